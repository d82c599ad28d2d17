package sandbox

import (
	"context"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/controllers/internal/enqueue"
	"github.com/openshell/openshell-operator/internal/index"
	"github.com/openshell/openshell-operator/internal/preflight"
)

// upstreamWatch follows the agents.x-k8s.io Sandboxes the gateways create,
// by metadata only, so that one deleted by hand (or lost with its CRD or
// its namespace's contents) re-queues its OpenShellSandbox at once instead
// of at the next resync: Ready must mean running. The API may appear after
// the operator starts, and its served version can change, so the watch
// starts when preflight first reports each version. One per Reconciler.
type upstreamWatch struct {
	mu      sync.Mutex
	watched map[string]bool // served version → watch started
	// tombs guards unclaimed. It is held across a Sandbox event's lookup
	// of the sandbox that names its ID and the tombstone a miss leaves
	// (orphaned), and by claim: the cache's update that names the ID
	// lands between a lookup that missed and its tombstone otherwise, and
	// its claim, finding none, is lost with the sandbox's loss (CI saw a
	// Ready sandbox left on a gateway sandbox that was gone). It is not mu,
	// which ensure holds while a watch starts and delivers its first events.
	tombs sync.Mutex
	// unclaimed are the gateway IDs of Sandboxes that went (or changed ID)
	// while no OpenShellSandbox in the cache named them, and when. The
	// first status write of a sandbox quick to start names its ID and says
	// Ready at once; a Sandbox deleted just then can have its event reach
	// the operator before that write reaches the cache, and without this
	// the loss would wait for the next resync.
	unclaimed map[string]time.Time
	// synced says a watch has delivered its first events: the located
	// sandboxes are looked at once more then (resyncLocated), since a
	// Sandbox deleted before the watch listed was never an event.
	synced chan event.GenericEvent
}

// Tombstones of unclaimed Sandboxes last far longer than the cache can lag
// behind a status write, and are bounded in number: past the bound, a
// loss in that race is noticed at the next resync, as before.
const (
	unclaimedTTL = 2 * time.Minute
	unclaimedMax = 4096
)

// orphaned returns the sandboxes lookup finds naming gateway ID id, whose
// Sandbox changed; if there are none, it records that (a tombstone) before
// any claim can look for it.
func (u *upstreamWatch) orphaned(id string, now time.Time, lookup func() []reconcile.Request) []reconcile.Request {
	u.tombs.Lock()
	defer u.tombs.Unlock()
	reqs := lookup()
	if len(reqs) == 0 {
		u.rememberLocked(id, now)
	}
	return reqs
}

// rememberLocked records that a Sandbox of gateway ID id changed while no
// OpenShellSandbox in the cache named it; u.tombs is held.
func (u *upstreamWatch) rememberLocked(id string, now time.Time) {
	if u.unclaimed == nil {
		u.unclaimed = map[string]time.Time{}
	}
	if len(u.unclaimed) >= unclaimedMax {
		for k, at := range u.unclaimed {
			if now.Sub(at) > unclaimedTTL {
				delete(u.unclaimed, k)
			}
		}
	}
	if len(u.unclaimed) < unclaimedMax {
		u.unclaimed[id] = now
	}
}

// claim says whether a Sandbox of gateway ID id changed, unclaimed, within
// unclaimedTTL before now, and forgets it.
func (u *upstreamWatch) claim(id string, now time.Time) bool {
	u.tombs.Lock()
	defer u.tombs.Unlock()
	at, ok := u.unclaimed[id]
	if !ok {
		return false
	}
	delete(u.unclaimed, id)
	return now.Sub(at) <= unclaimedTTL
}

// namesNewSandboxID passes an OpenShellSandbox whose status came to name a
// gateway sandbox (its first status write, or a re-creation's): the moment
// an unclaimed Sandbox's event can find it.
var namesNewSandboxID = predicate.Funcs{
	CreateFunc: func(e event.CreateEvent) bool { return sandboxID(e.Object) != "" },
	UpdateFunc: func(e event.UpdateEvent) bool {
		id := sandboxID(e.ObjectNew)
		return id != "" && id != sandboxID(e.ObjectOld)
	},
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
}

func sandboxID(o client.Object) string {
	if sb, ok := o.(*openshellv1alpha1.OpenShellSandbox); ok {
		return sb.Status.SandboxID
	}
	return ""
}

// claimed re-queues an OpenShellSandbox whose gateway sandbox's Sandbox
// went while the cache did not yet say it was this object's.
func (r *Reconciler) claimed(ctx context.Context, o client.Object) []reconcile.Request {
	if id := sandboxID(o); id != "" && r.upstream.claim(id, time.Now()) {
		ctrl.LoggerFrom(ctx).V(1).Info("its agents.x-k8s.io Sandbox changed before the cache named the sandbox", "sandboxID", id,
			"namespace", o.GetNamespace(), "name", o.GetName())
		return []reconcile.Request{{NamespacedName: client.ObjectKeyFromObject(o)}}
	}
	return nil
}

// agentSandboxGVK is the Sandbox kind at a served version.
func agentSandboxGVK(version string) schema.GroupVersionKind {
	return schema.GroupVersionKind{Group: "agents.x-k8s.io", Version: version, Kind: "Sandbox"}
}

// startUpstreamWatch runs, until the manager stops, a loop that adds the
// watch for every Agent Sandbox version preflight reports as preferred.
func (r *Reconciler) startUpstreamWatch(mgr ctrl.Manager, c controller.Controller) error {
	changes := r.Preflight.Subscribe()
	byID := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
		id := o.GetLabels()[LabelSandboxID]
		if id == "" {
			return nil
		}
		reqs := r.upstream.orphaned(id, time.Now(), func() []reconcile.Request {
			return enqueue.Requests(ctx, r.Client, &openshellv1alpha1.OpenShellSandboxList{}, client.MatchingFields{index.SandboxID: id})
		})
		ctrl.LoggerFrom(ctx).V(1).Info("agents.x-k8s.io Sandbox changed", "sandboxID", id, "namespace", o.GetNamespace(), "name", o.GetName(),
			"deleting", !o.GetDeletionTimestamp().IsZero(), "requeued", reqs)
		return reqs
	})
	// Only a deletion (or a change of what the gateway's ID label says)
	// concerns the OpenShellSandbox, and a creation it has not located
	// yet; the Agent Sandbox controller's own status writes do not.
	onlyGone := predicate.Funcs{
		CreateFunc: func(e event.CreateEvent) bool { return r.unlocated(e.Object.GetLabels()[LabelSandboxID]) },
		UpdateFunc: func(e event.UpdateEvent) bool {
			return e.ObjectOld.GetLabels()[LabelSandboxID] != e.ObjectNew.GetLabels()[LabelSandboxID] || !e.ObjectNew.GetDeletionTimestamp().IsZero()
		},
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
	return mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		return followPreflight(ctx, r.Preflight, changes, upstreamRetryMax, func(version string) error {
			return r.upstream.ensure(ctx, mgr, c, version, byID, onlyGone)
		})
	}))
}

// syncedEvents makes the channel on which a synced watch says so.
func (u *upstreamWatch) syncedEvents() <-chan event.GenericEvent {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.synced == nil {
		u.synced = make(chan event.GenericEvent, 1)
	}
	return u.synced
}

// resyncLocated re-queues the sandboxes whose agents.x-k8s.io Sandbox
// (which status names) the just-synced watch o came from does not hold.
// Between the watch's start and its first list, a Sandbox the gateway
// created and then lost was never an event: CI saw a sandbox left Ready
// for a minute on one deleted while a loaded operator's new watch was
// still listing. The reconcile confirms the miss live (upstreamMissing);
// a Sandbox the cache holds costs nothing, so a start does not read every
// sandbox at its gateway twice. A reference of another version than the
// watch's, or a failed read, is re-queued too: it cannot be told here.
func (r *Reconciler) resyncLocated(ctx context.Context, o client.Object) []reconcile.Request {
	gvk := o.GetObjectKind().GroupVersionKind()
	list := &openshellv1alpha1.OpenShellSandboxList{}
	if err := r.Client.List(ctx, list); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing sandboxes to look at once the agents.x-k8s.io Sandbox watch synced")
		return nil
	}
	var reqs []reconcile.Request
	for i := range list.Items {
		ref := list.Items[i].Status.AgentSandbox
		if ref == nil {
			continue
		}
		if ref.APIVersion == gvk.GroupVersion().String() {
			held := &metav1.PartialObjectMetadata{}
			held.SetGroupVersionKind(gvk)
			if err := r.Client.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, held); err == nil {
				continue
			}
		}
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
	}
	return reqs
}

// upstreamRetryMax bounds the wait before a watch that failed to start is
// tried again.
const upstreamRetryMax = 30 * time.Second

// followPreflight calls ensure with the served Agent Sandbox version
// whenever preflight reports one, and again after a failure, backing off
// from a second to retryMax, until ctx ends. A watch that failed to start
// (its kind not yet mapped just after its CRD came back, say) is retried:
// waiting for the next preflight change instead left the operator without
// it, blind to deleted Sandboxes, for as long as nothing else changed.
func followPreflight(ctx context.Context, pf *preflight.Store, changes <-chan event.GenericEvent, retryMax time.Duration, ensure func(version string) error) error {
	wait := time.Duration(0)
	for {
		var retry <-chan time.Time
		if res, known := pf.Get(); known && res.AgentSandbox.Available {
			if err := ensure(res.AgentSandbox.Preferred); err != nil {
				wait = min(max(2*wait, time.Second), retryMax)
				ctrl.LoggerFrom(ctx).Error(err, "watch agents.x-k8s.io Sandboxes; trying again", "in", wait)
				retry = time.After(wait)
			} else {
				wait = 0
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changes:
		case <-retry:
		}
	}
}

func (u *upstreamWatch) ensure(ctx context.Context, mgr ctrl.Manager, c controller.Controller, version string, h handler.EventHandler, p predicate.Funcs) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.watched[version] {
		return nil
	}
	obj := &metav1.PartialObjectMetadata{}
	obj.SetGroupVersionKind(agentSandboxGVK(version))
	src := signalOnSync{SyncingSource: source.Kind(mgr.GetCache(), client.Object(obj), h, p), synced: u.synced, obj: obj}
	if err := c.Watch(src); err != nil {
		return fmt.Errorf("start the watch of %s: %w", agentSandboxGVK(version), err)
	}
	if u.watched == nil {
		u.watched = map[string]bool{}
	}
	u.watched[version] = true
	return nil
}

// signalOnSync is a watch that says on synced (without blocking: one
// signal waiting is enough) once it has delivered its first events. The
// wait starts only once the controller started the watch: before that,
// the source has nothing to wait on (a controller not started yet starts
// it later, and waits for it itself before its workers run).
type signalOnSync struct {
	source.SyncingSource
	synced chan<- event.GenericEvent
	obj    client.Object
}

func (s signalOnSync) Start(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	if err := s.SyncingSource.Start(ctx, q); err != nil {
		return err
	}
	go func() {
		// WaitForSync answers nil when ctx ends too: a stopping operator
		// is not told the watch synced.
		if s.SyncingSource.WaitForSync(ctx) == nil && ctx.Err() == nil && s.synced != nil {
			select {
			case s.synced <- event.GenericEvent{Object: s.obj}:
			default:
			}
		}
	}()
	return nil
}

// upstreamMissing says whether the agents.x-k8s.io Sandbox status names is
// gone: asked from the cache, confirmed live on a miss (a Sandbox the
// gateway just created may not be in the cache yet). Where the operator
// may not read it (an External gateway's namespace outside the install
// mode), it cannot tell and says no.
func (r *Reconciler) upstreamMissing(ctx context.Context, sb *openshellv1alpha1.OpenShellSandbox) (bool, error) {
	ref := sb.Status.AgentSandbox
	if ref == nil || ref.Namespace == "" || ref.Name == "" {
		return false, nil
	}
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return false, nil
	}
	obj := &metav1.PartialObjectMetadata{}
	obj.SetGroupVersionKind(agentSandboxGVK(gv.Version))
	key := client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}
	switch err := r.Client.Get(ctx, key, obj); {
	case err == nil:
		return false, nil
	case !apierrors.IsNotFound(err) && !meta.IsNoMatchError(err):
		return false, fmt.Errorf("get %s %s: %w", agentSandboxGVK(gv.Version).Kind, key, err)
	}
	// Confirm a miss live, by the list the operator may make (a name field
	// selector needs no get verb).
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(agentSandboxGVK(gv.Version).GroupVersion().WithKind("SandboxList"))
	switch err := r.APIReader.List(ctx, list, client.InNamespace(ref.Namespace), client.MatchingFields{"metadata.name": ref.Name}); {
	case apierrors.IsForbidden(err):
		return false, nil
	case err != nil && !meta.IsNoMatchError(err) && !apierrors.IsNotFound(err):
		return false, fmt.Errorf("list %s %s: %w", agentSandboxGVK(gv.Version).Kind, key, err)
	}
	return len(list.Items) == 0, nil
}

// locateUpstream records which agents.x-k8s.io Sandbox runs the gateway
// sandbox, once it is in this cluster's cache under the gateway's ID label
// (gateways of every line set it; 0.1 no longer reports the object's
// name), so that its loss can be noticed: in the Managed gateway's sandbox
// namespace (ns), or anywhere for an External gateway, whose placement the
// operator does not know (then only a single match counts). One whose
// gateway runs its sandboxes elsewhere is never found, and never reported
// missing.
func (r *Reconciler) locateUpstream(ctx context.Context, sb *openshellv1alpha1.OpenShellSandbox, version, ns string) error {
	if ref := sb.Status.AgentSandbox; (ref != nil && ref.Namespace != "") || sb.Status.SandboxID == "" || !r.upstream.started(version) {
		return nil
	}
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(agentSandboxGVK(version).GroupVersion().WithKind("SandboxList"))
	if err := r.Client.List(ctx, list, client.InNamespace(ns), client.MatchingLabels{LabelSandboxID: sb.Status.SandboxID}); err != nil {
		return client.IgnoreNotFound(err)
	}
	if len(list.Items) != 1 {
		return nil // not here (yet), or not one the gateway's label can tell
	}
	o := list.Items[0]
	sb.Status.AgentSandbox = &openshellv1alpha1.AgentSandboxReference{APIVersion: agentSandboxGVK(version).GroupVersion().String(),
		Namespace: o.Namespace, Name: o.Name}
	return nil
}

// unlocated says whether a sandbox of this gateway ID has not yet recorded
// its agents.x-k8s.io Sandbox: the object reached the cache after the
// sandbox's last report. At a restart every sandbox is located already, so
// the watch's initial list re-queues nothing.
func (r *Reconciler) unlocated(id string) bool {
	if id == "" {
		return false
	}
	list := &openshellv1alpha1.OpenShellSandboxList{}
	if err := r.Client.List(context.Background(), list, client.MatchingFields{index.SandboxID: id}); err != nil {
		return false
	}
	for _, sb := range list.Items {
		if ref := sb.Status.AgentSandbox; ref == nil || ref.Namespace == "" {
			return true
		}
	}
	return false
}

// started says whether the watch of a version runs (so the cache holds it).
func (u *upstreamWatch) started(version string) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.watched[version]
}
