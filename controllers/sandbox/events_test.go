package sandbox

import (
	"testing"

	"k8s.io/client-go/tools/events"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
)

// TestRecordPhase: the normal way to Ready writes no phase event (the
// "Created" event covers it); failures, and Ready after one, do.
func TestRecordPhase(t *testing.T) {
	for _, tc := range []struct {
		from, to openshellv1alpha1.SandboxPhase
		event    bool
	}{
		{"", openshellv1alpha1.SandboxPhaseProvisioning, false},
		{openshellv1alpha1.SandboxPhasePending, openshellv1alpha1.SandboxPhaseReady, false},
		{openshellv1alpha1.SandboxPhaseProvisioning, openshellv1alpha1.SandboxPhaseReady, false},
		{openshellv1alpha1.SandboxPhaseError, openshellv1alpha1.SandboxPhaseReady, true},
		{openshellv1alpha1.SandboxPhaseReady, openshellv1alpha1.SandboxPhaseError, true},
		{openshellv1alpha1.SandboxPhasePending, openshellv1alpha1.SandboxPhaseRejected, true},
	} {
		rec := events.NewFakeRecorder(1)
		r := &Reconciler{Recorder: rec}
		sb := &openshellv1alpha1.OpenShellSandbox{}
		sb.Status.Phase = tc.to
		r.recordPhase(tc.from, sb)
		if got := len(rec.Events) == 1; got != tc.event {
			t.Errorf("%q -> %q: event %v, want %v", tc.from, tc.to, got, tc.event)
		}
	}
}
