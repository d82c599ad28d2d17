package e2e

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	legacyopenshellv1 "github.com/openshell/openshell-operator/internal/gatewayapi/pb/openshellv1"
	"github.com/openshell/openshell-operator/internal/sandboxspec"
	"github.com/openshell/openshell-operator/operator"
	"github.com/openshell/openshell-operator/test/framework"
	"github.com/openshell/openshell-operator/test/stack"
)

// The template's images: the namespace's allowlist takes digests only.
const (
	claudeV1 = "mirror.corp/agents/claude@sha256:1111111111111111111111111111111111111111111111111111111111111111"
	claudeV2 = "mirror.corp/agents/claude@sha256:2222222222222222222222222222222222222222222222222222222222222222"
)

// startPersonaStack starts a stack on a 0.1.5 test gateway watching a
// platform, a sandbox and a tenant namespace named after prefix, with the
// operator's webhooks admitting the tenant namespace, OLM's aggregated
// roles, and the personas bound there with exactly their RBAC: tina
// (openshell-tenant-admin), eddie (edit) and dave (openshell-sandbox-user).
func startPersonaStack(ctx context.Context, t *testing.T, g Gomega, prefix string) (*stack.Stack, string) {
	t.Helper()
	c := cluster.Client
	gwNS, sbNS := framework.CreateNamespace(ctx, t, c, prefix+"-platform"), framework.CreateNamespace(ctx, t, c, prefix+"-sandboxes")
	tenant := framework.CreateNamespace(ctx, t, c, prefix+"-tenant")
	certDir, caPEM, port := webhookServing(t)
	st, err := stack.Start(ctx, cluster.Config, c, stack.Options{GatewayNamespace: gwNS, SandboxNamespace: sbNS,
		Manager: operator.Options{WatchNamespaces: []string{gwNS, sbNS, tenant}, WebhookHost: "127.0.0.1", WebhookPort: port, WebhookCertDir: certDir,
			Controllers: operator.ControllerOptions{EnableWebhooks: true}}})
	g.ExpectWithOffset(1, err).NotTo(HaveOccurred())
	t.Cleanup(func() { g.Expect(st.Stop()).To(Succeed()) })
	upgradeInPlace(ctx, g, st.Gateway, st.GatewayObj, "0.1.5")
	label := "openshell-e2e-" + prefix
	relabelOnly(ctx, g, tenant, label)
	webhooksFor(ctx, t, label, caPEM, port, map[string]string{label: "true"})
	installOLMAggregatedRoles(ctx, t)
	bind(ctx, t, tenant, "tina", "openshell-tenant-admin")
	bind(ctx, t, tenant, "eddie", "edit")
	bind(ctx, t, tenant, "dave", "openshell-sandbox-user")
	return st, tenant
}

// relabelOnly adds label=true to a namespace, as a cluster admin.
func relabelOnly(ctx context.Context, g Gomega, name, label string) {
	ns := &corev1.Namespace{}
	g.ExpectWithOffset(1, cluster.Client.Get(ctx, client.ObjectKey{Name: name}, ns)).To(Succeed())
	ns.Labels[label] = "true"
	g.ExpectWithOffset(1, cluster.Client.Update(ctx, ns)).To(Succeed())
}

// TestSandboxTemplates (#47 item 1): a Tenant Admin's
// OpenShellSandboxTemplate becomes a workspace template at the 0.1 gateway
// its sandboxes use, and a Sandbox Consumer's sandbox naming it is created
// from it. Each refusal is played by the persona holding exactly that
// RBAC: an editor (OLM's aggregated `edit`) may not write templates, a
// Tenant Admin may not write one whose image the namespace's allowlist
// refuses, nor delete one in use, and a consumer may not change one. A
// changed template is a new one at the gateway; the running sandbox keeps
// what it was created from.
func TestSandboxTemplates(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := cluster.Client
	st, tenant := startPersonaStack(ctx, t, g, "tmpl")
	admin, editor, consumer := as(t, "tina"), as(t, "eddie"), as(t, "dave")
	g.Expect(admin.Create(ctx, &openshellv1alpha1.OpenShellImagePolicy{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: "mirror"},
		Spec: openshellv1alpha1.OpenShellImagePolicySpec{AllowedMirrors: []string{"mirror.corp/agents"}}})).To(Succeed())

	cpu := resource.MustParse("500m")
	tmpl := &openshellv1alpha1.OpenShellSandboxTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: "claude"},
		Spec: openshellv1alpha1.OpenShellSandboxTemplateSpec{Image: claudeV1,
			Env: []openshellv1alpha1.TemplateEnvVar{{Name: "MODE", Value: "review"}}, Resources: &openshellv1alpha1.TemplateResources{CPU: &cpu}}}
	g.Expect(canI(ctx, g, "eddie", tenant, "create", "openshellsandboxtemplates")).To(BeTrue(), "OLM's aggregated edit role grants create")
	// The webhook is what refuses (the API server calls it once it has
	// seen its configuration).
	g.Eventually(func(g Gomega) {
		expectForbidden(g, editor.Create(ctx, tmpl.DeepCopy()), "TenantAdminRequired", "may not create openshellsandboxtemplates")
	}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
	bad := tmpl.DeepCopy()
	bad.Spec.Image = "quay.io/elsewhere/agent:1"
	expectForbidden(g, admin.Create(ctx, bad), "ImageNotMirrored", "quay.io/elsewhere/agent")
	g.Expect(admin.Create(ctx, tmpl)).To(Succeed())

	sb := sandboxOn(tenant, "agent", st.GatewayObj)
	sb.Spec.TemplateRef = &openshellv1alpha1.LocalObjectReference{Name: "claude"}
	// The consumer's env reads a Secret they may read (and the Tenant
	// Admin may not: openshell-tenant-admin grants no Secret reads).
	g.Expect(c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: "task"}, StringData: map[string]string{"text": "triage"}})).To(Succeed())
	g.Expect(c.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: "read-task"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{"task"}, Verbs: []string{"get"}}}})).To(Succeed())
	g.Expect(c.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: "dave-read-task"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "dave"}},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "read-task"}})).To(Succeed())
	sb.Spec.Env = []openshellv1alpha1.SandboxEnvVar{{Name: "TASK", ValueFrom: &openshellv1alpha1.SandboxEnvVarSource{
		SecretKeyRef: openshellv1alpha1.SecretKeyReference{Name: "task", Key: "text"}}}}
	g.Eventually(func() error { return consumer.Create(ctx, sb.DeepCopy()) }).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
	key := client.ObjectKeyFromObject(sb)
	waitPhase(ctx, g, key, openshellv1alpha1.SandboxPhaseReady)
	ws := sandboxWorkspace(ctx, g, tenant)
	cur := sandboxStatus(ctx, g, key)
	g.Expect(cur.Status.Template).NotTo(BeNil())
	first := cur.Status.Template.GatewayName
	g.Expect(cur.Status.Template.ResourceVersion).NotTo(BeEmpty(), "status does not show the gateway's resource version")
	g.Expect(st.Gateway.SandboxTemplates(ws)).To(Equal([]string{first}))
	name := sandboxspec.SandboxName(tenant, "agent")
	got, err := st.Gateway.GetSandbox(ctx, &legacyopenshellv1.GetSandboxRequest{Name: name, Workspace: ws})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.GetSandbox().GetSpec().GetTemplate().GetImage()).To(Equal(claudeV1))
	g.Expect(got.GetSandbox().GetSpec().GetTemplate().GetEnvironment()).To(HaveKeyWithValue("MODE", "review"))
	g.Expect(got.GetSandbox().GetSpec().GetEnvironment()).To(HaveKeyWithValue("TASK", "triage"))
	g.Expect(st.Gateway.CreatedFrom(ws, name)).To(Equal(first))

	// A consumer may not change what the template gives every sandbox;
	// nobody may delete it while it is in use.
	changed := tmpl.DeepCopy()
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(tmpl), changed)).To(Succeed())
	changed.Spec.Image = claudeV2
	g.Expect(apierrors.IsForbidden(consumer.Update(ctx, changed.DeepCopy()))).To(BeTrue())
	expectForbidden(g, admin.Delete(ctx, changed.DeepCopy()), "TemplateInUse", "agent")

	// A Tenant Admin who may not read the Secret the consumer's sandbox
	// reads may not choose what runs beside it (a recreate takes the
	// template as it is then).
	expectForbidden(g, admin.Update(ctx, changed.DeepCopy()), "SecretAccessDenied", "task")
	// Changed by whoever may: a new template at the gateway; the running
	// sandbox is not recreated, and keeps the one it came from.
	g.Expect(c.Update(ctx, changed)).To(Succeed())
	g.Eventually(func() []string { return st.Gateway.SandboxTemplates(ws) }).WithContext(ctx).WithTimeout(time.Minute).Should(HaveLen(2))
	g.Consistently(func(g Gomega) {
		now := sandboxStatus(ctx, g, key)
		g.Expect(now.Status.SandboxID).To(Equal(cur.Status.SandboxID))
		g.Expect(now.Status.Template.GatewayName).To(Equal(first))
	}).WithContext(ctx).WithTimeout(3 * time.Second).Should(Succeed())

	// The sandbox goes, then the template: nothing is left at the gateway.
	g.Expect(consumer.Delete(ctx, sb)).To(Succeed())
	g.Eventually(func() error { return c.Get(ctx, key, sb) }).WithContext(ctx).WithTimeout(time.Minute).Should(Satisfy(apierrors.IsNotFound))
	g.Expect(admin.Delete(ctx, changed)).To(Succeed())
	g.Eventually(func() []string { return st.Gateway.SandboxTemplates(ws) }).WithContext(ctx).WithTimeout(time.Minute).Should(BeEmpty())
	g.Eventually(func() error { return c.Get(ctx, client.ObjectKeyFromObject(tmpl), changed) }).WithContext(ctx).WithTimeout(time.Minute).
		Should(Satisfy(apierrors.IsNotFound))
}
