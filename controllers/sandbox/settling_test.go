package sandbox

import (
	"testing"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
)

func TestHoldable(t *testing.T) {
	withStatus := func(phase openshellv1alpha1.SandboxPhase, id string) *openshellv1alpha1.OpenShellSandbox {
		sb := sandboxWith(nil)
		sb.Status.Phase, sb.Status.SandboxID = phase, id
		return sb
	}
	provisioning := withStatus(openshellv1alpha1.SandboxPhaseProvisioning, "id-1")
	for _, tt := range []struct {
		name     string
		orig, sb *openshellv1alpha1.OpenShellSandbox
		created  bool
		want     bool
	}{
		{"first report of a create, still provisioning", withStatus("", ""), provisioning, true, true},
		{"already Ready: nothing to wait for", withStatus("", ""), withStatus(openshellv1alpha1.SandboxPhaseReady, "id-1"), true, false},
		{"not created by this reconcile", withStatus("", ""), provisioning, false, false},
		{"status shows something else: it would go stale", withStatus(openshellv1alpha1.SandboxPhasePending, ""), provisioning, true, false},
		{"refused by the gateway", withStatus("", ""), withStatus(openshellv1alpha1.SandboxPhaseError, ""), true, false},
	} {
		if got := holdable(tt.orig, tt.sb, tt.created); got != tt.want {
			t.Errorf("%s: holdable = %v, want %v", tt.name, got, tt.want)
		}
	}
}
