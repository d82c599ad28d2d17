package sandbox

import (
	"sync"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

// ownWrites remembers, per sandbox, the resourceVersion this reconciler's
// last write to it was based on, until the cache shows a newer one. The
// cache lags the API server: a reconcile queued between a write and its
// arrival (by a stream's event, a requeue, another watch) reads the object
// as it was before the write, and its status write would conflict — but
// the gateway calls it makes first would not. A sandbox whose first status
// write named it and said Ready, lost just then, read back without its ID,
// was created a second time under the same name while status went on
// naming the first. Such a reconcile waits for the cache instead (the
// ReplicaSet controller's expectations, for one object). The sandbox
// reconciler is its only user.
type ownWrites struct {
	mu sync.Mutex
	m  map[client.ObjectKey]ownWrite
}

type ownWrite struct {
	// read is the version the write was based on; a cache still showing
	// it is behind.
	read string
	// waiting says a reconcile was put off for the cache.
	waiting bool
}

// record notes that a reconcile read version read and left the object at
// version now (the same when it wrote nothing).
func (w *ownWrites) record(key client.ObjectKey, read, now string) {
	if read == now {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		w.m = map[client.ObjectKey]ownWrite{}
	}
	w.m[key] = ownWrite{read: read}
}

// behind says whether the cache's version of the object (cached) predates
// this reconciler's last write to it; if not, the write is done with.
func (w *ownWrites) behind(key client.ObjectKey, cached string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	e, ok := w.m[key]
	switch {
	case !ok:
		return false
	case e.read == cached:
		e.waiting = true
		w.m[key] = e
		return true
	}
	delete(w.m, key)
	return false
}

// caughtUp says whether a reconcile put off for the cache can run now
// that the cache shows version cached.
func (w *ownWrites) caughtUp(key client.ObjectKey, cached string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	e, ok := w.m[key]
	if !ok || !e.waiting || e.read == cached {
		return false
	}
	delete(w.m, key)
	return true
}

// forget drops what is known of a deleted object.
func (w *ownWrites) forget(key client.ObjectKey) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.m, key)
}

// predicate passes the update that brings a put-off reconcile's object
// into the cache, and forgets deleted objects.
func (w *ownWrites) predicate() predicate.Funcs {
	return predicate.Funcs{
		CreateFunc: func(event.CreateEvent) bool { return false },
		UpdateFunc: func(e event.UpdateEvent) bool {
			return w.caughtUp(client.ObjectKeyFromObject(e.ObjectNew), e.ObjectNew.GetResourceVersion())
		},
		DeleteFunc: func(e event.DeleteEvent) bool {
			w.forget(client.ObjectKeyFromObject(e.Object))
			return false
		},
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}
