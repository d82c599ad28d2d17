// Package traced gives each reconcile a span when the operator exports
// traces (internal/tracing), and is the reconciler itself otherwise.
package traced

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/openshell/openshell-operator/internal/tracing"
)

// Reconciler wraps r in a span named "Reconcile <controller>" carrying the
// object's namespace and name, its error and its requeue. Decided when the
// controller is built: with tracing off, r is returned as it is.
func Reconciler(controller string, r reconcile.Reconciler) reconcile.Reconciler {
	if !tracing.Enabled() {
		return r
	}
	name := "Reconcile " + controller
	return reconcile.Func(func(ctx context.Context, req reconcile.Request) (ctrl.Result, error) {
		ctx, span := tracing.Tracer().Start(ctx, name, trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(
			attribute.String("openshell.controller", controller),
			attribute.String("k8s.namespace.name", req.Namespace),
			attribute.String("openshell.object.name", req.Name)))
		defer span.End()
		res, err := r.Reconcile(ctx, req)
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		if res.RequeueAfter > 0 {
			span.SetAttributes(attribute.String("openshell.requeue_after", res.RequeueAfter.String()))
		}
		return res, err
	})
}
