// Package observe is the placeholder reconciler for kinds whose real
// controller has not landed yet: it acknowledges each spec generation in
// status.observedGeneration and nothing else, writing only when it changed.
package observe

import (
	"context"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openshell/openshell-operator/internal/status"
)

// Reconciler records observedGeneration for objects of type T.
type Reconciler[T status.Object] struct {
	Client client.Client
	New    func() T
}

// Reconcile implements reconcile.Reconciler.
func (r *Reconciler[T]) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	obj := r.New()
	if err := r.Client.Get(ctx, req.NamespacedName, obj); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	orig := obj.DeepCopyObject().(T)
	obj.SetObservedGeneration(obj.GetGeneration())
	return ctrl.Result{}, status.Patch(ctx, r.Client, orig, obj)
}
