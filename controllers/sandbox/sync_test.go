package sandbox

import (
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/openshellv1"
	"github.com/openshell/openshell-operator/internal/sandboxspec"
)

func sandboxWith(mutate func(*openshellv1alpha1.OpenShellSandbox)) *openshellv1alpha1.OpenShellSandbox {
	sb := &openshellv1alpha1.OpenShellSandbox{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "agent", UID: "uid-1"},
		Spec: openshellv1alpha1.OpenShellSandboxSpec{GatewayRef: openshellv1alpha1.GatewayReference{Name: "gw"}, Image: "registry.example.com/agent:1"}}
	if mutate != nil {
		mutate(sb)
	}
	return sb
}

func TestDesired(t *testing.T) {
	restricted := &openshellv1alpha1.OpenShellPolicy{ObjectMeta: metav1.ObjectMeta{Name: "restricted"}}
	for _, tc := range []struct {
		name       string
		sb         *openshellv1alpha1.OpenShellSandbox
		obs        observed
		wantPolicy bool
		providers  []string
	}{
		{name: "no policyRef sends no policy", sb: sandboxWith(nil)},
		{name: "policyRef sends the policy", sb: sandboxWith(func(sb *openshellv1alpha1.OpenShellSandbox) {
			sb.Spec.PolicyRef = &openshellv1alpha1.LocalObjectReference{Name: "restricted"}
		}), obs: observed{policy: restricted}, wantPolicy: true},
		{name: "providers are sorted", sb: sandboxWith(func(sb *openshellv1alpha1.OpenShellSandbox) {
			sb.Spec.Providers = []string{"github", "anthropic"}
		}), providers: []string{"anthropic", "github"}},
		// The gateway resolves names in the workspace: one the operator did
		// not push could be another owner's.
		{name: "only pushed providers are attached", sb: sandboxWith(func(sb *openshellv1alpha1.OpenShellSandbox) {
			sb.Spec.Providers = []string{"github", "anthropic", "gone", "openai"}
		}), obs: observed{missingProviders: []string{"gone"}, unsyncedProviders: []string{"anthropic"}}, providers: []string{"github", "openai"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := desired(tc.sb, tc.obs, "ws-0123456789abcdef")
			if err != nil {
				t.Fatal(err)
			}
			if d.name != sandboxspec.SandboxName("team-a", "agent") || d.workspace != "ws-0123456789abcdef" {
				t.Errorf("names: %s in %s", d.name, d.workspace)
			}
			if (d.policy != nil) != tc.wantPolicy || (d.policyHash != "") != tc.wantPolicy {
				t.Errorf("policy %v, hash %q; want policy: %v", d.policy, d.policyHash, tc.wantPolicy)
			}
			if (d.spec.GetPolicy() != nil) != tc.wantPolicy {
				t.Errorf("spec policy %v; want policy: %v", d.spec.GetPolicy(), tc.wantPolicy)
			}
			if len(tc.providers) > 0 && (!slices.Equal(d.providers, tc.providers) || !slices.Equal(d.spec.GetProviders(), tc.providers)) {
				t.Errorf("providers %v (spec %v), want %v", d.providers, d.spec.GetProviders(), tc.providers)
			}
			if d.specHash != sandboxspec.ImmutableHash(tc.sb) {
				t.Error("specHash is not the sandbox's immutable hash")
			}
		})
	}
}

func TestNextStep(t *testing.T) {
	d, err := desired(sandboxWith(nil), observed{}, "ws")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		st   openshellv1alpha1.OpenShellSandboxStatus
		want step
	}{
		{"never created", openshellv1alpha1.OpenShellSandboxStatus{}, stepCreate},
		{"created, spec unchanged", openshellv1alpha1.OpenShellSandboxStatus{SandboxID: "id", AppliedSpecHash: d.specHash}, stepUpdate},
		{"created, immutable change", openshellv1alpha1.OpenShellSandboxStatus{SandboxID: "id", AppliedSpecHash: "older"}, stepRecreate},
		// A forgotten sandbox (recreated, lost by the gateway) is created
		// again whatever hash status still held.
		{"forgotten", openshellv1alpha1.OpenShellSandboxStatus{AppliedSpecHash: "older"}, stepCreate},
	} {
		if got := nextStep(tc.st, d); got != tc.want {
			t.Errorf("%s: step %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestForgetGatewaySandbox(t *testing.T) {
	sb := sandboxWith(func(sb *openshellv1alpha1.OpenShellSandbox) {
		sb.Status = openshellv1alpha1.OpenShellSandboxStatus{SandboxID: "id", AppliedSpecHash: "h", AppliedPolicyHash: "p",
			AttachedProviders: []string{"a"}, PolicyVersion: 3, Workspace: "ws", GatewaySandboxName: "n", Gateway: "ns/gw",
			AgentSandbox: &openshellv1alpha1.AgentSandboxReference{Name: "x"}, Phase: openshellv1alpha1.SandboxPhaseReady}
	})
	forgetGatewaySandbox(sb)
	st := sb.Status
	if st.SandboxID != "" || st.AppliedSpecHash != "" || st.AppliedPolicyHash != "" || st.AttachedProviders != nil ||
		st.PolicyVersion != 0 || st.AgentSandbox != nil {
		t.Errorf("gateway sandbox state left after reset: %+v", st)
	}
	// Where the sandbox lives is kept: deletion and the next create use it.
	if st.Workspace != "ws" || st.GatewaySandboxName != "n" || st.Gateway != "ns/gw" {
		t.Errorf("placement lost: %+v", st)
	}
}

func TestRunAction(t *testing.T) {
	const (
		ready    = openshellv1.SandboxPhase_SANDBOX_PHASE_READY
		stopping = openshellv1.SandboxPhase_SANDBOX_PHASE_STOPPING
		stopped  = openshellv1.SandboxPhase_SANDBOX_PHASE_STOPPED
		starting = openshellv1.SandboxPhase_SANDBOX_PHASE_STARTING
		prov     = openshellv1.SandboxPhase_SANDBOX_PHASE_PROVISIONING
		errored  = openshellv1.SandboxPhase_SANDBOX_PHASE_ERROR
	)
	for _, tc := range []struct {
		suspend, ours, imageOK bool
		phase                  openshellv1.SandboxPhase
		want                   action
	}{
		{true, false, true, ready, actionStop}, {true, true, true, stopping, actionNone}, {true, true, true, stopped, actionNone},
		{true, false, true, prov, actionNone}, {true, true, true, starting, actionNone}, {true, false, true, errored, actionNone},
		{false, true, true, stopped, actionStart}, {false, true, true, starting, actionNone}, {false, true, true, ready, actionNone},
		{false, true, true, stopping, actionNone},
		// A sandbox the gateway (or its CLI) stopped is left to it.
		{false, false, true, stopped, actionNone},
		// Resuming would start a pod with an image the namespace no longer allows.
		{false, true, false, stopped, actionNone},
	} {
		if got := runAction(tc.suspend, tc.phase, tc.ours, tc.imageOK); got != tc.want {
			t.Errorf("suspend=%v ours=%v image=%v phase=%s: %v, want %v", tc.suspend, tc.ours, tc.imageOK, tc.phase, got, tc.want)
		}
	}
}

func TestReportSuspension(t *testing.T) {
	sb := &openshellv1alpha1.OpenShellSandbox{}
	reportSuspension(sb, openshellv1.SandboxPhase_SANDBOX_PHASE_READY)
	if len(sb.Status.Conditions) != 0 {
		t.Fatalf("a sandbox never suspended gained a condition: %+v", sb.Status.Conditions)
	}
	sb.Spec.Suspend = true
	for _, tc := range []struct {
		suspend bool
		gateway openshellv1.SandboxPhase
		phase   openshellv1alpha1.SandboxPhase
		status  metav1.ConditionStatus
		reason  string
	}{
		{true, openshellv1.SandboxPhase_SANDBOX_PHASE_STOPPING, openshellv1alpha1.SandboxPhaseSuspended, metav1.ConditionFalse, openshellv1alpha1.SandboxReasonSuspending},
		{true, openshellv1.SandboxPhase_SANDBOX_PHASE_STOPPED, openshellv1alpha1.SandboxPhaseSuspended, metav1.ConditionTrue, openshellv1alpha1.SandboxReasonSuspended},
		{false, openshellv1.SandboxPhase_SANDBOX_PHASE_STARTING, "", metav1.ConditionFalse, openshellv1alpha1.SandboxReasonResuming},
		{false, openshellv1.SandboxPhase_SANDBOX_PHASE_READY, "", metav1.ConditionFalse, openshellv1alpha1.SandboxReasonRunning},
	} {
		sb.Spec.Suspend, sb.Status.Phase = tc.suspend, ""
		reportSuspension(sb, tc.gateway)
		c := meta.FindStatusCondition(sb.Status.Conditions, openshellv1alpha1.SandboxConditionSuspended)
		if sb.Status.Phase != tc.phase || c == nil || c.Status != tc.status || c.Reason != tc.reason {
			t.Errorf("suspend=%v gateway %s: phase %q, condition %+v", tc.suspend, tc.gateway, sb.Status.Phase, c)
		}
	}
}

// TestRequirePolicySparesRunningSandboxes: turning requirePolicy on (an
// upgrade defaults it on for existing gateways) refuses new sandboxes
// without a policy and leaves running ones alone.
func TestRequirePolicySparesRunningSandboxes(t *testing.T) {
	required := true
	gw := &openshellv1alpha1.OpenShellGateway{Spec: openshellv1alpha1.OpenShellGatewaySpec{
		SandboxControls: openshellv1alpha1.SandboxControls{RequirePolicy: &required}}}
	sb := sandboxWith(nil)
	if r := policyRequiredGate(sb, observed{gateway: gw}); r == nil || r.reason != openshellv1alpha1.SandboxReasonPolicyRequired {
		t.Fatalf("a new sandbox without a policy: %+v", r)
	}
	sb.Status.SandboxID = "running"
	if r := policyRequiredGate(sb, observed{gateway: gw}); r != nil {
		t.Fatalf("a running sandbox was held: %+v", r)
	}
}

// TestUpstreamRecheck: a sandbox whose agents.x-k8s.io Sandbox went while
// the gateway still reports it running is asked about again within a
// second at first (the gateway usually notices a moment later), then
// less often, never less than every provisionPoll.
func TestUpstreamRecheck(t *testing.T) {
	for since, want := range map[time.Duration]time.Duration{
		0:                time.Second,
		time.Second:      time.Second,
		4 * time.Second:  2 * time.Second,
		16 * time.Second: 8 * time.Second,
		time.Minute:      provisionPoll,
		time.Hour:        provisionPoll,
	} {
		if got := upstreamRecheck(since); got != want {
			t.Errorf("upstreamRecheck(%s) = %s, want %s", since, got, want)
		}
	}
	sb := &openshellv1alpha1.OpenShellSandbox{Status: openshellv1alpha1.OpenShellSandboxStatus{
		AgentSandbox: &openshellv1alpha1.AgentSandboxReference{APIVersion: "agents.x-k8s.io/v1alpha1", Namespace: "sandboxes", Name: "gone"}}}
	running := &openshellv1.Sandbox{Status: &openshellv1.SandboxStatus{Phase: openshellv1.SandboxPhase_SANDBOX_PHASE_READY}}
	if res := reportUpstream(sb, running, true, ctrl.Result{}); res.RequeueAfter != time.Second || sb.Status.Phase != openshellv1alpha1.SandboxPhaseError {
		t.Errorf("just gone: %+v, phase %s; want a look in a second and Error", res, sb.Status.Phase)
	}
}
