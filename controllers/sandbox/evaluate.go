package sandbox

import (
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/preflight"
	"github.com/openshell/openshell-operator/internal/status"
)

// evaluate runs every check that needs no gateway call and sets the
// conditions and phase they decide. The first failing gate decides
// Accepted: preflight, gateway reference and access, policy, providers, env Secrets,
// then the image policy. It reports whether the sandbox may go to the
// gateway. Pure.
func evaluate(sb *openshellv1alpha1.OpenShellSandbox, obs observed) bool {
	set := func(typ string, s metav1.ConditionStatus, reason, msg string) {
		status.SetCondition(sb, typ, s, reason, msg)
	}
	reject := func(phase openshellv1alpha1.SandboxPhase, reason, msg string) bool {
		set(openshellv1alpha1.ConditionAccepted, metav1.ConditionFalse, reason, msg)
		set(openshellv1alpha1.ConditionReady, metav1.ConditionFalse, reason, msg)
		if sb.Status.SandboxID == "" || phase == openshellv1alpha1.SandboxPhaseRejected {
			sb.Status.Phase = phase
		}
		return false
	}

	d := obs.image
	imageStatus := metav1.ConditionTrue
	if !d.Allowed {
		imageStatus = metav1.ConditionFalse
	}
	set(openshellv1alpha1.ConditionImageAllowed, imageStatus, d.Reason, d.Message)

	switch {
	case sb.Spec.PolicyRef == nil:
		set(openshellv1alpha1.SandboxConditionPolicyResolved, metav1.ConditionTrue, openshellv1alpha1.SandboxReasonNoPolicy, "no spec.policyRef: the gateway's default policy applies")
	case obs.policy == nil:
		set(openshellv1alpha1.SandboxConditionPolicyResolved, metav1.ConditionFalse, openshellv1alpha1.SandboxReasonPolicyNotFound,
			fmt.Sprintf("OpenShellPolicy %s not found in namespace %s", sb.Spec.PolicyRef.Name, sb.Namespace))
	default:
		set(openshellv1alpha1.SandboxConditionPolicyResolved, metav1.ConditionTrue, openshellv1alpha1.SandboxReasonResolved, "OpenShellPolicy "+obs.policy.Name+" resolved")
	}
	switch {
	case len(obs.missingProviders) > 0:
		set(openshellv1alpha1.SandboxConditionProvidersResolved, metav1.ConditionFalse, openshellv1alpha1.SandboxReasonProviderNotFound,
			fmt.Sprintf("OpenShellProvider %s not found in namespace %s", strings.Join(obs.missingProviders, ", "), sb.Namespace))
	case len(obs.unsyncedProviders) > 0:
		set(openshellv1alpha1.SandboxConditionProvidersResolved, metav1.ConditionFalse, openshellv1alpha1.SandboxReasonProviderSyncing,
			fmt.Sprintf("waiting for OpenShellProvider %s to be pushed to the gateway", strings.Join(obs.unsyncedProviders, ", ")))
	default:
		set(openshellv1alpha1.SandboxConditionProvidersResolved, metav1.ConditionTrue, openshellv1alpha1.SandboxReasonResolved, fmt.Sprintf("%d providers resolved", len(sb.Spec.Providers)))
	}

	if blocked, msg := preflight.Blocking(obs.preflight, obs.preflightKnown); blocked {
		reason := openshellv1alpha1.SandboxReasonAgentSandboxCRDMissing
		if !obs.preflightKnown {
			reason = openshellv1alpha1.SandboxReasonPreflightPending
		}
		return reject(openshellv1alpha1.SandboxPhasePending, reason, msg)
	}
	if obs.gateway == nil {
		return reject(openshellv1alpha1.SandboxPhasePending, openshellv1alpha1.SandboxReasonGatewayNotFound,
			fmt.Sprintf("OpenShellGateway %s not found: create it or fix spec.gatewayRef", sb.GatewayKey()))
	}
	if obs.gatewayAccess != "" {
		// A sandbox not yet created is refused; one that runs keeps its
		// phase and is reported, and nothing more is sent for it.
		phase := openshellv1alpha1.SandboxPhaseRejected
		if sb.Status.SandboxID != "" {
			phase = openshellv1alpha1.SandboxPhasePending
		}
		return reject(phase, openshellv1alpha1.ReasonGatewayNotAllowed, obs.gatewayAccess)
	}
	if c := findCondition(sb, openshellv1alpha1.SandboxConditionPolicyResolved); c.Status == metav1.ConditionFalse {
		return reject(openshellv1alpha1.SandboxPhasePending, c.Reason, c.Message)
	}
	if len(obs.missingProviders) > 0 {
		c := findCondition(sb, openshellv1alpha1.SandboxConditionProvidersResolved)
		return reject(openshellv1alpha1.SandboxPhasePending, c.Reason, c.Message)
	}
	if obs.envError != "" {
		return reject(openshellv1alpha1.SandboxPhasePending, openshellv1alpha1.SandboxReasonSecretNotFound, obs.envError)
	}
	// An image that no longer complies is reported on a sandbox that already
	// runs (it is not killed); a sandbox not yet created is rejected.
	if !d.Allowed && obs.enforce.Mode == openshellv1alpha1.ImagePolicyEnforce && sb.Status.SandboxID == "" {
		return reject(openshellv1alpha1.SandboxPhaseRejected, d.Reason, d.Message)
	}
	set(openshellv1alpha1.ConditionAccepted, metav1.ConditionTrue, openshellv1alpha1.SandboxReasonAccepted,
		"prerequisites are met; Agent Sandbox "+obs.preflight.AgentSandbox.Preferred+" will be used")
	if sb.Status.Phase == "" || sb.Status.Phase == openshellv1alpha1.SandboxPhaseRejected {
		sb.Status.Phase = openshellv1alpha1.SandboxPhasePending
	}
	if sb.Status.SandboxID == "" {
		set(openshellv1alpha1.ConditionReady, metav1.ConditionFalse, openshellv1alpha1.SandboxReasonWaitingForGateway,
			"waiting for the sandbox to be created at the gateway")
	}
	return len(obs.unsyncedProviders) == 0 || sb.Status.SandboxID != ""
}

func findCondition(sb *openshellv1alpha1.OpenShellSandbox, typ string) metav1.Condition {
	for _, c := range sb.Status.Conditions {
		if c.Type == typ {
			return c
		}
	}
	return metav1.Condition{}
}

// unsynced lists providers whose status lacks an entry for the gateway.
func unsynced(providers []*openshellv1alpha1.OpenShellProvider, gatewayKey string) []string {
	var out []string
	for _, p := range providers {
		if !slices.ContainsFunc(p.Status.Gateways, func(g openshellv1alpha1.ProviderGatewayStatus) bool { return g.Gateway == gatewayKey }) {
			out = append(out, p.Name)
		}
	}
	return out
}
