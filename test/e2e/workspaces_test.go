package e2e

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	render "github.com/openshell/openshell-operator/internal/render/gateway"
	"github.com/openshell/openshell-operator/internal/sandboxspec"
	"github.com/openshell/openshell-operator/internal/tenancy"
	"github.com/openshell/openshell-operator/operator"
	"github.com/openshell/openshell-operator/test/framework"
	"github.com/openshell/openshell-operator/test/stack"
)

// TestWorkspaceModeOperator (#45 item 1): a Managed 0.1 gateway in
// workspace mode Operator runs each tenant namespace's sandboxes in a
// paired namespace the operator creates (the tenant's workspace name),
// with the gateway's grants only there. The test gateway plays the pod
// with exactly the gateway's RBAC and refuses, as the 0.1 driver does, a
// workspace whose namespace is not on the mounted allowlist. Attacks, each
// as the persona who would try it:
//   - tenant A's namespace admin reads or writes nothing in A's paired
//     namespace (pods, bootstrap Secrets) nor in B's;
//   - a self-provisioner who guessed a tenant's paired name and created
//     that namespace first does not get the tenant's sandboxes: the
//     operator never adopts it (WorkspaceNamespaceConflict) and the
//     allowlist never names it;
//   - the platform admin cannot switch the mode of a running gateway.
//
// The last sandbox of a tenant gone, its paired namespace goes too.
// releaseGrace is the operator's PairedReleaseGrace in the test: the
// draining namespace is seen for this long.
const releaseGrace = 10 * time.Second

func TestWorkspaceModeOperator(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := cluster.Client
	own := framework.CreateNamespace(ctx, t, c, "paired-operator")
	platform := framework.CreatePlatformNamespace(ctx, t, c, "paired-platform")
	tenantA := framework.CreateNamespace(ctx, t, c, "paired-a")
	tenantB := framework.CreateNamespace(ctx, t, c, "paired-b")
	squatted := framework.CreateNamespace(ctx, t, c, "paired-c")
	createVolume(ctx, t, platform, "paired")
	// Workspace mode Operator creates namespaces at run time: the operator
	// is installed for all namespaces (its cache is not scoped).
	certDir, caPEM, port := webhookServing(t)
	st, err := stack.Start(ctx, cluster.Config, c, stack.Options{GatewayNamespace: own, SandboxNamespace: own, PlayManagedGateways: true,
		Manager: operator.Options{WebhookHost: "127.0.0.1", WebhookPort: port, WebhookCertDir: certDir,
			// The test gateway reads the allowlist live: no kubelet to wait
			// for, only long enough to see the namespace drain.
			Controllers: operator.ControllerOptions{EnableWebhooks: true, PairedReleaseGrace: releaseGrace,
				Platform: tenancy.Platform{GatewayNamespaces: []string{platform}}}}})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { g.Expect(st.Stop()).To(Succeed()) })
	// The operator's webhooks, for this gateway's paired namespaces (by
	// the label the operator gives them at creation): the pod webhook
	// must admit the tenants' own sandbox pods there.
	webhooksFor(ctx, t, "openshell-e2e-paired", caPEM, port, map[string]string{render.LabelGatewayNamespace: platform})
	obj := &openshellv1alpha1.OpenShellGateway{
		ObjectMeta: metav1.ObjectMeta{Name: "paired", Namespace: platform},
		Spec: openshellv1alpha1.OpenShellGatewaySpec{Mode: openshellv1alpha1.GatewayModeManaged,
			Managed:         &openshellv1alpha1.ManagedGatewaySpec{Sandboxes: openshellv1alpha1.SandboxPlacement{WorkspaceMode: openshellv1alpha1.WorkspaceModeOperator}},
			Tenancy:         openshellv1alpha1.GatewayTenancy{AllowedNamespaces: openshellv1alpha1.AllowedNamespaces{From: openshellv1alpha1.NamespacesFromAll}},
			SandboxControls: openshellv1alpha1.SandboxControls{RequirePolicy: ptr.To(false)}},
	}
	g.Expect(c.Create(ctx, obj)).To(Succeed())
	_, err = st.PlayManagedGateway(ctx, c, obj, "")
	g.Expect(err).NotTo(HaveOccurred())

	// The squatter: a self-provisioner creates the namespace tenant C's
	// sandboxes would run in (its name derives from C's name and UID).
	selfProvisioner(ctx, t, "squatter")
	squat := render.PairedNamespace(squatted, namespaceUID(ctx, g, squatted))
	g.Expect(as(t, "squatter").Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: squat}})).To(Succeed())
	t.Cleanup(func() {
		_ = c.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: squat}})
	})

	sbA, sbB, sbC := sandboxOn(tenantA, "agent", obj), sandboxOn(tenantB, "agent", obj), sandboxOn(squatted, "agent", obj)
	for _, sb := range []*openshellv1alpha1.OpenShellSandbox{sbA, sbB, sbC} {
		g.Expect(c.Create(ctx, sb)).To(Succeed())
	}
	pairedA, pairedB := render.PairedNamespace(tenantA, namespaceUID(ctx, g, tenantA)), render.PairedNamespace(tenantB, namespaceUID(ctx, g, tenantB))
	for _, tc := range []struct {
		sb     *openshellv1alpha1.OpenShellSandbox
		paired string
	}{{sbA, pairedA}, {sbB, pairedB}} {
		waitPhase(ctx, g, client.ObjectKeyFromObject(tc.sb), openshellv1alpha1.SandboxPhaseReady)
		cur := sandboxStatus(ctx, g, client.ObjectKeyFromObject(tc.sb))
		g.Expect(cur.Status.Workspace).To(Equal(tc.paired))
		g.Eventually(func(g Gomega) {
			cur := sandboxStatus(ctx, g, client.ObjectKeyFromObject(tc.sb))
			g.Expect(cur.Status.AgentSandbox).NotTo(BeNil())
			g.Expect(cur.Status.AgentSandbox.Namespace).To(Equal(tc.paired), "the Sandbox runs outside the tenant's paired namespace")
			g.Expect(cur.Status.AgentSandbox.Name).To(Equal(sandboxspec.SandboxName(tc.sb.Namespace, tc.sb.Name)), "operator mode names Sandboxes without the workspace prefix")
		}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
		// Its pods there wear its tenant labels (admitted by the pod
		// webhook), and no other tenant's.
		pods := &corev1.PodList{}
		g.Expect(c.List(ctx, pods, client.InNamespace(tc.paired))).To(Succeed())
		labelled := 0
		for _, p := range pods.Items {
			if ns, ok := p.Labels[sandboxspec.LabelTenantNamespace]; ok {
				g.Expect(ns).To(Equal(tc.sb.Namespace), "pod %s/%s wears another tenant's label", p.Namespace, p.Name)
				labelled++
			}
		}
		g.Expect(labelled).To(BeNumerically(">", 0), "no pod of %s's sandbox in %s", tc.sb.Namespace, tc.paired)
	}
	// Nothing of either tenant runs in the gateway's own namespace.
	sandboxes := &unstructured.UnstructuredList{}
	sandboxes.SetGroupVersionKind(sandboxGVK.GroupVersion().WithKind("SandboxList"))
	g.Expect(c.List(ctx, sandboxes, client.InNamespace(platform))).To(Succeed())
	g.Expect(sandboxes.Items).To(BeEmpty())

	// The squatted name is never adopted nor allowlisted.
	g.Eventually(func(g Gomega) {
		cur := sandboxStatus(ctx, g, client.ObjectKeyFromObject(sbC))
		g.Expect(cur.Status.SandboxID).To(BeEmpty())
		c := meta.FindStatusCondition(cur.Status.Conditions, openshellv1alpha1.ConditionReady)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Reason).To(Equal(openshellv1alpha1.SandboxReasonWorkspaceNamespaceConflict), c.Message)
		g.Expect(c.Message).To(ContainSubstring("never adopted"))
	}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
	g.Expect(allowlist(ctx, g, obj)).To(ConsistOf(pairedA, pairedB))
	squatNS := &corev1.Namespace{}
	g.Expect(c.Get(ctx, client.ObjectKey{Name: squat}, squatNS)).To(Succeed())
	g.Expect(squatNS.Labels).NotTo(HaveKey(render.LabelGatewayName), "the operator labelled a namespace it did not create")

	// Tenant A's namespace admin: nothing in the paired namespaces.
	// (The namespace admin role, with what OLM aggregates into it.)
	installOLMAggregatedRoles(ctx, t)
	bind(ctx, t, tenantA, "alice", "admin")
	alice := as(t, "alice")
	for _, ns := range []string{pairedA, pairedB} {
		for _, list := range []client.ObjectList{&corev1.PodList{}, &corev1.SecretList{}} {
			err := alice.List(ctx, list, client.InNamespace(ns))
			g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "tenant A's admin lists %T in %s: %v", list, ns, err)
		}
		err := alice.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "intruder", Namespace: ns,
			Labels: map[string]string{sandboxspec.LabelTenantNamespace: tenantA}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}})
		g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "tenant A's admin creates a pod in %s: %v", ns, err)
	}
	// Nor may it add a namespace to the allowlist by its labels.
	err = alice.Patch(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tenantA}},
		client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"labels":{"`+render.LabelGatewayName+`":"paired"}}}`)))
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "tenant A's admin labels its namespace: %v", err)

	// A cluster admin's quota on team A (namespace admins may read it, not
	// change it) binds A's sandboxes in their paired namespace, counted
	// apart from A's own pods, and never B's; A's admin cannot touch the
	// copy. A breach says so on the sandbox with the quota's message.
	quota := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "sandboxes", Namespace: tenantA},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("2")}}}
	g.Expect(c.Create(ctx, quota)).To(Succeed())
	mirrored := client.ObjectKey{Namespace: pairedA, Name: render.MirrorName("sandboxes")}
	g.Eventually(func(g Gomega) {
		q := &corev1.ResourceQuota{}
		g.Expect(c.Get(ctx, mirrored, q)).To(Succeed())
		g.Expect(q.Spec.Hard.Pods().String()).To(Equal("2"))
		g.Expect(q.Status.Hard).NotTo(BeEmpty(), "the quota controller has not counted it yet")
	}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
	quotasB := &corev1.ResourceQuotaList{}
	g.Expect(c.List(ctx, quotasB, client.InNamespace(pairedB))).To(Succeed())
	g.Expect(quotasB.Items).To(BeEmpty(), "tenant A's quota reached B's paired namespace")
	err = alice.Delete(ctx, &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: mirrored.Name, Namespace: pairedA}})
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "tenant A's admin deletes the mirrored quota: %v", err)
	sbA2, sbB2 := sandboxOn(tenantA, "second", obj), sandboxOn(tenantB, "second", obj)
	g.Expect(c.Create(ctx, sbA2)).To(Succeed())
	g.Expect(c.Create(ctx, sbB2)).To(Succeed())
	g.Eventually(func(g Gomega) {
		cur := sandboxStatus(ctx, g, client.ObjectKeyFromObject(sbA2))
		ready := meta.FindStatusCondition(cur.Status.Conditions, openshellv1alpha1.ConditionReady)
		g.Expect(ready).NotTo(BeNil())
		g.Expect(ready.Reason).To(Equal(openshellv1alpha1.SandboxReasonQuotaExceeded), "%+v", cur.Status.Conditions)
		g.Expect(ready.Message).To(ContainSubstring(mirrored.Name))
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
	waitPhase(ctx, g, client.ObjectKeyFromObject(sbB2), openshellv1alpha1.SandboxPhaseReady)
	// The cluster admin raises it: the copy follows, and A's second runs.
	g.Expect(c.Patch(ctx, quota, client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"hard":{"pods":"4"}}}`)))).To(Succeed())
	waitPhase(ctx, g, client.ObjectKeyFromObject(sbA2), openshellv1alpha1.SandboxPhaseReady)

	// Tenant pull Secrets: a Tenant Admin who may not read the Secret
	// cannot name it; A's admin, who may, does, and only A's paired
	// namespace pulls with it (the gateway names one pull Secret in every
	// paired namespace; B's holds no credentials of A's).
	g.Expect(c.Patch(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tenantA}},
		client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"openshell-e2e-paired":"true"}}}`)))).To(Succeed())
	webhooksFor(ctx, t, "openshell-e2e-paired-tenants", caPEM, port, map[string]string{"openshell-e2e-paired": "true"})
	regcred := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "regcred", Namespace: tenantA}, Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":{"registry.team-a.example":{"auth":"YTpi"}}}`)}}
	g.Expect(c.Create(ctx, regcred)).To(Succeed())
	pulls := &openshellv1alpha1.OpenShellImagePolicy{ObjectMeta: metav1.ObjectMeta{Name: "pulls", Namespace: tenantA},
		Spec: openshellv1alpha1.OpenShellImagePolicySpec{AllowedMirrors: []string{"registry.team-a.example"},
			PullSecrets: []openshellv1alpha1.LocalObjectReference{{Name: "regcred"}}}}
	bind(ctx, t, tenantA, "tina", "openshell-tenant-admin")
	g.Eventually(func(g Gomega) {
		err := as(t, "tina").Create(ctx, pulls.DeepCopy())
		g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "a Tenant Admin who may not read regcred names it: %v", err)
		g.Expect(err.Error()).To(ContainSubstring("SecretAccessDenied"))
	}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
	g.Expect(alice.Create(ctx, pulls)).To(Succeed())
	pullAuths := func(g Gomega, ns string) map[string]any {
		s := &corev1.Secret{}
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: render.PairedPullSecret}, s)).To(Succeed())
		var cfg struct {
			Auths map[string]any `json:"auths"`
		}
		g.Expect(json.Unmarshal(s.Data[corev1.DockerConfigJsonKey], &cfg)).To(Succeed())
		return cfg.Auths
	}
	g.Eventually(func(g Gomega) {
		g.Expect(pullAuths(g, pairedA)).To(HaveKey("registry.team-a.example"))
		g.Expect(pullAuths(g, pairedB)).To(BeEmpty())
		cur := &openshellv1alpha1.OpenShellImagePolicy{}
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(pulls), cur)).To(Succeed())
		g.Expect(meta.IsStatusConditionTrue(cur.Status.Conditions, openshellv1alpha1.ImagePolicyConditionPullSecretsResolved)).To(BeTrue(), "%+v", cur.Status.Conditions)
	}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
	err = alice.Get(ctx, client.ObjectKey{Namespace: pairedA, Name: render.PairedPullSecret}, &corev1.Secret{})
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "tenant A's admin reads the paired pull Secret: %v", err)

	// The mode cannot change under running sandboxes.
	cur := &openshellv1alpha1.OpenShellGateway{}
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(obj), cur)).To(Succeed())
	cur.Spec.Managed.Sandboxes.WorkspaceMode = openshellv1alpha1.WorkspaceModeShared
	err = c.Update(ctx, cur)
	g.Expect(err).To(HaveOccurred())
	g.Expect(err.Error()).To(ContainSubstring("workspaceMode is immutable"))

	// A's last sandbox goes: so do its paired namespace and its allowlist
	// entry; B's stay.
	// It leaves the allowlist first and is deleted only after the grace,
	// so that its name is never free while a gateway's file may name it.
	g.Expect(c.Delete(ctx, sbA)).To(Succeed())
	g.Expect(c.Delete(ctx, sbA2)).To(Succeed())
	g.Eventually(func(g Gomega) {
		ns := &corev1.Namespace{}
		g.Expect(c.Get(ctx, client.ObjectKey{Name: pairedA}, ns)).To(Succeed(), "deleted before it was drained")
		g.Expect(ns.DeletionTimestamp).To(BeNil(), "deleted before it was drained")
		g.Expect(render.Draining(ns)).To(BeTrue())
		g.Expect(allowlist(ctx, g, obj)).To(ConsistOf(pairedB))
	}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(100 * time.Millisecond).Should(Succeed())
	g.Eventually(func(g Gomega) {
		ns := &corev1.Namespace{}
		err := c.Get(ctx, client.ObjectKey{Name: pairedA}, ns)
		g.Expect(apierrors.IsNotFound(err) || !ns.DeletionTimestamp.IsZero()).To(BeTrue(), "paired namespace %s stays: %v", pairedA, err)
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
	waitPhase(ctx, g, client.ObjectKeyFromObject(sbB), openshellv1alpha1.SandboxPhaseReady)

	// The gateway goes (after its sandboxes): nothing of it is left, its
	// cluster-wide Sandbox watch included; the squatter's namespace stays.
	for _, sb := range []*openshellv1alpha1.OpenShellSandbox{sbB, sbB2, sbC} {
		g.Expect(c.Delete(ctx, sb)).To(Succeed())
	}
	g.Expect(c.Delete(ctx, obj)).To(Succeed())
	g.Eventually(func(g Gomega) {
		err := c.Get(ctx, client.ObjectKeyFromObject(obj), &openshellv1alpha1.OpenShellGateway{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the gateway stays: %v", err)
		nss := &corev1.NamespaceList{}
		g.Expect(c.List(ctx, nss, client.MatchingLabels{render.LabelGatewayNamespace: platform})).To(Succeed())
		for _, ns := range nss.Items {
			g.Expect(ns.DeletionTimestamp).NotTo(BeNil(), "paired namespace %s stays", ns.Name)
		}
		err = c.Get(ctx, client.ObjectKey{Name: render.NamesFor(obj).WorkspacesBinding}, &rbacv1.ClusterRoleBinding{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the cluster-wide Sandbox watch stays: %v", err)
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
	g.Expect(c.Get(ctx, client.ObjectKey{Name: squat}, &corev1.Namespace{})).To(Succeed())
}

// allowlist is the gateway's operator_namespace_file, as mounted.
func allowlist(ctx context.Context, g Gomega, gw *openshellv1alpha1.OpenShellGateway) []string {
	cm := &corev1.ConfigMap{}
	g.ExpectWithOffset(1, cluster.Client.Get(ctx, client.ObjectKey{Namespace: gw.Namespace, Name: render.NamesFor(gw).Workspaces}, cm)).To(Succeed())
	names, err := render.WorkspacesIn(cm)
	g.ExpectWithOffset(1, err).NotTo(HaveOccurred())
	return names
}
