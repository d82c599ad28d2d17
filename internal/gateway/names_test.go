package gateway

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

func TestNamesObeyGatewayLimits(t *testing.T) {
	seen := map[string]string{}
	for _, ns := range []string{"a", "team-a", "team--a", "Team_A", strings.Repeat("x", 63), "---", "1-2-3", "tenant-with-a-very-long-name"} {
		for _, name := range []string{"claude", "claude-agent-with-long-name", "a", "x--y", strings.Repeat("z", 253)} {
			for _, got := range []string{WorkspaceName(ns), SandboxName(ns, name)} {
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
