package sandboxspec

import (
	"strings"
	"testing"

	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/openshellv1"
)

func TestNamesObeyGatewayLimits(t *testing.T) {
	seen := map[string]string{}
	for _, ns := range []string{"a", "team-a", "team--a", "Team_A", strings.Repeat("x", 63), "---", "1-2-3", "tenant-with-a-very-long-name"} {
		for _, name := range []string{"claude", "claude-agent-with-long-name", "a", "x--y", strings.Repeat("z", 253)} {
			for _, got := range []string{WorkspaceName(ns, "0b6a3c1e-5e4f-4c41-9d0f-0c1f6a3b2d11"), SandboxName(ns, name)} {
				if len(got) > MaxNameLen || len(validation.IsDNS1123Label(got)) > 0 || strings.Contains(got, "--") {
					t.Errorf("%q (from %s/%s) breaks the gateway's name rules", got, ns, name)
				}
			}
			sb := SandboxName(ns, name)
			if prev, ok := seen[sb]; ok && prev != ns+"/"+name {
				t.Errorf("%s/%s and %s map to the same sandbox name %s", ns, name, prev, sb)
			}
			seen[sb] = ns + "/" + name
		}
	}
	first := SandboxName("team-a", "agent")
	if again := SandboxName("team-a", "agent"); again != first {
		t.Errorf("names are not deterministic: %s then %s", first, again)
	}
	if SandboxName("team-a", "agent") == SandboxName("team-b", "agent") {
		t.Error("the same sandbox name in two namespaces collides")
	}
}

func TestWorkspaceNameIsPerNamespaceIncarnation(t *testing.T) {
	a := WorkspaceName("team-a", "uid-1")
	if a != WorkspaceName("team-a", "uid-1") {
		t.Fatal("workspace names are not deterministic")
	}
	if a == WorkspaceName("team-a", "uid-2") {
		t.Error("a re-created namespace (new UID) maps to the old workspace")
	}
	if a == WorkspaceName("team-b", "uid-1") {
		t.Error("two namespaces map to one workspace")
	}
	// 64 bits of hash: "ws-" plus 16 hex characters, the whole name budget.
	if len(a) != MaxNameLen || !strings.HasPrefix(a, "ws-") {
		t.Errorf("workspace name %q: want ws- and 16 hex characters", a)
	}
}

func TestOwnedBy(t *testing.T) {
	want := WorkspaceLabels("team-a", "uid-1")
	for _, tc := range []struct {
		labels map[string]string
		owned  bool
	}{
		{map[string]string{LabelNamespace: "team-a", LabelNamespaceUID: "uid-1", "other": "x"}, true},
		{map[string]string{LabelNamespace: "team-a", LabelNamespaceUID: "uid-2"}, false},
		{map[string]string{LabelNamespace: "team-a"}, false},
		{nil, false},
	} {
		if got := OwnedBy(tc.labels, want); got != tc.owned {
			t.Errorf("OwnedBy(%v) = %v, want %v", tc.labels, got, tc.owned)
		}
	}
}

// TestRequestID: the same request and parts give the same key (a retry
// replays), any change of either another; the key is a non-zero UUID.
func TestRequestID(t *testing.T) {
	req := &openshellv1.CreateSandboxRequest{Name: "s", Spec: &openshellv1.SandboxSpec{LogLevel: "info"}}
	id := RequestID(req, "uid-1", "")
	if _, err := uuid.Parse(id); err != nil || id == (uuid.UUID{}).String() {
		t.Fatalf("RequestID = %q: not a non-zero UUID (%v)", id, err)
	}
	if again := RequestID(proto.Clone(req).(*openshellv1.CreateSandboxRequest), "uid-1", ""); again != id {
		t.Fatalf("same request, another key: %s, %s", id, again)
	}
	other := proto.Clone(req).(*openshellv1.CreateSandboxRequest)
	other.Spec.LogLevel = "debug"
	for name, got := range map[string]string{
		"another request":     RequestID(other, "uid-1", ""),
		"another object":      RequestID(req, "uid-2", ""),
		"another incarnation": RequestID(req, "uid-1", "lost-sandbox-id"),
	} {
		if got == id {
			t.Errorf("%s: same key %s", name, id)
		}
	}
	if RequestID(req, "uid-1", "lost-sandbox-id") == RequestID(req, "uid-1lost-sandbox-id") {
		t.Error("parts run together: (a, b) and (ab) give one key")
	}
}
