// Package tenantegress renders the AdminNetworkPolicy that makes a tenant
// namespace's egress NetworkPolicies bind its agents in their paired
// namespace (workspace mode Operator).
//
// Why an AdminNetworkPolicy: an agent's traffic leaves through its
// supervisor pod, and the OpenShell 0.1 driver gives every supervisor of
// a namespace all egress (NetworkPolicy openshell-sandbox-supervisors,
// "so a namespace default-deny does not cut supervisors off"). The driver
// creates that fence or validates it field for field, refuses one that
// differs and suspends the namespace's sandboxes (k8s/driver.rs,
// create_or_validate_sandbox_runtime_fence and its reconcile), so the
// operator cannot narrow it; and Kubernetes admits what any policy that
// selects a pod allows, so no further NetworkPolicy can narrow it either.
// AdminNetworkPolicies are evaluated before NetworkPolicies: this one
// passes what the tenant's policies allow (and what a supervisor needs:
// DNS, its gateway, its workload's boundary port) on to NetworkPolicy
// evaluation, where the fence admits it, and denies everything else.
//
// It uses only Pass and Deny, so it never admits what a NetworkPolicy or
// another AdminNetworkPolicy would refuse; at a priority above the
// platform's own it never shadows them (api: TenantEgress.Priority).
//
// Which tenant policies count: every policy that isolates egress, for the
// sandboxes whose pod labels (what the operator gives the workload pod:
// the sandbox's podLabels and the tenant labels) its podSelector selects.
// Supervisors do not wear those labels, so where label-selecting policies
// exist each group of sandboxes that the same policies select gets a
// policy of its own, one priority ahead of the namespace's default, whose
// subject names its supervisors by their boundary-pair label (the sandbox
// ID). The default covers every supervisor and passes only what the
// namespace-wide policies allow, never more than any group: a supervisor
// whose ID is not known yet, of a sandbox made at the gateway with a token,
// or one the operator is moving from one group to another (it takes a
// sandbox out of its old group before it adds it to the new one), falls
// under it, never under no policy.
//
// No library translates NetworkPolicy into AdminNetworkPolicy; the
// translation is written here. Pure: table-tested without a cluster.
package tenantegress

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	anpv1alpha1 "sigs.k8s.io/network-policy-api/apis/v1alpha1"
)

// Labels and values of the 0.1 runtime's pods (reference §3.1).
const (
	LabelBoundaryRole = "openshell.ai/boundary-role"
	// LabelBoundaryPair names a sandbox's two pods: its ID, lowercased.
	LabelBoundaryPair = "openshell.ai/boundary-pair"
	RoleSupervisor    = "supervisor"
	RoleWorkload      = "workload"
	// BoundaryPort is where a supervisor reaches its workload (the
	// driver's default boundary_port).
	BoundaryPort = 5500
	// labelNamespaceName is set by Kubernetes on every namespace.
	labelNamespaceName = "kubernetes.io/metadata.name"
)

// Bounds of what one ipBlock may cost: subtracting N except blocks takes
// up to 128·N² steps and yields up to 128·N prefixes, and every tenant
// shares the operator's worker. Beyond them the peer is left out (denied)
// and reported.
const (
	maxExcepts       = 64
	maxBlockPrefixes = 512
)

// maxGroups bounds the per-sandbox policies of one paired namespace; the
// sandboxes of further groups stay under the default policy (narrower)
// and are reported.
const maxGroups = 64

// Bounds of the AdminNetworkPolicy API (v1alpha1 CRD validation).
const (
	maxRules    = 100
	maxPeers    = 100
	maxPorts    = 100
	maxNetworks = 25
	maxRuleName = 100
)

// DNSNamespaces are where cluster DNS answers: OpenShift's, then vanilla
// Kubernetes'.
var DNSNamespaces = []string{"openshift-dns", "kube-system"}

// Inputs are what one paired namespace's policy is rendered from.
type Inputs struct {
	// Name, Labels and Owner are the object's metadata.
	Name   string
	Labels map[string]string
	Owner  metav1.OwnerReference
	// Tenant is the tenant namespace, Paired its paired namespace.
	Tenant, Paired string
	// GatewayNamespace and GatewayPods select the gateway's pods.
	GatewayNamespace string
	GatewayPods      map[string]string
	Priority         int32
	// Policies are the tenant namespace's NetworkPolicies.
	Policies []networkingv1.NetworkPolicy
	// Sandboxes are the tenant's sandboxes on the gateway.
	Sandboxes []Sandbox
}

// Sandbox is one sandbox as its policies select it.
type Sandbox struct {
	// ID is the gateway's sandbox ID ("" before the gateway assigned it).
	ID string
	// Labels are its workload pod's labels.
	Labels map[string]string
}

// Skipped is a tenant policy, or a part of one, left out, with why.
type Skipped struct {
	Policy, Reason string
}

// Render is the paired namespace's AdminNetworkPolicies, none when no
// policy of the tenant isolates egress (then the supervisors' egress is
// the fence's: all of it, narrowed by the OpenShellPolicy the supervisor
// enforces), and what it left out. The first is named in.Name and is the
// namespace's default, at in.Priority; groups of sandboxes that
// label-selecting policies select differently follow, named
// in.Name-<digest of their policies>, at in.Priority-1.
func Render(in Inputs) ([]*anpv1alpha1.AdminNetworkPolicy, []Skipped) {
	policies := slices.Clone(in.Policies)
	slices.SortFunc(policies, func(a, b networkingv1.NetworkPolicy) int { return strings.Compare(a.Name, b.Name) })
	var wide, byLabel []*networkingv1.NetworkPolicy
	for i := range policies {
		np := &policies[i]
		switch {
		case !isolatesEgress(np):
		case selectsAll(np.Spec.PodSelector):
			wide = append(wide, np)
		default:
			byLabel = append(byLabel, np)
		}
	}
	if len(wide) == 0 && len(byLabel) == 0 {
		return nil, nil
	}
	var skipped []Skipped
	report := func(s []Skipped) {
		for _, x := range s {
			if !slices.Contains(skipped, x) {
				skipped = append(skipped, x)
			}
		}
	}
	if len(byLabel) == 0 {
		anp, s := in.policy(in.Name, in.Priority, nil, true, wide)
		report(s)
		return []*anpv1alpha1.AdminNetworkPolicy{anp}, skipped
	}
	// Group the sandboxes whose ID is known, once, by the policies that
	// select them; every other supervisor has the default policy only.
	count := map[string]int{}
	for _, sb := range in.Sandboxes {
		count[strings.ToLower(sb.ID)]++
	}
	groups := map[string][]string{}
	members := map[string][]*networkingv1.NetworkPolicy{}
	for _, sb := range in.Sandboxes {
		id := strings.ToLower(sb.ID)
		if id == "" || count[id] > 1 {
			continue // not created yet, or claimed twice: the default's
		}
		applies := slices.Clone(wide)
		for _, np := range byLabel {
			if sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector); err == nil && sel.Matches(labels.Set(sb.Labels)) {
				applies = append(applies, np)
			}
		}
		key := groupKey(applies)
		groups[key] = append(groups[key], id)
		members[key] = applies
	}
	// Isolated whatever the namespace-wide policies: a label-selecting
	// policy may select a supervisor it covers.
	def, s := in.policy(in.Name, in.Priority, nil, true, wide)
	report(s)
	out := []*anpv1alpha1.AdminNetworkPolicy{def}
	keys := slices.Sorted(maps.Keys(groups))
	if len(keys) > maxGroups {
		skipped = append(skipped, Skipped{"", fmt.Sprintf("the sandboxes fall into %d groups of policies, more than %d: the sandboxes of the rest have the namespace-wide policies only", len(keys), maxGroups)})
		keys = keys[:maxGroups]
	}
	for _, key := range keys {
		ids := groups[key]
		slices.Sort(ids)
		anp, s := in.policy(in.Name+"-"+key, in.Priority-1, []metav1.LabelSelectorRequirement{{Key: LabelBoundaryPair, Operator: metav1.LabelSelectorOpIn, Values: ids}},
			len(members[key]) > 0, members[key])
		report(s)
		out = append(out, anp)
	}
	return out, skipped
}

// groupKey names the set of policies that select a group of sandboxes,
// with their content: a policy that changes makes new groups, which lets
// the operator drop the old ones (to the narrower default) before it
// writes the new (controllers/pairedns writeEgress).
func groupKey(policies []*networkingv1.NetworkPolicy) string {
	h := sha256.New()
	for _, np := range policies {
		spec, _ := json.Marshal(np.Spec) // a NetworkPolicySpec always marshals
		h.Write([]byte(np.Name))
		h.Write([]byte{0})
		h.Write(spec)
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))[:32]
}

// policy renders one AdminNetworkPolicy: for the supervisors the
// requirements select, what the given policies allow, or everything where
// their egress is not isolated.
func (in Inputs) policy(name string, priority int32, pairs []metav1.LabelSelectorRequirement, isolated bool, policies []*networkingv1.NetworkPolicy) (*anpv1alpha1.AdminNetworkPolicy, []Skipped) {
	var skipped []Skipped
	var rules []anpv1alpha1.AdminNetworkPolicyEgressRule
	if !isolated {
		rules = []anpv1alpha1.AdminNetworkPolicyEgressRule{{Name: "not-isolated", Action: anpv1alpha1.AdminNetworkPolicyRuleActionPass,
			To: []anpv1alpha1.AdminNetworkPolicyEgressPeer{{Networks: []anpv1alpha1.CIDR{"0.0.0.0/0", "::/0"}}}}}
	} else {
		rules, skipped = in.rules(policies)
	}
	return &anpv1alpha1.AdminNetworkPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: anpv1alpha1.GroupVersion.String(), Kind: "AdminNetworkPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: in.Labels, OwnerReferences: []metav1.OwnerReference{in.Owner}},
		Spec: anpv1alpha1.AdminNetworkPolicySpec{
			Priority: priority,
			Subject: anpv1alpha1.AdminNetworkPolicySubject{Pods: &anpv1alpha1.NamespacedPod{
				NamespaceSelector: nsNamed(in.Paired),
				PodSelector:       metav1.LabelSelector{MatchLabels: map[string]string{LabelBoundaryRole: RoleSupervisor}, MatchExpressions: pairs},
			}},
			Egress: rules,
		},
	}, skipped
}

// rules are the egress rules for what the policies allow: what every
// supervisor needs, each policy's rules in turn, then Deny.
func (in Inputs) rules(policies []*networkingv1.NetworkPolicy) ([]anpv1alpha1.AdminNetworkPolicyEgressRule, []Skipped) {
	var skipped []Skipped
	var tenant []anpv1alpha1.AdminNetworkPolicyEgressRule
	platform := platformRules(in)
	room := maxRules - len(platform) - 1
	full := false
	for _, np := range policies {
		for j, r := range np.Spec.Egress {
			if full {
				break // no room left: translating the rest would only cost
			}
			rules, why := translate(in.Tenant, fmt.Sprintf("%s[%d]", np.Name, j), r)
			if why != "" {
				skipped = append(skipped, Skipped{np.Name, fmt.Sprintf("egress rule %d: %s", j, why)})
			}
			tenant = append(tenant, rules...)
			full = len(tenant) > room
		}
	}
	if full {
		skipped = append(skipped, Skipped{"", fmt.Sprintf("the tenant's policies need more than the %d AdminNetworkPolicy rules left: the rest is denied", room)})
		tenant = tenant[:room]
	}
	rules := append(platform, tenant...)
	return append(rules, anpv1alpha1.AdminNetworkPolicyEgressRule{Name: "deny-the-rest", Action: anpv1alpha1.AdminNetworkPolicyRuleActionDeny,
		To: []anpv1alpha1.AdminNetworkPolicyEgressPeer{{Networks: []anpv1alpha1.CIDR{"0.0.0.0/0", "::/0"}}}}), skipped
}

// NamespaceOwner is the owner reference that has the policy collected
// with its paired namespace.
func NamespaceOwner(name string, uid types.UID) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: "v1", Kind: "Namespace", Name: name, UID: uid}
}

// platformRules pass what every supervisor needs: DNS, its gateway (the
// relay and its configuration) and its workload's boundary listener.
func platformRules(in Inputs) []anpv1alpha1.AdminNetworkPolicyEgressRule {
	var dns []anpv1alpha1.AdminNetworkPolicyPort
	for _, p := range []int32{53, 5353} {
		for _, proto := range []corev1.Protocol{corev1.ProtocolUDP, corev1.ProtocolTCP} {
			dns = append(dns, anpv1alpha1.AdminNetworkPolicyPort{PortNumber: &anpv1alpha1.Port{Protocol: proto, Port: p}})
		}
	}
	pass := anpv1alpha1.AdminNetworkPolicyRuleActionPass
	return []anpv1alpha1.AdminNetworkPolicyEgressRule{
		{Name: "cluster-dns", Action: pass, Ports: &dns, To: []anpv1alpha1.AdminNetworkPolicyEgressPeer{{Namespaces: &metav1.LabelSelector{
			MatchExpressions: []metav1.LabelSelectorRequirement{{Key: labelNamespaceName, Operator: metav1.LabelSelectorOpIn, Values: DNSNamespaces}}}}}},
		{Name: "gateway", Action: pass, To: []anpv1alpha1.AdminNetworkPolicyEgressPeer{{Pods: &anpv1alpha1.NamespacedPod{
			NamespaceSelector: nsNamed(in.GatewayNamespace), PodSelector: metav1.LabelSelector{MatchLabels: in.GatewayPods}}}}},
		{Name: "boundary", Action: pass, Ports: &[]anpv1alpha1.AdminNetworkPolicyPort{{PortNumber: &anpv1alpha1.Port{Protocol: corev1.ProtocolTCP, Port: BoundaryPort}}},
			To: []anpv1alpha1.AdminNetworkPolicyEgressPeer{{Pods: &anpv1alpha1.NamespacedPod{
				NamespaceSelector: nsNamed(in.Paired), PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{LabelBoundaryRole: RoleWorkload}}}}}},
	}
}

func nsNamed(ns string) metav1.LabelSelector {
	return metav1.LabelSelector{MatchLabels: map[string]string{labelNamespaceName: ns}}
}

// isolatesEgress: the policy selects its pods for egress (policyTypes
// names Egress; the API server fills policyTypes in, and without it egress
// rules imply it).
func isolatesEgress(np *networkingv1.NetworkPolicy) bool {
	if len(np.Spec.PolicyTypes) == 0 {
		return len(np.Spec.Egress) > 0
	}
	return slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress)
}

func selectsAll(s metav1.LabelSelector) bool {
	return len(s.MatchLabels) == 0 && len(s.MatchExpressions) == 0
}

// translate turns one NetworkPolicy egress rule into Pass rules (none: it
// allows nothing that could be expressed; why says what was left out).
// Peers that select pods or namespaces take every port; ipBlock peers
// only numeric ones (the API has no named ports for networks).
func translate(tenant, name string, r networkingv1.NetworkPolicyEgressRule) ([]anpv1alpha1.AdminNetworkPolicyEgressRule, string) {
	ports, named, why := translatePorts(r.Ports)
	if why != "" {
		return nil, why
	}
	var selectors []anpv1alpha1.AdminNetworkPolicyEgressPeer
	var networks []anpv1alpha1.CIDR
	var skippedPeers []string
	everywhere := len(r.To) == 0
	if everywhere {
		// To everywhere.
		networks = []anpv1alpha1.CIDR{"0.0.0.0/0", "::/0"}
		selectors = []anpv1alpha1.AdminNetworkPolicyEgressPeer{{Namespaces: &metav1.LabelSelector{}}}
	}
	for _, p := range r.To {
		switch {
		case p.IPBlock != nil:
			cidrs, err := subtract(p.IPBlock.CIDR, p.IPBlock.Except)
			if err != nil {
				skippedPeers = append(skippedPeers, err.Error())
				continue
			}
			networks = append(networks, cidrs...)
		case p.NamespaceSelector != nil && p.PodSelector != nil:
			selectors = append(selectors, anpv1alpha1.AdminNetworkPolicyEgressPeer{Pods: &anpv1alpha1.NamespacedPod{
				NamespaceSelector: *p.NamespaceSelector.DeepCopy(), PodSelector: *p.PodSelector.DeepCopy()}})
		case p.NamespaceSelector != nil:
			selectors = append(selectors, anpv1alpha1.AdminNetworkPolicyEgressPeer{Namespaces: p.NamespaceSelector.DeepCopy()})
		case p.PodSelector != nil:
			// Pods of the policy's own namespace: the tenant's.
			selectors = append(selectors, anpv1alpha1.AdminNetworkPolicyEgressPeer{Pods: &anpv1alpha1.NamespacedPod{
				NamespaceSelector: nsNamed(tenant), PodSelector: *p.PodSelector.DeepCopy()}})
		}
	}
	var out []anpv1alpha1.AdminNetworkPolicyEgressRule
	rule := func(peers []anpv1alpha1.AdminNetworkPolicyEgressPeer, ports []anpv1alpha1.AdminNetworkPolicyPort) {
		for len(peers) > 0 {
			n := min(len(peers), maxPeers)
			pass := anpv1alpha1.AdminNetworkPolicyEgressRule{Name: ruleName(name, len(out)), Action: anpv1alpha1.AdminNetworkPolicyRuleActionPass, To: peers[:n]}
			if ports != nil {
				pass.Ports = ptr.To(slices.Clone(ports))
			}
			out = append(out, pass)
			peers = peers[n:]
		}
	}
	if len(selectors) > 0 {
		all := ports
		if ports != nil || named != nil {
			all = append(slices.Clone(ports), named...)
		}
		rule(selectors, all)
	}
	if len(networks) > 0 {
		switch {
		case named != nil && ports == nil:
			if !everywhere {
				skippedPeers = append(skippedPeers, "named ports cannot apply to ipBlock peers; those are denied")
			}
		default:
			var peers []anpv1alpha1.AdminNetworkPolicyEgressPeer
			for chunk := range slices.Chunk(networks, maxNetworks) {
				peers = append(peers, anpv1alpha1.AdminNetworkPolicyEgressPeer{Networks: chunk})
			}
			rule(peers, ports)
		}
	}
	return out, strings.Join(skippedPeers, "; ")
}

// translatePorts splits a rule's ports into numeric ones and named ones
// (nil, nil: every port).
func translatePorts(in []networkingv1.NetworkPolicyPort) (numeric, named []anpv1alpha1.AdminNetworkPolicyPort, why string) {
	if len(in) > maxPorts {
		return nil, nil, fmt.Sprintf("more than %d ports; the rule is denied", maxPorts)
	}
	for _, p := range in {
		proto := ptr.Deref(p.Protocol, corev1.ProtocolTCP)
		switch {
		case p.Port == nil:
			numeric = append(numeric, anpv1alpha1.AdminNetworkPolicyPort{PortRange: &anpv1alpha1.PortRange{Protocol: proto, Start: 1, End: 65535}})
		case p.Port.Type == intstr.String:
			named = append(named, anpv1alpha1.AdminNetworkPolicyPort{NamedPort: ptr.To(p.Port.StrVal)})
		case p.EndPort != nil:
			numeric = append(numeric, anpv1alpha1.AdminNetworkPolicyPort{PortRange: &anpv1alpha1.PortRange{Protocol: proto, Start: p.Port.IntVal, End: *p.EndPort}})
		default:
			numeric = append(numeric, anpv1alpha1.AdminNetworkPolicyPort{PortNumber: &anpv1alpha1.Port{Protocol: proto, Port: p.Port.IntVal}})
		}
	}
	return numeric, named, ""
}

// ruleName names a tenant rule after its policy, rule and part; a name
// over the API's bound keeps its start and a digest of the whole, so that
// no two rules share one.
func ruleName(base string, i int) string {
	name := fmt.Sprintf("tenant/%s/%d", base, i)
	if len(name) > maxRuleName {
		sum := sha256.Sum256([]byte(name))
		suffix := "~" + hex.EncodeToString(sum[:6])
		name = name[:maxRuleName-len(suffix)] + suffix
	}
	return name
}

// subtract is cidr without the except blocks, as CIDRs: an ipBlock's
// except has no AdminNetworkPolicy form, and a Deny ahead of the Pass
// would also deny what another rule allows.
func subtract(cidr string, except []string) ([]anpv1alpha1.CIDR, error) {
	base, err := netip.ParsePrefix(cidr)
	if err != nil {
		return nil, fmt.Errorf("ipBlock cidr %q: %w", cidr, err)
	}
	if len(except) > maxExcepts {
		return nil, fmt.Errorf("ipBlock %s has more than %d except blocks; that peer is denied", cidr, maxExcepts)
	}
	var holes []netip.Prefix
	for _, e := range except {
		h, err := netip.ParsePrefix(e)
		if err != nil {
			return nil, fmt.Errorf("ipBlock except %q: %w", e, err)
		}
		holes = append(holes, h.Masked())
	}
	parts := without(base.Masked(), holes)
	if len(parts) > maxBlockPrefixes {
		return nil, fmt.Errorf("ipBlock %s less its except blocks is more than %d CIDRs; that peer is denied", cidr, maxBlockPrefixes)
	}
	var out []anpv1alpha1.CIDR
	for _, p := range parts {
		if !p.IsValid() {
			return nil, fmt.Errorf("ipBlock %s: cannot be expressed as CIDRs; that peer is denied", cidr)
		}
		out = append(out, anpv1alpha1.CIDR(p.String()))
	}
	return out, nil
}

// without splits p in halves until no part overlaps a hole partly: at
// most one split per bit of each hole's prefix.
func without(p netip.Prefix, holes []netip.Prefix) []netip.Prefix {
	overlaps := false
	for _, h := range holes {
		if h.Bits() <= p.Bits() && h.Contains(p.Addr()) {
			return nil // p lies inside a hole
		}
		if p.Overlaps(h) {
			overlaps = true
		}
	}
	if !overlaps {
		return []netip.Prefix{p}
	}
	lo := netip.PrefixFrom(p.Addr(), p.Bits()+1)
	hi := netip.PrefixFrom(lastOf(lo).Next(), p.Bits()+1)
	return append(without(lo, holes), without(hi, holes)...)
}

// lastOf is the last address of a (masked) prefix.
func lastOf(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	// Per family: an IPv6 address is never unmapped to IPv4.
	a, _ := netip.AddrFromSlice(b)
	return a
}
