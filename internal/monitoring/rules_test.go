package monitoring_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/yaml"

	"github.com/openshell/openshell-operator/internal/monitoring"
	"github.com/openshell/openshell-operator/test/framework"
)

// prometheusRule is the part of the PrometheusRule the tests read.
type prometheusRule struct {
	Spec struct {
		Groups []struct {
			Rules []struct {
				Alert string `json:"alert"`
				Expr  string `json:"expr"`
			} `json:"rules"`
		} `json:"groups"`
	} `json:"spec"`
}

// TestRules checks the rules with promtool and runs their unit tests
// (testdata/rules_test.yaml) with `promtool test rules`.
func TestRules(t *testing.T) {
	if testing.Short() {
		t.Skip("needs bin/promtool (make tools)")
	}
	promtool, err := framework.Binary("promtool")
	if err != nil {
		t.Fatal(err)
	}
	var pr map[string]any
	if err := yaml.Unmarshal(monitoring.Rules, &pr); err != nil {
		t.Fatal(err)
	}
	spec, err := yaml.Marshal(pr["spec"])
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), spec, 0o600); err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile(filepath.Join("testdata", "rules_test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rules_test.yaml"), tests, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"check", "rules", "rules.yaml"}, {"test", "rules", "rules_test.yaml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("promtool %v: %v\n%s", args, err, out)
		}
	}
}

// TestRulesUseExportedMetrics checks every metric the rules name against
// what the operator exports, and that every alert has a unit test.
func TestRulesUseExportedMetrics(t *testing.T) {
	var pr prometheusRule
	if err := yaml.Unmarshal(monitoring.Rules, &pr); err != nil {
		t.Fatal(err)
	}
	exported := map[string]bool{monitoring.MetricImagePolicyDenials: true,
		// controller-runtime's own, registered by every manager.
		"controller_runtime_reconcile_errors_total": true}
	ch := make(chan *prometheus.Desc, 16)
	(&monitoring.Collector{}).Describe(ch)
	close(ch)
	for d := range ch {
		exported[regexp.MustCompile(`fqName: "([^"]+)"`).FindStringSubmatch(d.String())[1]] = true
	}
	tests, err := os.ReadFile(filepath.Join("testdata", "rules_test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	name := regexp.MustCompile(`\b(openshell_operator_[a-z_]+|controller_runtime_[a-z_]+)\b`)
	var alerts []string
	for _, g := range pr.Spec.Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
			for _, m := range name.FindAllString(r.Expr, -1) {
				if !exported[m] {
					t.Errorf("alert %s uses %s, which the operator does not export", r.Alert, m)
				}
			}
			if !regexp.MustCompile(`alertname: ` + r.Alert + `\b`).Match(tests) {
				t.Errorf("alert %s has no promtool unit test", r.Alert)
			}
		}
	}
	if !slices.Contains(alerts, "OpenShellGatewayUnavailable") || len(alerts) < 5 {
		t.Fatalf("alerts = %v", alerts)
	}
}

// TestReconcileErrorsAlertCoversEveryController checks that the
// OpenShellOperatorReconcileErrors alert selects every controller the
// operator registers (each `Named("...")` under controllers/), so a
// controller added later is not left out of it.
func TestReconcileErrorsAlertCoversEveryController(t *testing.T) {
	var pr prometheusRule
	if err := yaml.Unmarshal(monitoring.Rules, &pr); err != nil {
		t.Fatal(err)
	}
	var expr string
	for _, g := range pr.Spec.Groups {
		for _, r := range g.Rules {
			if r.Alert == "OpenShellOperatorReconcileErrors" {
				expr = r.Expr
			}
		}
	}
	m := regexp.MustCompile(`controller=~"([^"]+)"`).FindStringSubmatch(expr)
	if m == nil {
		t.Fatalf("OpenShellOperatorReconcileErrors selects no controller by regex: %s", expr)
	}
	// Prometheus anchors label regexes.
	selects := regexp.MustCompile("^(?:" + m[1] + ")$")
	named := regexp.MustCompile(`\bNamed\("([^"]+)"\)`)
	var names []string
	err := filepath.WalkDir(filepath.Join(framework.RepoRoot(), "controllers"), func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Ext(path) != ".go" || strings.HasSuffix(path, "_test.go") {
			return err
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, n := range named.FindAllSubmatch(src, -1) {
			names = append(names, string(n[1]))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(names) < 10 {
		t.Fatalf("found only %d controller names under controllers/ (%v): the scan is broken", len(names), names)
	}
	for _, n := range names {
		if !selects.MatchString(n) {
			t.Errorf("controller %q is not selected by OpenShellOperatorReconcileErrors (controller=~%q)", n, m[1])
		}
	}
}
