package sandboxspec

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/sandboxv1"
)

func TestRuleReadsBackWhatPolicyRenders(t *testing.T) {
	in := openshellv1alpha1.NetworkPolicyRule{Name: "api", Endpoints: []openshellv1alpha1.NetworkEndpoint{{
		Host: "api.example.com", Port: ptr(int32(443)), Protocol: "rest", Enforcement: "enforce",
		Rules:     []openshellv1alpha1.L7Rule{{Method: "GET", Path: "/v1/**"}},
		DenyRules: []openshellv1alpha1.L7Rule{{Method: "DELETE", Path: "/**"}},
	}, {Host: "mcp.example.com", Ports: []int32{8443, 9443}, Protocol: "mcp", MCP: &openshellv1alpha1.MCPOptions{StrictToolNames: ptr(true)}}},
		Binaries: []openshellv1alpha1.NetworkBinary{{Path: "/usr/bin/curl"}}}
	rendered := Policy(openshellv1alpha1.OpenShellPolicySpec{NetworkPolicies: []openshellv1alpha1.NetworkPolicyRule{in}}).NetworkPolicies["api"]
	got, lost := Rule("api", rendered)
	if len(lost) > 0 || !equality.Semantic.DeepEqual(got, in) {
		t.Fatalf("Rule(Policy(x)) = %+v (lost %v), want %+v", got, lost, in)
	}
}

func TestRuleNeverShowsMoreAccessThanProposed(t *testing.T) {
	query := map[string]*sandboxv1.L7QueryMatcher{"q": {Glob: "safe*"}}
	in := &sandboxv1.NetworkPolicyRule{Name: "api", Endpoints: []*sandboxv1.NetworkEndpoint{
		{Host: "a.example.com", Port: 443, Protocol: "rest", Tls: sandboxv1.NetworkTlsMode_NETWORK_TLS_MODE_SKIP, Rules: []*sandboxv1.L7Rule{
			{Allow: &sandboxv1.L7Allow{Method: "GET", Path: "/search", Query: query}},
			{Allow: &sandboxv1.L7Allow{Method: "GET", Path: "/health"}},
		}, DenyRules: []*sandboxv1.L7DenyRule{{Method: "POST", Path: "/admin", Query: query}}},
		{Host: "b.example.com", Port: 443, Protocol: "rest", Rules: []*sandboxv1.L7Rule{{Allow: &sandboxv1.L7Allow{Method: "GET", Query: query}}}},
	}}
	got, lost := Rule("api", in)
	if len(got.Endpoints) != 1 || got.Endpoints[0].Host != "a.example.com" {
		t.Fatalf("endpoints %+v: b.example.com, whose only allow rule cannot be expressed, must be left out whole", got.Endpoints)
	}
	ep := got.Endpoints[0]
	if len(ep.Rules) != 1 || ep.Rules[0].Path != "/health" {
		t.Errorf("allow rules %+v: the one narrowed by a query matcher must be left out, not widened", ep.Rules)
	}
	if len(ep.DenyRules) != 1 || ep.DenyRules[0].Path != "/admin" {
		t.Errorf("deny rules %+v: a deny rule without its matchers denies more, so it is kept", ep.DenyRules)
	}
	if joined := strings.Join(lost, "; "); len(lost) != 5 || !strings.Contains(joined, "tls") {
		t.Errorf("lost %q, want the tls mode, both allow rules, the deny rule's matchers and the endpoint named", joined)
	}
}

func TestRuleLeavesOutWhatItCannotJudge(t *testing.T) {
	query := map[string]*sandboxv1.L7QueryMatcher{"q": {Glob: "x"}}
	known := &sandboxv1.NetworkEndpoint{Host: "ok.example.com", Port: 443}
	emptyDeny := &sandboxv1.NetworkEndpoint{Host: "deny.example.com", Port: 443, Protocol: "rest",
		DenyRules: []*sandboxv1.L7DenyRule{{Query: query}}}
	unknown := &sandboxv1.NetworkEndpoint{Host: "new.example.com", Port: 443}
	// A field of a later release (number 99), as the wire carries it.
	unknown.ProtoReflect().SetUnknown([]byte{0x98, 0x06, 0x01})
	got, lost := Rule("r", &sandboxv1.NetworkPolicyRule{Name: "r", Endpoints: []*sandboxv1.NetworkEndpoint{known, emptyDeny, unknown}})
	if len(got.Endpoints) != 1 || got.Endpoints[0].Host != "ok.example.com" {
		t.Fatalf("endpoints %+v: one with a matcher-only deny rule and one with unknown fields must be left out", got.Endpoints)
	}
	if len(lost) != 2 {
		t.Errorf("lost %q, want both endpoints named", lost)
	}

	// An allow rule without its allow, and an access preset of a later
	// release, cannot be judged either.
	got, _ = Rule("r", &sandboxv1.NetworkPolicyRule{Name: "r", Endpoints: []*sandboxv1.NetworkEndpoint{
		known,
		{Host: "nil-allow.example.com", Port: 443, Protocol: "rest", Rules: []*sandboxv1.L7Rule{{}}},
		{Host: "later.example.com", Port: 443, Access: sandboxv1.NetworkAccessPreset(42)},
	}})
	if len(got.Endpoints) != 1 || got.Endpoints[0].Host != "ok.example.com" {
		t.Errorf("endpoints %+v: an empty allow rule would allow everything, an unknown preset is unknown", got.Endpoints)
	}

	// A binary with fields of a later release may have narrowed the rule:
	// nothing is shown.
	bin := &sandboxv1.NetworkBinary{Path: "/usr/bin/pip"}
	bin.ProtoReflect().SetUnknown([]byte{0x98, 0x06, 0x01})
	got, lost = Rule("r", &sandboxv1.NetworkPolicyRule{Name: "r", Endpoints: []*sandboxv1.NetworkEndpoint{known}, Binaries: []*sandboxv1.NetworkBinary{bin}})
	if len(got.Endpoints) != 0 || len(got.Binaries) != 0 || len(lost) != 1 {
		t.Errorf("rule %+v, lost %q: a rule with unknown binary fields must not be shown", got, lost)
	}
}
