package e2e

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/tenancy"
	"github.com/openshell/openshell-operator/operator"
	"github.com/openshell/openshell-operator/test/framework"
	"github.com/openshell/openshell-operator/test/stack"
)

// TestLeastPrivilegeIsSufficient runs the operator under a kubeconfig that
// impersonates the CSV's ServiceAccount, holding exactly the CSV's
// clusterPermissions and permissions, and drives a managed gateway to
// Available and a sandbox to Ready: what the bundle grants is enough.
func TestLeastPrivilegeIsSufficient(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := cluster.Client

	raw, err := os.ReadFile(filepath.Join(framework.RepoRoot(), "bundle", "manifests", "openshell-operator.clusterserviceversion.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	csv := &operatorsv1alpha1.ClusterServiceVersion{}
	g.Expect(yaml.Unmarshal(raw, csv)).To(Succeed())
	spec := csv.Spec.InstallStrategy.StrategySpec

	opNS := framework.CreateNamespace(ctx, t, c, "operator")
	sa := spec.DeploymentSpecs[0].Spec.Template.Spec.ServiceAccountName
	g.Expect(c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: opNS}})).To(Succeed())
	subject := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: opNS}}
	for i, p := range spec.ClusterPermissions {
		name := opNS + "-csv-" + string(rune('a'+i))
		g.Expect(c.Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: p.Rules})).To(Succeed())
		g.Expect(c.Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name}, Subjects: subject,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name}})).To(Succeed())
	}
	for i, p := range spec.Permissions {
		name := "csv-" + string(rune('a'+i))
		g.Expect(c.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: opNS}, Rules: p.Rules})).To(Succeed())
		g.Expect(c.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: opNS}, Subjects: subject,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name}})).To(Succeed())
	}
	asOperator := rest.CopyConfig(cluster.Config)
	asOperator.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + opNS + ":" + sa}
	probe, err := client.New(asOperator, client.Options{Scheme: c.Scheme()})
	g.Expect(err).NotTo(HaveOccurred())
	// The operator may remove its own finalizers, which the admission
	// webhooks allow only to whoever may update <kind>/finalizers.
	for _, res := range []string{"openshellsandboxes", "openshellproviders", "openshellpolicies"} {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: "system:serviceaccount:" + opNS + ":" + sa, Groups: []string{"system:serviceaccounts", "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: "any-tenant", Verb: "update", Group: "openshell.ai",
				Resource: res, Subresource: "finalizers"}}}
		g.Eventually(func(g Gomega) {
			cur := sar.DeepCopy()
			g.Expect(c.Create(ctx, cur)).To(Succeed())
			g.Expect(cur.Status.Allowed).To(BeTrue(), res+"/finalizers")
		}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
	}
	// Impersonation really restricts: the CSV grants reading nodes, not deleting them.
	g.Expect(probe.List(ctx, &corev1.NodeList{})).To(Succeed())
	err = probe.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "kwok-node-0"}})
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "want Forbidden, got %v", err)

	// The sandbox flow, with the manager (and its OIDC issuer) impersonating.
	sbNS := framework.CreateNamespace(ctx, t, c, "lp-sandboxes")
	tenant := framework.CreateNamespace(ctx, t, c, "lp-tenant")
	// A second platform namespace for the managed gateway, as a cluster
	// admin designates it (OPENSHELL_GATEWAY_NAMESPACES).
	gwNS := framework.CreateNamespace(ctx, t, c, "lp-gateway")
	setLabels(ctx, g, gwNS, map[string]string{corev1.LabelMetadataName: gwNS, tenancy.LabelServeGateways: "true"})
	st, err := stack.Start(ctx, asOperator, c, stack.Options{GatewayNamespace: opNS, SandboxNamespace: sbNS,
		Manager: operator.Options{LeaderElection: true, LeaderElectionNamespace: opNS,
			Controllers: operator.ControllerOptions{Platform: tenancy.Platform{GatewayNamespaces: []string{gwNS}}}}})
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { g.Expect(st.Stop()).To(Succeed()) }()
	sb := &openshellv1alpha1.OpenShellSandbox{ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: tenant},
		Spec: openshellv1alpha1.OpenShellSandboxSpec{GatewayRef: openshellv1alpha1.GatewayReference{Name: st.GatewayObj.Name, Namespace: opNS}}}
	g.Expect(c.Create(ctx, sb)).To(Succeed())
	g.Eventually(func(g Gomega) {
		cur := &openshellv1alpha1.OpenShellSandbox{}
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(sb), cur)).To(Succeed())
		g.Expect(cur.Status.Phase).To(Equal(openshellv1alpha1.SandboxPhaseReady), "%+v", cur.Status.Conditions)
	}).WithContext(ctx).WithTimeout(90 * time.Second).Should(Succeed())

	// The managed gateway flow: RBAC, SCC-free vanilla install, workload.
	createVolume(ctx, t, "pv-"+gwNS)
	gw := &openshellv1alpha1.OpenShellGateway{ObjectMeta: metav1.ObjectMeta{Name: "openshell", Namespace: gwNS},
		Spec: openshellv1alpha1.OpenShellGatewaySpec{Managed: &openshellv1alpha1.ManagedGatewaySpec{}}}
	g.Expect(c.Create(ctx, gw)).To(Succeed())
	g.Eventually(func(g Gomega) {
		cur := &openshellv1alpha1.OpenShellGateway{}
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(gw), cur)).To(Succeed())
		g.Expect(meta.IsStatusConditionTrue(cur.Status.Conditions, openshellv1alpha1.ConditionAvailable)).To(BeTrue(), "%+v", cur.Status.Conditions)
	}).WithContext(ctx).WithTimeout(2 * time.Minute).Should(Succeed())

	// Deleting it finishes under the same RBAC: the finalizer is released
	// and the cluster-scoped RBAC it held is gone.
	managed := client.MatchingLabels{"openshell.ai/gateway-namespace": gwNS}
	crs := &rbacv1.ClusterRoleList{}
	g.Expect(c.List(ctx, crs, managed)).To(Succeed())
	g.Expect(crs.Items).NotTo(BeEmpty(), "the gateway holds a ClusterRole while it runs")
	g.Expect(c.Delete(ctx, gw)).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(c.Get(ctx, client.ObjectKeyFromObject(gw), &openshellv1alpha1.OpenShellGateway{}))
	}).WithContext(ctx).WithTimeout(time.Minute).Should(BeTrue(), "the gateway finalizer was not released")
	g.Expect(c.List(ctx, crs, managed)).To(Succeed())
	g.Expect(crs.Items).To(BeEmpty())
	crbs := &rbacv1.ClusterRoleBindingList{}
	g.Expect(c.List(ctx, crbs, managed)).To(Succeed())
	g.Expect(crbs.Items).To(BeEmpty())
}
