// Package saexist tells whether the ServiceAccount a Kubernetes identity
// names still exists, as the same object, so that the relay ends what a
// deleted ServiceAccount holds open: its sessions and its workspace
// memberships.
//
// The kube-apiserver stops authenticating a deleted ServiceAccount's tokens,
// so its new requests fail; but the relay authorizes an open session or a
// membership again with a SubjectAccessReview for the identity it was given
// when it began, and RBAC that names the ServiceAccount still allows it.
// Deleting a compromised workload's ServiceAccount is how an incident is
// stopped: without this, its exec sessions ran on for up to eight hours and
// its gateway membership until its last token expired. A ServiceAccount put
// back under the same name (the controllers re-create `default`, OpenShift
// `builder` and `deployer`, GitOps any of them, within moments) is another
// object, with another UID, whose tokens the old ones are not: where the
// identity carries the UID, that counts as gone too.
//
// client-go's metadata informer serves here, objects slimmed to their
// namespace, name and UID: the relay asks on every look of every session,
// which a read from the API server each time would make its largest cost
// again. An absence in the cache is confirmed with one read before it ends
// anything, so a cache behind (a watch down) ends nothing that exists.
package saexist

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	toolscache "k8s.io/client-go/tools/cache"
)

// confirmTimeout bounds the read that confirms an absence.
const confirmTimeout = 5 * time.Second

var resource = corev1.SchemeGroupVersion.WithResource("serviceaccounts")

// Accounts follows the cluster's ServiceAccounts. The zero value, and a
// nil one, cannot tell: Gone says no.
type Accounts struct {
	mu     sync.Mutex
	store  toolscache.Store // set once synced
	client metadata.Interface
}

// Gone says whether u is a ServiceAccount that no longer exists, or exists
// as another object than the one u's UID names. A user, or anyone before
// the informer has synced or when the API server cannot be asked, is not
// gone.
func (a *Accounts) Gone(ctx context.Context, u user.Info) bool {
	if a == nil {
		return false
	}
	ns, name, err := serviceaccount.SplitUsername(u.GetName())
	if err != nil {
		return false // not a ServiceAccount
	}
	a.mu.Lock()
	store, client := a.store, a.client
	a.mu.Unlock()
	if store == nil {
		return false
	}
	if obj, exists, err := store.GetByKey(ns + "/" + name); err == nil && exists && sameUID(obj, u) {
		return false
	}
	// Absent or another object in the cache: confirm, since a cache behind
	// its watch would end a new ServiceAccount's sessions.
	ctx, cancel := context.WithTimeout(ctx, confirmTimeout)
	defer cancel()
	cur, err := client.Resource(resource).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return true
	case err != nil:
		return false
	}
	return !sameUID(cur, u)
}

// sameUID says whether obj is the ServiceAccount u's UID names (any, when u
// carries none).
func sameUID(obj any, u user.Info) bool {
	o, ok := obj.(metav1.Object)
	return ok && (u.GetUID() == "" || string(o.GetUID()) == u.GetUID())
}

// Watch follows the ServiceAccounts (list and watch, cluster-wide) until
// ctx ends; it returns once the informer has synced, after which Gone can
// say yes.
func (a *Accounts) Watch(ctx context.Context, client metadata.Interface) error {
	factory := metadatainformer.NewSharedInformerFactory(client, 0)
	inf := factory.ForResource(resource).Informer()
	if err := inf.SetTransform(slim); err != nil {
		return fmt.Errorf("watch serviceaccounts: %w", err)
	}
	factory.Start(ctx.Done())
	if !toolscache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return fmt.Errorf("the serviceaccounts informer did not sync")
	}
	a.mu.Lock()
	a.store, a.client = inf.GetStore(), client
	a.mu.Unlock()
	go func() { <-ctx.Done(); factory.Shutdown() }()
	return nil
}

// slim keeps a ServiceAccount's key (namespace and name), its UID, and its
// resourceVersion (which the informer's relists compare).
func slim(obj any) (any, error) {
	if m, ok := obj.(*metav1.PartialObjectMetadata); ok {
		return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: m.Name, Namespace: m.Namespace, UID: m.UID,
			ResourceVersion: m.ResourceVersion}}, nil
	}
	return obj, nil
}
