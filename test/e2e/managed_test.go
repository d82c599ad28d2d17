package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/gatewayline"
	render "github.com/openshell/openshell-operator/internal/render/gateway"
	"github.com/openshell/openshell-operator/internal/sandboxspec"
	"github.com/openshell/openshell-operator/internal/tenancy"
	"github.com/openshell/openshell-operator/operator"
	"github.com/openshell/openshell-operator/test/framework"
	"github.com/openshell/openshell-operator/test/stack"
)

// TestManagedGatewayUpgradeKeepsTenants upgrades a Managed gateway that
// holds a tenant's sandbox, policy and provider from 0.0.111 to the
// operator's default 0.1 release, with a test gateway playing its pod at
// each release. Unpinned, following the default (upgradePolicy Automatic)
// and without the operator's shipped profiles (policy None), the gateway
// stays on 0.0.111
// (ProviderProfilesRequired: its sandbox attaches a provider whose type no
// OpenShellProviderProfile declares, and 0.1 builds none in); once the
// Tenant Admin declares it, the gateway moves by itself. When the pod
// restarts on the new template it speaks 0.1, the operator follows once
// the roll is over (status.version), imports the profile into the
// tenant's catalog, gives the provider again naming it, and the tenant's
// objects keep working through the 0.1 wire, nothing re-created.
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

	// Without the operator's shipped profiles (which would declare
	// claude-code): this is the path of a type the operator ships none for.
	g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &openshellv1alpha1.OpenShellGateway{}
		if err := c.Get(ctx, gwKey, cur); err != nil {
			return err
		}
		cur.Spec.BuiltinProviderProfiles = &openshellv1alpha1.BuiltinProviderProfiles{Policy: openshellv1alpha1.BuiltinProfilesNone}
		cur.Spec.Managed.Version, cur.Spec.Managed.UpgradePolicy = "", openshellv1alpha1.UpgradePolicyAutomatic
		return c.Update(ctx, cur)
	})).To(Succeed())
	g.Eventually(func(g Gomega) {
		cur := &openshellv1alpha1.OpenShellGateway{}
		g.Expect(c.Get(ctx, gwKey, cur)).To(Succeed())
		g.Expect(cur.Status.ObservedGeneration).To(Equal(cur.Generation))
		current := meta.FindStatusCondition(cur.Status.Conditions, openshellv1alpha1.GatewayConditionVersionCurrent)
		g.Expect(current).NotTo(BeNil())
		g.Expect(current.Reason).To(Equal(openshellv1alpha1.GatewayReasonProviderProfilesRequired))
		g.Expect(current.Message).To(ContainSubstring(tenant + "/anthropic (claude-code)"))
		g.Expect(cur.Status.Version).To(Equal(gatewayline.LegacyManaged))
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
	g.Expect(m.Gateway.LineCalls()).NotTo(HaveKey(HavePrefix("0.1 ")), "a held gateway was spoken to in 0.1")

	// The Tenant Admin declares the profile: nothing else holds the
	// gateway, which moves by itself.
	prof := declareSampleProfile(ctx, t, tenant)
	// The pod restarts on the 0.1 template: from then on it speaks 0.1.
	restartedOn(ctx, g, m.Object, gatewayline.DefaultManaged)
	m.Gateway.ReportVersion(gatewayline.DefaultManaged)
	g.Eventually(func(g Gomega) {
		cur := &openshellv1alpha1.OpenShellGateway{}
		g.Expect(c.Get(ctx, gwKey, cur)).To(Succeed())
		g.Expect(cur.Status.Version).To(Equal(gatewayline.DefaultManaged))
		g.Expect(meta.IsStatusConditionTrue(cur.Status.Conditions, openshellv1alpha1.GatewayConditionVersionCurrent)).To(BeTrue(), "%+v", cur.Status.Conditions)
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
	// The profile is imported into the tenant's catalog at the new pod
	// before the provider is given again, naming that catalog.
	ws := sandboxWorkspace(ctx, g, tenant)
	expectProfileReason(ctx, g, client.ObjectKeyFromObject(prof), openshellv1alpha1.ProfileReasonImported)
	g.Expect(m.Gateway.Profile(ws, prof.Name)).NotTo(BeNil())
	g.Eventually(func() string { return profileWorkspaceOf(m.Gateway, ws, "anthropic") }).WithContext(ctx).WithTimeout(30 * time.Second).Should(Equal(ws))
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
	createVolume(ctx, t, platform, "managed")
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

// rebuildSandboxes is how many sandboxes TestManagedGatewayRebuildsAfterStateLoss
// puts on the gateway before it loses its state.
const rebuildSandboxes = 6

// TestManagedGatewayRebuildsAfterStateLoss: a Managed gateway's pod is
// replaced and comes back with an empty database (its volume lost). With
// no human involved, the operator notices the replaced pod
// (status.instance), gives the gateway back the tenant's provider profile,
// then its provider with its credentials, and re-creates every sandbox, with its policy, until all are
// Ready again: the cluster's objects are the gateway's backup. The time it
// takes is logged (docs/reliability.md records it).
func TestManagedGatewayRebuildsAfterStateLoss(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := cluster.Client
	_, m, tenant := startManagedStack(ctx, t, g, "rebuild", "")
	gwKey := client.ObjectKeyFromObject(m.Object)
	prof := declareSampleProfile(ctx, t, tenant)
	_, first := createSampleTenant(ctx, t, tenant, "sk-kept", gwKey)
	sandboxes := []*openshellv1alpha1.OpenShellSandbox{first}
	for i := 1; i < rebuildSandboxes; i++ {
		sb := first.DeepCopy()
		sb.ObjectMeta = metav1.ObjectMeta{Name: fmt.Sprintf("agent-%d", i), Namespace: tenant}
		g.Expect(c.Create(ctx, sb)).To(Succeed())
		sandboxes = append(sandboxes, sb)
	}
	ids := map[string]string{}
	for _, sb := range sandboxes {
		waitPhase(ctx, g, client.ObjectKeyFromObject(sb), openshellv1alpha1.SandboxPhaseReady)
		ids[sb.Name] = sandboxStatus(ctx, g, client.ObjectKeyFromObject(sb)).Status.SandboxID
	}
	ws := sandboxWorkspace(ctx, g, tenant)
	instance := func(g Gomega) string {
		cur := &openshellv1alpha1.OpenShellGateway{}
		g.Expect(c.Get(ctx, gwKey, cur)).To(Succeed())
		return cur.Status.Instance
	}
	before := instance(g)
	g.Expect(before).NotTo(BeEmpty())

	// The pod comes back with nothing: a new test gateway, empty state.
	lost := time.Now()
	fresh, err := m.Replace(ctx, gatewayline.DefaultManaged)
	g.Expect(err).NotTo(HaveOccurred())
	pod := &corev1.Pod{}
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: m.Object.Namespace, Name: render.NamesFor(m.Object).Fullname + "-0"}, pod)).To(Succeed())
	g.Expect(c.Delete(ctx, pod)).To(Succeed())

	g.Eventually(func(g Gomega) {
		g.Expect(instance(g)).NotTo(Equal(before))
		g.Expect(fresh.Profile(ws, prof.Name)).NotTo(BeNil(), "the provider profile was not imported again")
		g.Expect(fresh.StoredCredentials(ws, "anthropic")).To(Equal(map[string]string{"ANTHROPIC_API_KEY": "sk-kept"}))
		for _, sb := range sandboxes {
			cur := sandboxStatus(ctx, g, client.ObjectKeyFromObject(sb))
			g.Expect(cur.Status.SandboxID).NotTo(Equal(ids[sb.Name]), "%s still names the lost sandbox: %+v", sb.Name, cur.Status.Conditions)
			g.Expect(cur.Status.Phase).To(Equal(openshellv1alpha1.SandboxPhaseReady), "%s: %+v", sb.Name, cur.Status.Conditions)
			g.Expect(fresh.SandboxPolicyVersion(ws, sandboxspec.SandboxName(tenant, sb.Name))).To(BeNumerically(">", 0), "%s has no policy (rows %v, calls %v, ws %s)", sb.Name, fresh.SandboxNames(ws), fresh.LineCalls(), ws)
		}
		g.Expect(fresh.SandboxNames(ws)).To(HaveLen(rebuildSandboxes))
	}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(200 * time.Millisecond).Should(Succeed())
	t.Logf("rebuilt a gateway that lost its state: 1 provider profile, 1 provider and %d sandboxes with their policy back and Ready in %s", rebuildSandboxes, time.Since(lost).Round(100*time.Millisecond))
}
