// Package groupmember tells when a user has left an OpenShift Group that
// their session's identity named, so that the relay ends the session (or
// the workspace membership) instead of authorizing it again and again
// with the groups it began with.
//
// The kube-apiserver names a user's groups per request, as the front
// proxy forwards them, and the relay authorizes an open session again with
// that identity: removing a user from a group changed nothing the relay
// asked about, so their sessions ran on for up to 8 hours and their
// memberships for as long as they kept them alive. On OpenShift, groups
// are Group objects (user.openshift.io/v1, LDAP-synced ones included), and
// the OAuth server's tokens carry those a user is in: when a Group the
// identity named no longer lists the user, or was deleted, the identity is
// out of date and its session must end (a new one names the groups as
// they are). Groups that are not Group objects (system:authenticated, an
// external identity provider's claims) cannot be followed here: a Group
// never seen is assumed to be such a group.
//
// openshift/client-go's typed informer serves here; objects are kept with
// their name and users only. No library answers "did this user leave a
// group since", so the package is this project's own.
package groupmember

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	userv1 "github.com/openshift/api/user/v1"
	userclient "github.com/openshift/client-go/user/clientset/versioned"
	userinformers "github.com/openshift/client-go/user/informers/externalversions"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	toolscache "k8s.io/client-go/tools/cache"
)

// Groups follows OpenShift's Group objects. The zero value (and nil)
// follows none: Left always says no.
type Groups struct {
	mu sync.Mutex
	// store holds the Groups once synced; deleted names the Groups seen
	// deleted since (and not created again).
	store   toolscache.Store
	deleted map[string]bool
}

// Left names an OpenShift Group that u's identity names but that no longer
// lists u, or was deleted since it was followed ("" if none, or if Groups
// are not followed yet).
func (g *Groups) Left(u user.Info) string {
	if g == nil {
		return ""
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.store == nil {
		return ""
	}
	for _, name := range u.GetGroups() {
		if strings.HasPrefix(name, "system:") {
			continue // the API server's own, never a Group object
		}
		if g.deleted[name] {
			return name
		}
		obj, exists, err := g.store.GetByKey(name)
		if err != nil || !exists {
			continue // not a Group object: an identity provider's, say
		}
		if grp, ok := obj.(*userv1.Group); ok && !slices.Contains(grp.Users, u.GetName()) {
			return name
		}
	}
	return ""
}

// Watch follows the Groups until ctx ends; it returns once the informer
// has synced (or failed to). Call it where user.openshift.io/v1 is served.
func (g *Groups) Watch(ctx context.Context, client userclient.Interface) error {
	factory := userinformers.NewSharedInformerFactory(client, 0)
	inf := factory.User().V1().Groups().Informer()
	if err := inf.SetTransform(slim); err != nil {
		return fmt.Errorf("watch groups: %w", err)
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { g.seen(obj, false) },
		DeleteFunc: func(obj any) { g.seen(obj, true) },
	}); err != nil {
		return fmt.Errorf("watch groups: %w", err)
	}
	factory.Start(ctx.Done())
	if !toolscache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return fmt.Errorf("the groups informer did not sync")
	}
	g.mu.Lock()
	g.store = inf.GetStore()
	g.mu.Unlock()
	go func() { <-ctx.Done(); factory.Shutdown() }()
	return nil
}

// seen records a Group's deletion, or its creation (which ends a deletion).
func (g *Groups) seen(obj any, deleted bool) {
	if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	o, ok := obj.(metav1.Object)
	if !ok {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.deleted == nil {
		g.deleted = map[string]bool{}
	}
	if deleted {
		g.deleted[o.GetName()] = true
	} else {
		delete(g.deleted, o.GetName())
	}
}

// slim keeps a Group's name, resourceVersion and users.
func slim(obj any) (any, error) {
	if grp, ok := obj.(*userv1.Group); ok {
		return &userv1.Group{ObjectMeta: metav1.ObjectMeta{Name: grp.Name, ResourceVersion: grp.ResourceVersion}, Users: grp.Users}, nil
	}
	return obj, nil
}
