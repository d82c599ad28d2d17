package platform_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	consolev1 "github.com/openshift/api/console/v1"
	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/openshell/openshell-operator/controllers/platform"
	"github.com/openshell/openshell-operator/internal/console"
	"github.com/openshell/openshell-operator/internal/preflight"
	render "github.com/openshell/openshell-operator/internal/render/gateway"
	"github.com/openshell/openshell-operator/internal/tenancy"
	"github.com/openshell/openshell-operator/operator"
	"github.com/openshell/openshell-operator/test/framework"
)

var env *framework.Env

func TestMain(m *testing.M) {
	os.Exit(framework.RunWithEnv(m, framework.EnvOptions{Monitoring: true, OpenShift: true, AgentSandbox: framework.AgentSandboxBetaOnly}, &env))
}

func TestRuleMatchesTheEmbeddedRules(t *testing.T) {
	g := NewWithT(t)
	pr, err := platform.Rule("ops")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(pr.Namespace).To(Equal("ops"))
	g.Expect(pr.Spec.Groups).To(HaveLen(1))
	g.Expect(pr.Spec.Groups[0].Rules).To(HaveLen(5))
}

// TestDesiredFollowsTheAPIsServed: each object only where its API is, and
// every one labelled as the operator's.
func TestDesiredFollowsTheAPIsServed(t *testing.T) {
	g := NewWithT(t)
	kinds := func(pf preflight.Result) []string {
		objs, err := platform.Desired(pf, "ops")
		g.Expect(err).NotTo(HaveOccurred())
		var out []string
		for _, o := range objs {
			out = append(out, o.GetObjectKind().GroupVersionKind().Kind)
			// The uninstall and must-gather find them by it.
			g.Expect(o.GetLabels()).To(HaveKeyWithValue(render.LabelManagedBy, render.ManagedByValue), "%s %s", out[len(out)-1], o.GetName())
		}
		return out
	}
	const ovn = platform.NetworkTypeOVNKubernetes
	g.Expect(kinds(preflight.Result{NetworkType: ovn})).To(BeEmpty())
	g.Expect(kinds(preflight.Result{NetworkType: ovn, PrometheusRule: true})).To(Equal([]string{"PrometheusRule"}))
	g.Expect(kinds(preflight.Result{NetworkType: ovn, ConsoleYAMLSample: true})).To(HaveEach("ConsoleYAMLSample"))
	g.Expect(kinds(preflight.Result{NetworkType: ovn, ServiceMonitor: true})).To(Equal([]string{"ServiceMonitor", "ServiceMonitor"}))
	g.Expect(kinds(preflight.Result{NetworkType: ovn, PrometheusRule: true, ServiceMonitor: true, ConsoleYAMLSample: true})).To(HaveLen(7))
	// Where host traffic cannot be selected, the kube-apiserver's ports are
	// opened (and only there are they unwanted: none to delete).
	for _, network := range []string{"", "OpenShiftSDN", "Calico"} {
		g.Expect(kinds(preflight.Result{NetworkType: network})).To(Equal([]string{"NetworkPolicy", "NetworkPolicy"}), "network %q", network)
		g.Expect(platform.Unwanted(preflight.Result{NetworkType: network}, "ops")).To(BeEmpty())
	}
	g.Expect(platform.Unwanted(preflight.Result{NetworkType: ovn}, "ops")).To(HaveLen(2))
}

// TestServiceMonitorScrapesTheBundledService: each ServiceMonitor (the
// operator's, the relay's) selects the metrics Service the bundle ships,
// by name for TLS and by labels, and that Service the pods serving it.
func TestServiceMonitorScrapesTheBundledService(t *testing.T) {
	for _, tc := range []struct {
		service string
		monitor func(string, bool) *monitoringv1.ServiceMonitor
	}{
		{platform.MetricsService, platform.ServiceMonitor},
		{platform.RelayMetricsService, platform.RelayServiceMonitor},
	} {
		t.Run(tc.service, func(t *testing.T) {
			g := NewWithT(t)
			raw, err := os.ReadFile(filepath.Join(framework.RepoRoot(), "bundle", "manifests", tc.service+"_v1_service.yaml"))
			g.Expect(err).NotTo(HaveOccurred())
			svc := &corev1.Service{}
			g.Expect(yaml.Unmarshal(raw, svc)).To(Succeed())
			sm := tc.monitor("ops", true)
			sel, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(sel.Matches(labels.Set(svc.Labels))).To(BeTrue(), "selector %v, Service labels %v", sel, svc.Labels)
			g.Expect(svc.Spec.Ports).To(ContainElement(HaveField("Name", sm.Spec.Endpoints[0].Port)))
			g.Expect(svc.Annotations).To(HaveKey("service.beta.openshift.io/serving-cert-secret-name"))
			g.Expect(*sm.Spec.Endpoints[0].TLSConfig.ServerName).To(Equal(tc.service + ".ops.svc"))
			g.Expect(tc.monitor("ops", false).Spec.Endpoints[0].TLSConfig.CAFile).To(BeEmpty())
		})
	}
}

// TestRulesInstalledWhereTheAPIIsServed: with the Prometheus Operator's
// and the console's CRDs served, the operator installs its PrometheusRule in
// its namespace and its console YAML samples (the API server validates both
// against the real CRDs) and keeps them.
func TestRulesInstalledWhereTheAPIIsServed(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	c := env.Client
	ns := framework.CreatePlatformNamespace(ctx, t, c, "ops")
	csv, usage, start := asTheOperator(t, ns)
	start()
	pr := &monitoringv1.PrometheusRule{}
	g.Eventually(func() error {
		return c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "openshell-operator"}, pr)
	}).WithTimeout(30 * time.Second).Should(Succeed())
	var alerts []string
	for _, r := range pr.Spec.Groups[0].Rules {
		alerts = append(alerts, r.Alert)
	}
	g.Expect(alerts).To(ContainElements("OpenShellGatewayUnavailable", "OpenShellCertificateExpiringSoon", "OpenShellAgentSandboxCRDMissing"))
	want, err := console.Samples()
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func(g Gomega) {
		list := &consolev1.ConsoleYAMLSampleList{}
		g.Expect(c.List(ctx, list, client.MatchingLabels{render.LabelManagedBy: render.ManagedByValue})).To(Succeed())
		g.Expect(list.Items).To(HaveLen(len(want)))
	}).WithTimeout(30 * time.Second).Should(Succeed())
	sm := &monitoringv1.ServiceMonitor{}
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "openshell-operator"}, sm)).To(Succeed())
	g.Expect(sm.Spec.Endpoints[0].TLSConfig.CAFile).NotTo(BeEmpty(), "on OpenShift Prometheus verifies the service-ca certificate")
	g.Expect(usage.Forbidden()).To(BeEmpty(), "the CSV's RBAC refused a request")
	// The e2e least-privilege test defers these rules to this test.
	var rules []rbacv1.PolicyRule
	for _, r := range framework.CSVRules(csv) {
		if slices.Contains(r.APIGroups, monitoringv1.SchemeGroupVersion.Group) || slices.Contains(r.APIGroups, consolev1.GroupName) {
			rules = append(rules, r)
		}
	}
	g.Expect(rules).NotTo(BeEmpty(), "the CSV's monitoring.coreos.com and console.openshift.io rules")
	// A gateway's ServiceMonitor is listed and watched by controllers/gateway
	// (TestManagedGatewayOnOpenShift, under the same RBAC); no gateway here.
	gatewayOnly := map[string]string{"monitoring.coreos.com/servicemonitors list": "controllers/gateway",
		"monitoring.coreos.com/servicemonitors watch": "controllers/gateway"}
	g.Expect(usage.Unused(rules, gatewayOnly)).To(BeEmpty(), "a monitoring.coreos.com or console.openshift.io rule of the CSV is never used")

	// Deleted, it is put back at the next apply (a restart, or a
	// preflight change).
	g.Expect(c.Delete(ctx, pr)).To(Succeed())
	start()
	g.Eventually(func() error {
		return c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "openshell-operator"}, &monitoringv1.PrometheusRule{})
	}).WithTimeout(30 * time.Second).Should(Succeed())
}

// TestAPIServerIngressFollowsTheNetwork: off OVN-Kubernetes (here the
// cluster reports OpenShift SDN) the operator, with exactly the CSV's RBAC,
// admits every peer to its webhook and relay ports, since the bundle's
// policies admit only host traffic and nothing else can select it; once the
// cluster reports OVN-Kubernetes (as this control plane does by default) it
// removes them.
func TestAPIServerIngressFollowsTheNetwork(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	c := env.Client
	ns := framework.CreatePlatformNamespace(ctx, t, c, "netpol")
	_, usage, start := asTheOperator(t, ns)
	reportNetwork := func(networkType string) {
		t.Helper()
		g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
			n := &unstructured.Unstructured{}
			n.SetAPIVersion("config.openshift.io/v1")
			n.SetKind("Network")
			if err := c.Get(ctx, client.ObjectKey{Name: "cluster"}, n); err != nil {
				return err
			}
			if err := unstructured.SetNestedField(n.Object, networkType, "status", "networkType"); err != nil {
				return err
			}
			return c.Update(ctx, n) // the Network CRD has no status subresource
		})).To(Succeed())
	}
	want := platform.APIServerIngress(ns, platform.NamePrefix)
	g.Expect(want).To(HaveLen(2))

	reportNetwork("OpenShiftSDN")
	t.Cleanup(func() { reportNetwork(platform.NetworkTypeOVNKubernetes) })
	stop := start()
	g.Eventually(func(g Gomega) {
		for _, np := range want {
			cur := &networkingv1.NetworkPolicy{}
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(np), cur)).To(Succeed())
			g.Expect(cur.Spec.PodSelector).To(Equal(np.Spec.PodSelector))
			g.Expect(cur.Spec.Ingress).To(Equal(np.Spec.Ingress))
			g.Expect(cur.Labels).To(HaveKeyWithValue(render.LabelManagedBy, render.ManagedByValue))
		}
	}).WithTimeout(30 * time.Second).Should(Succeed())
	stop()

	reportNetwork(platform.NetworkTypeOVNKubernetes)
	stop = start()
	gone := func() {
		g.Eventually(func(g Gomega) {
			for _, np := range want {
				err := c.Get(ctx, client.ObjectKeyFromObject(np), &networkingv1.NetworkPolicy{})
				g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "%s: %v", np.Name, err)
			}
		}).WithTimeout(30 * time.Second).Should(Succeed())
	}
	gone()
	// Put back (as an OLM upgrade or a GitOps sync would): deleted again.
	g.Expect(c.Create(ctx, want[0].DeepCopy())).To(Succeed())
	gone()
	stop()
	g.Expect(usage.Forbidden()).To(BeEmpty(), "the CSV's RBAC refused a request")
	g.Expect(usage.Seen()).To(ContainElements("networking.k8s.io/networkpolicies get", "networking.k8s.io/networkpolicies patch",
		"networking.k8s.io/networkpolicies delete"))
}

// asTheOperator grants the CSV's RBAC in ns as OLM does (OwnNamespace) and
// returns the CSV, the recorder of every request made with it, and a start
// of the operator under it (which returns its stop).
func asTheOperator(t *testing.T, ns string) (*operatorsv1alpha1.ClusterServiceVersion, *framework.APIUsage, func() func()) {
	t.Helper()
	csv, err := framework.LoadCSV()
	if err != nil {
		t.Fatal(err)
	}
	asOperator, _, err := framework.GrantLikeOLM(context.Background(), env.Client, env.Config, csv, ns, []string{ns})
	if err != nil {
		t.Fatal(err)
	}
	usage := &framework.APIUsage{}
	asOperator.Wrap(usage.Wrap)
	return csv, usage, func() func() {
		return framework.StartManager(t, asOperator, operator.Options{WatchNamespaces: []string{ns},
			Controllers: operator.ControllerOptions{Platform: tenancy.Platform{OperatorNamespace: ns, GatewayNamespaces: []string{ns}}}})
	}
}
