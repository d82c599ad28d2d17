package sandbox

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
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
			if len(tc.providers) > 0 && (len(d.providers) != len(tc.providers) || d.providers[0] != tc.providers[0]) {
				t.Errorf("providers %v, want %v", d.providers, tc.providers)
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
