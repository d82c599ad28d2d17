package status

import (
	"context"
	"slices"
	"sync"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

// OwnWrites remembers, per object, the resourceVersions a reconcile of
// it passed through (the one it read, and those its writes left on the
// way) and the one it left, until the cache shows a version other than
// those it passed through. The cache lags the API server: a reconcile
// queued by an earlier write of the same reconcile (a finalizer, a
// recorded intent) or by another watch reads the object as it was before
// the last write, and acts on a status that is no longer true. Its own
// status write would conflict, but the gateway calls it makes first would
// not: a sandbox was created twice, a provider pushed twice (and its drift
// check later took the second push for a change at the gateway). Such a
// reconcile waits for the cache instead, as the ReplicaSet controller's
// expectations do.
//
// A version the reconcile did not pass through is the last one or newer
// (another writer's): the cache has caught up. The versions its writes
// leave on the way are collected by the helpers of this package (Patch,
// Record, AddFinalizer, RemoveFinalizer) from the context Begin returns.
type OwnWrites struct {
	mu sync.Mutex
	m  map[client.ObjectKey]ownWrite
}

type ownWrite struct {
	// passed are the versions before the last write.
	passed []string
	// waiting says a reconcile was put off for the cache.
	waiting bool
}

// Begin starts a reconcile of the object key, read at version read. behind
// says the cache predates this reconciler's last write to it: the caller
// waits (requeue after StaleRetry; the write's arrival also re-queues it
// where Predicate watches). Otherwise the caller reconciles with ctx and
// calls done with the version it leaves the object at.
func (w *OwnWrites) Begin(ctx context.Context, key client.ObjectKey, read string) (_ context.Context, behind bool, done func(now string)) {
	if w.behind(key, read) {
		return ctx, true, func(string) {}
	}
	t := &trail{}
	return context.WithValue(ctx, trailKey{}, t), false, func(now string) {
		w.record(key, now, append([]string{read}, t.list()...)...)
	}
}

// trail collects the versions the writes of one reconcile leave.
type trail struct {
	mu       sync.Mutex
	versions []string
}

type trailKey struct{}

func (t *trail) list() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.versions)
}

// noteWrite adds the version a write left o at to the reconcile's trail,
// if ctx carries one.
func noteWrite(ctx context.Context, o client.Object) {
	if t, ok := ctx.Value(trailKey{}).(*trail); ok {
		t.mu.Lock()
		defer t.mu.Unlock()
		t.versions = append(t.versions, o.GetResourceVersion())
	}
}

// record notes that a reconcile passed through versions passed (the one it
// read first) and left the object at version now (one of them when it
// wrote nothing).
func (w *OwnWrites) record(key client.ObjectKey, now string, passed ...string) {
	var before []string
	for _, v := range passed {
		if v != now {
			before = append(before, v)
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(before) == 0 {
		delete(w.m, key)
		return
	}
	if w.m == nil {
		w.m = map[client.ObjectKey]ownWrite{}
	}
	w.m[key] = ownWrite{passed: before}
}

// behind says whether the cache's version of the object (cached) predates
// this reconciler's last write to it; if not, the write is done with.
func (w *OwnWrites) behind(key client.ObjectKey, cached string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	e, ok := w.m[key]
	switch {
	case !ok:
		return false
	case !slices.Contains(e.passed, cached):
		delete(w.m, key)
		return false
	}
	e.waiting = true
	w.m[key] = e
	return true
}

// arrived notes that the cache shows version cached, and says whether a
// reconcile put off for it can run now.
func (w *OwnWrites) arrived(key client.ObjectKey, cached string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	e, ok := w.m[key]
	if !ok || slices.Contains(e.passed, cached) {
		return false
	}
	delete(w.m, key)
	return e.waiting
}

// Forget drops what is known of a deleted object (a reconcile that finds it
// gone calls it too: the delete event may have come before the last write
// was recorded).
func (w *OwnWrites) Forget(key client.ObjectKey) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.m, key)
}

// Predicate, on a watch of the reconciler's own kind, passes the update
// that brings a put-off reconcile's object into the cache, and forgets
// deleted objects. It must see every update, so it is the only predicate
// of its watch.
func (w *OwnWrites) Predicate() predicate.Funcs {
	return predicate.Funcs{
		CreateFunc: func(event.CreateEvent) bool { return false },
		UpdateFunc: func(e event.UpdateEvent) bool {
			return w.arrived(client.ObjectKeyFromObject(e.ObjectNew), e.ObjectNew.GetResourceVersion())
		},
		DeleteFunc: func(e event.DeleteEvent) bool {
			w.Forget(client.ObjectKeyFromObject(e.Object))
			return false
		},
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}
