package sandboxspec

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

func TestTenantClaimProblem(t *testing.T) {
	const uidA, uidB = types.UID("uid-a"), types.UID("uid-b")
	wsA, wsB := WorkspaceName("team-a", uidA), WorkspaceName("team-b", uidB)
	for _, tc := range []struct {
		name      string
		claim     TenantClaim
		uid       types.UID
		sandboxes []string
		want      string // substring of the problem; "" for none
	}{
		{"0.1: a sandbox of the namespace's workspace", TenantClaim{Namespace: "team-a", UID: string(uidA), Sandbox: wsA + "--" + SandboxName("team-a", "agent")}, uidA, nil, ""},
		{"0.1: any name in the namespace's workspace (its own Tenant Admin's)", TenantClaim{Namespace: "team-a", Sandbox: wsA + "--mine"}, uidA, nil, ""},
		{"0.1: another workspace's sandbox claims team-a", TenantClaim{Namespace: "team-a", UID: string(uidA), Sandbox: wsB + "--" + SandboxName("team-a", "agent")}, uidA, []string{"agent"}, "not created in namespace team-a's workspace"},
		{"0.1: the UID label of another incarnation", TenantClaim{Namespace: "team-a", UID: "old", Sandbox: wsA + "--x"}, uidA, nil, "not namespace team-a's UID"},
		{"0.1: a forged UID does not choose the workspace", TenantClaim{Namespace: "team-a", UID: string(uidB), Sandbox: WorkspaceName("team-a", uidB) + "--x"}, uidA, nil, "not namespace team-a's UID"},
		{"0.0.111: the operator's name for an OpenShellSandbox of the namespace", TenantClaim{Namespace: "team-a", Sandbox: SandboxName("team-a", "agent")}, uidA, []string{"other", "agent"}, ""},
		{"0.0.111: a name the operator gives no sandbox of the namespace", TenantClaim{Namespace: "team-a", Sandbox: SandboxName("team-a", "gone")}, uidA, []string{"agent"}, "not created in namespace team-a's workspace"},
		{"0.0.111 rule never admits a workspace-prefixed name", TenantClaim{Namespace: "team-a", Sandbox: wsB + "--" + SandboxName("team-a", "agent")}, uidA, []string{"agent"}, "not created"},
		{"operator mode: a sandbox in the namespace's paired namespace", TenantClaim{Namespace: "team-a", UID: string(uidA), Sandbox: "agent", PodNamespace: wsA, InPairedNamespace: true}, uidA, nil, ""},
		{"operator mode: another tenant's paired namespace claims team-a", TenantClaim{Namespace: "team-a", UID: string(uidA), Sandbox: "agent", PodNamespace: wsB, InPairedNamespace: true}, uidA, nil, "not namespace team-a's paired namespace"},
		{"operator mode: in another's paired namespace, a Sandbox named as team-a's OpenShellSandbox", TenantClaim{Namespace: "team-a", Sandbox: SandboxName("team-a", "agent"), PodNamespace: wsB, InPairedNamespace: true}, uidA, []string{"agent"}, "not namespace team-a's paired namespace"},
		{"operator mode: in another's paired namespace, a shared-mode name of team-a's workspace", TenantClaim{Namespace: "team-a", Sandbox: wsA + "--x", PodNamespace: wsB, InPairedNamespace: true}, uidA, nil, "not namespace team-a's paired namespace"},
		{"a namespace named like team-a's workspace is no paired namespace by its name alone", TenantClaim{Namespace: "team-a", Sandbox: "agent", PodNamespace: wsA}, uidA, nil, "not created in namespace team-a's workspace"},
		{"operator mode: no Sandbox owns the pod in the paired namespace", TenantClaim{Namespace: "team-a", PodNamespace: wsA, InPairedNamespace: true}, uidA, nil, "no agents.x-k8s.io Sandbox owns it"},
		{"no Sandbox owns the pod", TenantClaim{Namespace: "team-a"}, uidA, []string{"agent"}, "no agents.x-k8s.io Sandbox owns it"},
		{"the namespace does not exist", TenantClaim{Namespace: "nowhere", Sandbox: "x"}, "", nil, "does not exist"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := TenantClaimProblem(tc.claim, tc.uid, tc.sandboxes)
			if tc.want == "" && got != "" {
				t.Fatalf("refused: %s", got)
			}
			if tc.want != "" && !strings.Contains(got, tc.want) {
				t.Fatalf("problem %q, want one containing %q", got, tc.want)
			}
		})
	}
}
