// Package enqueue has the map functions controllers share to re-queue
// objects when something outside them changes.
package enqueue

import (
	"context"

	"k8s.io/apimachinery/pkg/api/meta"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
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
