package status

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// StaleRetry is how soon a reconcile whose optimistically locked write met
// a newer object runs again, unless that object's own event queues it first
// (as it usually does, within milliseconds). It bounds an object whose
// cache never catches up to one write a second.
const StaleRetry = time.Second

// RetryStale wraps a reconciler whose writes are optimistically locked
// (Patch, AddFinalizer, Record): a reconcile that fails only with
// conflicts runs again on fresh data, as the lock intends, without being
// logged, counted in controller_runtime_reconcile_errors_total or alerted
// on as a failure. The cache lags the API server, so a reconcile queued by
// a child's event can read the object before its previous status write
// arrives; its write then conflicts, which is how the lock keeps a status
// computed from stale data out, not an error. A conflict next to any other
// error is returned as it is.
func RetryStale(r reconcile.Reconciler) reconcile.Reconciler {
	return reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		res, err := r.Reconcile(ctx, req)
		if err != nil && OnlyConflicts(err) {
			return reconcile.Result{RequeueAfter: StaleRetry}, nil
		}
		return res, err
	})
}

// OnlyConflicts reports whether every error err joins or wraps is a
// Conflict from the API server.
func OnlyConflicts(err error) bool {
	switch e := err.(type) {
	case interface{ Unwrap() []error }:
		for _, inner := range e.Unwrap() {
			if inner != nil && !OnlyConflicts(inner) {
				return false
			}
		}
		return true
	case interface{ Unwrap() error }:
		if inner := e.Unwrap(); inner != nil {
			return OnlyConflicts(inner)
		}
	}
	return apierrors.IsConflict(err)
}
