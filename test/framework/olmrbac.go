package framework

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// LoadCSV reads the bundle's ClusterServiceVersion.
func LoadCSV() (*operatorsv1alpha1.ClusterServiceVersion, error) {
	raw, err := os.ReadFile(filepath.Join(RepoRoot(), "bundle", "manifests", "openshell-operator.clusterserviceversion.yaml"))
	if err != nil {
		return nil, err
	}
	csv := &operatorsv1alpha1.ClusterServiceVersion{}
	return csv, yaml.Unmarshal(raw, csv)
}

// CSVRules are every rule of the CSV's permissions and clusterPermissions
// for the operator's ServiceAccount (the relay's are its own, exercised
// by test/olm).
func CSVRules(csv *operatorsv1alpha1.ClusterServiceVersion) []rbacv1.PolicyRule {
	spec := csv.Spec.InstallStrategy.StrategySpec
	sa := operatorAccount(csv)
	var rules []rbacv1.PolicyRule
	for _, p := range append(append([]operatorsv1alpha1.StrategyDeploymentPermissions{}, spec.ClusterPermissions...), spec.Permissions...) {
		if p.ServiceAccountName == sa {
			rules = append(rules, p.Rules...)
		}
	}
	return rules
}

// operatorAccount is the ServiceAccount of the CSV's Deployment that runs
// the manager container.
func operatorAccount(csv *operatorsv1alpha1.ClusterServiceVersion) string {
	for _, d := range csv.Spec.InstallStrategy.StrategySpec.DeploymentSpecs {
		for _, c := range d.Spec.Template.Spec.Containers {
			if c.Name == "manager" {
				return d.Spec.Template.Spec.ServiceAccountName
			}
		}
	}
	return ""
}

// GrantLikeOLM creates the operator's ServiceAccount in opNS and binds it as OLM
// does for an OperatorGroup with these targets: clusterPermissions as
// ClusterRoles; permissions as Roles in the operator's namespace and in
// every target namespace, or, for AllNamespaces (nil targets), as
// ClusterRoles bound cluster-wide (OLM's operatorgroup.go ensureTenantRBAC
// and ensureSingletonRBAC). It returns a config that impersonates the
// ServiceAccount and the uninstall (OLM removes the RBAC after the
// Deployment).
func GrantLikeOLM(ctx context.Context, c client.Client, cfg *rest.Config, csv *operatorsv1alpha1.ClusterServiceVersion, opNS string, targets []string) (*rest.Config, func() error, error) {
	spec := csv.Spec.InstallStrategy.StrategySpec
	sa := operatorAccount(csv)
	objs := []client.Object{&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: opNS}}}
	subject := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: opNS}}
	clusterRole := func(name string, rules []rbacv1.PolicyRule) {
		objs = append(objs, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules},
			&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name}, Subjects: subject,
				RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name}})
	}
	for i, p := range spec.ClusterPermissions {
		if p.ServiceAccountName == sa {
			clusterRole(fmt.Sprintf("%s-cluster-%d", opNS, i), p.Rules)
		}
	}
	namespaces := []string{opNS}
	for _, ns := range targets {
		if ns != opNS {
			namespaces = append(namespaces, ns)
		}
	}
	for i, p := range spec.Permissions {
		if p.ServiceAccountName != sa {
			continue
		}
		if targets == nil {
			clusterRole(fmt.Sprintf("%s-all-%d", opNS, i), p.Rules)
		}
		for _, ns := range namespaces {
			if targets == nil && ns != opNS {
				continue
			}
			name := fmt.Sprintf("csv-%d", i)
			objs = append(objs, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Rules: p.Rules},
				&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Subjects: subject,
					RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name}})
		}
	}
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil {
			return nil, nil, fmt.Errorf("grant %T %s: %w", o, o.GetName(), err)
		}
	}
	user := "system:serviceaccount:" + opNS + ":" + sa
	// The API server authorizes from informers: wait until the grants are
	// in effect in every namespace (an OLM-installed pod starts seconds
	// after its RBAC; an in-process manager starts at once).
	if err := waitAllowed(ctx, c, user, namespaces); err != nil {
		return nil, nil, err
	}
	as := rest.CopyConfig(cfg)
	as.Impersonate = rest.ImpersonationConfig{UserName: user}
	revoke := func() error {
		for _, o := range objs[1:] {
			if err := client.IgnoreNotFound(c.Delete(context.Background(), o)); err != nil {
				return err
			}
		}
		return nil
	}
	return as, revoke, nil
}

func waitAllowed(ctx context.Context, c client.Client, user string, namespaces []string) error {
	deadline := time.Now().Add(30 * time.Second)
	for _, ns := range namespaces {
		for {
			sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: user,
				Groups:             []string{"system:serviceaccounts", "system:authenticated"},
				ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: "create", Group: "events.k8s.io", Resource: "events"}}}
			if err := c.Create(ctx, sar); err != nil {
				return err
			}
			if sar.Status.Allowed {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("the CSV's RBAC did not take effect in %s", ns)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return nil
}
