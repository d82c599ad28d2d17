package provider

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/status"
)

// staleReads keeps a copy of the provider after each write, and serves a
// chosen one to reads: the cache as it lags the reconciler's own writes.
type staleReads struct {
	client.Client
	written []*openshellv1alpha1.OpenShellProvider
	serve   *openshellv1alpha1.OpenShellProvider
}

func (s *staleReads) keep(obj client.Object) {
	if p, ok := obj.(*openshellv1alpha1.OpenShellProvider); ok {
		s.written = append(s.written, p.DeepCopy())
	}
}

func (s *staleReads) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if p, ok := obj.(*openshellv1alpha1.OpenShellProvider); ok && s.serve != nil {
		s.serve.DeepCopyInto(p)
		return nil
	}
	return s.Client.Get(ctx, key, obj, opts...)
}

func (s *staleReads) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	err := s.Client.Patch(ctx, obj, patch, opts...)
	if err == nil {
		s.keep(obj)
	}
	return err
}

func (s *staleReads) Status() client.SubResourceWriter { return staleStatus{s} }

type staleStatus struct{ s *staleReads }

func (w staleStatus) Create(ctx context.Context, obj, sub client.Object, opts ...client.SubResourceCreateOption) error {
	return w.s.Client.Status().Create(ctx, obj, sub, opts...)
}

func (w staleStatus) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	err := w.s.Client.Status().Update(ctx, obj, opts...)
	if err == nil {
		w.s.keep(obj)
	}
	return err
}

func (w staleStatus) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	err := w.s.Client.Status().Patch(ctx, obj, patch, opts...)
	if err == nil {
		w.s.keep(obj)
	}
	return err
}

func (w staleStatus) Apply(ctx context.Context, obj runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
	return w.s.Client.Status().Apply(ctx, obj, opts...)
}

// TestAReconcileOnAStaleCachePushesNothing: the first reconcile adds its
// finalizer, records where the provider may be, pushes and writes its
// status. A reconcile queued by the first two writes can read either
// before the status arrives; it once pushed the provider again (and the
// drift check, a period later, took that second push for a change made at
// the gateway). It waits for the cache instead.
func TestAReconcileOnAStaleCachePushesNothing(t *testing.T) {
	f := newFixture(t, options{})
	s := &staleReads{Client: f.r.Client}
	f.r.Client = s
	read := f.provider(t)
	f.reconcile(t)
	if len(s.written) < 3 {
		t.Fatalf("%d writes of the provider, want the finalizer, the intent and the status", len(s.written))
	}
	pushes := f.pushes()
	for i, stale := range append([]*openshellv1alpha1.OpenShellProvider{read}, s.written[:len(s.written)-1]...) {
		s.serve = stale
		if res := f.reconcile(t); res.RequeueAfter != status.StaleRetry {
			t.Errorf("version %d of %d: reconciled on a stale read (result %+v)", i, len(s.written), res)
		}
		if got := f.pushes(); got != pushes {
			t.Fatalf("version %d of %d: pushed again on a stale read (%d → %d)", i, len(s.written), pushes, got)
		}
	}
	s.serve = nil
	f.reconcile(t)
	if got := f.pushes(); got != pushes {
		t.Errorf("caught-up cache: pushed again (%d → %d)", pushes, got)
	}
}
