package sandbox

import (
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/gwconn"
	"github.com/openshell/openshell-operator/internal/preflight"
	render "github.com/openshell/openshell-operator/internal/render/gateway"
	"github.com/openshell/openshell-operator/internal/sandboxcontrols"
	"github.com/openshell/openshell-operator/internal/status"
)

// evaluate runs every check that needs no gateway call and sets the
// conditions and phase they decide. The first failing gate decides
// Accepted (see gates). It reports whether the sandbox may go to the
// gateway. Pure.
func evaluate(sb *openshellv1alpha1.OpenShellSandbox, obs observed) bool {
	setResolutionConditions(sb, obs)
	for _, gate := range gates {
		if r := gate(sb, obs); r != nil {
			status.SetCondition(sb, openshellv1alpha1.ConditionAccepted, metav1.ConditionFalse, r.reason, r.message)
			status.SetCondition(sb, openshellv1alpha1.ConditionReady, metav1.ConditionFalse, r.reason, r.message)
			// A sandbox that runs keeps its phase unless it is refused
			// outright, or said to run (Ready, Provisioning) when it
			// cannot be running any more.
			if sb.Status.SandboxID == "" || r.phase == openshellv1alpha1.SandboxPhaseRejected || (r.notRunning && saysRunning(sb.Status.Phase)) {
				sb.Status.Phase = r.phase
			}
			return false
		}
	}
	status.SetCondition(sb, openshellv1alpha1.ConditionAccepted, metav1.ConditionTrue, openshellv1alpha1.SandboxReasonAccepted,
		"prerequisites are met; Agent Sandbox "+obs.preflight.AgentSandbox.Preferred+" will be used")
	if sb.Status.Phase == "" || sb.Status.Phase == openshellv1alpha1.SandboxPhaseRejected {
		sb.Status.Phase = openshellv1alpha1.SandboxPhasePending
	}
	if sb.Status.SandboxID == "" {
		status.SetCondition(sb, openshellv1alpha1.ConditionReady, metav1.ConditionFalse, openshellv1alpha1.SandboxReasonWaitingForGateway,
			"waiting for the sandbox to be created at the gateway")
	}
	return len(obs.providersBehind) == 0 || sb.Status.SandboxID != ""
}

// setResolutionConditions reports ImageAllowed, PolicyResolved and
// ProvidersResolved, whatever the gates decide.
func setResolutionConditions(sb *openshellv1alpha1.OpenShellSandbox, obs observed) {
	imageStatus := metav1.ConditionTrue
	if !obs.image.Allowed {
		imageStatus = metav1.ConditionFalse
	}
	status.SetCondition(sb, openshellv1alpha1.ConditionImageAllowed, imageStatus, obs.image.Reason, obs.image.Message)

	pol := metav1.Condition{Status: metav1.ConditionTrue, Reason: openshellv1alpha1.SandboxReasonNoPolicy,
		Message: "no spec.policyRef: the gateway's default policy applies"}
	if r := policyGate(sb, obs); r != nil {
		pol = metav1.Condition{Status: metav1.ConditionFalse, Reason: r.reason, Message: r.message}
	} else if r := policyRequiredGate(sb, obs); r != nil {
		pol = metav1.Condition{Status: metav1.ConditionFalse, Reason: r.reason, Message: r.message}
	} else if obs.policy != nil && sb.Spec.PolicyRef == nil {
		pol = metav1.Condition{Status: metav1.ConditionTrue, Reason: openshellv1alpha1.SandboxReasonDefaultPolicy,
			Message: "no spec.policyRef: the namespace's default OpenShellPolicy " + obs.policy.Name + " applies"}
	} else if obs.policy != nil {
		pol = metav1.Condition{Status: metav1.ConditionTrue, Reason: openshellv1alpha1.SandboxReasonResolved, Message: "OpenShellPolicy " + obs.policy.Name + " resolved"}
	}
	status.SetCondition(sb, openshellv1alpha1.SandboxConditionPolicyResolved, pol.Status, pol.Reason, pol.Message)

	prov := metav1.Condition{Status: metav1.ConditionTrue, Reason: openshellv1alpha1.SandboxReasonResolved,
		Message: fmt.Sprintf("%d providers resolved", len(sb.Spec.Providers))}
	if r := providersGate(sb, obs); r != nil {
		prov = metav1.Condition{Status: metav1.ConditionFalse, Reason: r.reason, Message: r.message}
	} else if behind := slices.Concat(obs.unsyncedProviders, obs.providersBehind); len(behind) > 0 {
		slices.Sort(behind)
		prov = metav1.Condition{Status: metav1.ConditionFalse, Reason: openshellv1alpha1.SandboxReasonProviderSyncing,
			Message: fmt.Sprintf("waiting for OpenShellProvider %s to be pushed to the gateway (its Ready condition says what holds it)",
				strings.Join(slices.Compact(behind), ", "))}
	}
	status.SetCondition(sb, openshellv1alpha1.SandboxConditionProvidersResolved, prov.Status, prov.Reason, prov.Message)
}

// refusal is why a gate holds a sandbox back, and the phase it leaves.
type refusal struct {
	phase           openshellv1alpha1.SandboxPhase
	reason, message string
	// notRunning says the refusal means the sandbox cannot be running (the
	// API of its runtime object is gone), so even a sandbox that ran takes
	// the refusal's phase: phase Ready must mean running.
	notRunning bool
}

// gates are the checks before any gateway call, in order: the first that
// refuses decides Accepted and Ready.
var gates = []func(*openshellv1alpha1.OpenShellSandbox, observed) *refusal{
	preflightGate, gatewayGate, gatewayAccessGate, templateGate, policyGate, policyRequiredGate, providersGate, controlsGate, budgetGate, envGate, imageGate,
	pullSecretsGate, pairedGate,
}

// pullSecretsGate refuses a new sandbox (holds a running one) whose
// namespace names pull Secrets on a gateway that cannot give them to its
// pods only: pulling without them would fail later, or worse, succeed with
// credentials the tenant did not choose.
func pullSecretsGate(sb *openshellv1alpha1.OpenShellSandbox, obs observed) *refusal {
	if len(obs.pullSecrets) == 0 || obs.gateway == nil || render.OperatorMode(obs.gateway) {
		return nil
	}
	return &refusal{phase: rejectedOrHeld(sb), reason: openshellv1alpha1.SandboxReasonPullSecretsUnsupported,
		message: fmt.Sprintf("this namespace's OpenShellImagePolicy names pull Secrets (%s), but gateway %s runs every tenant's sandboxes with the same, "+
			"gateway-wide pull Secrets: use a gateway in workspace mode Operator, or remove spec.pullSecrets (the platform admin's gateway-wide ones "+
			"are spec.managed.sandboxes.imagePullSecrets)", strings.Join(obs.pullSecrets, ", "), gwconn.Key(obs.gateway))}
}

// pairedGate holds a sandbox until its namespace's paired namespace can
// take it (workspace mode Operator).
func pairedGate(_ *openshellv1alpha1.OpenShellSandbox, obs observed) *refusal { return obs.paired }

// rejectedOrHeld is the phase of a refusal by the platform (gateway
// access, a control): a sandbox not yet created is rejected; one that runs
// is held and gets nothing new until it fits again (Pending is its phase
// only where the sandbox cannot be running any more: evaluate keeps a
// running sandbox's phase).
func rejectedOrHeld(sb *openshellv1alpha1.OpenShellSandbox) openshellv1alpha1.SandboxPhase {
	if sb.Status.SandboxID != "" {
		return openshellv1alpha1.SandboxPhasePending
	}
	return openshellv1alpha1.SandboxPhaseRejected
}

// refuseOrHold is the refusal for a violated platform control.
func refuseOrHold(sb *openshellv1alpha1.OpenShellSandbox, v *sandboxcontrols.Violation) *refusal {
	if v == nil {
		return nil
	}
	return &refusal{phase: rejectedOrHeld(sb), reason: v.Reason, message: v.Message}
}

// budgetGate charges the sandbox to its namespace's budget on the gateway
// after the namespace's earlier sandboxes.
func budgetGate(sb *openshellv1alpha1.OpenShellSandbox, obs observed) *refusal {
	return refuseOrHold(sb, sandboxcontrols.CheckBudget(obs.gateway, sb, obs.budgetPeers))
}

// policyRequiredGate refuses a new sandbox without a policy where one is
// required (or the namespace's default is ambiguous). A sandbox the gateway
// already runs was admitted before the requirement (an upgrade turns it on
// for existing gateways) and is left running; removing its policyRef later
// is refused at admission.
func policyRequiredGate(sb *openshellv1alpha1.OpenShellSandbox, obs observed) *refusal {
	if sb.Status.SandboxID != "" {
		return nil
	}
	return refuseOrHold(sb, sandboxcontrols.PolicyViolation(obs.gateway, sb, obs.defaultPolicies))
}

// controlsGate holds to the gateway's spec.sandboxControls a sandbox the
// webhook did not see (or that the platform tightened since).
func controlsGate(sb *openshellv1alpha1.OpenShellSandbox, obs observed) *refusal {
	types := make(map[string]string, len(obs.providers))
	for _, p := range obs.providers {
		types[p.Name] = p.Spec.Type
	}
	return refuseOrHold(sb, sandboxcontrols.Check(obs.gateway, sb, types))
}

// saysRunning is whether a phase claims the runtime runs or is starting.
func saysRunning(p openshellv1alpha1.SandboxPhase) bool {
	return p == openshellv1alpha1.SandboxPhaseReady || p == openshellv1alpha1.SandboxPhaseProvisioning
}

func preflightGate(sb *openshellv1alpha1.OpenShellSandbox, obs observed) *refusal {
	blocked, msg := preflight.Blocking(obs.preflight, obs.preflightKnown)
	switch {
	case !blocked:
		return nil
	case !obs.preflightKnown:
		return &refusal{phase: openshellv1alpha1.SandboxPhasePending, reason: openshellv1alpha1.SandboxReasonPreflightPending, message: msg}
	default:
		// A CRD deleted (or being deleted) deletes every agents.x-k8s.io
		// Sandbox with it: a sandbox whose runtime object was found in this
		// cluster does not run, whatever its gateway last said. (One of an
		// External gateway that runs its sandboxes elsewhere was never
		// found here.)
		located := sb.Status.AgentSandbox != nil && sb.Status.AgentSandbox.Namespace != ""
		return &refusal{phase: openshellv1alpha1.SandboxPhasePending, reason: openshellv1alpha1.SandboxReasonAgentSandboxCRDMissing,
			message: msg, notRunning: obs.preflight.AgentSandbox.Gone && located}
	}
}

func gatewayGate(sb *openshellv1alpha1.OpenShellSandbox, obs observed) *refusal {
	if obs.gateway != nil {
		return nil
	}
	return &refusal{phase: openshellv1alpha1.SandboxPhasePending, reason: openshellv1alpha1.SandboxReasonGatewayNotFound,
		message: fmt.Sprintf("OpenShellGateway %s not found: create it or fix spec.gatewayRef", sb.GatewayKey())}
}

// gatewayAccessGate refuses a sandbox not yet created; one that runs is
// held and reported, and nothing more is sent for it.
func gatewayAccessGate(sb *openshellv1alpha1.OpenShellSandbox, obs observed) *refusal {
	if obs.gatewayAccess == "" {
		return nil
	}
	return &refusal{phase: rejectedOrHeld(sb), reason: openshellv1alpha1.ReasonGatewayNotAllowed, message: obs.gatewayAccess}
}

func policyGate(sb *openshellv1alpha1.OpenShellSandbox, obs observed) *refusal {
	if sb.Spec.PolicyRef == nil || obs.policy != nil {
		return nil
	}
	return &refusal{phase: openshellv1alpha1.SandboxPhasePending, reason: openshellv1alpha1.SandboxReasonPolicyNotFound,
		message: fmt.Sprintf("OpenShellPolicy %s not found in namespace %s", sb.Spec.PolicyRef.Name, sb.Namespace)}
}

func providersGate(sb *openshellv1alpha1.OpenShellSandbox, obs observed) *refusal {
	if len(obs.missingProviders) == 0 {
		return nil
	}
	return &refusal{phase: openshellv1alpha1.SandboxPhasePending, reason: openshellv1alpha1.SandboxReasonProviderNotFound,
		message: fmt.Sprintf("OpenShellProvider %s not found in namespace %s", strings.Join(obs.missingProviders, ", "), sb.Namespace)}
}

func envGate(_ *openshellv1alpha1.OpenShellSandbox, obs observed) *refusal {
	return obs.envRefusal
}

// imageGate rejects a sandbox not yet created whose image is not allowed;
// one that already runs is reported (ImageAllowed=False), not killed.
func imageGate(sb *openshellv1alpha1.OpenShellSandbox, obs observed) *refusal {
	if obs.image.Allowed || obs.enforce.Mode != openshellv1alpha1.ImagePolicyEnforce || sb.Status.SandboxID != "" {
		return nil
	}
	return &refusal{phase: openshellv1alpha1.SandboxPhaseRejected, reason: obs.image.Reason, message: obs.image.Message}
}

// unsynced lists providers not yet pushed to the gateway: their status has
// no entry for it with a push that succeeded (ObservedGeneration set). An
// entry without a push is only the provider controller's intent, recorded
// before its first push, and it stays so when that push met another
// owner's provider of the same name: a sandbox created then would be given
// that provider's credentials. With instance set, a push to pods since
// replaced (GatewayInstance: a replaced pod may have lost it) counts as
// not pushed; pushes recorded before instances were (none recorded) count.
// That stricter reading only gates a create: attachments of a running
// sandbox follow the plain one, so a pod replacement detaches nothing.
func unsynced(providers []*openshellv1alpha1.OpenShellProvider, gw *openshellv1alpha1.OpenShellGateway, instance string) []string {
	gatewayKey := gwconn.Key(gw)
	var out []string
	for _, p := range providers {
		if !slices.ContainsFunc(p.Status.Gateways, func(g openshellv1alpha1.ProviderGatewayStatus) bool {
			return g.Gateway == gatewayKey && g.ObservedGeneration > 0 && (instance == "" || g.GatewayInstance == "" || g.GatewayInstance == instance)
		}) {
			out = append(out, p.Name)
		}
	}
	return out
}
