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
	ready := health{ready: "1/1 gateway replicas ready"}
	rolling := health{waiting: []issue{{Reason: openshellv1alpha1.GatewayReasonInstalling, Message: "0/1 gateway replicas ready"}}}
	badTLS := health{degraded: []issue{{Reason: openshellv1alpha1.GatewayReasonCertificateInvalid, Message: "expired"}},
		waiting: []issue{{Reason: openshellv1alpha1.GatewayReasonInstalling, Message: "rolling"}}}

	for name, tt := range map[string]struct {
		pf                            preflight.Result
		known                         bool
		h                             health
		phase                         openshellv1alpha1.GatewayPhase
		available, degraded, progress metav1.ConditionStatus
		availableReason               string
	}{
		"before first probe": {preflight.Result{}, false, ready, openshellv1alpha1.GatewayPhasePending,
			metav1.ConditionUnknown, metav1.ConditionUnknown, metav1.ConditionTrue, preflight.ReasonPreflightPending},
		"agent sandbox missing": {noCRD, true, ready, openshellv1alpha1.GatewayPhasePending,
			metav1.ConditionFalse, metav1.ConditionTrue, metav1.ConditionFalse, openshellv1alpha1.GatewayReasonAgentSandboxUnavailable},
		"kubernetes too old": {oldKube, true, ready, openshellv1alpha1.GatewayPhaseDegraded,
			metav1.ConditionFalse, metav1.ConditionTrue, metav1.ConditionFalse, openshellv1alpha1.GatewayReasonKubernetesTooOld},
		"installing": {okCluster, true, rolling, openshellv1alpha1.GatewayPhaseInstalling,
			metav1.ConditionFalse, metav1.ConditionFalse, metav1.ConditionTrue, openshellv1alpha1.GatewayReasonInstalling},
		"degraded while rolling": {okCluster, true, badTLS, openshellv1alpha1.GatewayPhaseDegraded,
			metav1.ConditionFalse, metav1.ConditionTrue, metav1.ConditionTrue, openshellv1alpha1.GatewayReasonCertificateInvalid},
		"ready": {okCluster, true, ready, openshellv1alpha1.GatewayPhaseAvailable,
			metav1.ConditionTrue, metav1.ConditionFalse, metav1.ConditionFalse, openshellv1alpha1.GatewayReasonWorkloadReady},
	} {
		t.Run(name, func(t *testing.T) {
			gw := &openshellv1alpha1.OpenShellGateway{ObjectMeta: metav1.ObjectMeta{Generation: 2}}
			setStatus(gw, tt.pf, tt.known, tt.h)
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
			before := gw.DeepCopy()
			setStatus(gw, tt.pf, tt.known, tt.h)
			if len(before.Status.Conditions) != len(gw.Status.Conditions) || before.Status.Phase != gw.Status.Phase {
				t.Error("setStatus is not idempotent")
			}
		})
	}
}
