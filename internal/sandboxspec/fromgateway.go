package sandboxspec

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/sandboxv1"
)

// Rule reads a gateway network rule (a policy advisor's proposal) back as
// the API's spec.networkPolicies entry, for a Tenant Admin to adopt. What
// the API cannot carry (TLS modes, L7 query, field and parameter matchers,
// fields or enum values of a later release) is named in lost and resolved
// towards less access, so that adopting the rule as shown never grants
// more than was proposed: an allow rule with such matchers is left out
// (they narrowed it), a deny rule is kept without them (it then denies
// more), an endpoint whose meaning cannot be judged is left out whole, and
// a rule or binary with unknown fields is not shown at all.
func Rule(name string, in *sandboxv1.NetworkPolicyRule) (out openshellv1alpha1.NetworkPolicyRule, lost []string) {
	out.Name = name
	if unknown(in) || anyUnknown(in.GetBinaries()) {
		return out, []string{"the rule or its binaries hold fields this operator does not know: not shown (read the proposal at the gateway)"}
	}
	for i, e := range in.GetEndpoints() {
		ep, why, notes := endpoint(e)
		for _, n := range notes {
			lost = append(lost, fmt.Sprintf("endpoints[%d]%s", i, n))
		}
		if why != "" {
			lost = append(lost, fmt.Sprintf("endpoints[%d] (left out: %s)", i, why))
			continue
		}
		out.Endpoints = append(out.Endpoints, ep)
	}
	for _, b := range in.GetBinaries() {
		out.Binaries = append(out.Binaries, openshellv1alpha1.NetworkBinary{Path: b.GetPath()})
	}
	return out, lost
}

// endpoint reads one endpoint; why says why it is left out whole ("" if
// it is kept), notes what was resolved towards less access.
func endpoint(e *sandboxv1.NetworkEndpoint) (ep openshellv1alpha1.NetworkEndpoint, why string, notes []string) {
	ep = openshellv1alpha1.NetworkEndpoint{Host: e.GetHost(), Protocol: e.GetProtocol(), AllowedIPs: e.GetAllowedIps(), Path: e.GetPath()}
	if e.GetPort() != 0 {
		ep.Port = ptrTo(int32(e.GetPort()))
	}
	for _, p := range e.GetPorts() {
		ep.Ports = append(ep.Ports, int32(p))
	}
	var known bool
	if ep.Enforcement, known = keyOf(enforcement, e.GetEnforcement()); !known {
		return ep, "an enforcement mode this operator does not know", nil
	}
	if ep.Access, known = keyOf(access, e.GetAccess()); !known {
		return ep, "an access preset this operator does not know", nil
	}
	if unknown(e) || unknown(e.GetMcp()) {
		return ep, "fields this operator does not know", nil
	}
	if e.GetTls() != sandboxv1.NetworkTlsMode_NETWORK_TLS_MODE_UNSPECIFIED {
		notes = append(notes, ".tls (the gateway's default applies)")
	}
	if m := e.GetMcp(); m != nil {
		ep.MCP = &openshellv1alpha1.MCPOptions{StrictToolNames: m.StrictToolNames, AllowAllKnownMCPMethods: m.AllowAllKnownMcpMethods, Versions: m.GetVersions()}
	}
	for j, r := range e.GetRules() {
		a := r.GetAllow()
		if a == nil || len(a.GetQuery()) > 0 || len(a.GetFields()) > 0 || len(a.GetParams()) > 0 || unknown(r) || unknown(a) {
			notes = append(notes, fmt.Sprintf(".rules[%d] (left out: matchers the API cannot carry)", j))
			continue
		}
		ep.Rules = append(ep.Rules, openshellv1alpha1.L7Rule{Method: a.GetMethod(), Path: a.GetPath(), Command: a.GetCommand(),
			OperationType: a.GetOperationType(), OperationName: a.GetOperationName()})
	}
	if len(e.GetRules()) > 0 && len(ep.Rules) == 0 {
		// Without its allow rules the endpoint would allow what they did not.
		return ep, "none of its allow rules can be expressed", notes
	}
	for j, d := range e.GetDenyRules() {
		r := openshellv1alpha1.L7Rule{Method: d.GetMethod(), Path: d.GetPath(), Command: d.GetCommand(),
			OperationType: d.GetOperationType(), OperationName: d.GetOperationName()}
		if r == (openshellv1alpha1.L7Rule{}) || unknown(d) {
			// A deny rule of matchers only would deny nothing, or what is not
			// established.
			return ep, "a deny rule the API cannot carry", notes
		}
		if len(d.GetQuery()) > 0 || len(d.GetFields()) > 0 || len(d.GetParams()) > 0 {
			notes = append(notes, fmt.Sprintf(".denyRules[%d] (kept without its query/fields/params matchers)", j))
		}
		ep.DenyRules = append(ep.DenyRules, r)
	}
	return ep, "", notes
}

// unknown says whether m carries fields this operator's protos do not
// declare (a later release's).
func unknown(m proto.Message) bool {
	return m != nil && m.ProtoReflect().IsValid() && len(m.ProtoReflect().GetUnknown()) > 0
}

func anyUnknown[M proto.Message](ms []M) bool {
	for _, m := range ms {
		if unknown(m) {
			return true
		}
	}
	return false
}

// keyOf is the API spelling of a gateway enum value ("" for unspecified);
// known is false for a value the API has no spelling of.
func keyOf[V comparable](m map[string]V, v V) (key string, known bool) {
	var zero V
	if v == zero {
		return "", true
	}
	for k, mv := range m {
		if mv == v {
			return k, true
		}
	}
	return "", false
}

func ptrTo[T any](v T) *T { return &v }
