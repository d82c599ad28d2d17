package tenantegress

import (
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	anpv1alpha1 "sigs.k8s.io/network-policy-api/apis/v1alpha1"
)

func egress(name string, sel metav1.LabelSelector, rules ...networkingv1.NetworkPolicyEgressRule) networkingv1.NetworkPolicy {
	return networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team-a"},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: sel, PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}, Egress: rules}}
}

func inputs(policies ...networkingv1.NetworkPolicy) Inputs {
	return Inputs{Name: "openshell-ws-1", Tenant: "team-a", Paired: "ws-1", GatewayNamespace: "platform",
		GatewayPods: map[string]string{"app": "gw"}, Priority: 99, Policies: policies}
}

func TestNoPolicyThatIsolatesEgressMakesNone(t *testing.T) {
	ingressOnly := networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "ingress"},
		Spec: networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}}}
	if anps, _ := Render(inputs(ingressOnly)); anps != nil {
		t.Fatalf("a policy was rendered from an ingress policy: %+v", anps)
	}
}

func TestLabelSelectingPoliciesGroupTheSandboxesTheySelect(t *testing.T) {
	web := egress("web-anywhere", metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}, networkingv1.NetworkPolicyEgressRule{})
	in := inputs(web)
	in.Sandboxes = []Sandbox{
		{ID: "AAA-1", Labels: map[string]string{"app": "web"}},
		{ID: "bbb-2", Labels: map[string]string{"app": "batch"}},
		{ID: "ccc-3", Labels: map[string]string{"app": "web"}},
		{ID: "", Labels: map[string]string{"app": "web"}}, // not created yet
	}
	anps, skipped := Render(in)
	if len(skipped) != 0 || len(anps) != 3 {
		t.Fatalf("%d policies, skipped %+v", len(anps), skipped)
	}
	// The default covers every supervisor, at the priority; a supervisor
	// whose sandbox has no ID yet passes nothing of the tenant's: only
	// what supervisors need, then Deny.
	def := anps[0]
	if def.Name != in.Name || def.Spec.Priority != 99 || len(def.Spec.Subject.Pods.PodSelector.MatchExpressions) != 0 {
		t.Fatalf("default: %s at %d, %+v", def.Name, def.Spec.Priority, def.Spec.Subject.Pods.PodSelector)
	}
	if last := def.Spec.Egress[len(def.Spec.Egress)-1]; len(def.Spec.Egress) != 4 || last.Action != anpv1alpha1.AdminNetworkPolicyRuleActionDeny {
		t.Fatalf("default rules: %+v", def.Spec.Egress)
	}
	byIDs := map[string]*anpv1alpha1.AdminNetworkPolicy{}
	for _, a := range anps[1:] {
		if !strings.HasPrefix(a.Name, in.Name+"-") || len(a.Name) > 63 || a.Spec.Priority != 98 {
			t.Fatalf("group %s at %d: groups are evaluated before the default", a.Name, a.Spec.Priority)
		}
		e := a.Spec.Subject.Pods.PodSelector.MatchExpressions
		if len(e) != 1 || e[0].Operator != metav1.LabelSelectorOpIn || a.Spec.Subject.Pods.PodSelector.MatchLabels[LabelBoundaryRole] != RoleSupervisor {
			t.Fatalf("group subject %+v", a.Spec.Subject.Pods.PodSelector)
		}
		byIDs[strings.Join(e[0].Values, ",")] = a
	}
	webGroup, batch := byIDs["aaa-1,ccc-3"], byIDs["bbb-2"]
	if webGroup == nil || batch == nil || len(byIDs) != 2 {
		t.Fatalf("groups %v", byIDs)
	}
	if n := len(webGroup.Spec.Egress); n != 6 || webGroup.Spec.Egress[n-1].Action != anpv1alpha1.AdminNetworkPolicyRuleActionDeny {
		t.Fatalf("web group rules: %+v", webGroup.Spec.Egress)
	}
	// No policy selects the batch sandbox: its egress is not isolated.
	if len(batch.Spec.Egress) != 1 || batch.Spec.Egress[0].Action != anpv1alpha1.AdminNetworkPolicyRuleActionPass {
		t.Fatalf("batch group rules: %+v", batch.Spec.Egress)
	}
	// The same inputs, in another order, render the same policies.
	in.Sandboxes = []Sandbox{in.Sandboxes[2], in.Sandboxes[1], in.Sandboxes[0]}
	again, _ := Render(in)
	for i := range anps {
		if again[i].Name != anps[i].Name || !reflect.DeepEqual(again[i].Spec, anps[i].Spec) {
			t.Fatalf("policy %d differs with the sandboxes' order", i)
		}
	}
}

func TestDefaultDenyPassesOnlyWhatSupervisorsNeed(t *testing.T) {
	anps, skipped := Render(inputs(egress("deny-all", metav1.LabelSelector{})))
	if len(anps) != 1 || len(skipped) != 0 {
		t.Fatalf("anps %v, skipped %+v", anps, skipped)
	}
	anp := anps[0]
	if anp.Spec.Priority != 99 || anp.Spec.Subject.Pods == nil ||
		anp.Spec.Subject.Pods.NamespaceSelector.MatchLabels[labelNamespaceName] != "ws-1" ||
		anp.Spec.Subject.Pods.PodSelector.MatchLabels[LabelBoundaryRole] != RoleSupervisor {
		t.Fatalf("subject or priority: %+v", anp.Spec)
	}
	var names []string
	for _, r := range anp.Spec.Egress {
		names = append(names, r.Name+":"+string(r.Action))
		if r.Action == anpv1alpha1.AdminNetworkPolicyRuleActionAllow {
			t.Errorf("rule %s allows: only Pass and Deny may be rendered", r.Name)
		}
	}
	want := "cluster-dns:Pass gateway:Pass boundary:Pass deny-the-rest:Deny"
	if got := strings.Join(names, " "); got != want {
		t.Fatalf("rules %s, want %s", got, want)
	}
	last := anp.Spec.Egress[len(anp.Spec.Egress)-1]
	if len(last.To) != 1 || strings.Join(cidrs(last.To[0].Networks), ",") != "0.0.0.0/0,::/0" {
		t.Fatalf("the last rule does not deny everything: %+v", last.To)
	}
}

func TestTenantRulesBecomePassRules(t *testing.T) {
	tcp, udp := corev1.ProtocolTCP, corev1.ProtocolUDP
	allow := egress("allow", metav1.LabelSelector{},
		networkingv1.NetworkPolicyEgressRule{
			To:    []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/8", Except: []string{"10.1.0.0/16", "10.2.3.0/24"}}}},
			Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: ptr.To(intstr.FromInt32(443))}, {Protocol: &udp, Port: ptr.To(intstr.FromInt32(1000)), EndPort: ptr.To[int32](1010)}},
		},
		networkingv1.NetworkPolicyEgressRule{
			To: []networkingv1.NetworkPolicyPeer{
				{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}},
				{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "shared"}}},
			},
			Ports: []networkingv1.NetworkPolicyPort{{Port: ptr.To(intstr.FromString("postgres"))}},
		})
	anps, skipped := Render(inputs(allow, egress("deny-all", metav1.LabelSelector{})))
	anp := anps[0]
	if len(skipped) != 0 {
		t.Fatalf("skipped %+v", skipped)
	}
	tenant := anp.Spec.Egress[3 : len(anp.Spec.Egress)-1]
	if len(tenant) != 2 {
		t.Fatalf("tenant rules: %+v", tenant)
	}
	nets := tenant[0]
	if nets.Action != anpv1alpha1.AdminNetworkPolicyRuleActionPass || len(nets.To) != 1 {
		t.Fatalf("ipBlock rule: %+v", nets)
	}
	size := 0
	for _, c := range cidrs(nets.To[0].Networks) {
		p := netip.MustParsePrefix(c)
		for _, hole := range []string{"10.1.0.0/16", "10.2.3.0/24"} {
			if p.Overlaps(netip.MustParsePrefix(hole)) {
				t.Errorf("%s overlaps the except block %s", c, hole)
			}
		}
		size += 1 << (32 - p.Bits())
	}
	if want := 1<<24 - 1<<16 - 1<<8; size != want {
		t.Errorf("the passed blocks hold %d addresses, want %d", size, want)
	}
	if got := (*nets.Ports)[1].PortRange; got == nil || got.Protocol != udp || got.Start != 1000 || got.End != 1010 {
		t.Fatalf("port range: %+v", (*nets.Ports)[1])
	}
	pods := tenant[1]
	if len(pods.To) != 2 || pods.To[0].Pods.NamespaceSelector.MatchLabels[labelNamespaceName] != "team-a" ||
		pods.To[1].Namespaces.MatchLabels["team"] != "shared" {
		t.Fatalf("a podSelector peer must mean the tenant's own pods: %+v", pods.To)
	}
	if p := *pods.Ports; len(p) != 1 || p[0].NamedPort == nil || *p[0].NamedPort != "postgres" {
		t.Fatalf("named port: %+v", p)
	}
}

func TestNamedPortsNeverReachIPBlocks(t *testing.T) {
	np := egress("named", metav1.LabelSelector{}, networkingv1.NetworkPolicyEgressRule{
		To:    []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "192.0.2.0/24"}}},
		Ports: []networkingv1.NetworkPolicyPort{{Port: ptr.To(intstr.FromString("https"))}},
	})
	anps, skipped := Render(inputs(np))
	anp := anps[0]
	if len(anp.Spec.Egress) != 4 {
		t.Fatalf("a rule was rendered that the API refuses: %+v", anp.Spec.Egress)
	}
	if len(skipped) != 1 || !strings.Contains(skipped[0].Reason, "named ports") {
		t.Fatalf("skipped %+v", skipped)
	}
}

func TestAnEmptyToPassesEverything(t *testing.T) {
	anps, _ := Render(inputs(egress("open", metav1.LabelSelector{}, networkingv1.NetworkPolicyEgressRule{})))
	anp := anps[0]
	tenant := anp.Spec.Egress[3]
	if tenant.Ports != nil || len(tenant.To) != 1 || tenant.To[0].Namespaces == nil {
		t.Fatalf("pods rule: %+v", tenant)
	}
	if nets := anp.Spec.Egress[4]; strings.Join(cidrs(nets.To[0].Networks), ",") != "0.0.0.0/0,::/0" {
		t.Fatalf("networks rule: %+v", nets)
	}
}

func TestTooManyRulesAreCutAndSaid(t *testing.T) {
	var rules []networkingv1.NetworkPolicyEgressRule
	for range 120 {
		rules = append(rules, networkingv1.NetworkPolicyEgressRule{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "192.0.2.0/24"}}}})
	}
	anps, skipped := Render(inputs(egress("many", metav1.LabelSelector{}, rules...)))
	anp := anps[0]
	if len(anp.Spec.Egress) != maxRules || anp.Spec.Egress[maxRules-1].Action != anpv1alpha1.AdminNetworkPolicyRuleActionDeny {
		t.Fatalf("%d rules, last %+v", len(anp.Spec.Egress), anp.Spec.Egress[len(anp.Spec.Egress)-1])
	}
	if len(skipped) != 1 || !strings.Contains(skipped[0].Reason, "denied") {
		t.Fatalf("skipped %+v", skipped)
	}
}

func TestSubtract(t *testing.T) {
	for _, tc := range []struct {
		cidr   string
		except []string
		want   string
	}{
		{"10.0.0.0/8", nil, "10.0.0.0/8"},
		{"10.0.0.0/30", []string{"10.0.0.1/32"}, "10.0.0.0/32,10.0.0.2/31"},
		{"10.0.0.0/24", []string{"10.0.0.0/16"}, ""},
		{"10.0.0.0/24", []string{"192.168.0.0/16"}, "10.0.0.0/24"},
		{"10.0.0.5/30", nil, "10.0.0.4/30"},
		{"2001:db8::/32", []string{"2001:db8::/33"}, "2001:db8:8000::/33"},
		// The last address of ::/80 is ::ffff:255.255.255.255: it stays IPv6.
		{"::/79", []string{"::/80"}, "::1:0:0:0/80"},
	} {
		got, err := subtract(tc.cidr, tc.except)
		if err != nil {
			t.Fatal(err)
		}
		if s := strings.Join(cidrs(got), ","); s != tc.want {
			t.Errorf("%s except %v = %s, want %s", tc.cidr, tc.except, s, tc.want)
		}
	}
	if _, err := subtract("not-a-cidr", nil); err == nil {
		t.Fatal("a bad CIDR was accepted")
	}
	got, err := subtract("::/0", []string{"::1/128"})
	if err != nil || len(got) != 128 {
		t.Fatalf("::/0 less ::1: %d CIDRs, %v", len(got), err)
	}
	for _, c := range got {
		if p, err := netip.ParsePrefix(string(c)); err != nil || !p.Addr().Is6() || p.Addr().Is4In6() && p.Bits() < 96 {
			t.Fatalf("%s is not an IPv6 CIDR of the block: %v", c, err)
		}
	}
	var many []string
	for i := range maxExcepts + 1 {
		many = append(many, fmt.Sprintf("10.0.%d.0/24", i))
	}
	if _, err := subtract("10.0.0.0/8", many); err == nil || !strings.Contains(err.Error(), "denied") {
		t.Fatalf("an ipBlock with %d excepts was translated: %v", len(many), err)
	}
}

func TestABadPeerIsDeniedAloneAndSaid(t *testing.T) {
	var many []string
	for i := range maxExcepts + 1 {
		many = append(many, fmt.Sprintf("10.0.%d.0/24", i))
	}
	anps, skipped := Render(inputs(egress("mixed", metav1.LabelSelector{}, networkingv1.NetworkPolicyEgressRule{To: []networkingv1.NetworkPolicyPeer{
		{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/8", Except: many}},
		{IPBlock: &networkingv1.IPBlock{CIDR: "192.0.2.0/24"}},
	}})))
	anp := anps[0]
	if len(anp.Spec.Egress) != 5 || strings.Join(cidrs(anp.Spec.Egress[3].To[0].Networks), ",") != "192.0.2.0/24" {
		t.Fatalf("the good peer is not passed alone: %+v", anp.Spec.Egress)
	}
	if len(skipped) != 1 || !strings.Contains(skipped[0].Reason, "except blocks") {
		t.Fatalf("skipped %+v", skipped)
	}
}

func TestLongRuleNamesStayApart(t *testing.T) {
	long := strings.Repeat("p", 240)
	a, b := ruleName(long+"[0]", 0), ruleName(long+"[1]", 0)
	if a == b || len(a) > maxRuleName || len(b) > maxRuleName {
		t.Fatalf("%q and %q", a, b)
	}
}

func cidrs(in []anpv1alpha1.CIDR) []string {
	var out []string
	for _, c := range in {
		out = append(out, string(c))
	}
	return out
}

func TestAnIDClaimedTwiceStaysUnderTheDefault(t *testing.T) {
	in := inputs(egress("web-anywhere", metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}, networkingv1.NetworkPolicyEgressRule{}))
	in.Sandboxes = []Sandbox{{ID: "dup", Labels: map[string]string{"app": "web"}}, {ID: "DUP", Labels: map[string]string{"app": "batch"}}}
	anps, _ := Render(in)
	if len(anps) != 1 {
		t.Fatalf("a sandbox ID two sandboxes claim was grouped: %d policies", len(anps))
	}
}

func TestGroupsAreBounded(t *testing.T) {
	var policies []networkingv1.NetworkPolicy
	var sandboxes []Sandbox
	for i := range maxGroups + 5 {
		key := fmt.Sprintf("k%d", i)
		policies = append(policies, egress(key, metav1.LabelSelector{MatchLabels: map[string]string{key: "x"}}, networkingv1.NetworkPolicyEgressRule{}))
		sandboxes = append(sandboxes, Sandbox{ID: key, Labels: map[string]string{key: "x"}})
	}
	in := inputs(policies...)
	in.Sandboxes = sandboxes
	anps, skipped := Render(in)
	if len(anps) != maxGroups+1 || len(skipped) != 1 || !strings.Contains(skipped[0].Reason, "namespace-wide policies only") {
		t.Fatalf("%d policies, skipped %+v", len(anps), skipped)
	}
}
