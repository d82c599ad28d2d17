package e2e

import (
	"context"
	"io"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/gatewayapi"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/openshellv1"
	"github.com/openshell/openshell-operator/internal/sandboxspec"
	"github.com/openshell/openshell-operator/operator"
	"github.com/openshell/openshell-operator/test/framework"
	"github.com/openshell/openshell-operator/test/stack"
)

// TestForgedTenantLabelsAtTheGateway (fourth adversarial read, R5): tina,
// Tenant Admin of team-a (openshell-tenant-admin, nothing more), exchanges
// a gateway token and creates a sandbox directly at a 0.1.5 gateway whose
// template wears team-b's tenant labels, the labels NetworkPolicies select
// team-b's pods by. The gateway accepts it (the operator's config
// allowlists those labels) and names its agents.x-k8s.io Sandbox in
// team-a's workspace; the pod the Agent Sandbox controller makes of it is
// refused by the operator's webhook, so the only pod wearing team-b's
// labels is team-b's own sandbox's.
func TestForgedTenantLabelsAtTheGateway(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := cluster.Client
	gwNS, sbNS := framework.CreateNamespace(ctx, t, c, "forge-platform"), framework.CreateNamespace(ctx, t, c, "forge-sandboxes")
	teamA, teamB := framework.CreateNamespace(ctx, t, c, "forge-team-a"), framework.CreateNamespace(ctx, t, c, "forge-team-b")
	certDir, caPEM, port := webhookServing(t)
	st, err := stack.Start(ctx, cluster.Config, c, stack.Options{GatewayNamespace: gwNS, SandboxNamespace: sbNS,
		Manager: operator.Options{WatchNamespaces: []string{gwNS, sbNS, teamA, teamB}, WebhookHost: "127.0.0.1", WebhookPort: port, WebhookCertDir: certDir,
			Controllers: operator.ControllerOptions{EnableWebhooks: true}}})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { g.Expect(st.Stop()).To(Succeed()) })
	upgradeInPlace(ctx, g, st.Gateway, st.GatewayObj, "0.1.5")

	// The operator's webhooks, for the sandbox namespace only (the pod
	// webhook is the one that matters there).
	const label = "openshell-e2e-forge"
	ns := &corev1.Namespace{}
	g.Expect(c.Get(ctx, client.ObjectKey{Name: sbNS}, ns)).To(Succeed())
	ns.Labels[label] = "true"
	g.Expect(c.Update(ctx, ns)).To(Succeed())
	webhooksFor(ctx, t, "openshell-e2e-forge", caPEM, port, map[string]string{label: "true"})

	// Both tenants' own sandboxes, through the operator: their pods wear
	// their labels and are admitted.
	for _, tenant := range []string{teamA, teamB} {
		g.Expect(c.Create(ctx, sandboxOn(tenant, "agent", st.GatewayObj))).To(Succeed())
	}
	for _, tenant := range []string{teamA, teamB} {
		waitPhase(ctx, g, client.ObjectKey{Namespace: tenant, Name: "agent"}, openshellv1alpha1.SandboxPhaseReady)
	}
	g.Eventually(func() []string { return tenantPods(ctx, g, sbNS, teamB) }).WithContext(ctx).WithTimeout(time.Minute).
		Should(HaveLen(1), "team-b's own sandbox pod")

	installOLMAggregatedRoles(ctx, t)
	bind(ctx, t, teamA, "tina", "openshell-tenant-admin")
	r, err := st.StartRelay(ctx, cluster.Config, gwNS, zap.New(zap.WriteTo(io.Discard)))
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { g.Expect(r.Stop(context.Background(), c)).To(Succeed()) })
	tok, err := exchangeAs(ctx, userConfig("tina"), teamA, "agent")
	g.Expect(err).NotTo(HaveOccurred())

	// The attack: team-b's labels on a sandbox made with team-a's token.
	b := &corev1.Namespace{}
	g.Expect(c.Get(ctx, client.ObjectKey{Name: teamB}, b)).To(Succeed())
	forged := map[string]string{sandboxspec.LabelTenantNamespace: teamB, sandboxspec.LabelTenantNamespaceUID: string(b.UID)}
	g.Expect(createAtGateway(ctx, st, tok.Token, tok.Workspace, "forged", forged)).To(Succeed(),
		"the gateway itself accepts the labels: the operator's config allowlists them")
	crName := tok.Workspace + sandboxspec.WorkspaceSeparator + "forged"
	cr := &unstructured.Unstructured{}
	cr.SetGroupVersionKind(agentSandboxGVK)
	g.Eventually(func() error { return c.Get(ctx, client.ObjectKey{Namespace: sbNS, Name: crName}, cr) }).WithContext(ctx).
		WithTimeout(time.Minute).Should(Succeed(), "the gateway made no agents.x-k8s.io Sandbox")

	// The pod the Agent Sandbox controller makes of that Sandbox, as it
	// makes it: refused, and why.
	pod := podOfSandbox(g, cr)
	err = c.Create(ctx, pod)
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%v", err)
	g.Expect(err.Error()).To(ContainSubstring("a gateway token of one namespace cannot dress a pod as another's"))
	// The UID label alone, which a NetworkPolicy may select on as well: the
	// webhook sees such a pod too (a selector of its own) and refuses it.
	uidOnly := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "uid-only", Namespace: sbNS,
		Labels: map[string]string{sandboxspec.LabelTenantNamespaceUID: string(b.UID)}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "registry.example.com/agent:1"}}}}
	err = c.Create(ctx, uidOnly)
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "a pod wearing team-b's UID label alone: %v", err)
	g.Expect(err.Error()).To(ContainSubstring("without " + sandboxspec.LabelTenantNamespace))
	// And the controller's own attempts fail alike: no pod but team-b's
	// sandbox's wears team-b's labels.
	g.Consistently(func() []string { return tenantPods(ctx, g, sbNS, teamB) }).WithContext(ctx).WithTimeout(5*time.Second).
		Should(HaveLen(1), "a pod of team-a's workspace wears team-b's labels")
}

// agentSandboxGVK is the Agent Sandbox kind this cluster serves.
var agentSandboxGVK = schema.GroupVersionKind{Group: "agents.x-k8s.io", Version: "v1beta1", Kind: "Sandbox"}

// tenantPods names the pods of ns wearing tenant's namespace label.
func tenantPods(ctx context.Context, g Gomega, ns, tenant string) []string {
	list := &corev1.PodList{}
	g.Expect(cluster.Client.List(ctx, list, client.InNamespace(ns), client.MatchingLabels{sandboxspec.LabelTenantNamespace: tenant})).To(Succeed())
	var out []string
	for _, p := range list.Items {
		out = append(out, p.Name)
	}
	return out
}

// podOfSandbox is the pod the Agent Sandbox controller creates for cr: its
// pod template, named after it and controlled by it.
func podOfSandbox(g Gomega, cr *unstructured.Unstructured) *corev1.Pod {
	tmpl, found, err := unstructured.NestedMap(cr.Object, "spec", "podTemplate")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(found).To(BeTrue(), "the Sandbox has no pod template")
	pt := &corev1.PodTemplateSpec{}
	g.Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(tmpl, pt)).To(Succeed())
	yes := true
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: cr.GetName(), Namespace: cr.GetNamespace(), Labels: pt.Labels, Annotations: pt.Annotations,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: cr.GetAPIVersion(), Kind: cr.GetKind(), Name: cr.GetName(), UID: cr.GetUID(), Controller: &yes}}},
		Spec: pt.Spec}
}

// createAtGateway creates a sandbox in workspace at the stack's 0.1 gateway
// with a bearer token, as any 0.1 client can, its template wearing labels.
func createAtGateway(ctx context.Context, st *stack.Stack, token, workspace, name string, labels map[string]string) error {
	gw, ctx, done, err := gatewayAs(ctx, st, token)
	if err != nil {
		return err
	}
	defer done()
	_, err = gw.CreateSandbox(ctx, &openshellv1.CreateSandboxRequest{Name: name, WorkspaceScope: gatewayapi.Workspace(workspace),
		Spec: &openshellv1.SandboxSpec{Template: &openshellv1.SandboxTemplate{Labels: labels}}})
	return err
}
