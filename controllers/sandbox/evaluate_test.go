package sandbox

import (
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/imagepolicy"
	"github.com/openshell/openshell-operator/internal/preflight"
)

func TestEvaluate(t *testing.T) {
	available := preflight.Result{AgentSandbox: preflight.AgentSandbox{Available: true, Preferred: "v1alpha1"}}
	gw := &openshellv1alpha1.OpenShellGateway{}
	operatorGateway := &openshellv1alpha1.OpenShellGateway{Spec: openshellv1alpha1.OpenShellGatewaySpec{Mode: openshellv1alpha1.GatewayModeManaged,
		Managed: &openshellv1alpha1.ManagedGatewaySpec{Sandboxes: openshellv1alpha1.SandboxPlacement{WorkspaceMode: openshellv1alpha1.WorkspaceModeOperator}}}}
	allowed := imagepolicy.Decision{Allowed: true, Reason: imagepolicy.ReasonAllowed, Message: "ok"}
	denied := imagepolicy.Decision{Reason: imagepolicy.ReasonImageNotMirrored, Message: "image x is not mirrored"}
	enforce := openshellv1alpha1.ImagePolicyEnforcement{Mode: openshellv1alpha1.ImagePolicyEnforce}
	warn := openshellv1alpha1.ImagePolicyEnforcement{Mode: openshellv1alpha1.ImagePolicyWarn}

	for name, tt := range map[string]struct {
		obs       observed
		sandboxID string
		accepted  metav1.ConditionStatus
		reason    string
		image     metav1.ConditionStatus
		phase     openshellv1alpha1.SandboxPhase
	}{
		"preflight pending": {observed{gateway: gw, image: allowed, enforce: enforce}, "",
			metav1.ConditionFalse, openshellv1alpha1.SandboxReasonPreflightPending, metav1.ConditionTrue, openshellv1alpha1.SandboxPhasePending},
		"crd missing": {observed{preflight: preflight.Result{AgentSandbox: preflight.EvaluateAgentSandbox(nil)}, preflightKnown: true, gateway: gw, image: allowed, enforce: enforce}, "",
			metav1.ConditionFalse, openshellv1alpha1.SandboxReasonAgentSandboxCRDMissing, metav1.ConditionTrue, openshellv1alpha1.SandboxPhasePending},
		"gateway missing": {observed{preflight: available, preflightKnown: true, image: allowed, enforce: enforce}, "",
			metav1.ConditionFalse, openshellv1alpha1.SandboxReasonGatewayNotFound, metav1.ConditionTrue, openshellv1alpha1.SandboxPhasePending},
		"image denied, enforce": {observed{preflight: available, preflightKnown: true, gateway: gw, image: denied, enforce: enforce}, "",
			metav1.ConditionFalse, imagepolicy.ReasonImageNotMirrored, metav1.ConditionFalse, openshellv1alpha1.SandboxPhaseRejected},
		"image denied, already running": {observed{preflight: available, preflightKnown: true, gateway: gw, image: denied, enforce: enforce}, "3f6c",
			metav1.ConditionTrue, openshellv1alpha1.SandboxReasonAccepted, metav1.ConditionFalse, openshellv1alpha1.SandboxPhasePending},
		"image denied, warn": {observed{preflight: available, preflightKnown: true, gateway: gw, image: denied, enforce: warn}, "",
			metav1.ConditionTrue, openshellv1alpha1.SandboxReasonAccepted, metav1.ConditionFalse, openshellv1alpha1.SandboxPhasePending},
		"all good": {observed{preflight: available, preflightKnown: true, gateway: gw, image: allowed, enforce: enforce}, "",
			metav1.ConditionTrue, openshellv1alpha1.SandboxReasonAccepted, metav1.ConditionTrue, openshellv1alpha1.SandboxPhasePending},
		"tenant pull Secrets on a Shared gateway": {observed{preflight: available, preflightKnown: true, gateway: gw, image: allowed, enforce: enforce,
			pullSecrets: []string{"regcred"}}, "",
			metav1.ConditionFalse, openshellv1alpha1.SandboxReasonPullSecretsUnsupported, metav1.ConditionTrue, openshellv1alpha1.SandboxPhaseRejected},
		"tenant pull Secrets on a Shared gateway, already running": {observed{preflight: available, preflightKnown: true, gateway: gw, image: allowed, enforce: enforce,
			pullSecrets: []string{"regcred"}}, "3f6c",
			metav1.ConditionFalse, openshellv1alpha1.SandboxReasonPullSecretsUnsupported, metav1.ConditionTrue, ""},
		"tenant pull Secrets on an Operator mode gateway": {observed{preflight: available, preflightKnown: true, gateway: operatorGateway, image: allowed,
			enforce: enforce, pullSecrets: []string{"regcred"}}, "",
			metav1.ConditionTrue, openshellv1alpha1.SandboxReasonAccepted, metav1.ConditionTrue, openshellv1alpha1.SandboxPhasePending},
	} {
		t.Run(name, func(t *testing.T) {
			sb := &openshellv1alpha1.OpenShellSandbox{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "ns", Generation: 5}}
			sb.Status.SandboxID = tt.sandboxID
			evaluate(sb, tt.obs)
			c := meta.FindStatusCondition(sb.Status.Conditions, openshellv1alpha1.ConditionAccepted)
			if c == nil || c.Status != tt.accepted || c.Reason != tt.reason || c.ObservedGeneration != 5 {
				t.Fatalf("Accepted = %+v, want %s/%s at generation 5", c, tt.accepted, tt.reason)
			}
			if img := meta.FindStatusCondition(sb.Status.Conditions, openshellv1alpha1.ConditionImageAllowed); img == nil || img.Status != tt.image {
				t.Fatalf("ImageAllowed = %+v, want %s", img, tt.image)
			}
			if sb.Status.Phase != tt.phase {
				t.Fatalf("phase = %s, want %s", sb.Status.Phase, tt.phase)
			}
			if tt.reason == openshellv1alpha1.SandboxReasonGatewayNotFound && !strings.Contains(c.Message, "fix spec.gatewayRef") {
				t.Fatalf("message %q is not actionable", c.Message)
			}
		})
	}
}

// TestEvaluateARunningSandbox: a refusal holds a running sandbox in its
// phase, except one that means it cannot run: with the Sandbox CRD gone
// (its deletion took every agents.x-k8s.io Sandbox), phase Ready would lie
// for a sandbox whose runtime object was found in this cluster.
func TestEvaluateARunningSandbox(t *testing.T) {
	available := preflight.Result{AgentSandbox: preflight.AgentSandbox{Available: true, Preferred: "v1alpha1"}}
	gone := preflight.Result{AgentSandbox: preflight.EvaluateAgentSandbox(nil)}
	notEstablished := preflight.Result{AgentSandbox: preflight.AgentSandbox{Reason: preflight.ReasonCRDNotEstablished, Message: "not established"}}
	allowed := imagepolicy.Decision{Allowed: true, Reason: imagepolicy.ReasonAllowed, Message: "ok"}
	gw := &openshellv1alpha1.OpenShellGateway{}
	here := &openshellv1alpha1.AgentSandboxReference{APIVersion: "agents.x-k8s.io/v1beta1", Namespace: "sandboxes", Name: "s"}
	for name, tt := range map[string]struct {
		obs       observed
		located   *openshellv1alpha1.AgentSandboxReference
		was, want openshellv1alpha1.SandboxPhase
	}{
		"crd gone":                         {observed{preflight: gone, preflightKnown: true, gateway: gw, image: allowed}, here, openshellv1alpha1.SandboxPhaseReady, openshellv1alpha1.SandboxPhasePending},
		"crd gone, provisioning":           {observed{preflight: gone, preflightKnown: true, gateway: gw, image: allowed}, here, openshellv1alpha1.SandboxPhaseProvisioning, openshellv1alpha1.SandboxPhasePending},
		"crd gone, suspended stays":        {observed{preflight: gone, preflightKnown: true, gateway: gw, image: allowed}, here, openshellv1alpha1.SandboxPhaseSuspended, openshellv1alpha1.SandboxPhaseSuspended},
		"crd gone, runtime not found here": {observed{preflight: gone, preflightKnown: true, gateway: gw, image: allowed}, nil, openshellv1alpha1.SandboxPhaseReady, openshellv1alpha1.SandboxPhaseReady},
		"crd not established (it runs)":    {observed{preflight: notEstablished, preflightKnown: true, gateway: gw, image: allowed}, here, openshellv1alpha1.SandboxPhaseReady, openshellv1alpha1.SandboxPhaseReady},
		"gateway missing (held)":           {observed{preflight: available, preflightKnown: true, image: allowed}, here, openshellv1alpha1.SandboxPhaseReady, openshellv1alpha1.SandboxPhaseReady},
	} {
		t.Run(name, func(t *testing.T) {
			sb := &openshellv1alpha1.OpenShellSandbox{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "ns"}}
			sb.Status.SandboxID, sb.Status.Phase, sb.Status.AgentSandbox = "3f6c", tt.was, tt.located
			if evaluate(sb, tt.obs) {
				t.Fatal("a refused sandbox may go to the gateway")
			}
			if sb.Status.Phase != tt.want {
				t.Fatalf("phase = %s, want %s", sb.Status.Phase, tt.want)
			}
			if meta.IsStatusConditionTrue(sb.Status.Conditions, openshellv1alpha1.ConditionReady) {
				t.Fatal("Ready stays True")
			}
		})
	}
}

// TestUnsynced: only a push that succeeded counts. The provider controller
// records its intent (an entry without a push) before pushing, and keeps it
// when the push meets another owner's provider of the same name.
func TestUnsynced(t *testing.T) {
	const key = "gw-ns/gw"
	gw := &openshellv1alpha1.OpenShellGateway{ObjectMeta: metav1.ObjectMeta{Namespace: "gw-ns", Name: "gw"}}
	gw.Status.Instance = "pods-now"
	provider := func(name string, entries ...openshellv1alpha1.ProviderGatewayStatus) *openshellv1alpha1.OpenShellProvider {
		p := &openshellv1alpha1.OpenShellProvider{ObjectMeta: metav1.ObjectMeta{Name: name}}
		p.Status.Gateways = entries
		return p
	}
	pushed := openshellv1alpha1.ProviderGatewayStatus{Gateway: key, Name: "x", Workspace: "ws", ObservedGeneration: 1, GatewayInstance: "pods-now"}
	// Pushed to pods since replaced, which may have lost it.
	beforeRestart := openshellv1alpha1.ProviderGatewayStatus{Gateway: key, Name: "x", Workspace: "ws", ObservedGeneration: 1, GatewayInstance: "pods-before"}
	// Pushed before instances were recorded (an operator upgrade).
	unrecorded := openshellv1alpha1.ProviderGatewayStatus{Gateway: key, Name: "x", Workspace: "ws", ObservedGeneration: 1}
	intent := openshellv1alpha1.ProviderGatewayStatus{Gateway: key, Name: "x", Workspace: "ws"}
	elsewhere := openshellv1alpha1.ProviderGatewayStatus{Gateway: "other/gw", Name: "x", Workspace: "ws", ObservedGeneration: 3}
	providers := []*openshellv1alpha1.OpenShellProvider{
		provider("pushed", pushed),
		// A provider without a credentials Secret has no Secret version
		// once pushed either: the generation is what says it was.
		provider("no-secret", pushed),
		provider("intent-only", intent),
		provider("other-gateway", elsewhere),
		provider("none"),
		provider("before-restart", beforeRestart),
		provider("unrecorded", unrecorded),
	}
	// Attachments of a running sandbox: any push counts, so a pod
	// replacement detaches nothing.
	if got, want := unsynced(providers, gw, ""), []string{"intent-only", "other-gateway", "none"}; !slices.Equal(got, want) {
		t.Fatalf("unsynced = %v, want %v", got, want)
	}
	// A create: only a push to the current pods counts.
	if got, want := unsynced(providers, gw, gw.Status.Instance), []string{"intent-only", "other-gateway", "none", "before-restart"}; !slices.Equal(got, want) {
		t.Fatalf("unsynced to the current pods = %v, want %v", got, want)
	}
}
