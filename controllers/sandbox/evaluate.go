package sandbox

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/preflight"
	"github.com/openshell/openshell-operator/internal/status"
)

// evaluate runs the checks that need no gateway call and sets conditions
// and phase. The first failing gate decides Accepted: preflight, then the
// gateway reference, then the image policy. Pure.
func evaluate(sb *openshellv1alpha1.OpenShellSandbox, obs observed) {
	set := func(typ string, s metav1.ConditionStatus, reason, msg string) {
		status.SetCondition(sb, typ, s, reason, msg)
	}
	reject := func(phase openshellv1alpha1.SandboxPhase, reason, msg string) {
		set(openshellv1alpha1.ConditionAccepted, metav1.ConditionFalse, reason, msg)
		set(openshellv1alpha1.ConditionReady, metav1.ConditionFalse, reason, msg)
		sb.Status.Phase = phase
	}

	d := obs.image
	imageStatus := metav1.ConditionTrue
	if !d.Allowed {
		imageStatus = metav1.ConditionFalse
	}
	set(openshellv1alpha1.ConditionImageAllowed, imageStatus, d.Reason, d.Message)

	if blocked, msg := preflight.Blocking(obs.preflight, obs.preflightKnown); blocked {
		reason := openshellv1alpha1.SandboxReasonAgentSandboxCRDMissing
		if !obs.preflightKnown {
			reason = openshellv1alpha1.SandboxReasonPreflightPending
		}
		reject(openshellv1alpha1.SandboxPhasePending, reason, msg)
		return
	}
	if obs.gateway == nil {
		reject(openshellv1alpha1.SandboxPhasePending, openshellv1alpha1.SandboxReasonGatewayNotFound,
			fmt.Sprintf("OpenShellGateway %s not found: create it or fix spec.gatewayRef", sb.GatewayKey()))
		return
	}
	// An image that no longer complies is reported on a sandbox that already
	// runs (it is not killed); a sandbox not yet created is rejected.
	if !d.Allowed && obs.enforce.Mode == openshellv1alpha1.ImagePolicyEnforce && sb.Status.SandboxID == "" {
		reject(openshellv1alpha1.SandboxPhaseRejected, d.Reason, d.Message)
		return
	}
	set(openshellv1alpha1.ConditionAccepted, metav1.ConditionTrue, openshellv1alpha1.SandboxReasonAccepted,
		"prerequisites are met; Agent Sandbox "+obs.preflight.AgentSandbox.Preferred+" will be used")
	set(openshellv1alpha1.ConditionReady, metav1.ConditionFalse, openshellv1alpha1.SandboxReasonWaitingForGateway,
		"waiting for the sandbox to be created at the gateway")
	sb.Status.Phase = openshellv1alpha1.SandboxPhasePending
}
