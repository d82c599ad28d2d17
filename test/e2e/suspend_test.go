package e2e

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/sandboxspec"
	"github.com/openshell/openshell-operator/test/framework"
	"github.com/openshell/openshell-operator/test/stack"
)

// TestSuspendResume: spec.suspend stops a sandbox's runtime through the
// gateway (StopSandbox) and keeps the rest — the OpenShellSandbox, the
// gateway sandbox and its ID, the agents.x-k8s.io Sandbox (which holds the
// workspace) — while the real Agent Sandbox controller removes the pod;
// spec.suspend false starts a new runtime (a new pod) on the same Sandbox.
func TestSuspendResume(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := cluster.Client
	gwNS := framework.CreateNamespace(ctx, t, c, "suspend-platform")
	sbNS := framework.CreateNamespace(ctx, t, c, "suspend-sandboxes")
	tenant := framework.CreateNamespace(ctx, t, c, "suspend-tenant")
	st, err := stack.Start(ctx, cluster.Config, c, stack.Options{GatewayNamespace: gwNS, SandboxNamespace: sbNS})
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { g.Expect(st.Stop()).To(Succeed()) }()

	sb := sandboxOn(tenant, "pausable", st.GatewayObj)
	g.Expect(c.Create(ctx, sb)).To(Succeed())
	key := client.ObjectKeyFromObject(sb)
	var id, crName string
	var podUID types.UID
	g.Eventually(func(g Gomega) {
		cur := sandboxStatus(ctx, g, key)
		g.Expect(cur.Status.Phase).To(Equal(openshellv1alpha1.SandboxPhaseReady))
		id, crName = cur.Status.SandboxID, cur.Status.AgentSandbox.Name
		pod := &corev1.Pod{}
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: sbNS, Name: crName}, pod)).To(Succeed())
		podUID = pod.UID
	}).WithContext(ctx).WithTimeout(90*time.Second).WithPolling(500*time.Millisecond).Should(Succeed(), cluster.CheckProcessesMessage)
	cr := &unstructured.Unstructured{}
	cr.SetAPIVersion("agents.x-k8s.io/v1beta1")
	cr.SetKind("Sandbox")
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: sbNS, Name: crName}, cr)).To(Succeed())
	crUID := cr.GetUID()

	setSuspend(ctx, g, key, true)
	g.Eventually(func(g Gomega) {
		cur := sandboxStatus(ctx, g, key)
		g.Expect(cur.Status.Phase).To(Equal(openshellv1alpha1.SandboxPhaseSuspended), "%+v", cur.Status.Conditions)
		s := meta.FindStatusCondition(cur.Status.Conditions, openshellv1alpha1.SandboxConditionSuspended)
		g.Expect(s).NotTo(BeNil())
		g.Expect(s.Status).To(Equal(metav1.ConditionTrue))
		g.Expect(cur.Status.SandboxID).To(Equal(id), "suspending recreated the gateway sandbox")
		err := c.Get(ctx, client.ObjectKey{Namespace: sbNS, Name: crName}, &corev1.Pod{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the runtime's pod is still there: %v", err)
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: sbNS, Name: crName}, cr)).To(Succeed())
		g.Expect(cr.GetUID()).To(Equal(crUID), "the Sandbox holding the workspace was replaced")
		mode, _, _ := unstructured.NestedString(cr.Object, "spec", "operatingMode")
		g.Expect(mode).To(Equal("Suspended"))
	}).WithContext(ctx).WithTimeout(90*time.Second).WithPolling(500*time.Millisecond).Should(Succeed(), cluster.CheckProcessesMessage)
	g.Expect(st.Gateway.SandboxNames(sandboxWorkspace(ctx, g, tenant))).To(HaveLen(1), "the gateway keeps the one sandbox")

	setSuspend(ctx, g, key, false)
	g.Eventually(func(g Gomega) {
		cur := sandboxStatus(ctx, g, key)
		g.Expect(cur.Status.Phase).To(Equal(openshellv1alpha1.SandboxPhaseReady), "%+v", cur.Status.Conditions)
		s := meta.FindStatusCondition(cur.Status.Conditions, openshellv1alpha1.SandboxConditionSuspended)
		g.Expect(s.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(s.Reason).To(Equal(openshellv1alpha1.SandboxReasonRunning))
		g.Expect(cur.Status.SandboxID).To(Equal(id))
		pods := &corev1.PodList{}
		g.Expect(c.List(ctx, pods, client.InNamespace(sbNS))).To(Succeed())
		var names []string
		for _, p := range pods.Items {
			names = append(names, p.Name+"/"+string(p.Status.Phase))
		}
		pod := &corev1.Pod{}
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: sbNS, Name: crName}, pod)).To(Succeed(), "pods: %v; CR: %v", names, cr.Object["status"])
		g.Expect(pod.UID).NotTo(Equal(podUID), "resuming starts a new runtime")
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: sbNS, Name: crName}, cr)).To(Succeed())
		g.Expect(cr.GetUID()).To(Equal(crUID))
	}).WithContext(ctx).WithTimeout(90*time.Second).WithPolling(500*time.Millisecond).Should(Succeed(), cluster.CheckProcessesMessage)

	// Deleting still deletes everything.
	g.Expect(c.Delete(ctx, sb)).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(c.Get(ctx, key, &openshellv1alpha1.OpenShellSandbox{})) &&
			apierrors.IsNotFound(c.Get(ctx, client.ObjectKey{Namespace: sbNS, Name: crName}, cr.DeepCopy()))
	}).WithContext(ctx).WithTimeout(60 * time.Second).Should(BeTrue())
}

// sandboxWorkspace is the tenant's workspace name at the gateway.
func sandboxWorkspace(ctx context.Context, g Gomega, tenant string) string {
	ns := &corev1.Namespace{}
	g.Expect(cluster.Client.Get(ctx, client.ObjectKey{Name: tenant}, ns)).To(Succeed())
	return sandboxspec.WorkspaceName(tenant, ns.UID)
}
