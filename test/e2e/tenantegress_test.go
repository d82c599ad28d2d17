package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	anpv1alpha1 "sigs.k8s.io/network-policy-api/apis/v1alpha1"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	render "github.com/openshell/openshell-operator/internal/render/gateway"
	"github.com/openshell/openshell-operator/internal/render/tenantegress"
	"github.com/openshell/openshell-operator/internal/tenancy"
	"github.com/openshell/openshell-operator/operator"
	"github.com/openshell/openshell-operator/test/framework"
	"github.com/openshell/openshell-operator/test/stack"
)

// operatorSA is the operator's ServiceAccount as config/tenant-egress
// names it (the namespace docs/quickstart.md installs it in).
const operatorSA = "system:serviceaccount:openshell-operator:openshell-operator-controller-manager"

// TestTenantEgress (#45 item 2): on a gateway in workspace mode Operator
// with spec.managed.sandboxes.tenantEgress, a tenant namespace's
// namespace-wide egress NetworkPolicies bind its agents through the
// AdminNetworkPolicy the operator writes for its paired namespace (the
// gateway's own supervisor fence allows all egress, and its driver
// refuses a narrower one). The cluster has the real AdminNetworkPolicy
// CRD and a cluster admin applied config/tenant-egress; the operator runs
// as its ServiceAccount with the bundle's RBAC and that grant. No CNI runs here,
// so what is asserted is the policy the network plugin would enforce.
// A policy that selects pods by label applies to the sandboxes whose pod
// labels it selects (their supervisors, by sandbox ID, in a group of their
// own). Attacks, each as the persona who would try it:
//   - tenant A's namespace admin reads, changes or deletes its
//     AdminNetworkPolicy, creates one of its own, or places a
//     NetworkPolicy in its paired namespace: refused;
//   - tenant B's policies never reach A's agents, nor A's B's;
//   - a priority the grant refuses fails closed: a new tenant's agents
//     wait, off the allowlist, instead of running with all egress open;
//   - the operator's own ServiceAccount, were it subverted, cannot write
//     an AdminNetworkPolicy that allows, selects another namespace or
//     takes precedence over the platform's, nor delete the platform's:
//     config/tenant-egress's admission policy refuses it (and admits what
//     the operator renders).
func TestTenantEgress(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := cluster.Client
	crd, err := framework.LoadCRD(framework.UpstreamDir("crds", "network-policy-api", "policy.networking.k8s.io_adminnetworkpolicies.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(framework.InstallCRD(ctx, c, crd)).To(Succeed())
	g.Expect(framework.WaitCRDReady(ctx, c, crd)).To(Succeed())
	// The operator runs as its ServiceAccount, in the namespace
	// config/tenant-egress names, with what OLM grants it for
	// AllNamespaces and what the cluster admin grants it there: its
	// writes meet the grant's admission policy for real.
	opNS := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "openshell-operator"}}
	g.Expect(c.Create(ctx, opNS)).To(Succeed())
	t.Cleanup(func() { _ = c.Delete(context.Background(), opNS) })
	csv, err := framework.LoadCSV()
	g.Expect(err).NotTo(HaveOccurred())
	asOperator, revoke, err := framework.GrantLikeOLM(ctx, c, cluster.Config, csv, opNS.Name, nil)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { g.Expect(revoke()).To(Succeed()) })
	g.Expect(asOperator.Impersonate.UserName).To(Equal(operatorSA))
	grant := filepath.Join(framework.RepoRoot(), "config", "tenant-egress", "grant.yaml")
	g.Expect(framework.ApplyManifests(ctx, c, grant)).To(Succeed())
	t.Cleanup(func() { g.Expect(framework.DeleteManifests(context.Background(), c, grant)).To(Succeed()) })

	own := framework.CreateNamespace(ctx, t, c, "egress-operator")
	platform := framework.CreatePlatformNamespace(ctx, t, c, "egress-platform")
	tenantA := framework.CreateNamespace(ctx, t, c, "egress-a")
	tenantB := framework.CreateNamespace(ctx, t, c, "egress-b")
	tenantC := framework.CreateNamespace(ctx, t, c, "egress-c")
	createVolume(ctx, t, platform, "egress")
	st, err := stack.Start(ctx, asOperator, c, stack.Options{GatewayNamespace: own, SandboxNamespace: own, PlayManagedGateways: true, GatewayConfig: cluster.Config,
		Manager: operator.Options{Controllers: operator.ControllerOptions{PairedReleaseGrace: releaseGrace,
			Platform: tenancy.Platform{GatewayNamespaces: []string{platform}}}}})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { g.Expect(st.Stop()).To(Succeed()) })
	gw := &openshellv1alpha1.OpenShellGateway{
		ObjectMeta: metav1.ObjectMeta{Name: "egress", Namespace: platform},
		Spec: openshellv1alpha1.OpenShellGatewaySpec{Mode: openshellv1alpha1.GatewayModeManaged,
			Managed: &openshellv1alpha1.ManagedGatewaySpec{Sandboxes: openshellv1alpha1.SandboxPlacement{WorkspaceMode: openshellv1alpha1.WorkspaceModeOperator,
				TenantEgress: &openshellv1alpha1.TenantEgress{}, AllowedPodLabels: []string{"app"}}},
			Tenancy:         openshellv1alpha1.GatewayTenancy{AllowedNamespaces: openshellv1alpha1.AllowedNamespaces{From: openshellv1alpha1.NamespacesFromAll}},
			SandboxControls: openshellv1alpha1.SandboxControls{RequirePolicy: ptr.To(false)}},
	}
	g.Expect(c.Create(ctx, gw)).To(Succeed())
	_, err = st.PlayManagedGateway(ctx, c, gw, "")
	g.Expect(err).NotTo(HaveOccurred())

	// Tenant A's namespace admin denies its namespace all egress but
	// HTTPS to 10/8 (less 10.1/16), and gives one labelled app more.
	installOLMAggregatedRoles(ctx, t)
	bind(ctx, t, tenantA, "alice", "admin")
	bind(ctx, t, tenantB, "bob", "admin")
	alice, bob := as(t, "alice"), as(t, "bob")
	egressOnly := []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}
	https := []networkingv1.NetworkPolicyPort{{Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromInt32(443))}}
	denyAll := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "deny-egress", Namespace: tenantA},
		Spec: networkingv1.NetworkPolicySpec{PolicyTypes: egressOnly}}
	allow := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "allow-https", Namespace: tenantA},
		Spec: networkingv1.NetworkPolicySpec{PolicyTypes: egressOnly, Egress: []networkingv1.NetworkPolicyEgressRule{{
			To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/8", Except: []string{"10.1.0.0/16"}}}}, Ports: https}}}}
	web := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "web-anywhere", Namespace: tenantA},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			PolicyTypes: egressOnly, Egress: []networkingv1.NetworkPolicyEgressRule{{}}}}
	for _, np := range []*networkingv1.NetworkPolicy{denyAll, allow, web} {
		g.Expect(alice.Create(ctx, np)).To(Succeed())
	}
	sbA, sbB, sbW := sandboxOn(tenantA, "agent", gw), sandboxOn(tenantB, "agent", gw), sandboxOn(tenantA, "web", gw)
	sbW.Spec.PodLabels = map[string]openshellv1alpha1.PodLabelValue{"app": "web"}
	for _, sb := range []*openshellv1alpha1.OpenShellSandbox{sbA, sbB, sbW} {
		g.Expect(c.Create(ctx, sb)).To(Succeed())
	}
	for _, sb := range []*openshellv1alpha1.OpenShellSandbox{sbA, sbB, sbW} {
		waitPhase(ctx, g, client.ObjectKeyFromObject(sb), openshellv1alpha1.SandboxPhaseReady)
	}
	idA := strings.ToLower(sandboxStatus(ctx, g, client.ObjectKeyFromObject(sbA)).Status.SandboxID)
	idW := strings.ToLower(sandboxStatus(ctx, g, client.ObjectKeyFromObject(sbW)).Status.SandboxID)
	pairedA, pairedB := render.PairedNamespace(tenantA, namespaceUID(ctx, g, tenantA)), render.PairedNamespace(tenantB, namespaceUID(ctx, g, tenantB))
	nameA, nameB := render.TenantEgressPolicyName(pairedA), render.TenantEgressPolicyName(pairedB)

	// A's default policy: all its supervisors, Pass for DNS, the gateway,
	// the boundary and A's HTTPS blocks, then Deny; never Allow. Each of
	// A's sandboxes has its group, evaluated first: the web one also
	// passes what web-anywhere allows, which selects it by label.
	// B, which has no egress policy, has none.
	anpA := &anpv1alpha1.AdminNetworkPolicy{}
	actions := func(a *anpv1alpha1.AdminNetworkPolicy) []string {
		var out []string
		for _, r := range a.Spec.Egress {
			out = append(out, string(r.Action))
		}
		return out
	}
	g.Eventually(func(g Gomega) {
		g.Expect(c.Get(ctx, client.ObjectKey{Name: nameA}, anpA)).To(Succeed())
		g.Expect(anpA.Spec.Priority).To(BeEquivalentTo(99), "the default priority is the one config/tenant-egress admits")
		g.Expect(anpA.Spec.Subject.Pods.NamespaceSelector.MatchLabels).To(Equal(map[string]string{"kubernetes.io/metadata.name": pairedA}))
		g.Expect(anpA.Spec.Subject.Pods.PodSelector.MatchLabels).To(Equal(map[string]string{tenantegress.LabelBoundaryRole: tenantegress.RoleSupervisor}))
		g.Expect(anpA.Spec.Subject.Pods.PodSelector.MatchExpressions).To(BeEmpty(), "the default does not cover every supervisor")
		g.Expect(actions(anpA)).To(Equal([]string{"Pass", "Pass", "Pass", "Pass", "Deny"}), "%+v", anpA.Spec.Egress)
		g.Expect(anpA.Spec.Egress[3].To[0].Networks).NotTo(ContainElement(anpv1alpha1.CIDR("10.1.0.0/16")))
		g.Expect((*anpA.Spec.Egress[3].Ports)[0].PortNumber.Port).To(BeEquivalentTo(443))
		g.Expect(anpA.OwnerReferences).To(ConsistOf(HaveField("Name", pairedA)), "not collected with its namespace")
		groups := tenantPolicies(ctx, g, nameA)
		g.Expect(groups).To(HaveLen(3))
		bySandbox := map[string]*anpv1alpha1.AdminNetworkPolicy{}
		for _, a := range groups[1:] {
			e := a.Spec.Subject.Pods.PodSelector.MatchExpressions
			g.Expect(e).To(HaveLen(1))
			g.Expect(e[0].Operator).To(Equal(metav1.LabelSelectorOpIn))
			g.Expect(a.Spec.Priority).To(BeEquivalentTo(98), "a group is not evaluated before the default")
			bySandbox[strings.Join(e[0].Values, ",")] = a
		}
		g.Expect(bySandbox).To(HaveKey(idA))
		g.Expect(bySandbox).To(HaveKey(idW))
		g.Expect(bySandbox[idA].Spec.Egress).To(Equal(anpA.Spec.Egress), "the unlabelled agent gets more than the namespace-wide policies")
		g.Expect(actions(bySandbox[idW])).To(Equal([]string{"Pass", "Pass", "Pass", "Pass", "Pass", "Pass", "Deny"}))
		g.Expect(bySandbox[idW].Spec.Egress[5].To[0].Networks).To(ConsistOf(anpv1alpha1.CIDR("0.0.0.0/0"), anpv1alpha1.CIDR("::/0")))
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
	err = c.Get(ctx, client.ObjectKey{Name: nameB}, &anpv1alpha1.AdminNetworkPolicy{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "tenant B has no egress policy, yet has an AdminNetworkPolicy: %v", err)
	g.Eventually(func(g Gomega) {
		cond := egressCondition(ctx, g, gw)
		g.Expect(cond.Status).To(Equal(metav1.ConditionTrue), cond.Message)
		g.Expect(cond.Message).To(ContainSubstring("of 1 tenant"))
	}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())

	// A's namespace admin: nothing of the AdminNetworkPolicy, nothing in
	// its paired namespace.
	for _, err := range []error{
		alice.Get(ctx, client.ObjectKey{Name: nameA}, &anpv1alpha1.AdminNetworkPolicy{}),
		alice.Patch(ctx, &anpv1alpha1.AdminNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: nameA}}, client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"priority":1}}`))),
		alice.Delete(ctx, &anpv1alpha1.AdminNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: nameA}}),
		alice.Create(ctx, allowEverything("tenant-a-escape", pairedA)),
		alice.Create(ctx, &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "open", Namespace: pairedA},
			Spec: networkingv1.NetworkPolicySpec{PolicyTypes: egressOnly, Egress: []networkingv1.NetworkPolicyEgressRule{{}}}}),
	} {
		g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "tenant A's admin: %v", err)
	}

	// The operator's ServiceAccount is held to what it renders: its own
	// policy passes the admission policy (dry run), an Allow, another
	// namespace's subject or a higher precedence does not.
	sa := asServiceAccount(t, operatorSA)
	mine := &anpv1alpha1.AdminNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: render.TenantEgressPolicyName("ws-0123456789abcdef")}, Spec: *anpA.Spec.DeepCopy()}
	mine.Spec.Subject.Pods.NamespaceSelector.MatchLabels = map[string]string{"kubernetes.io/metadata.name": "ws-0123456789abcdef"}
	g.Expect(sa.Create(ctx, mine.DeepCopy(), client.DryRunAll)).To(Succeed(), "the admission policy refuses what the operator renders")
	group := tenantPolicies(ctx, g, nameA)[1].DeepCopy()
	mineGroup := &anpv1alpha1.AdminNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: mine.Name + group.Name[len(nameA):]}, Spec: group.Spec}
	mineGroup.Spec.Subject.Pods.NamespaceSelector.MatchLabels = map[string]string{"kubernetes.io/metadata.name": "ws-0123456789abcdef"}
	g.Expect(sa.Create(ctx, mineGroup, client.DryRunAll)).To(Succeed(), "the admission policy refuses a group the operator renders")
	allows := mine.DeepCopy()
	allows.Spec.Egress[0].Action = anpv1alpha1.AdminNetworkPolicyRuleActionAllow
	elsewhere := mine.DeepCopy()
	elsewhere.Spec.Subject.Pods.NamespaceSelector.MatchLabels = map[string]string{"kubernetes.io/metadata.name": tenantB}
	first := mine.DeepCopy()
	first.Spec.Priority = 1
	for _, tc := range []struct {
		anp  *anpv1alpha1.AdminNetworkPolicy
		says string
	}{
		{allows, "may only Pass or Deny"},
		{elsewhere, "of the paired namespace the policy is named after"},
		{first, "must have priority 99"},
		{allowEverything("openshell-ws-0123456789abcdef", pairedA), "the subject must be supervisor pods"},
	} {
		err := sa.Create(ctx, tc.anp, client.DryRunAll)
		g.Expect(apierrors.IsInvalid(err) || apierrors.IsForbidden(err)).To(BeTrue(), "the operator's ServiceAccount wrote %+v: %v", tc.anp.Spec, err)
		g.Expect(err.Error()).To(ContainSubstring(tc.says))
	}

	// Nor may it delete what is not its own: a platform policy.
	platformANP := &anpv1alpha1.AdminNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "platform-deny-metadata"},
		Spec: anpv1alpha1.AdminNetworkPolicySpec{Priority: 10,
			Subject: anpv1alpha1.AdminNetworkPolicySubject{Namespaces: &metav1.LabelSelector{}},
			Egress: []anpv1alpha1.AdminNetworkPolicyEgressRule{{Name: "metadata", Action: anpv1alpha1.AdminNetworkPolicyRuleActionDeny,
				To: []anpv1alpha1.AdminNetworkPolicyEgressPeer{{Networks: []anpv1alpha1.CIDR{"169.254.169.254/32"}}}}}}}
	g.Expect(c.Create(ctx, platformANP)).To(Succeed())
	t.Cleanup(func() { _ = c.Delete(context.Background(), platformANP) })
	err = sa.Delete(ctx, platformANP.DeepCopy(), client.DryRunAll)
	g.Expect(apierrors.IsInvalid(err) || apierrors.IsForbidden(err)).To(BeTrue(), "the operator's ServiceAccount deletes a platform policy: %v", err)
	g.Expect(err.Error()).To(ContainSubstring("may only write or delete AdminNetworkPolicies named openshell-"))
	g.Expect(sa.Delete(ctx, &anpv1alpha1.AdminNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: nameA}}, client.DryRunAll)).To(Succeed())

	// B denies its egress: B's policy appears, A's is unchanged.
	g.Expect(bob.Create(ctx, &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "deny-egress", Namespace: tenantB},
		Spec: networkingv1.NetworkPolicySpec{PolicyTypes: egressOnly}})).To(Succeed())
	g.Eventually(func(g Gomega) {
		anpB := &anpv1alpha1.AdminNetworkPolicy{}
		g.Expect(c.Get(ctx, client.ObjectKey{Name: nameB}, anpB)).To(Succeed())
		g.Expect(anpB.Spec.Egress).To(HaveLen(4), "B's policy passes only what supervisors need")
		g.Expect(anpB.Spec.Subject.Pods.NamespaceSelector.MatchLabels).To(Equal(map[string]string{"kubernetes.io/metadata.name": pairedB}))
	}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
	now := &anpv1alpha1.AdminNetworkPolicy{}
	g.Expect(c.Get(ctx, client.ObjectKey{Name: nameA}, now)).To(Succeed())
	g.Expect(now.Spec).To(Equal(anpA.Spec), "tenant B's policy changed A's")

	// Fail closed: the platform admin sets a priority the grant's
	// admission policy refuses. A's policy stays as it was, and A's
	// agents keep running; tenant C's new paired namespace stays off the
	// allowlist, so its sandbox waits rather than run with all egress
	// open, and the gateway says why. Back to 99, C's runs.
	setPriority := func(p int32) {
		g.Expect(c.Patch(ctx, gw, client.RawPatch("application/merge-patch+json",
			[]byte(fmt.Sprintf(`{"spec":{"managed":{"sandboxes":{"tenantEgress":{"priority":%d}}}}}`, p))))).To(Succeed())
	}
	setPriority(50)
	bind(ctx, t, tenantC, "carol", "admin")
	g.Expect(as(t, "carol").Create(ctx, &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "deny-egress", Namespace: tenantC},
		Spec: networkingv1.NetworkPolicySpec{PolicyTypes: egressOnly}})).To(Succeed())
	sbC := sandboxOn(tenantC, "agent", gw)
	g.Expect(c.Create(ctx, sbC)).To(Succeed())
	pairedC := render.PairedNamespace(tenantC, namespaceUID(ctx, g, tenantC))
	g.Eventually(func(g Gomega) {
		cond := egressCondition(ctx, g, gw)
		g.Expect(cond.Reason).To(Equal(openshellv1alpha1.GatewayReasonTenantEgressNotWritten), cond.Message)
		g.Expect(cond.Message).To(ContainSubstring("must have priority 99"))
		// All three refused (A's and B's re-render too): the gateway has
		// seen C's namespace, and rendered its allowlist, in this status.
		g.Expect(cond.Message).To(ContainSubstring("of 3 tenant namespace(s)"))
		ns := &corev1.Namespace{}
		g.Expect(c.Get(ctx, client.ObjectKey{Name: pairedC}, ns)).To(Succeed())
		g.Expect(ns.Labels).To(HaveKey(render.LabelEgressPending))
		g.Expect(allowlist(ctx, g, gw)).To(ConsistOf(pairedA, pairedB), "a namespace whose egress is not in place is allowlisted")
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
	ready := meta.FindStatusCondition(sandboxStatus(ctx, g, client.ObjectKeyFromObject(sbC)).Status.Conditions, openshellv1alpha1.ConditionReady)
	g.Expect(ready).NotTo(BeNil())
	g.Expect(ready.Reason).To(Equal(openshellv1alpha1.SandboxReasonWorkspaceNamespacePending), ready.Message)
	g.Expect(c.Get(ctx, client.ObjectKey{Name: nameA}, now)).To(Succeed())
	g.Expect(now.Spec.Priority).To(BeEquivalentTo(99), "A's policy was changed to what the grant refuses")
	waitPhase(ctx, g, client.ObjectKeyFromObject(sbA), openshellv1alpha1.SandboxPhaseReady)
	setPriority(99)
	waitPhase(ctx, g, client.ObjectKeyFromObject(sbC), openshellv1alpha1.SandboxPhaseReady)
	g.Expect(c.Get(ctx, client.ObjectKey{Name: render.TenantEgressPolicyName(pairedC)}, &anpv1alpha1.AdminNetworkPolicy{})).To(Succeed())

	// A lifts its egress isolation: its AdminNetworkPolicies go.
	for _, np := range []*networkingv1.NetworkPolicy{denyAll, allow, web} {
		g.Expect(alice.Delete(ctx, np)).To(Succeed())
	}
	g.Eventually(func(g Gomega) {
		g.Expect(tenantPolicies(ctx, g, nameA)).To(BeEmpty(), "A's AdminNetworkPolicies stay")
	}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())

	for _, sb := range []*openshellv1alpha1.OpenShellSandbox{sbA, sbB, sbC, sbW} {
		g.Expect(c.Delete(ctx, sb)).To(Succeed())
	}
	g.Expect(c.Delete(ctx, gw)).To(Succeed())
	g.Eventually(func(g Gomega) {
		err := c.Get(ctx, client.ObjectKeyFromObject(gw), &openshellv1alpha1.OpenShellGateway{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the gateway stays: %v", err)
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
}

// allowEverything is an AdminNetworkPolicy that opens all egress of a
// namespace's pods, whatever its NetworkPolicies say.
func allowEverything(name, ns string) *anpv1alpha1.AdminNetworkPolicy {
	return &anpv1alpha1.AdminNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: anpv1alpha1.AdminNetworkPolicySpec{Priority: 95,
			Subject: anpv1alpha1.AdminNetworkPolicySubject{Namespaces: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}}},
			Egress: []anpv1alpha1.AdminNetworkPolicyEgressRule{{Name: "all", Action: anpv1alpha1.AdminNetworkPolicyRuleActionAllow,
				To: []anpv1alpha1.AdminNetworkPolicyEgressPeer{{Networks: []anpv1alpha1.CIDR{"0.0.0.0/0"}}}}}}}
}

// asServiceAccount impersonates a ServiceAccount of namespace
// openshell-operator with its groups.
func asServiceAccount(t *testing.T, user string) client.Client {
	t.Helper()
	return impersonating(t, user, "system:serviceaccounts", "system:serviceaccounts:openshell-operator", "system:authenticated")
}

// tenantPolicies are a paired namespace's AdminNetworkPolicies: the
// default one (named base) first, then its groups, by name.
func tenantPolicies(ctx context.Context, g Gomega, base string) []*anpv1alpha1.AdminNetworkPolicy {
	list := &anpv1alpha1.AdminNetworkPolicyList{}
	g.ExpectWithOffset(1, cluster.Client.List(ctx, list)).To(Succeed())
	var out []*anpv1alpha1.AdminNetworkPolicy
	for i := range list.Items {
		if a := &list.Items[i]; a.Name == base || strings.HasPrefix(a.Name, base+"-") {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, func(a, b *anpv1alpha1.AdminNetworkPolicy) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// egressCondition is a gateway's TenantEgressEnforced condition.
func egressCondition(ctx context.Context, g Gomega, gw *openshellv1alpha1.OpenShellGateway) *metav1.Condition {
	cur := &openshellv1alpha1.OpenShellGateway{}
	g.ExpectWithOffset(1, cluster.Client.Get(ctx, client.ObjectKeyFromObject(gw), cur)).To(Succeed())
	cond := meta.FindStatusCondition(cur.Status.Conditions, openshellv1alpha1.GatewayConditionTenantEgressEnforced)
	g.ExpectWithOffset(1, cond).NotTo(BeNil())
	return cond
}
