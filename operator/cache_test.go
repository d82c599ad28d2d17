package operator_test

import (
	"context"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	render "github.com/openshell/openshell-operator/internal/render/gateway"
	"github.com/openshell/openshell-operator/internal/tenancy"
	"github.com/openshell/openshell-operator/operator"
	"github.com/openshell/openshell-operator/test/framework"
)

// TestCacheHoldsOnlyOurChildren: Services, ConfigMaps and RoleBindings
// that the operator did not make (one Service per sandbox, a ConfigMap and
// RoleBindings per namespace) stay out of its cache; its own are there. A
// tenant who copies the operator's label onto objects in their own
// namespace does not get them cached either: children are cached only in
// the platform namespaces, where tenants cannot write.
func TestCacheHoldsOnlyOurChildren(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := framework.CreateNamespace(ctx, t, env.Client, "cache")
	tenant := framework.CreateNamespace(ctx, t, env.Client, "cache-tenant")
	ours := map[string]string{render.LabelManagedBy: render.ManagedByValue}
	port := corev1.ServicePort{Port: 80}
	objs := []client.Object{
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "ours", Namespace: ns, Labels: ours}, Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{port}}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "sandbox-svc", Namespace: ns}, Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{port}}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "ours", Namespace: ns, Labels: ours}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "tenant-config", Namespace: ns}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "tenant-admins", Namespace: ns},
			RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "admin"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "inflated", Namespace: tenant, Labels: ours},
			Data: map[string]string{"blob": strings.Repeat("x", 100<<10)}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "inflated", Namespace: tenant, Labels: ours}},
	}
	for _, o := range objs {
		g.Expect(env.Client.Create(ctx, o)).To(Succeed())
	}
	mgr, err := operator.New(env.Config, operator.Options{MetricsAddr: "0", ProbeAddr: "0", SkipControllerNameValidation: true,
		Controllers: operator.ControllerOptions{Platform: tenancy.Platform{OperatorNamespace: ns, GatewayNamespaces: []string{ns}}}})
	g.Expect(err).NotTo(HaveOccurred())
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	defer func() { cancel(); g.Expect(<-done).To(Succeed()) }()
	g.Expect(mgr.GetCache().WaitForCacheSync(ctx)).To(BeTrue())

	names := func(list client.ObjectList, opts ...client.ListOption) func(Gomega) []string {
		return func(g Gomega) []string {
			g.Expect(mgr.GetCache().List(ctx, list, append([]client.ListOption{client.InNamespace(ns)}, opts...)...)).To(Succeed())
			items, err := meta.ExtractList(list)
			g.Expect(err).NotTo(HaveOccurred())
			var out []string
			for _, o := range items {
				out = append(out, o.(client.Object).GetName())
			}
			return out
		}
	}
	g.Eventually(names(&corev1.ServiceList{})).Should(ConsistOf("ours"))
	g.Eventually(names(&corev1.ConfigMapList{})).Should(ConsistOf("ours"))
	g.Eventually(names(&rbacv1.RoleBindingList{})).Should(BeEmpty())
	// The tenant's labelled objects: the cache does not cover their
	// namespace at all.
	for _, list := range []client.ObjectList{&corev1.ConfigMapList{}, &corev1.SecretList{}} {
		err := mgr.GetCache().List(ctx, list, client.InNamespace(tenant))
		g.Expect(err).To(HaveOccurred(), "%T of a tenant namespace must not be cached", list)
		g.Expect(err.Error()).To(ContainSubstring("unable to list"))
	}
}
