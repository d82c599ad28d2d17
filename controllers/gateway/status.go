package gateway

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/preflight"
	"github.com/openshell/openshell-operator/internal/status"
)

// Reasons of the Available, Progressing and Degraded conditions.
const (
	// ReasonAgentSandboxUnavailable: the Agent Sandbox CRD is missing or unusable.
	ReasonAgentSandboxUnavailable = "AgentSandboxUnavailable"
	// ReasonKubernetesTooOld: the cluster is older than the supported minimum.
	ReasonKubernetesTooOld = "KubernetesTooOld"
	// ReasonAsExpected: nothing is degraded.
	ReasonAsExpected = "AsExpected"
	// ReasonInstalling: the managed gateway workload is being rolled out.
	ReasonInstalling = "Installing"
	// ReasonConnecting: the external gateway has not answered yet.
	ReasonConnecting = "Connecting"
	// ReasonWorkloadReady: the gateway serves requests.
	ReasonWorkloadReady = "WorkloadReady"
)

// workload is what the operator knows about the gateway process itself.
type workload struct {
	Ready           bool
	Reason, Message string
}

// workloadState reports the gateway process. Installation and the External
// health check land with the gateway installation issue; until then a
// gateway is never claimed Available.
func workloadState(gw *openshellv1alpha1.OpenShellGateway) workload {
	if gw.Spec.Mode == openshellv1alpha1.GatewayModeExternal {
		return workload{Reason: ReasonConnecting, Message: "waiting for the external gateway's Health RPC"}
	}
	return workload{Reason: ReasonInstalling, Message: "the gateway workload is not rolled out yet"}
}

// setStatus renders every condition and the phase from the preflight result
// and the workload state. It is pure: same inputs, same status.
func setStatus(gw *openshellv1alpha1.OpenShellGateway, pf preflight.Result, known bool, wl workload) {
	for _, c := range preflight.GatewayConditions(pf, known) {
		status.SetCondition(gw, c.Type, c.Status, c.Reason, c.Message)
	}
	set := func(typ string, s metav1.ConditionStatus, reason, msg string) {
		status.SetCondition(gw, typ, s, reason, msg)
	}
	switch {
	case !known:
		set(openshellv1alpha1.ConditionDegraded, metav1.ConditionUnknown, preflight.ReasonPreflightPending, "waiting for the first cluster probe")
		set(openshellv1alpha1.ConditionAvailable, metav1.ConditionUnknown, preflight.ReasonPreflightPending, "waiting for the first cluster probe")
		set(openshellv1alpha1.ConditionProgressing, metav1.ConditionTrue, preflight.ReasonPreflightPending, "waiting for the first cluster probe")
		gw.Status.Phase = openshellv1alpha1.GatewayPhasePending
	case !pf.AgentSandbox.Available:
		msg := "sandboxes cannot be created: " + pf.AgentSandbox.Message
		set(openshellv1alpha1.ConditionDegraded, metav1.ConditionTrue, ReasonAgentSandboxUnavailable, msg)
		set(openshellv1alpha1.ConditionAvailable, metav1.ConditionFalse, ReasonAgentSandboxUnavailable, msg)
		set(openshellv1alpha1.ConditionProgressing, metav1.ConditionFalse, ReasonAgentSandboxUnavailable, "waiting for the Agent Sandbox CRD")
		gw.Status.Phase = openshellv1alpha1.GatewayPhasePending
	case !pf.Kubernetes.Supported:
		set(openshellv1alpha1.ConditionDegraded, metav1.ConditionTrue, ReasonKubernetesTooOld, pf.Kubernetes.Message)
		set(openshellv1alpha1.ConditionAvailable, metav1.ConditionFalse, ReasonKubernetesTooOld, pf.Kubernetes.Message)
		set(openshellv1alpha1.ConditionProgressing, metav1.ConditionFalse, ReasonKubernetesTooOld, pf.Kubernetes.Message)
		gw.Status.Phase = openshellv1alpha1.GatewayPhaseDegraded
	case !wl.Ready:
		set(openshellv1alpha1.ConditionDegraded, metav1.ConditionFalse, ReasonAsExpected, "prerequisites are met")
		set(openshellv1alpha1.ConditionAvailable, metav1.ConditionFalse, wl.Reason, wl.Message)
		set(openshellv1alpha1.ConditionProgressing, metav1.ConditionTrue, wl.Reason, wl.Message)
		gw.Status.Phase = openshellv1alpha1.GatewayPhaseInstalling
	default:
		set(openshellv1alpha1.ConditionDegraded, metav1.ConditionFalse, ReasonAsExpected, "prerequisites are met")
		set(openshellv1alpha1.ConditionAvailable, metav1.ConditionTrue, ReasonWorkloadReady, wl.Message)
		set(openshellv1alpha1.ConditionProgressing, metav1.ConditionFalse, ReasonWorkloadReady, wl.Message)
		gw.Status.Phase = openshellv1alpha1.GatewayPhaseAvailable
	}
}

// phaseMessage is the event text for a phase transition.
func phaseMessage(gw *openshellv1alpha1.OpenShellGateway) string {
	for _, c := range gw.Status.Conditions {
		if c.Type == openshellv1alpha1.ConditionAvailable {
			return "gateway is " + string(gw.Status.Phase) + ": " + c.Message
		}
	}
	return "gateway is " + string(gw.Status.Phase)
}
