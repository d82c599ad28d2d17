package e2e

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/sandboxspec"
	"github.com/openshell/openshell-operator/test/framework"
	"github.com/openshell/openshell-operator/test/stack"
	"github.com/openshell/openshell-operator/test/testgateway"
)

// TestSandboxControls: a gateway's spec.sandboxControls take effect on the
// real control plane without the webhook (the controller enforces them
// too): the default RuntimeClass and a sandbox's own reach the agent pod the
// Agent Sandbox controller creates, and a sandbox over a ceiling is
// Rejected with the ceiling's reason and never reaches the gateway.
func TestSandboxControls(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := cluster.Client
	gwNS := framework.CreateNamespace(ctx, t, c, "controls-platform")
	sbNS := framework.CreateNamespace(ctx, t, c, "controls-sandboxes")
	tenant := framework.CreateNamespace(ctx, t, c, "controls-tenant")
	// The RuntimeClass admission plugin refuses pods naming one that does
	// not exist: a cluster admin creates them.
	for _, name := range []string{"e2e-kata", "e2e-gvisor"} {
		rc := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Handler: name}
		g.Expect(c.Create(ctx, rc)).To(Succeed())
		t.Cleanup(func() { _ = c.Delete(context.Background(), rc) })
	}
	st, err := stack.Start(ctx, cluster.Config, c, stack.Options{GatewayNamespace: gwNS, SandboxNamespace: sbNS})
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { g.Expect(st.Stop()).To(Succeed()) }()
	_, gw, err := st.AddGatewayWith(ctx, c, "controlled", sbNS, func(_ *testgateway.Options, gw *openshellv1alpha1.OpenShellGateway) {
		gw.Spec.SandboxControls = openshellv1alpha1.SandboxControls{
			RequirePolicy:         ptr.To(false),
			MaxResources:          corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("8Gi")},
			AllowedRuntimeClasses: []string{"e2e-kata", "e2e-gvisor"}, DefaultRuntimeClass: "e2e-kata",
		}
	})
	g.Expect(err).NotTo(HaveOccurred())

	podOf := func(sb *openshellv1alpha1.OpenShellSandbox) *corev1.Pod {
		t.Helper()
		pod := &corev1.Pod{}
		g.Eventually(func(g Gomega) {
			cur := sandboxStatus(ctx, g, client.ObjectKeyFromObject(sb))
			g.Expect(cur.Status.Phase).To(Equal(openshellv1alpha1.SandboxPhaseReady), "%+v", cur.Status.Conditions)
			g.Expect(c.Get(ctx, client.ObjectKey{Namespace: sbNS, Name: cur.Status.AgentSandbox.Name}, pod)).To(Succeed())
		}).WithContext(ctx).WithTimeout(90*time.Second).WithPolling(500*time.Millisecond).Should(Succeed(), cluster.CheckProcessesMessage)
		return pod
	}
	// Under the memory ceiling a sandbox declares its memory limit.
	bounded := func(name string) *openshellv1alpha1.OpenShellSandbox {
		sb := sandboxOn(tenant, name, gw)
		sb.Spec.Resources = &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}}
		return sb
	}
	byDefault := bounded("by-default")
	own := bounded("own-class")
	own.Spec.RuntimeClassName = "e2e-gvisor"
	own.Spec.PodLabels = map[string]openshellv1alpha1.PodLabelValue{"team": "a"}
	own.Spec.PodAnnotations = map[string]openshellv1alpha1.PodAnnotationValue{"example.com/owner": "team a"}
	g.Expect(c.Create(ctx, byDefault)).To(Succeed())
	g.Expect(c.Create(ctx, own)).To(Succeed())
	g.Expect(podOf(byDefault).Spec.RuntimeClassName).To(HaveValue(Equal("e2e-kata")), "the gateway's default RuntimeClass")
	ownPod := podOf(own)
	g.Expect(ownPod.Spec.RuntimeClassName).To(HaveValue(Equal("e2e-gvisor")), "the sandbox's own RuntimeClass")
	g.Expect(ownPod.Labels).To(HaveKeyWithValue("team", "a"), "spec.podLabels reach the pod")
	g.Expect(ownPod.Labels).To(HaveKeyWithValue("openshell.ai/managed-by-operator", "true"), "the operator's label stays")
	g.Expect(ownPod.Annotations).To(HaveKeyWithValue("example.com/owner", "team a"), "spec.podAnnotations reach the pod")

	runc := bounded("runc")
	runc.Spec.RuntimeClassName = "runc"
	big := sandboxOn(tenant, "big", gw)
	big.Spec.Resources = &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("32Gi")}}
	for sb, reason := range map[*openshellv1alpha1.OpenShellSandbox]string{
		runc: openshellv1alpha1.SandboxReasonRuntimeClassNotAllowed, big: openshellv1alpha1.SandboxReasonResourceLimitExceeded,
	} {
		g.Expect(c.Create(ctx, sb)).To(Succeed()) // no webhook in this cluster: the controller refuses
		g.Eventually(func(g Gomega) {
			cur := sandboxStatus(ctx, g, client.ObjectKeyFromObject(sb))
			g.Expect(cur.Status.Phase).To(Equal(openshellv1alpha1.SandboxPhaseRejected))
			acc := meta.FindStatusCondition(cur.Status.Conditions, openshellv1alpha1.ConditionAccepted)
			g.Expect(acc).NotTo(BeNil())
			g.Expect(acc.Reason).To(Equal(reason))
			g.Expect(acc.Message).To(ContainSubstring(gw.Namespace + "/" + gw.Name))
			g.Expect(cur.Status.SandboxID).To(BeEmpty(), "a refused sandbox reached the gateway")
		}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
	}

	// A gateway that requires a policy (the API default): a sandbox naming
	// none is Rejected until the namespace's Tenant Admin marks a default
	// policy; then the same sandbox runs under it.
	gwState, strict, err := st.AddGatewayWith(ctx, c, "strict", sbNS, func(_ *testgateway.Options, gw *openshellv1alpha1.OpenShellGateway) {
		gw.Spec.SandboxControls.RequirePolicy = nil
	})
	g.Expect(err).NotTo(HaveOccurred())
	bare := sandboxOn(tenant, "bare", strict)
	g.Expect(c.Create(ctx, bare)).To(Succeed())
	g.Eventually(func(g Gomega) {
		cur := sandboxStatus(ctx, g, client.ObjectKeyFromObject(bare))
		g.Expect(cur.Status.Phase).To(Equal(openshellv1alpha1.SandboxPhaseRejected))
		g.Expect(meta.FindStatusCondition(cur.Status.Conditions, openshellv1alpha1.ConditionAccepted).Reason).To(Equal(openshellv1alpha1.SandboxReasonPolicyRequired))
	}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
	g.Expect(c.Create(ctx, &openshellv1alpha1.OpenShellPolicy{ObjectMeta: metav1.ObjectMeta{Name: "house", Namespace: tenant},
		Spec: openshellv1alpha1.OpenShellPolicySpec{Default: true, NetworkPolicies: []openshellv1alpha1.NetworkPolicyRule{{Name: "github",
			Endpoints: []openshellv1alpha1.NetworkEndpoint{{Host: "api.github.com", Port: ptr.To[int32](443)}}}}}})).To(Succeed())
	nsObj := &corev1.Namespace{}
	g.Expect(c.Get(ctx, client.ObjectKey{Name: tenant}, nsObj)).To(Succeed())
	g.Eventually(func(g Gomega) {
		cur := sandboxStatus(ctx, g, client.ObjectKeyFromObject(bare))
		g.Expect(cur.Status.Phase).To(Equal(openshellv1alpha1.SandboxPhaseReady), "%+v", cur.Status.Conditions)
		pol := meta.FindStatusCondition(cur.Status.Conditions, openshellv1alpha1.SandboxConditionPolicyResolved)
		g.Expect(pol.Reason).To(Equal(openshellv1alpha1.SandboxReasonDefaultPolicy))
		g.Expect(pol.Message).To(ContainSubstring("house"))
		// The gateway received the default policy with the sandbox.
		g.Expect(gwState.SandboxPolicyVersion(sandboxspec.WorkspaceName(tenant, nsObj.UID), sandboxspec.SandboxName(tenant, "bare"))).To(BeNumerically(">=", 1))
	}).WithContext(ctx).WithTimeout(90*time.Second).WithPolling(500*time.Millisecond).Should(Succeed(), cluster.CheckProcessesMessage)

	// A namespace budget, without the webhook: the namespace's earlier
	// sandbox is charged first, the later one over the budget is Rejected.
	_, budgeted, err := st.AddGatewayWith(ctx, c, "budgeted", sbNS, func(_ *testgateway.Options, gw *openshellv1alpha1.OpenShellGateway) {
		gw.Spec.SandboxControls.NamespaceBudget = &openshellv1alpha1.NamespaceBudget{MaxSandboxes: ptr.To[int32](1)}
	})
	g.Expect(err).NotTo(HaveOccurred())
	first := sandboxOn(tenant, "budget-first", budgeted)
	g.Expect(c.Create(ctx, first)).To(Succeed())
	podOf(first)
	second := sandboxOn(tenant, "budget-second", budgeted)
	g.Expect(c.Create(ctx, second)).To(Succeed())
	g.Eventually(func(g Gomega) {
		cur := sandboxStatus(ctx, g, client.ObjectKeyFromObject(second))
		g.Expect(cur.Status.Phase).To(Equal(openshellv1alpha1.SandboxPhaseRejected))
		acc := meta.FindStatusCondition(cur.Status.Conditions, openshellv1alpha1.ConditionAccepted)
		g.Expect(acc.Reason).To(Equal(openshellv1alpha1.SandboxReasonNamespaceBudgetExceeded))
		g.Expect(acc.Message).To(ContainSubstring("would have 2 sandboxes on gateway"))
	}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
	g.Expect(sandboxStatus(ctx, g, client.ObjectKeyFromObject(first)).Status.Phase).To(Equal(openshellv1alpha1.SandboxPhaseReady), "the earlier sandbox keeps running")
}

// TestSandboxCountQuota: a tenant's own ResourceQuota counts its
// OpenShellSandboxes natively (object count quota for custom resources), so
// a Tenant or Platform Admin caps a namespace's sandboxes without the
// gateway's budget — what docs/sandbox-controls.md tells them.
//
// kube-apiserver's quota admission reads quotas from its own informer, so
// a quota the controller has counted (a live GET shows its status) may not
// yet be what admission sees: a create in that gap is admitted uncharged
// (a fresh-clone run saw "two" admitted so). The test therefore proves
// admission sees the quota before it relies on it: at zero a dry-run create
// (which charges nothing) is refused, then the limit is raised to one and
// the first create is retried until admission sees the new limit.
func TestSandboxCountQuota(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := cluster.Client
	ns := framework.CreateNamespace(ctx, t, c, "quota-tenant")
	const counted = corev1.ResourceName("count/openshellsandboxes.openshell.ai")
	q := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "sandboxes", Namespace: ns},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{counted: resource.MustParse("0")}}}
	g.Expect(c.Create(ctx, q)).To(Succeed())
	gw := &openshellv1alpha1.OpenShellGateway{ObjectMeta: metav1.ObjectMeta{Name: "gw", Namespace: ns}}
	g.Eventually(func(g Gomega) {
		err := c.Create(ctx, sandboxOn(ns, "probe", gw), client.DryRunAll)
		g.Expect(err).To(HaveOccurred(), "quota admission has not seen the counted quota yet")
		g.Expect(err.Error()).To(ContainSubstring("exceeded quota: sandboxes"))
	}).WithContext(ctx).WithTimeout(60 * time.Second).Should(Succeed())

	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(q), q)).To(Succeed())
	q.Spec.Hard[counted] = resource.MustParse("1")
	g.Expect(c.Update(ctx, q)).To(Succeed())
	g.Eventually(func(g Gomega) {
		err := c.Create(ctx, sandboxOn(ns, "one", gw))
		if err != nil {
			// Refused only while admission still sees the limit of zero.
			g.Expect(err.Error()).To(ContainSubstring("limited: " + string(counted) + "=0"))
		}
		g.Expect(err).NotTo(HaveOccurred(), "quota admission has not seen the raised limit yet")
	}).WithContext(ctx).WithTimeout(60 * time.Second).Should(Succeed())
	err := c.Create(ctx, sandboxOn(ns, "two", gw))
	g.Expect(err).To(HaveOccurred())
	g.Expect(err.Error()).To(ContainSubstring("exceeded quota: sandboxes"))
	g.Expect(err.Error()).To(ContainSubstring(string(counted)))
}
