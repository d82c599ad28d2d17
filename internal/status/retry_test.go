package status

import (
	"context"
	"errors"
	"fmt"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// TestRetryStale: a reconcile that fails only with conflicts is re-queued
// without an error; any other error, alone or next to a conflict, is
// returned unchanged, and so is a success.
func TestRetryStale(t *testing.T) {
	conflict := apierrors.NewConflict(schema.GroupResource{Group: "openshell.ai", Resource: "openshellgateways"}, "gw", errors.New("the object has been modified"))
	other := errors.New("apply ConfigMap: connection refused")
	for name, tc := range map[string]struct {
		res     reconcile.Result
		err     error
		wantRes reconcile.Result
		wantErr error
	}{
		"success":                   {res: reconcile.Result{RequeueAfter: 7}, wantRes: reconcile.Result{RequeueAfter: 7}},
		"conflict":                  {err: conflict, wantRes: reconcile.Result{RequeueAfter: StaleRetry}},
		"wrapped conflict":          {err: fmt.Errorf("patch status of ns/gw: %w", conflict), wantRes: reconcile.Result{RequeueAfter: StaleRetry}},
		"joined conflicts":          {err: errors.Join(conflict, fmt.Errorf("add finalizer: %w", conflict)), wantRes: reconcile.Result{RequeueAfter: StaleRetry}},
		"other error":               {err: other, wantErr: other},
		"conflict next to another":  {err: errors.Join(other, conflict), wantErr: errors.Join(other, conflict)},
		"wrapped join with another": {err: fmt.Errorf("sync: %w", errors.Join(conflict, other)), wantErr: fmt.Errorf("sync: %w", errors.Join(conflict, other))},
	} {
		t.Run(name, func(t *testing.T) {
			r := RetryStale(reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) { return tc.res, tc.err }))
			res, err := r.Reconcile(context.Background(), reconcile.Request{})
			if res != tc.wantRes {
				t.Errorf("result %+v, want %+v", res, tc.wantRes)
			}
			if fmt.Sprint(err) != fmt.Sprint(tc.wantErr) {
				t.Errorf("error %v, want %v", err, tc.wantErr)
			}
		})
	}
}
