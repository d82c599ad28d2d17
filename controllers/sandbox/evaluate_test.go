package sandbox

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/preflight"
)

func TestEvaluatePreflightGate(t *testing.T) {
	available := preflight.Result{AgentSandbox: preflight.AgentSandbox{Available: true, Preferred: "v1alpha1"}}
	for name, tt := range map[string]struct {
		pf       preflight.Result
		known    bool
		accepted metav1.ConditionStatus
		reason   string
	}{
		"preflight pending": {preflight.Result{}, false, metav1.ConditionFalse, openshellv1alpha1.SandboxReasonPreflightPending},
		"crd missing":       {preflight.Result{AgentSandbox: preflight.EvaluateAgentSandbox(nil)}, true, metav1.ConditionFalse, openshellv1alpha1.SandboxReasonAgentSandboxCRDMissing},
		"crd available":     {available, true, metav1.ConditionTrue, openshellv1alpha1.SandboxReasonAccepted},
	} {
		t.Run(name, func(t *testing.T) {
			sb := &openshellv1alpha1.OpenShellSandbox{ObjectMeta: metav1.ObjectMeta{Generation: 5}}
			evaluate(sb, tt.pf, tt.known)
			c := meta.FindStatusCondition(sb.Status.Conditions, openshellv1alpha1.ConditionAccepted)
			if c == nil || c.Status != tt.accepted || c.Reason != tt.reason || c.ObservedGeneration != 5 {
				t.Fatalf("Accepted = %+v, want %s/%s at generation 5", c, tt.accepted, tt.reason)
			}
			if sb.Status.Phase != openshellv1alpha1.SandboxPhasePending {
				t.Fatalf("phase = %s, want Pending", sb.Status.Phase)
			}
			if r := meta.FindStatusCondition(sb.Status.Conditions, openshellv1alpha1.ConditionReady); r == nil || r.Status != metav1.ConditionFalse {
				t.Fatalf("Ready = %+v, want False", r)
			}
		})
	}
}
