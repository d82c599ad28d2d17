package sandboxspec

import (
	"fmt"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/sandboxv1"
)

// Rule reads a gateway network rule (a policy advisor's proposal) back as
// the API's spec.networkPolicies entry, for a Tenant Admin to adopt. What
// the API cannot carry (TLS modes, L7 query, field and parameter matchers)
// is named in lost and resolved towards less access, so that adopting the
// rule as shown never grants more than was proposed: an allow rule with
// such matchers is left out (they narrowed it), a deny rule is kept
// without them (it then denies more), and a TLS mode falls back to the
// gateway's default inspection.
func Rule(name string, in *sandboxv1.NetworkPolicyRule) (out openshellv1alpha1.NetworkPolicyRule, lost []string) {
	out.Name = name
	if len(in.ProtoReflect().GetUnknown()) > 0 {
		lost = append(lost, "fields of the rule this operator does not know (read the proposal at the gateway)")
	}
	for i, e := range in.GetEndpoints() {
		ep := openshellv1alpha1.NetworkEndpoint{Host: e.GetHost(), Protocol: e.GetProtocol(), AllowedIPs: e.GetAllowedIps(), Path: e.GetPath()}
		if e.GetPort() != 0 {
			ep.Port = ptrTo(int32(e.GetPort()))
		}
		for _, p := range e.GetPorts() {
			ep.Ports = append(ep.Ports, int32(p))
		}
		ep.Enforcement = keyOf(enforcement, e.GetEnforcement())
		ep.Access = keyOf(access, e.GetAccess())
		if e.GetTls() != sandboxv1.NetworkTlsMode_NETWORK_TLS_MODE_UNSPECIFIED {
			lost = append(lost, fmt.Sprintf("endpoints[%d].tls (the gateway's default applies)", i))
		}
		if m := e.GetMcp(); m != nil {
			ep.MCP = &openshellv1alpha1.MCPOptions{StrictToolNames: m.StrictToolNames, AllowAllKnownMCPMethods: m.AllowAllKnownMcpMethods, Versions: m.GetVersions()}
		}
		for j, r := range e.GetRules() {
			a := r.GetAllow()
			if len(a.GetQuery()) > 0 || len(a.GetFields()) > 0 || len(a.GetParams()) > 0 || len(a.ProtoReflect().GetUnknown()) > 0 {
				lost = append(lost, fmt.Sprintf("endpoints[%d].rules[%d] (left out: query/fields/params matchers)", i, j))
				continue
			}
			ep.Rules = append(ep.Rules, openshellv1alpha1.L7Rule{Method: a.GetMethod(), Path: a.GetPath(), Command: a.GetCommand(),
				OperationType: a.GetOperationType(), OperationName: a.GetOperationName()})
		}
		emptyDeny := false
		for j, d := range e.GetDenyRules() {
			r := openshellv1alpha1.L7Rule{Method: d.GetMethod(), Path: d.GetPath(), Command: d.GetCommand(),
				OperationType: d.GetOperationType(), OperationName: d.GetOperationName()}
			if len(d.GetQuery()) > 0 || len(d.GetFields()) > 0 || len(d.GetParams()) > 0 {
				lost = append(lost, fmt.Sprintf("endpoints[%d].denyRules[%d] (kept without its query/fields/params matchers)", i, j))
			}
			emptyDeny = emptyDeny || r == (openshellv1alpha1.L7Rule{})
			ep.DenyRules = append(ep.DenyRules, r)
		}
		if emptyDeny || len(e.ProtoReflect().GetUnknown()) > 0 {
			// A deny rule of matchers only would deny nothing, or what is not
			// established; fields this operator does not know may have
			// narrowed the endpoint: left out whole either way.
			lost = append(lost, fmt.Sprintf("endpoints[%d] (left out: it holds a deny rule or fields the API cannot carry)", i))
			continue
		}
		if len(e.GetRules()) > 0 && len(ep.Rules) == 0 {
			// Without its allow rules the endpoint would allow what they
			// did not: left out whole.
			lost = append(lost, fmt.Sprintf("endpoints[%d] (left out: none of its allow rules can be expressed)", i))
			continue
		}
		out.Endpoints = append(out.Endpoints, ep)
	}
	for _, b := range in.GetBinaries() {
		out.Binaries = append(out.Binaries, openshellv1alpha1.NetworkBinary{Path: b.GetPath()})
	}
	return out, lost
}

// keyOf is the API spelling of a gateway enum value ("" for unspecified).
func keyOf[V comparable](m map[string]V, v V) string {
	for k, mv := range m {
		if mv == v {
			return k
		}
	}
	return ""
}

func ptrTo[T any](v T) *T { return &v }
