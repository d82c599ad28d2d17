package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	routev1 "github.com/openshift/api/route/v1"
	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/yaml"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/controllers/externalports"
	"github.com/openshell/openshell-operator/internal/gatewayline"
	"github.com/openshell/openshell-operator/internal/relayload"
	render "github.com/openshell/openshell-operator/internal/render/gateway"
	"github.com/openshell/openshell-operator/internal/sandboxspec"
	"github.com/openshell/openshell-operator/internal/tenancy"
	"github.com/openshell/openshell-operator/operator"
	"github.com/openshell/openshell-operator/test/framework"
	"github.com/openshell/openshell-operator/test/stack"
)

// installMode is an OperatorGroup shape: which namespaces it targets, and
// where the platform admin puts the managed gateway, its sandboxes and the
// tenant.
type installMode struct {
	name string
	// targets are OLM's target namespaces (nil: AllNamespaces).
	targets func(ns lpNamespaces) []string
	// tenant is where the tenant's objects go.
	tenant func(ns lpNamespaces) string
	// gateway and sandboxes place the managed gateway ("" sandboxes: its
	// own namespace). Without a gateway namespace the mode has no platform
	// namespace but the operator's, where sandboxes may not run: the
	// managed gateway is refused there.
	gateway, sandboxes func(ns lpNamespaces) string
	// renewLeaves shortens the built-in PKI's leaf validity so that the
	// lifecycle includes a certificate renewal.
	renewLeaves bool
}

// lpNamespaces: the operator's; two listed and labelled platform
// namespaces; a tenant's; where the test gateway puts its Sandboxes.
type lpNamespaces struct{ operator, platform, platformSandboxes, tenant, sandboxes string }

var installModes = []installMode{
	{name: "OwnNamespace", targets: func(ns lpNamespaces) []string { return []string{ns.operator} },
		tenant: func(ns lpNamespaces) string { return ns.operator }},
	// One target, a platform namespace: gateway, its sandboxes and tenants together.
	{name: "SingleNamespace", targets: func(ns lpNamespaces) []string { return []string{ns.platform} },
		tenant:  func(ns lpNamespaces) string { return ns.platform },
		gateway: func(ns lpNamespaces) string { return ns.platform }, renewLeaves: true},
	{name: "MultiNamespace", targets: func(ns lpNamespaces) []string { return []string{ns.platform, ns.platformSandboxes, ns.tenant} },
		tenant:    func(ns lpNamespaces) string { return ns.tenant },
		gateway:   func(ns lpNamespaces) string { return ns.platform },
		sandboxes: func(ns lpNamespaces) string { return ns.platformSandboxes }},
	{name: "AllNamespaces", targets: func(lpNamespaces) []string { return nil },
		tenant:  func(ns lpNamespaces) string { return ns.tenant },
		gateway: func(ns lpNamespaces) string { return ns.platform }},
}

// TestLeastPrivilege runs the whole lifecycle — gateway create, sandbox
// create/update/delete, provider rotation, policy change, gateway delete
// with its finalizer released, operator uninstall in order — as the CSV's
// ServiceAccount holding exactly the RBAC OLM derives from the CSV, in each
// install mode; then checks that every rule the CSV asks for was used.
func TestLeastPrivilege(t *testing.T) {
	csv, err := framework.LoadCSV()
	if err != nil {
		t.Fatal(err)
	}
	usage := &framework.APIUsage{}
	ran := 0
	for _, mode := range installModes {
		if t.Run(mode.name, func(t *testing.T) { leastPrivilegeLifecycle(t, csv, mode, usage) }) {
			ran++
		}
	}
	t.Run("every CSV rule is used", func(t *testing.T) {
		if ran != len(installModes) {
			t.Skip("needs every install mode's lifecycle to have passed")
		}
		// Refused requests are bugs, except the one the code expects: the
		// wait for an External gateway's Sandboxes in a namespace the
		// install mode does not reach.
		g := NewWithT(t)
		for _, refused := range usage.Forbidden() {
			g.Expect(refused).To(HavePrefix("agents.x-k8s.io/sandboxes list in "), "a request the CSV's RBAC refused")
		}
		for _, unused := range usage.Unused(framework.CSVRules(csv), authorizationOnly) {
			t.Errorf("the CSV grants %s, which no code path of the lifecycle used: remove it, or exercise it here", unused)
		}
	})
}

// authorizationOnly are rules that no request of the operator exercises
// but an authorization check made on its behalf does; each says which.
var authorizationOnly = map[string]string{
	"openshell.ai/openshellgateways/finalizers update": "OwnerReferencesPermissionEnforcement (OpenShift): " +
		"the gateway's children set blockOwnerDeletion on their owner reference",
	"openshell.ai/openshellsandboxes/finalizers update":        "the FinalizerProtected admission check lets the operator release its finalizer",
	"openshell.ai/openshellproviders/finalizers update":        "the FinalizerProtected admission check lets the operator release its finalizer",
	"openshell.ai/openshellpolicies/finalizers update":         "the FinalizerProtected admission check lets the operator release its finalizer",
	"openshell.ai/openshellproviderprofiles/finalizers update": "the FinalizerProtected admission check lets the operator release its finalizer",
	"openshell.ai/openshellsandboxtemplates/finalizers update": "the FinalizerProtected admission check lets the operator release its finalizer",
	"route.openshift.io/routes/custom-host create":             "OpenShift's Route admission, when spec.managed.route.host is set",
	"route.openshift.io/routes/custom-host update":             "OpenShift's Route admission, when spec.managed.route.host changes",
	// cert-manager is not installed in this cluster; controllers/gateway
	// TestManagedGatewayOnOpenShift runs with the CSV's RBAC against its CRDs and
	// fails if one of these rules goes unused there.
	"cert-manager.io/certificates create": "controllers/gateway",
	"cert-manager.io/certificates delete": "controllers/gateway",
	"cert-manager.io/certificates list":   "controllers/gateway",
	"cert-manager.io/certificates patch":  "controllers/gateway",
	"cert-manager.io/certificates watch":  "controllers/gateway",
	"cert-manager.io/issuers create":      "controllers/gateway",
	"cert-manager.io/issuers list":        "controllers/gateway",
	"cert-manager.io/issuers patch":       "controllers/gateway",
	"cert-manager.io/issuers watch":       "controllers/gateway",
	// No Prometheus Operator here either: controllers/platform runs with the
	// CSV's RBAC against its CRD and fails if one of these goes unused.
	// The console samples are cluster-scoped: once an earlier test of this
	// cluster created them, the lifecycle only reads them (they are in
	// place, so nothing is applied). controllers/platform creates and
	// patches them under the CSV's RBAC.
	"console.openshift.io/consoleyamlsamples create": "controllers/platform",
	"console.openshift.io/consoleyamlsamples patch":  "controllers/platform",
	// Read only for gateways with spec.imagePolicy.honorClusterMirrors,
	// which the lifecycle here does not set; test/e2e TestClusterMirrors
	// exercises it (cluster-scoped list and watch of a config API).
	"config.openshift.io/imagedigestmirrorsets list":  "internal/imagepolicy",
	"config.openshift.io/imagedigestmirrorsets watch": "internal/imagepolicy",
	"monitoring.coreos.com/prometheusrules create":    "controllers/platform",
	"monitoring.coreos.com/prometheusrules patch":     "controllers/platform",
	"monitoring.coreos.com/prometheusrules get":       "controllers/platform",
	// The ServiceMonitors (the operator's and each gateway's): controllers/platform
	// and controllers/gateway TestManagedGatewayOnOpenShift run with the CSV's
	// RBAC against the CRD.
	"monitoring.coreos.com/servicemonitors create": "controllers/platform, controllers/gateway",
	"monitoring.coreos.com/servicemonitors patch":  "controllers/platform, controllers/gateway",
	"monitoring.coreos.com/servicemonitors get":    "controllers/platform",
	"monitoring.coreos.com/servicemonitors list":   "controllers/gateway",
	"monitoring.coreos.com/servicemonitors watch":  "controllers/gateway",
}

func leastPrivilegeLifecycle(t *testing.T, csv *operatorsv1alpha1.ClusterServiceVersion, mode installMode, usage *framework.APIUsage) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := cluster.Client
	ns := lpNamespaces{operator: framework.CreateNamespace(ctx, t, c, "lp-op"), sandboxes: framework.CreateNamespace(ctx, t, c, "lp-sb"),
		platform: framework.CreatePlatformNamespace(ctx, t, c, "lp-platform"), platformSandboxes: framework.CreatePlatformNamespace(ctx, t, c, "lp-psb"),
		tenant: framework.CreateNamespace(ctx, t, c, "lp-tenant")}
	ns.tenant = mode.tenant(ns)
	platform := tenancy.Platform{OperatorNamespace: ns.operator, GatewayNamespaces: []string{ns.platform, ns.platformSandboxes}}
	targets := mode.targets(ns)
	asOperator, revoke, err := framework.GrantLikeOLM(ctx, c, cluster.Config, csv, ns.operator, targets)
	g.Expect(err).NotTo(HaveOccurred())
	asOperator.Wrap(usage.Wrap)
	usage.Resume()

	metricsPort, err := framework.FreePort()
	g.Expect(err).NotTo(HaveOccurred())
	// A short sweep period: the sweep then always runs while the sandbox
	// is live, so its reads are exercised under the CSV's RBAC every time.
	// The relay is held at three replicas (no relay runs here: no
	// sessions), which its scale subresource and the Lease cache exercise.
	copts := operator.ControllerOptions{Platform: platform, SweepPeriod: 2 * time.Second,
		RelayScaling: relayload.Scaling{Min: 3, Max: 3, SessionsPerReplica: 1, ScaleDownDelay: time.Second}}
	if mode.renewLeaves {
		copts.PKI.LeafValidity = 15 * time.Second
	}
	allNamespaces := targets == nil
	if allNamespaces {
		copts.PairedReleaseGrace = time.Second
	}
	st, err := stack.Start(ctx, asOperator, c, stack.Options{GatewayNamespace: ns.operator, SandboxNamespace: ns.sandboxes, GatewayConfig: cluster.Config,
		PlayManagedGateways: allNamespaces,
		Manager: operator.Options{WatchNamespaces: targets, LeaderElection: true, LeaderElectionNamespace: ns.operator,
			MetricsAddr: fmt.Sprintf("127.0.0.1:%d", metricsPort), SecureMetrics: true, Controllers: copts}})
	g.Expect(err).NotTo(HaveOccurred())
	stopped := false
	defer func() {
		if !stopped {
			g.Expect(st.Stop()).To(Succeed())
		}
	}()

	// The tenant admin's objects and a sandbox on the External gateway.
	secret, sb := createSampleTenant(ctx, t, ns.tenant, "sk-lp-first", client.ObjectKey{Namespace: ns.operator, Name: st.GatewayObj.Name})
	key := client.ObjectKeyFromObject(sb)
	g.Eventually(func(g Gomega) {
		cur := sandboxStatus(ctx, g, key)
		g.Expect(cur.Status.Phase).To(Equal(openshellv1alpha1.SandboxPhaseReady), "%+v", cur.Status.Conditions)
	}).WithContext(ctx).WithTimeout(90*time.Second).Should(Succeed(), cluster.CheckProcessesMessage)
	tenantNS := &corev1.Namespace{}
	g.Expect(c.Get(ctx, client.ObjectKey{Name: ns.tenant}, tenantNS)).To(Succeed())
	ws, name := sandboxspec.WorkspaceName(ns.tenant, tenantNS.UID), sandboxspec.SandboxName(ns.tenant, sb.Name)

	// A policy change applies in place.
	before := st.Gateway.SandboxPolicyVersion(ws, name)
	addNetworkRule(ctx, g, ns.tenant, "restricted", "github", "api.github.com")
	g.Eventually(func() uint32 { return st.Gateway.SandboxPolicyVersion(ws, name) }).WithContext(ctx).WithTimeout(30 * time.Second).Should(Equal(before + 1))

	// A credential rotation reaches the gateway.
	setSecretValue(ctx, g, client.ObjectKeyFromObject(secret), "ANTHROPIC_API_KEY", "sk-lp-rotated")
	g.Eventually(func() map[string]string { return st.Gateway.StoredCredentials(ws, "anthropic") }).
		WithContext(ctx).WithTimeout(30 * time.Second).Should(Equal(map[string]string{"ANTHROPIC_API_KEY": "sk-lp-rotated"}))

	// A sandbox update that recreates it (the image).
	firstID := sandboxStatus(ctx, g, key).Status.SandboxID
	g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := sandboxStatus(ctx, g, key)
		cur.Spec.Image = strings.Replace(cur.Spec.Image, "sandboxes/base", "sandboxes/python", 1)
		return c.Update(ctx, cur)
	})).To(Succeed())
	g.Eventually(func(g Gomega) {
		cur := sandboxStatus(ctx, g, key)
		g.Expect(cur.Status.SandboxID).NotTo(BeElementOf("", firstID))
		g.Expect(cur.Status.Phase).To(Equal(openshellv1alpha1.SandboxPhaseReady))
	}).WithContext(ctx).WithTimeout(90 * time.Second).Should(Succeed())

	// A sandbox whose agent finished is deleted by its TTL: the operator's
	// own delete.
	finishes := sandboxOn(ns.tenant, "finishes", st.GatewayObj)
	finishes.Spec.Command, finishes.Spec.TTLSecondsAfterFinished = []string{"true"}, ptr.To[int32](0)
	g.Expect(c.Create(ctx, finishes)).To(Succeed())
	waitPhase(ctx, g, client.ObjectKeyFromObject(finishes), openshellv1alpha1.SandboxPhaseReady)
	g.Expect(st.Gateway.Exit(ws, sandboxspec.SandboxName(ns.tenant, finishes.Name), 1)).To(Succeed())
	g.Eventually(func() error { return c.Get(ctx, client.ObjectKeyFromObject(finishes), finishes) }).WithContext(ctx).WithTimeout(time.Minute).
		Should(Satisfy(apierrors.IsNotFound), "the finished sandbox was not deleted by its TTL")

	// A sandbox template, and a sandbox naming it: this External gateway
	// runs 0.0.x, so both say why they wait.
	tmpl := &openshellv1alpha1.OpenShellSandboxTemplate{ObjectMeta: metav1.ObjectMeta{Name: "claude", Namespace: ns.tenant},
		Spec: openshellv1alpha1.OpenShellSandboxTemplateSpec{Image: sb.Spec.Image}}
	templated := sandboxOn(ns.tenant, "templated", st.GatewayObj)
	templated.Spec.TemplateRef = &openshellv1alpha1.LocalObjectReference{Name: tmpl.Name}
	g.Expect(c.Create(ctx, tmpl)).To(Succeed())
	g.Expect(c.Create(ctx, templated)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(tmpl), tmpl)).To(Succeed())
		g.Expect(meta.FindStatusCondition(tmpl.Status.Conditions, openshellv1alpha1.ConditionReady)).To(
			HaveField("Reason", openshellv1alpha1.TemplateReasonUnsupported))
		g.Expect(meta.FindStatusCondition(sandboxStatus(ctx, g, client.ObjectKeyFromObject(templated)).Status.Conditions, openshellv1alpha1.ConditionReady)).To(
			HaveField("Reason", openshellv1alpha1.SandboxReasonTemplateUnsupported))
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())

	// Prometheus scrapes the authenticated metrics endpoint.
	scrapeMetrics(ctx, t, ns.operator, metricsPort)

	// The relay's Deployment, scaled by the operator to its minimum.
	relay := createRelayDeployment(ctx, g, ns.operator)
	g.Eventually(func(g Gomega) int32 { return relayReplicas(ctx, g, relay) }).WithContext(ctx).WithTimeout(time.Minute).
		Should(Equal(int32(3)), "the operator did not scale the relay under the CSV's RBAC")

	// A managed gateway, installed, changed and deleted with its finalizer
	// released; where only the operator's namespace is a platform
	// namespace, refused there.
	if mode.gateway == nil {
		managedGatewayRefused(ctx, t, ns.operator)
	} else {
		sandboxNS := ""
		if mode.sandboxes != nil {
			sandboxNS = mode.sandboxes(ns)
		}
		managedGatewayLifecycle(ctx, t, mode.gateway(ns), sandboxNS, mode.renewLeaves)
	}
	if allNamespaces {
		// Workspace mode Operator needs this install mode.
		pairedLifecycle(ctx, t, st, ns.platformSandboxes, ns.tenant)
		// The rules for external ports through an HTTPRoute are the same
		// in every mode: used once.
		httpRouteLifecycle(ctx, t, st, ns.platform)
	}

	// Uninstall in order: the tenants' objects while the operator runs
	// (their finalizers are released), then the operator, then its RBAC.
	for _, o := range []client.Object{templated, tmpl, sb, &openshellv1alpha1.OpenShellProvider{ObjectMeta: metav1.ObjectMeta{Name: "anthropic", Namespace: ns.tenant}},
		&openshellv1alpha1.OpenShellPolicy{ObjectMeta: metav1.ObjectMeta{Name: "restricted", Namespace: ns.tenant}}, st.GatewayObj} {
		g.Expect(c.Delete(ctx, o)).To(Succeed())
		g.Eventually(func() error { return c.Get(ctx, client.ObjectKeyFromObject(o), o) }).WithContext(ctx).WithTimeout(60*time.Second).
			Should(Satisfy(apierrors.IsNotFound), func() string {
				dump, _ := yaml.Marshal(o)
				return "the operator did not release its finalizer:\n" + string(dump)
			})
	}
	g.Expect(st.Gateway.SandboxNames(ws)).NotTo(ContainElement(name))
	stopped = true
	g.Expect(st.Stop()).To(Succeed())
	// What the stopped operator's clients still send (events flushed late)
	// is not part of the lifecycle, and would meet the revoked RBAC.
	usage.Pause()
	g.Expect(revoke()).To(Succeed())
}

// managedGatewayRefused: a managed gateway in the operator's namespace
// would run sandboxes there (next to the operator's ServiceAccount and
// keys): it is refused before anything is rendered or finalized.
func managedGatewayRefused(ctx context.Context, t *testing.T, ns string) {
	g := NewWithT(t)
	c := cluster.Client
	gw := &openshellv1alpha1.OpenShellGateway{ObjectMeta: metav1.ObjectMeta{Name: "managed", Namespace: ns},
		Spec: openshellv1alpha1.OpenShellGatewaySpec{Managed: &openshellv1alpha1.ManagedGatewaySpec{}}}
	g.Expect(c.Create(ctx, gw)).To(Succeed())
	g.Eventually(func(g Gomega) {
		cur := &openshellv1alpha1.OpenShellGateway{}
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(gw), cur)).To(Succeed())
		d := meta.FindStatusCondition(cur.Status.Conditions, openshellv1alpha1.ConditionDegraded)
		g.Expect(d).NotTo(BeNil())
		g.Expect(d.Reason).To(Equal(openshellv1alpha1.GatewayReasonSandboxNamespaceNotServed))
		g.Expect(d.Message).To(ContainSubstring("the operator's namespace"))
		g.Expect(cur.Finalizers).To(BeEmpty())
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
	g.Expect(apierrors.IsNotFound(c.Get(ctx, client.ObjectKey{Name: render.NamesFor(gw).ClusterScoped}, &rbacv1.ClusterRoleBinding{}))).To(BeTrue())
	g.Expect(c.Delete(ctx, gw)).To(Succeed())
}

// managedGatewayLifecycle drives a managed gateway to Available on
// 0.0.111, upgrades it to the operator's default 0.1 release, takes it
// through the changes that prune (Route disabled, SQLite to PostgreSQL and
// back) and, when asked, a certificate renewal, then deletes it: the
// finalizer is released and the cluster-scoped binding and the children
// outside its namespace are gone. Both releases' objects, and the move
// between them, are written with exactly the CSV's RBAC.
func managedGatewayLifecycle(ctx context.Context, t *testing.T, ns, sandboxNS string, renewal bool) {
	g := NewWithT(t)
	c := cluster.Client
	createVolume(ctx, t, ns, "managed")
	// A platform provider profile: ignored on 0.0.111, imported into the
	// gateway's platform catalog once it runs 0.1.
	prof := declareSampleProfile(ctx, t, ns)
	gw := &openshellv1alpha1.OpenShellGateway{ObjectMeta: metav1.ObjectMeta{Name: "managed", Namespace: ns},
		Spec: openshellv1alpha1.OpenShellGatewaySpec{ProviderProfiles: []string{prof.Name}, Managed: &openshellv1alpha1.ManagedGatewaySpec{
			Version:   gatewayline.LegacyManaged,
			Sandboxes: openshellv1alpha1.SandboxPlacement{Namespace: sandboxNS}}}}
	g.Expect(c.Create(ctx, gw)).To(Succeed())
	available := func(version, sccReason string) {
		g.Eventually(func(g Gomega) {
			cur := &openshellv1alpha1.OpenShellGateway{}
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(gw), cur)).To(Succeed())
			g.Expect(cur.Status.ObservedGeneration).To(Equal(cur.Generation))
			g.Expect(meta.IsStatusConditionTrue(cur.Status.Conditions, openshellv1alpha1.ConditionAvailable)).To(BeTrue(), "%+v", cur.Status.Conditions)
			g.Expect(cur.Status.Version).To(Equal(version))
			g.Expect(meta.FindStatusCondition(cur.Status.Conditions, openshellv1alpha1.GatewayConditionSCCReady).Reason).To(Equal(sccReason))
		}).WithContext(ctx).WithTimeout(2*time.Minute).Should(Succeed(), cluster.CheckProcessesMessage)
	}
	available(gatewayline.LegacyManaged, openshellv1alpha1.GatewayReasonSCCApplied)
	n := render.NamesFor(gw)
	crb := &rbacv1.ClusterRoleBinding{}
	g.Expect(c.Get(ctx, client.ObjectKey{Name: n.ClusterScoped}, crb)).To(Succeed())
	g.Expect(crb.RoleRef.Name).To(Equal(render.ClusterRoleGateway), "the gateway is bound to the bundle's static ClusterRole")
	outside := []client.Object{&corev1.ServiceAccount{}, &networkingv1.NetworkPolicy{}, &rbacv1.RoleBinding{}}
	for i, name := range []string{n.SandboxSA, n.SandboxPolicy, n.GatewayBinding} {
		outside[i].SetNamespace(n.SandboxNamespace)
		outside[i].SetName(name)
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(outside[i]), outside[i])).To(Succeed())
	}

	// The move to 0.1: the sidecar's SCC binding and sandbox
	// NetworkPolicy go, the runtime's grants come.
	setManagedVersion(ctx, g, client.ObjectKeyFromObject(gw), gatewayline.DefaultManaged)
	available(gatewayline.DefaultManaged, openshellv1alpha1.GatewayReasonSCCRestrictedV2)
	g.Eventually(func(g Gomega) {
		g.Expect(apierrors.IsNotFound(c.Get(ctx, client.ObjectKey{Namespace: n.SandboxNamespace, Name: n.SandboxPolicy}, &networkingv1.NetworkPolicy{}))).To(BeTrue(), "sandbox NetworkPolicy not pruned")
		rb := &rbacv1.RoleBinding{}
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: n.SandboxNamespace, Name: n.RuntimeBinding}, rb)).To(Succeed())
		g.Expect(rb.RoleRef.Name).To(Equal(render.ClusterRoleGatewayRuntime))
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
	outside[1] = &rbacv1.RoleBinding{}
	outside[1].SetNamespace(n.SandboxNamespace)
	outside[1].SetName(n.RuntimeBinding)
	// On 0.1 the platform profile is taken in hand: finalized, its
	// catalog recorded (nothing plays this gateway's pod here, so the
	// import itself keeps failing and is retried).
	g.Eventually(func(g Gomega) {
		cur := &openshellv1alpha1.OpenShellProviderProfile{}
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(prof), cur)).To(Succeed())
		g.Expect(cur.Finalizers).NotTo(BeEmpty())
		g.Expect(cur.Status.Gateways).To(ContainElement(HaveField("Scope", openshellv1alpha1.ProfileScopePlatform)))
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())

	if renewal {
		tlsSecret := &corev1.Secret{}
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: n.ServerTLS}, tlsSecret)).To(Succeed())
		g.Eventually(func(g Gomega) {
			cur := &corev1.Secret{}
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(tlsSecret), cur)).To(Succeed())
			g.Expect(cur.ResourceVersion).NotTo(Equal(tlsSecret.ResourceVersion), "the leaf certificate was not renewed")
		}).WithContext(ctx).WithTimeout(45 * time.Second).Should(Succeed())
	}

	// Route disabled, then SQLite to PostgreSQL: the Route and the
	// StatefulSet are pruned, a Deployment replaces it.
	uri := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "gateway-db", Namespace: ns}, StringData: map[string]string{"uri": "postgres://db/openshell"}}
	g.Expect(c.Create(ctx, uri)).To(Succeed())
	g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &openshellv1alpha1.OpenShellGateway{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(gw), cur); err != nil {
			return err
		}
		cur.Spec.Managed.Route.Enabled = ptr.To(false)
		cur.Spec.Managed.Persistence = &openshellv1alpha1.GatewayPersistence{Postgres: &openshellv1alpha1.PostgresPersistence{
			URISecretRef: openshellv1alpha1.SecretKeyReference{Name: uri.Name, Key: "uri"}}}
		return c.Update(ctx, cur)
	})).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(apierrors.IsNotFound(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: n.Fullname}, &routev1.Route{}))).To(BeTrue(), "Route not pruned")
		g.Expect(apierrors.IsNotFound(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: n.Fullname}, &appsv1.StatefulSet{}))).To(BeTrue(), "StatefulSet not pruned")
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: n.Fullname}, &appsv1.Deployment{})).To(Succeed())
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
	available(gatewayline.DefaultManaged, openshellv1alpha1.GatewayReasonSCCRestrictedV2)
	// And back: the Deployment is pruned, the StatefulSet (and its claim) return.
	g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &openshellv1alpha1.OpenShellGateway{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(gw), cur); err != nil {
			return err
		}
		cur.Spec.Managed.Persistence = nil
		return c.Update(ctx, cur)
	})).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(apierrors.IsNotFound(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: n.Fullname}, &appsv1.Deployment{}))).To(BeTrue(), "Deployment not pruned")
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: n.Fullname}, &appsv1.StatefulSet{})).To(Succeed())
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
	available(gatewayline.DefaultManaged, openshellv1alpha1.GatewayReasonSCCRestrictedV2)

	g.Expect(c.Delete(ctx, gw)).To(Succeed())
	g.Eventually(func() error { return c.Get(ctx, client.ObjectKeyFromObject(gw), gw) }).WithContext(ctx).WithTimeout(time.Minute).
		Should(Satisfy(apierrors.IsNotFound), "the gateway finalizer was not released")
	g.Expect(apierrors.IsNotFound(c.Get(ctx, client.ObjectKeyFromObject(crb), crb))).To(BeTrue(), "the ClusterRoleBinding outlived the gateway")
	// With its gateway gone the profile holds nothing: its finalizer goes.
	g.Expect(c.Delete(ctx, prof)).To(Succeed())
	g.Eventually(func() error { return c.Get(ctx, client.ObjectKeyFromObject(prof), prof) }).WithContext(ctx).WithTimeout(time.Minute).
		Should(Satisfy(apierrors.IsNotFound), "the profile finalizer was not released")
	if n.SandboxNamespace != ns {
		for _, o := range outside {
			g.Expect(apierrors.IsNotFound(c.Get(ctx, client.ObjectKeyFromObject(o), o))).To(BeTrue(), "%T %s outlived the gateway", o, o.GetName())
		}
	}
}

// scrapeMetrics scrapes the operator's authenticated metrics endpoint as
// Prometheus does: with a ServiceAccount token the operator reviews
// (TokenReview) and authorizes (SubjectAccessReview).
func scrapeMetrics(ctx context.Context, t *testing.T, ns string, port int) {
	g := NewWithT(t)
	token := framework.MetricsReader(ctx, t, cluster.Client, ns)
	g.Eventually(func(g Gomega) {
		code, body, err := framework.Scrape(ctx, fmt.Sprintf("https://127.0.0.1:%d/metrics", port), token)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(code).To(Equal(http.StatusOK), "%s", body)
	}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
}

// pairedLifecycle runs a gateway in workspace mode Operator with exactly
// the CSV's RBAC: a tenant's sandbox gets its paired namespace, with the
// tenant namespace's quota and limit range copied in (changed, then
// removed) and its pull Secret merged with the gateway's; the sandbox
// deleted, the namespace is drained and deleted; then the gateway.
func pairedLifecycle(ctx context.Context, t *testing.T, st *stack.Stack, platform, tenant string) {
	g := NewWithT(t)
	c := cluster.Client
	createVolume(ctx, t, platform, "paired")
	dockercfg := func(ns, name, registry string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Type: corev1.SecretTypeDockerConfigJson,
			Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":{"` + registry + `":{"auth":"YTpi"}}}`)}}
	}
	g.Expect(c.Create(ctx, dockercfg(platform, "corp-pull", "registry.corp.example"))).To(Succeed())
	g.Expect(c.Create(ctx, dockercfg(tenant, "regcred", "registry.tenant.example"))).To(Succeed())
	gw := &openshellv1alpha1.OpenShellGateway{ObjectMeta: metav1.ObjectMeta{Name: "paired", Namespace: platform},
		Spec: openshellv1alpha1.OpenShellGatewaySpec{Mode: openshellv1alpha1.GatewayModeManaged,
			Managed: &openshellv1alpha1.ManagedGatewaySpec{Sandboxes: openshellv1alpha1.SandboxPlacement{
				WorkspaceMode: openshellv1alpha1.WorkspaceModeOperator, ImagePullSecrets: []string{"corp-pull"}}},
			Tenancy:         openshellv1alpha1.GatewayTenancy{AllowedNamespaces: openshellv1alpha1.AllowedNamespaces{From: openshellv1alpha1.NamespacesFromAll}},
			SandboxControls: openshellv1alpha1.SandboxControls{RequirePolicy: ptr.To(false)}}}
	g.Expect(c.Create(ctx, gw)).To(Succeed())
	_, err := st.PlayManagedGateway(ctx, c, gw, "")
	g.Expect(err).NotTo(HaveOccurred())
	quota := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "agents", Namespace: tenant},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("20")}}}
	limits := &corev1.LimitRange{ObjectMeta: metav1.ObjectMeta{Name: "agents", Namespace: tenant},
		Spec: corev1.LimitRangeSpec{Limits: []corev1.LimitRangeItem{{Type: corev1.LimitTypeContainer,
			Max: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("8Gi")}}}}}
	g.Expect(c.Create(ctx, quota)).To(Succeed())
	g.Expect(c.Create(ctx, limits)).To(Succeed())
	g.Expect(c.Create(ctx, &openshellv1alpha1.OpenShellImagePolicy{ObjectMeta: metav1.ObjectMeta{Name: "pulls", Namespace: tenant},
		Spec: openshellv1alpha1.OpenShellImagePolicySpec{PullSecrets: []openshellv1alpha1.LocalObjectReference{{Name: "regcred"}}}})).To(Succeed())
	sb := sandboxOn(tenant, "paired", gw)
	g.Expect(c.Create(ctx, sb)).To(Succeed())
	waitPhase(ctx, g, client.ObjectKeyFromObject(sb), openshellv1alpha1.SandboxPhaseReady)
	paired := render.PairedNamespace(tenant, namespaceUID(ctx, g, tenant))
	g.Eventually(func(g Gomega) {
		pull := &corev1.Secret{}
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: paired, Name: render.PairedPullSecret}, pull)).To(Succeed())
		g.Expect(string(pull.Data[corev1.DockerConfigJsonKey])).To(And(ContainSubstring("registry.corp.example"), ContainSubstring("registry.tenant.example")))
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: paired, Name: render.MirrorName("agents")}, &corev1.ResourceQuota{})).To(Succeed())
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: paired, Name: render.MirrorName("agents")}, &corev1.LimitRange{})).To(Succeed())
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
	// A changed limit range is copied again; removed controls go.
	g.Expect(c.Patch(ctx, limits, client.RawPatch(types.MergePatchType,
		[]byte(`{"spec":{"limits":[{"type":"Container","max":{"memory":"4Gi"}}]}}`)))).To(Succeed())
	g.Eventually(func(g Gomega) {
		lr := &corev1.LimitRange{}
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: paired, Name: render.MirrorName("agents")}, lr)).To(Succeed())
		g.Expect(lr.Spec.Limits[0].Max.Memory().String()).To(Equal("4Gi"))
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
	g.Expect(c.Delete(ctx, quota)).To(Succeed())
	g.Expect(c.Delete(ctx, limits)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(apierrors.IsNotFound(c.Get(ctx, client.ObjectKey{Namespace: paired, Name: render.MirrorName("agents")}, &corev1.ResourceQuota{}))).To(BeTrue())
		g.Expect(apierrors.IsNotFound(c.Get(ctx, client.ObjectKey{Namespace: paired, Name: render.MirrorName("agents")}, &corev1.LimitRange{}))).To(BeTrue())
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
	g.Expect(c.Delete(ctx, sb)).To(Succeed())
	g.Eventually(func(g Gomega) {
		ns := &corev1.Namespace{}
		err := c.Get(ctx, client.ObjectKey{Name: paired}, ns)
		g.Expect(apierrors.IsNotFound(err) || !ns.DeletionTimestamp.IsZero()).To(BeTrue(), "paired namespace %s stays: %v", paired, err)
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
	g.Expect(c.Delete(ctx, gw)).To(Succeed())
	g.Eventually(func() error { return c.Get(ctx, client.ObjectKeyFromObject(gw), gw) }).WithContext(ctx).WithTimeout(time.Minute).
		Should(Satisfy(apierrors.IsNotFound), "the gateway finalizer was not released")
	g.Expect(apierrors.IsNotFound(c.Get(ctx, client.ObjectKey{Name: render.NamesFor(gw).WorkspacesBinding}, &rbacv1.ClusterRoleBinding{}))).To(BeTrue())
}

// httpRouteLifecycle publishes the External gateway's external ports
// through an HTTPRoute on a listener given to the operator's namespace
// (no Gateway controller reports here: RouteNotAccepted), then stops: the
// HTTPRoute, the BackendTLSPolicy and the CA bundle go.
func httpRouteLifecycle(ctx context.Context, t *testing.T, st *stack.Stack, gatewayNS string) {
	g := NewWithT(t)
	c := cluster.Client
	opNS := st.GatewayObj.Namespace
	const host = "ports.lp.example.test"
	g.Expect(c.Create(ctx, &gatewayv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: gatewayNS, Name: "lp"}, Spec: gatewayv1.GatewaySpec{
		GatewayClassName: "example", Listeners: []gatewayv1.Listener{{Name: "https", Protocol: gatewayv1.HTTPSProtocolType, Port: 443,
			Hostname: ptr.To(gatewayv1.Hostname(host)), AllowedRoutes: &gatewayv1.AllowedRoutes{Namespaces: &gatewayv1.RouteNamespaces{
				From: ptr.To(gatewayv1.NamespacesFromSelector), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": opNS}}}}}}}})).To(Succeed())
	setExpose(ctx, g, st.GatewayObj, &openshellv1alpha1.ExternalPorts{Expose: openshellv1alpha1.ExternalPortsHTTPRoute, Host: host,
		ParentRef: &openshellv1alpha1.ExternalPortsParentRef{Namespace: gatewayNS, Name: "lp", SectionName: "https"}})
	key := client.ObjectKey{Namespace: opNS, Name: externalports.RouteName(client.ObjectKeyFromObject(st.GatewayObj))}
	g.Eventually(func(g Gomega) {
		g.Expect(c.Get(ctx, key, &gatewayv1.HTTPRoute{})).To(Succeed())
		cur := &openshellv1alpha1.OpenShellGateway{}
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(st.GatewayObj), cur)).To(Succeed())
		g.Expect(cur.Status.ExternalPorts).NotTo(BeNil())
		p := meta.FindStatusCondition(cur.Status.ExternalPorts.Conditions, openshellv1alpha1.ExternalPortsConditionPublished)
		g.Expect(p).NotTo(BeNil())
		g.Expect(p.Reason).To(Equal(openshellv1alpha1.ExternalPortsReasonRouteNotAccepted), p.Message)
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
	setExpose(ctx, g, st.GatewayObj, &openshellv1alpha1.ExternalPorts{Expose: openshellv1alpha1.ExternalPortsNone})
	g.Eventually(func(g Gomega) {
		g.Expect(apierrors.IsNotFound(c.Get(ctx, key, &gatewayv1.HTTPRoute{}))).To(BeTrue(), "the HTTPRoute")
		g.Expect(apierrors.IsNotFound(c.Get(ctx, client.ObjectKey{Namespace: opNS, Name: externalports.BackendTLSPolicyName}, &gatewayv1.BackendTLSPolicy{}))).To(BeTrue(), "the policy")
		g.Expect(apierrors.IsNotFound(c.Get(ctx, client.ObjectKey{Namespace: opNS, Name: externalports.CABundleConfigMap}, &corev1.ConfigMap{}))).To(BeTrue(), "the CA bundle")
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
}
