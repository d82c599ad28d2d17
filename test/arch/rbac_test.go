package arch

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	render "github.com/openshell/openshell-operator/internal/render/gateway"
	"github.com/openshell/openshell-operator/internal/scc"
)

// TestRBACHasNoEscalationPaths reads the CSV's permissions and
// clusterPermissions and the static ClusterRoles the operator binds, and
// fails on a wildcard, on escalate or impersonate, on bind without
// resourceNames, and on Secret list or watch at cluster scope (OLM turns
// permissions cluster-wide only when the admin picks AllNamespaces).
func TestRBACHasNoEscalationPaths(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "bundle", "manifests", "openshell-operator.clusterserviceversion.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	csv := &operatorsv1alpha1.ClusterServiceVersion{}
	if err := yaml.Unmarshal(raw, csv); err != nil {
		t.Fatal(err)
	}
	spec := csv.Spec.InstallStrategy.StrategySpec
	check := func(where string, rules []rbacv1.PolicyRule, clusterWide bool) {
		for _, r := range rules {
			for _, field := range [][]string{r.APIGroups, r.Resources, r.Verbs, r.ResourceNames, r.NonResourceURLs} {
				if slices.ContainsFunc(field, func(s string) bool { return strings.Contains(s, "*") }) {
					t.Errorf("%s: wildcard in %+v", where, r)
				}
			}
			for _, v := range []string{"escalate", "impersonate"} {
				if slices.Contains(r.Verbs, v) {
					t.Errorf("%s: %s in %+v", where, v, r)
				}
			}
			if slices.Contains(r.Verbs, "bind") && len(r.ResourceNames) == 0 {
				t.Errorf("%s: bind without resourceNames in %+v", where, r)
			}
			if clusterWide && slices.Contains(r.APIGroups, "") && slices.Contains(r.Resources, "secrets") &&
				(slices.Contains(r.Verbs, "list") || slices.Contains(r.Verbs, "watch")) {
				t.Errorf("%s: Secrets list/watch at cluster scope in %+v", where, r)
			}
		}
	}
	for _, p := range spec.ClusterPermissions {
		check("clusterPermissions", p.Rules, true)
	}
	for _, p := range spec.Permissions {
		check("permissions", p.Rules, false)
	}
	for _, r := range append(render.OperandClusterRoles(), scc.UseRole()) {
		check("ClusterRole "+r.Name, r.Rules, true)
	}
	if len(spec.ClusterPermissions) == 0 || len(spec.Permissions) == 0 {
		t.Fatal("the CSV must split its rules into permissions and clusterPermissions")
	}
}
