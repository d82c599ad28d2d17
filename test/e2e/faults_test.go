package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/sandboxspec"
	"github.com/openshell/openshell-operator/test/framework"
	"github.com/openshell/openshell-operator/test/stack"
)

// TestDeleteDuringCreate deletes an OpenShellSandbox while its
// CreateSandbox is in flight: the gateway has created the sandbox, the
// response has not arrived, and the create's status write then loses to
// the deletion. Nothing may be orphaned, at the gateway or in
// agents.x-k8s.io, because where the sandbox was being created is recorded
// before the call.
func TestDeleteDuringCreate(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := cluster.Client
	gwNS := framework.CreateNamespace(ctx, t, c, "faults-platform")
	sbNS := framework.CreateNamespace(ctx, t, c, "faults-sandboxes")
	tenant := framework.CreateNamespace(ctx, t, c, "faults-tenant")
	st, err := stack.Start(ctx, cluster.Config, c, stack.Options{GatewayNamespace: gwNS, SandboxNamespace: sbNS})
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { g.Expect(st.Stop()).To(Succeed()) }()

	reached, release := st.Gateway.HoldNext("CreateSandbox")
	defer release()
	sb := &openshellv1alpha1.OpenShellSandbox{ObjectMeta: metav1.ObjectMeta{Name: "racer", Namespace: tenant},
		Spec: openshellv1alpha1.OpenShellSandboxSpec{GatewayRef: openshellv1alpha1.GatewayReference{Name: st.GatewayObj.Name, Namespace: gwNS}}}
	g.Expect(c.Create(ctx, sb)).To(Succeed())
	select {
	case <-reached:
	case <-ctx.Done():
		t.Fatal("CreateSandbox never reached the gateway")
	}
	ns := &corev1.Namespace{}
	g.Expect(c.Get(ctx, client.ObjectKey{Name: tenant}, ns)).To(Succeed())
	ws, name := sandboxspec.WorkspaceName(tenant, ns.UID), sandboxspec.SandboxName(tenant, sb.Name)
	g.Expect(st.Gateway.SandboxNames(ws)).To(ContainElement(name), "the gateway created the sandbox")
	g.Expect(c.Delete(ctx, sb)).To(Succeed())
	release()

	g.Eventually(func() error { return c.Get(ctx, client.ObjectKeyFromObject(sb), sb) }).WithContext(ctx).WithTimeout(time.Minute).
		Should(Satisfy(apierrors.IsNotFound), "the sandbox was not released")
	g.Expect(st.Gateway.SandboxNames(ws)).NotTo(ContainElement(name), "orphaned at the gateway")
	g.Eventually(func(g Gomega) {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(sandboxGVK)
		g.Expect(c.List(ctx, list, client.InNamespace(sbNS))).To(Succeed())
		g.Expect(list.Items).To(BeEmpty(), "orphaned agents.x-k8s.io Sandboxes")
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
}

// TestGatewayDeletionDrains deletes a gateway that still has a running
// sandbox: the gateway stays (Deleting, Draining) and keeps serving, so the
// sandbox's own deletion cleans up at the gateway; then the gateway goes.
// Nothing is orphaned.
func TestGatewayDeletionDrains(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := cluster.Client
	gwNS := framework.CreateNamespace(ctx, t, c, "drain-platform")
	sbNS := framework.CreateNamespace(ctx, t, c, "drain-sandboxes")
	tenant := framework.CreateNamespace(ctx, t, c, "drain-tenant")
	st, err := stack.Start(ctx, cluster.Config, c, stack.Options{GatewayNamespace: gwNS, SandboxNamespace: sbNS})
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { g.Expect(st.Stop()).To(Succeed()) }()
	sb := &openshellv1alpha1.OpenShellSandbox{ObjectMeta: metav1.ObjectMeta{Name: "tenant-agent", Namespace: tenant},
		Spec: openshellv1alpha1.OpenShellSandboxSpec{GatewayRef: openshellv1alpha1.GatewayReference{Name: st.GatewayObj.Name, Namespace: gwNS}}}
	g.Expect(c.Create(ctx, sb)).To(Succeed())
	waitPhase(ctx, g, client.ObjectKeyFromObject(sb), openshellv1alpha1.SandboxPhaseReady)

	gw := st.GatewayObj
	g.Expect(c.Delete(ctx, gw)).To(Succeed())
	g.Eventually(func(g Gomega) {
		cur := &openshellv1alpha1.OpenShellGateway{}
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(gw), cur)).To(Succeed())
		g.Expect(cur.Status.Phase).To(Equal(openshellv1alpha1.GatewayPhaseDeleting))
		a := meta.FindStatusCondition(cur.Status.Conditions, openshellv1alpha1.ConditionAvailable)
		g.Expect(a).NotTo(BeNil())
		g.Expect(a.Reason).To(Equal(openshellv1alpha1.GatewayReasonDraining))
		g.Expect(a.Message).To(ContainSubstring(tenant + "/tenant-agent"))
	}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
	g.Expect(sandboxStatus(ctx, g, client.ObjectKeyFromObject(sb)).Status.Phase).To(Equal(openshellv1alpha1.SandboxPhaseReady), "the sandbox keeps running")

	ns := &corev1.Namespace{}
	g.Expect(c.Get(ctx, client.ObjectKey{Name: tenant}, ns)).To(Succeed())
	ws, name := sandboxspec.WorkspaceName(tenant, ns.UID), sandboxspec.SandboxName(tenant, sb.Name)
	g.Expect(c.Delete(ctx, sb)).To(Succeed())
	g.Eventually(func() error { return c.Get(ctx, client.ObjectKeyFromObject(gw), gw) }).WithContext(ctx).WithTimeout(time.Minute).
		Should(Satisfy(apierrors.IsNotFound), "the gateway did not finish deleting after its last sandbox")
	g.Expect(apierrors.IsNotFound(c.Get(ctx, client.ObjectKeyFromObject(sb), sb))).To(BeTrue())
	g.Expect(st.Gateway.SandboxNames(ws)).NotTo(ContainElement(name), "orphaned at the gateway")
}

// TestSickGatewayDoesNotStarveOthers blackholes one gateway (it accepts
// connections and never answers) while its sandboxes are being created,
// then creates sandboxes on a healthy gateway: they become Ready as usual
// (the sick gateway's circuit breaker fails its calls fast instead of
// holding the shared workers), the sick gateway's sandboxes say
// GatewayReachable=False, and all recover once it answers again. Figures
// (time to detect, healthy create latency) are logged.
func TestSickGatewayDoesNotStarveOthers(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := cluster.Client
	gwNS := framework.CreateNamespace(ctx, t, c, "sick-platform")
	sbNS := framework.CreateNamespace(ctx, t, c, "sick-sandboxes")
	tenant := framework.CreateNamespace(ctx, t, c, "sick-tenant")
	st, err := stack.Start(ctx, cluster.Config, c, stack.Options{GatewayNamespace: gwNS, SandboxNamespace: sbNS})
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { g.Expect(st.Stop()).To(Succeed()) }()
	sick, sickObj, err := st.AddGateway(ctx, c, "sick", sbNS)
	g.Expect(err).NotTo(HaveOccurred())
	newSandbox := func(name string, gw *openshellv1alpha1.OpenShellGateway) *openshellv1alpha1.OpenShellSandbox {
		sb := &openshellv1alpha1.OpenShellSandbox{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: tenant},
			Spec: openshellv1alpha1.OpenShellSandboxSpec{GatewayRef: openshellv1alpha1.GatewayReference{Name: gw.Name, Namespace: gwNS}}}
		g.Expect(c.Create(ctx, sb)).To(Succeed())
		return sb
	}
	// Both gateways answer first (workspaces, health).
	warm := newSandbox("warm", sickObj)
	waitPhase(ctx, g, client.ObjectKeyFromObject(warm), openshellv1alpha1.SandboxPhaseReady)

	sick.SetDelay(time.Hour) // blackholed: every call waits until its deadline
	start := time.Now()
	var sickOnes []*openshellv1alpha1.OpenShellSandbox
	for i := range 8 {
		sickOnes = append(sickOnes, newSandbox(fmt.Sprintf("on-sick-%d", i), sickObj))
	}
	healthyStart := time.Now()
	var healthy []*openshellv1alpha1.OpenShellSandbox
	for i := range 4 {
		healthy = append(healthy, newSandbox(fmt.Sprintf("on-healthy-%d", i), st.GatewayObj))
	}
	for _, sb := range healthy {
		waitPhase(ctx, g, client.ObjectKeyFromObject(sb), openshellv1alpha1.SandboxPhaseReady)
	}
	t.Logf("figure: 4 sandboxes on the healthy gateway Ready %s after create, with 8 creates pending on a blackholed gateway",
		time.Since(healthyStart).Round(100*time.Millisecond))
	g.Eventually(func(g Gomega) {
		for _, sb := range sickOnes {
			r := meta.FindStatusCondition(sandboxStatus(ctx, g, client.ObjectKeyFromObject(sb)).Status.Conditions, openshellv1alpha1.ConditionGatewayReachable)
			g.Expect(r).NotTo(BeNil())
			g.Expect(r.Status).To(Equal(metav1.ConditionFalse))
		}
	}).WithContext(ctx).WithTimeout(2 * time.Minute).Should(Succeed())
	t.Logf("figure: every sandbox of the blackholed gateway reported GatewayReachable=False %s after the blackhole",
		time.Since(start).Round(100*time.Millisecond))

	sick.SetDelay(0)
	recovered := time.Now()
	for _, sb := range sickOnes {
		waitPhase(ctx, g, client.ObjectKeyFromObject(sb), openshellv1alpha1.SandboxPhaseReady)
	}
	t.Logf("figure: the blackholed gateway's 8 sandboxes Ready %s after it answered again", time.Since(recovered).Round(100*time.Millisecond))
}
