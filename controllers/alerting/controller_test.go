package alerting_test

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openshell/openshell-operator/controllers/alerting"
	"github.com/openshell/openshell-operator/internal/tenancy"
	"github.com/openshell/openshell-operator/operator"
	"github.com/openshell/openshell-operator/test/framework"
)

var env *framework.Env

func TestMain(m *testing.M) {
	os.Exit(framework.RunWithEnv(m, framework.EnvOptions{Monitoring: true, AgentSandbox: framework.AgentSandboxBetaOnly}, &env))
}

func TestRuleMatchesTheEmbeddedRules(t *testing.T) {
	g := NewWithT(t)
	pr, err := alerting.Rule("ops")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(pr.Namespace).To(Equal("ops"))
	g.Expect(pr.Spec.Groups).To(HaveLen(1))
	g.Expect(pr.Spec.Groups[0].Rules).To(HaveLen(5))
}

// TestRulesInstalledWhereTheAPIIsServed: with the Prometheus Operator's
// CRD served, the operator installs its PrometheusRule in its namespace
// (the API server validates it against the real CRD) and keeps it.
func TestRulesInstalledWhereTheAPIIsServed(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	c := env.Client
	ns := framework.CreatePlatformNamespace(ctx, t, c, "ops")
	// With exactly the CSV's RBAC (OwnNamespace), every request recorded.
	csv, err := framework.LoadCSV()
	g.Expect(err).NotTo(HaveOccurred())
	asOperator, _, err := framework.GrantLikeOLM(ctx, c, env.Config, csv, ns, []string{ns})
	g.Expect(err).NotTo(HaveOccurred())
	usage := &framework.APIUsage{}
	asOperator.Wrap(usage.Wrap)
	framework.StartManager(t, asOperator, operator.Options{WatchNamespaces: []string{ns},
		Controllers: operator.ControllerOptions{Platform: tenancy.Platform{OperatorNamespace: ns, GatewayNamespaces: []string{ns}}}})
	pr := &monitoringv1.PrometheusRule{}
	g.Eventually(func() error {
		return c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "openshell-operator"}, pr)
	}).WithTimeout(30 * time.Second).Should(Succeed())
	var alerts []string
	for _, r := range pr.Spec.Groups[0].Rules {
		alerts = append(alerts, r.Alert)
	}
	g.Expect(alerts).To(ContainElements("OpenShellGatewayUnavailable", "OpenShellCertificateExpiringSoon", "OpenShellAgentSandboxCRDMissing"))
	g.Expect(usage.Forbidden()).To(BeEmpty(), "the CSV's RBAC refused a request")
	// The e2e least-privilege test defers these rules to this test.
	var rules []rbacv1.PolicyRule
	for _, r := range framework.CSVRules(csv) {
		if slices.Contains(r.APIGroups, monitoringv1.SchemeGroupVersion.Group) {
			rules = append(rules, r)
		}
	}
	g.Expect(rules).NotTo(BeEmpty(), "the CSV has no monitoring.coreos.com rules")
	g.Expect(usage.Unused(rules, nil)).To(BeEmpty(), "a monitoring.coreos.com rule of the CSV is never used")

	// Deleted, it is put back at the next apply (a restart, or a
	// preflight change).
	g.Expect(c.Delete(ctx, pr)).To(Succeed())
	framework.StartManager(t, asOperator, operator.Options{WatchNamespaces: []string{ns},
		Controllers: operator.ControllerOptions{Platform: tenancy.Platform{OperatorNamespace: ns, GatewayNamespaces: []string{ns}}}})
	g.Eventually(func() error {
		return c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "openshell-operator"}, &monitoringv1.PrometheusRule{})
	}).WithTimeout(30 * time.Second).Should(Succeed())
}
