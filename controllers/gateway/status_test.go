package gateway

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/preflight"
)

func TestSetStatus(t *testing.T) {
	okCluster := preflight.Result{
		AgentSandbox: preflight.AgentSandbox{Available: true, Preferred: "v1beta1", Reason: preflight.ReasonAvailable},
		Kubernetes:   preflight.EvaluateKubernetesVersion("v1.34.4"),
	}
	noCRD := okCluster
	noCRD.AgentSandbox = preflight.EvaluateAgentSandbox(nil)
	oldKube := okCluster
	oldKube.Kubernetes = preflight.EvaluateKubernetesVersion("v1.27.3")

	for name, tt := range map[string]struct {
		pf                            preflight.Result
		known                         bool
		wl                            workload
		phase                         openshellv1alpha1.GatewayPhase
		available, degraded, progress metav1.ConditionStatus
		availableReason               string
	}{
		"before first probe": {preflight.Result{}, false, workload{}, openshellv1alpha1.GatewayPhasePending,
			metav1.ConditionUnknown, metav1.ConditionUnknown, metav1.ConditionTrue, preflight.ReasonPreflightPending},
		"agent sandbox missing": {noCRD, true, workload{Ready: true}, openshellv1alpha1.GatewayPhasePending,
			metav1.ConditionFalse, metav1.ConditionTrue, metav1.ConditionFalse, ReasonAgentSandboxUnavailable},
		"kubernetes too old": {oldKube, true, workload{Ready: true}, openshellv1alpha1.GatewayPhaseDegraded,
			metav1.ConditionFalse, metav1.ConditionTrue, metav1.ConditionFalse, ReasonKubernetesTooOld},
		"installing": {okCluster, true, workload{Reason: ReasonInstalling, Message: "rolling out"}, openshellv1alpha1.GatewayPhaseInstalling,
			metav1.ConditionFalse, metav1.ConditionFalse, metav1.ConditionTrue, ReasonInstalling},
		"ready": {okCluster, true, workload{Ready: true, Message: "1/1 ready"}, openshellv1alpha1.GatewayPhaseAvailable,
			metav1.ConditionTrue, metav1.ConditionFalse, metav1.ConditionFalse, ReasonWorkloadReady},
	} {
		t.Run(name, func(t *testing.T) {
			gw := &openshellv1alpha1.OpenShellGateway{ObjectMeta: metav1.ObjectMeta{Generation: 2}}
			setStatus(gw, tt.pf, tt.known, tt.wl)
			if gw.Status.Phase != tt.phase {
				t.Errorf("phase = %s, want %s", gw.Status.Phase, tt.phase)
			}
			for typ, want := range map[string]metav1.ConditionStatus{
				openshellv1alpha1.ConditionAvailable:   tt.available,
				openshellv1alpha1.ConditionDegraded:    tt.degraded,
				openshellv1alpha1.ConditionProgressing: tt.progress,
			} {
				c := meta.FindStatusCondition(gw.Status.Conditions, typ)
				if c == nil || c.Status != want || c.ObservedGeneration != 2 {
					t.Errorf("%s = %+v, want status %s at generation 2", typ, c, want)
				}
			}
			if c := meta.FindStatusCondition(gw.Status.Conditions, openshellv1alpha1.ConditionAvailable); c.Reason != tt.availableReason {
				t.Errorf("Available reason = %s, want %s", c.Reason, tt.availableReason)
			}
			if n := len(gw.Status.Conditions); n != 7 {
				t.Errorf("%d conditions, want 7 (4 preflight + Available, Progressing, Degraded)", n)
			}
			// Rendering again from the same inputs changes nothing.
			before := gw.DeepCopy()
			setStatus(gw, tt.pf, tt.known, tt.wl)
			if !meta.IsStatusConditionPresentAndEqual(gw.Status.Conditions, openshellv1alpha1.ConditionAvailable, tt.available) ||
				len(before.Status.Conditions) != len(gw.Status.Conditions) {
				t.Error("setStatus is not idempotent")
			}
		})
	}
}
