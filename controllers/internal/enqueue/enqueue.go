// Package enqueue has the map functions controllers share to re-queue
// objects when something outside them changes.
package enqueue

import (
	"context"
	"math/rand/v2"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// Requests lists objects (from the cache) and returns a request for each.
func Requests(ctx context.Context, c client.Reader, list client.ObjectList, opts ...client.ListOption) []reconcile.Request {
	if err := c.List(ctx, list, opts...); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing objects to re-queue")
		return nil
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Extracting list items to re-queue")
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(items))
	for _, it := range items {
		if o, ok := it.(client.Object); ok {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(o)})
		}
	}
	return reqs
}

// All re-queues every object of a kind, whatever the event carries.
// newList returns an empty list of the kind, e.g. &FooList{}.
func All(c client.Reader, newList func() client.ObjectList) handler.MapFunc {
	return func(ctx context.Context, _ client.Object) []reconcile.Request {
		return Requests(ctx, c, newList())
	}
}

// Coalesced is handler.EnqueueRequestsFromMapFunc with every request
// delayed by delay. The work queue keeps one entry per object and the
// earliest time asked for, so a burst of events for one object (a hundred
// sandboxes created against one policy) becomes one reconcile per delay
// instead of one per event. Use it for summaries, such as counts, that
// need not follow every event at once.
func Coalesced(delay time.Duration, fn handler.MapFunc) handler.EventHandler {
	add := func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request], objs ...client.Object) {
		for _, o := range objs {
			for _, r := range fn(ctx, o) {
				q.AddAfter(r, delay)
			}
		}
	}
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(ctx, q, e.Object)
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(ctx, q, e.ObjectOld, e.ObjectNew)
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(ctx, q, e.Object)
		},
		GenericFunc: func(ctx context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(ctx, q, e.Object)
		},
	}
}

// Backoff is the per-object retry limiter of reconcilers that call
// gateways: exponential from base to max, plus up to 20% jitter so that the
// objects of one failing gateway do not all retry in the same instant.
func Backoff(base, max time.Duration) workqueue.TypedRateLimiter[reconcile.Request] {
	return jittered{workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](base, max)}
}

type jittered struct {
	workqueue.TypedRateLimiter[reconcile.Request]
}

func (j jittered) When(r reconcile.Request) time.Duration {
	d := j.TypedRateLimiter.When(r)
	return d + time.Duration(rand.Int64N(int64(d)/5+1))
}

// Singleton is for a controller that keeps one object of the operator's
// own under key: a source that reconciles it once at start (what changed
// while no operator ran is noticed), and a handler that maps any event to
// it.
func Singleton(key types.NamespacedName) (source.Source, handler.EventHandler) {
	start := make(chan event.GenericEvent, 1)
	start <- event.GenericEvent{Object: &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}}
	to := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: key}}
	})
	return source.Channel(start, to), to
}

// Sooner is the sooner of two requeue delays, 0 meaning none: how a
// reconcile that several steps want to requeue picks one.
func Sooner(a, b time.Duration) time.Duration {
	if a == 0 || (b > 0 && b < a) {
		return b
	}
	return a
}
