// Package saexist tells whether the ServiceAccount a Kubernetes username
// names still exists, so that the relay ends what a deleted ServiceAccount
// holds open: its sessions and its workspace memberships.
//
// The kube-apiserver stops authenticating a deleted ServiceAccount's tokens,
// so its new requests fail; but the relay authorizes an open session or a
// membership again with a SubjectAccessReview for the identity it was given
// when it began, and RBAC that names the ServiceAccount still allows it.
// Deleting a compromised workload's ServiceAccount is how an incident is
// stopped: without this, its exec sessions ran on for up to eight hours and
// its gateway membership until its last token expired.
//
// client-go's metadata informer serves here, objects slimmed to their name
// and namespace: the relay asks on every look of every session, which a
// read from the API server each time would make its largest cost again.
package saexist

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	toolscache "k8s.io/client-go/tools/cache"
)

// Accounts follows the cluster's ServiceAccounts. The zero value, and a
// nil one, cannot tell: Gone says no.
type Accounts struct {
	mu    sync.Mutex
	store toolscache.Store // set once synced
}

// Gone says whether username is a ServiceAccount's that no longer exists.
// A username of a user, or a ServiceAccount before the informer has
// synced, is not gone.
func (a *Accounts) Gone(username string) bool {
	if a == nil {
		return false
	}
	ns, name, err := serviceaccount.SplitUsername(username)
	if err != nil {
		return false // not a ServiceAccount
	}
	a.mu.Lock()
	store := a.store
	a.mu.Unlock()
	if store == nil {
		return false
	}
	_, exists, err := store.GetByKey(ns + "/" + name)
	return err == nil && !exists
}

// Watch follows the ServiceAccounts (list and watch, cluster-wide) until
// ctx ends; it returns once the informer has synced, after which Gone can
// say yes.
func (a *Accounts) Watch(ctx context.Context, client metadata.Interface) error {
	factory := metadatainformer.NewSharedInformerFactory(client, 0)
	inf := factory.ForResource(corev1.SchemeGroupVersion.WithResource("serviceaccounts")).Informer()
	if err := inf.SetTransform(slim); err != nil {
		return fmt.Errorf("watch serviceaccounts: %w", err)
	}
	factory.Start(ctx.Done())
	if !toolscache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return fmt.Errorf("the serviceaccounts informer did not sync")
	}
	a.mu.Lock()
	a.store = inf.GetStore()
	a.mu.Unlock()
	go func() { <-ctx.Done(); factory.Shutdown() }()
	return nil
}

// slim keeps a ServiceAccount's key, its namespace and name, and its
// resourceVersion (which the informer's relists compare).
func slim(obj any) (any, error) {
	if m, ok := obj.(*metav1.PartialObjectMetadata); ok {
		return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: m.Name, Namespace: m.Namespace, ResourceVersion: m.ResourceVersion}}, nil
	}
	return obj, nil
}
