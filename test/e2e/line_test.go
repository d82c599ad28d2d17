package e2e

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/operator"
	"github.com/openshell/openshell-operator/test/framework"
	"github.com/openshell/openshell-operator/test/stack"
)

// TestGatewayOnALineNotSpoken: an External gateway upgraded in place to a
// 0.1 release reports the new version. The operator says so on the gateway
// (Degraded, VersionNotSupported) and sends it no 0.0.x sandbox call,
// which it would misread; once it reports 0.0.x again the sandbox waiting
// for it is created.
func TestGatewayOnALineNotSpoken(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := cluster.Client
	gwNS, sbNS := framework.CreateNamespace(ctx, t, c, "line-platform"), framework.CreateNamespace(ctx, t, c, "line-sandboxes")
	tenant := framework.CreateNamespace(ctx, t, c, "line-tenant")
	st, err := stack.Start(ctx, cluster.Config, c, stack.Options{GatewayNamespace: gwNS, SandboxNamespace: sbNS,
		Manager: operator.Options{WatchNamespaces: []string{gwNS, sbNS, tenant}}})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { g.Expect(st.Stop()).To(Succeed()) })
	degradedBy := func(g Gomega) *metav1.Condition {
		gw := &openshellv1alpha1.OpenShellGateway{}
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(st.GatewayObj), gw)).To(Succeed())
		d := meta.FindStatusCondition(gw.Status.Conditions, openshellv1alpha1.ConditionDegraded)
		g.Expect(d).NotTo(BeNil())
		return d
	}
	poke := func() {
		gw := &openshellv1alpha1.OpenShellGateway{}
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(st.GatewayObj), gw)).To(Succeed())
		patch := client.MergeFrom(gw.DeepCopy())
		metav1.SetMetaDataAnnotation(&gw.ObjectMeta, "test/poke", time.Now().String())
		g.Expect(c.Patch(ctx, gw, patch)).To(Succeed())
	}
	g.Eventually(func(g Gomega) { g.Expect(degradedBy(g).Status).To(Equal(metav1.ConditionFalse)) }).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())

	st.Gateway.ReportVersion("0.1.5")
	poke()
	g.Eventually(func(g Gomega) {
		d := degradedBy(g)
		g.Expect(d.Reason).To(Equal(openshellv1alpha1.GatewayReasonVersionNotSupported))
		g.Expect(d.Message).To(ContainSubstring("0.1.5 is on the 0.1 line"))
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
	creates := st.Gateway.Calls()["CreateSandbox"]
	sb := sandboxOn(tenant, "waits", st.GatewayObj)
	g.Expect(c.Create(ctx, sb)).To(Succeed())
	g.Eventually(func(g Gomega) {
		cur := &openshellv1alpha1.OpenShellSandbox{}
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(sb), cur)).To(Succeed())
		r := meta.FindStatusCondition(cur.Status.Conditions, openshellv1alpha1.ConditionGatewayReachable)
		g.Expect(r).NotTo(BeNil())
		g.Expect(r.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(r.Message).To(ContainSubstring("does not speak yet"))
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
	g.Expect(st.Gateway.Calls()["CreateSandbox"]).To(Equal(creates), "no 0.0.x create was sent to the 0.1 gateway")

	st.Gateway.ReportVersion("")
	poke()
	waitPhase(ctx, g, client.ObjectKeyFromObject(sb), openshellv1alpha1.SandboxPhaseReady)
}
