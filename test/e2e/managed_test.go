package e2e

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/gatewayline"
	render "github.com/openshell/openshell-operator/internal/render/gateway"
	"github.com/openshell/openshell-operator/internal/tenancy"
	"github.com/openshell/openshell-operator/operator"
	"github.com/openshell/openshell-operator/test/framework"
	"github.com/openshell/openshell-operator/test/stack"
)

// TestManagedGatewayUpgradeKeepsTenants upgrades a Managed gateway that
// holds a tenant's sandbox, policy and provider from 0.0.111 to the
// operator's default 0.1 release, by unpinning its version, with a test
// gateway playing its pod at each release: when the pod restarts on the
// new template it speaks 0.1, the operator follows once the roll is over
// (status.version), and the tenant's objects keep working through the 0.1
// wire, nothing re-created.
func TestManagedGatewayUpgradeKeepsTenants(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := cluster.Client
	_, m, tenant := startManagedStack(ctx, t, g, "mup", gatewayline.LegacyManaged)
	gwKey := client.ObjectKeyFromObject(m.Object)

	secret, first := createSampleTenant(ctx, t, tenant, "sk-before", gwKey)
	waitPhase(ctx, g, client.ObjectKeyFromObject(first), openshellv1alpha1.SandboxPhaseReady)
	id := sandboxStatus(ctx, g, client.ObjectKeyFromObject(first)).Status.SandboxID
	g.Expect(m.Gateway.LineCalls()).To(HaveKey("0.0 CreateSandbox"))

	g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &openshellv1alpha1.OpenShellGateway{}
		if err := c.Get(ctx, gwKey, cur); err != nil {
			return err
		}
		cur.Spec.Managed.Version = ""
		return c.Update(ctx, cur)
	})).To(Succeed())
	// The pod restarts on the 0.1 template: from then on it speaks 0.1.
	restartedOn(ctx, g, m.Object, gatewayline.DefaultManaged)
	m.Gateway.ReportVersion(gatewayline.DefaultManaged)
	g.Eventually(func(g Gomega) {
		cur := &openshellv1alpha1.OpenShellGateway{}
		g.Expect(c.Get(ctx, gwKey, cur)).To(Succeed())
		g.Expect(cur.Status.Version).To(Equal(gatewayline.DefaultManaged))
		g.Expect(meta.IsStatusConditionTrue(cur.Status.Conditions, openshellv1alpha1.GatewayConditionVersionCurrent)).To(BeTrue(), "%+v", cur.Status.Conditions)
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
	keepsWorkingOn01(ctx, g, m.Gateway, tenant, secret, first, id)
}

// startManagedStack starts a stack whose operator may install Managed
// gateways in a platform namespace named after prefix, creates one there
// running version with a test gateway playing its pod, and returns it
// with a tenant namespace; all stop with the test.
func startManagedStack(ctx context.Context, t *testing.T, g Gomega, prefix, version string) (*stack.Stack, *stack.ManagedGateway, string) {
	t.Helper()
	c := cluster.Client
	own := framework.CreateNamespace(ctx, t, c, prefix+"-operator")
	platform := framework.CreatePlatformNamespace(ctx, t, c, prefix+"-platform")
	tenant := framework.CreateNamespace(ctx, t, c, prefix+"-tenant")
	createVolume(ctx, t, "pv-"+platform)
	st, err := stack.Start(ctx, cluster.Config, c, stack.Options{GatewayNamespace: own, SandboxNamespace: own, PlayManagedGateways: true,
		Manager: operator.Options{WatchNamespaces: []string{own, platform, tenant},
			Controllers: operator.ControllerOptions{Platform: tenancy.Platform{GatewayNamespaces: []string{platform}}}}})
	g.ExpectWithOffset(1, err).NotTo(HaveOccurred())
	t.Cleanup(func() { g.Expect(st.Stop()).To(Succeed()) })
	m, err := st.AddManagedGateway(ctx, c, platform, "managed", version)
	g.ExpectWithOffset(1, err).NotTo(HaveOccurred())
	g.EventuallyWithOffset(1, func(g Gomega) {
		cur := &openshellv1alpha1.OpenShellGateway{}
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(m.Object), cur)).To(Succeed())
		g.Expect(meta.IsStatusConditionTrue(cur.Status.Conditions, openshellv1alpha1.ConditionAvailable)).To(BeTrue(), "%+v", cur.Status.Conditions)
		g.Expect(cur.Status.Version).To(Equal(m.Gateway.ReportedVersion()))
	}).WithContext(ctx).WithTimeout(2*time.Minute).Should(Succeed(), cluster.CheckProcessesMessage)
	return st, m, tenant
}

// restartedOn waits until the gateway's (single) pod runs the template of
// version: what a real pod would then be running.
func restartedOn(ctx context.Context, g Gomega, gw *openshellv1alpha1.OpenShellGateway, version string) {
	g.EventuallyWithOffset(1, func(g Gomega) {
		pod := &corev1.Pod{}
		g.Expect(cluster.Client.Get(ctx, client.ObjectKey{Namespace: gw.Namespace, Name: render.NamesFor(gw).Fullname + "-0"}, pod)).To(Succeed())
		g.Expect(pod.Annotations).To(HaveKeyWithValue(render.AnnotationVersion, version))
		g.Expect(pod.DeletionTimestamp).To(BeNil())
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
}
