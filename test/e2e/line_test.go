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
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	legacyopenshellv1 "github.com/openshell/openshell-operator/internal/gatewayapi/pb/openshellv1"
	"github.com/openshell/openshell-operator/internal/sandboxspec"
	"github.com/openshell/openshell-operator/operator"
	"github.com/openshell/openshell-operator/test/framework"
	"github.com/openshell/openshell-operator/test/stack"
	"github.com/openshell/openshell-operator/test/testgateway"
)

// TestGatewayOnALineNotSpoken: an External gateway upgraded in place to a
// release on no line the operator speaks (0.2) reports the new version. The
// operator says so on the gateway (Degraded, VersionNotSupported) and sends
// it no sandbox call, which it would misread; once it reports 0.0.x again
// the sandbox waiting for it is created.
func TestGatewayOnALineNotSpoken(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := cluster.Client
	st, tenant, _ := startLineStack(ctx, t, g, "line")
	degradedBy := func(g Gomega) *metav1.Condition {
		gw := &openshellv1alpha1.OpenShellGateway{}
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(st.GatewayObj), gw)).To(Succeed())
		d := meta.FindStatusCondition(gw.Status.Conditions, openshellv1alpha1.ConditionDegraded)
		g.Expect(d).NotTo(BeNil())
		return d
	}
	g.Eventually(func(g Gomega) { g.Expect(degradedBy(g).Status).To(Equal(metav1.ConditionFalse)) }).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())

	st.Gateway.ReportVersion("0.2.0")
	poke(ctx, g, st.GatewayObj)
	g.Eventually(func(g Gomega) {
		d := degradedBy(g)
		g.Expect(d.Reason).To(Equal(openshellv1alpha1.GatewayReasonVersionNotSupported))
		g.Expect(d.Message).To(ContainSubstring("0.2.0 is not one the operator speaks (0.0.111 and later 0.0.x, and 0.1.x)"))
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
		g.Expect(r.Message).To(ContainSubstring("not one the operator speaks"))
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
	g.Expect(st.Gateway.Calls()["CreateSandbox"]).To(Equal(creates), "no create was sent to the 0.2 gateway")

	st.Gateway.ReportVersion("")
	poke(ctx, g, st.GatewayObj)
	waitPhase(ctx, g, client.ObjectKeyFromObject(sb), openshellv1alpha1.SandboxPhaseReady)
}

// poke re-queues a gateway (an annotation change), as the next periodic
// Health check would.
func poke(ctx context.Context, g Gomega, obj client.Object) {
	gw := &openshellv1alpha1.OpenShellGateway{}
	g.ExpectWithOffset(1, cluster.Client.Get(ctx, client.ObjectKeyFromObject(obj), gw)).To(Succeed())
	patch := client.MergeFrom(gw.DeepCopy())
	metav1.SetMetaDataAnnotation(&gw.ObjectMeta, "test/poke", time.Now().String())
	g.ExpectWithOffset(1, cluster.Client.Patch(ctx, gw, patch)).To(Succeed())
}

// TestGatewayUpgradedInPlaceTo01: sandboxes, their policy and provider made
// on a 0.0.111 gateway keep working when the gateway is upgraded in place to
// 0.1 (it reports 0.1.5 and from then on speaks only the 0.1 wire): the
// provider's profile is imported into the tenant's catalog and the provider
// given again naming it, a policy edit and a credential rotation reach it
// in 0.1 messages, a new sandbox is created and deleted there, and nothing
// is re-created.
func TestGatewayUpgradedInPlaceTo01(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := cluster.Client
	st, tenant, _ := startLineStack(ctx, t, g, "wire")

	secret, first := createSampleTenant(ctx, t, tenant, "sk-before", client.ObjectKeyFromObject(st.GatewayObj))
	waitPhase(ctx, g, client.ObjectKeyFromObject(first), openshellv1alpha1.SandboxPhaseReady)
	id := sandboxStatus(ctx, g, client.ObjectKeyFromObject(first)).Status.SandboxID
	g.Expect(st.Gateway.LineCalls()).To(HaveKey("0.0 CreateSandbox"))

	// 0.1 has no built-in profiles: the Tenant Admin declares the one the
	// provider needs (unused on 0.0.111, imported once the gateway is 0.1).
	declareSampleProfile(ctx, t, tenant)
	upgradeInPlace(ctx, g, st.Gateway, st.GatewayObj, "0.1.5")
	gw := &openshellv1alpha1.OpenShellGateway{}
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(st.GatewayObj), gw)).To(Succeed())
	g.Expect(meta.IsStatusConditionTrue(gw.Status.Conditions, openshellv1alpha1.ConditionAvailable)).To(BeTrue(), "%+v", gw.Status.Conditions)
	keepsWorkingOn01(ctx, g, st.Gateway, tenant, secret, first, id)
}

// keepsWorkingOn01 requires a tenant's sample objects (createSampleTenant:
// first, Ready before the upgrade with ID id, and its provider's Secret)
// to work on the gateway gw plays, now on 0.1: a policy edit and a
// credential rotation reach it in 0.1 messages, a new sandbox is created
// and both are deleted there, and nothing was re-created.
func keepsWorkingOn01(ctx context.Context, g Gomega, gw *testgateway.Gateway, tenant string, secret *corev1.Secret, first *openshellv1alpha1.OpenShellSandbox, id string) {
	c := cluster.Client
	ws, name := sandboxWorkspace(ctx, g, tenant), sandboxspec.SandboxName(tenant, first.Name)
	before := gw.SandboxPolicyVersion(ws, name)
	addNetworkRule(ctx, g, tenant, "restricted", "github", "api.github.com")
	g.Eventually(func() uint32 { return gw.SandboxPolicyVersion(ws, name) }).WithContext(ctx).WithTimeout(30 * time.Second).Should(Equal(before + 1))
	setSecretValue(ctx, g, client.ObjectKeyFromObject(secret), "ANTHROPIC_API_KEY", "sk-after")
	g.Eventually(func() map[string]string { return gw.StoredCredentials(ws, "anthropic") }).
		WithContext(ctx).WithTimeout(30 * time.Second).Should(Equal(map[string]string{"ANTHROPIC_API_KEY": "sk-after"}))

	second := first.DeepCopy()
	second.ObjectMeta = metav1.ObjectMeta{Name: "after-upgrade", Namespace: tenant}
	g.Expect(c.Create(ctx, second)).To(Succeed())
	waitPhase(ctx, g, client.ObjectKeyFromObject(second), openshellv1alpha1.SandboxPhaseReady)
	g.Expect(sandboxStatus(ctx, g, client.ObjectKeyFromObject(first)).Status.SandboxID).To(Equal(id), "the upgrade re-created a sandbox")

	for _, sb := range []*openshellv1alpha1.OpenShellSandbox{first, second} {
		g.Expect(c.Delete(ctx, sb)).To(Succeed())
		g.Eventually(func() error { return c.Get(ctx, client.ObjectKeyFromObject(sb), sb) }).WithContext(ctx).WithTimeout(time.Minute).
			Should(Satisfy(apierrors.IsNotFound))
	}
	g.Expect(gw.SandboxNames(ws)).To(BeEmpty())
	calls := gw.LineCalls()
	for _, m := range []string{"UpdateConfig", "UpdateProvider", "CreateSandbox", "DeleteSandbox"} {
		g.Expect(calls).To(HaveKey("0.1 "+m), "the 0.1 gateway was not sent %s in 0.1 messages", m)
	}
}

// TestRunToCompletion: on a 0.1 gateway an agent whose command exits 0 is
// Completed with its exit code, and ttlSecondsAfterFinished deletes the
// sandbox (at the gateway too); one that exits 3 is Error with its code and
// reason Exited, and without a TTL it stays.
func TestRunToCompletion(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := cluster.Client
	st, tenant, _ := startLineStack(ctx, t, g, "done")
	upgradeInPlace(ctx, g, st.Gateway, st.GatewayObj, "0.1.5")

	ws := sandboxWorkspace(ctx, g, tenant)
	job := sandboxOn(tenant, "job", st.GatewayObj)
	job.Spec.Command, job.Spec.TTLSecondsAfterFinished = []string{"python", "train.py"}, ptr.To[int32](2)
	failing := sandboxOn(tenant, "failing", st.GatewayObj)
	failing.Spec.Command = []string{"false"}
	for _, sb := range []*openshellv1alpha1.OpenShellSandbox{job, failing} {
		g.Expect(c.Create(ctx, sb)).To(Succeed())
		waitPhase(ctx, g, client.ObjectKeyFromObject(sb), openshellv1alpha1.SandboxPhaseReady)
	}

	g.Expect(st.Gateway.Exit(ws, sandboxspec.SandboxName(tenant, job.Name), 0)).To(Succeed())
	g.Expect(st.Gateway.Exit(ws, sandboxspec.SandboxName(tenant, failing.Name), 3)).To(Succeed())
	g.Eventually(func(g Gomega) {
		cur := sandboxStatus(ctx, g, client.ObjectKeyFromObject(failing))
		g.Expect(cur.Status.Phase).To(Equal(openshellv1alpha1.SandboxPhaseError))
		g.Expect(cur.Status.ExitCode).To(HaveValue(Equal(int32(3))))
		g.Expect(cur.Status.CompletionTime).NotTo(BeNil())
		ready := meta.FindStatusCondition(cur.Status.Conditions, openshellv1alpha1.ConditionReady)
		g.Expect(ready.Reason).To(Equal(openshellv1alpha1.SandboxReasonExited))
		g.Expect(ready.Message).To(ContainSubstring("exited with code 3"))
	}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
	// The job is seen Completed (with its code), then deleted by its TTL.
	completed := false
	g.Eventually(func(g Gomega) {
		cur := &openshellv1alpha1.OpenShellSandbox{}
		err := c.Get(ctx, client.ObjectKeyFromObject(job), cur)
		if err == nil && cur.Status.Phase == openshellv1alpha1.SandboxPhaseCompleted {
			g.Expect(cur.Status.ExitCode).To(HaveValue(Equal(int32(0))))
			g.Expect(meta.FindStatusCondition(cur.Status.Conditions, openshellv1alpha1.ConditionReady).Reason).To(Equal(openshellv1alpha1.SandboxReasonCompleted))
			completed = true
		}
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the finished job is still there")
	}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(100 * time.Millisecond).Should(Succeed())
	g.Expect(completed).To(BeTrue(), "the job was never reported Completed")
	g.Expect(st.Gateway.SandboxNames(ws)).NotTo(ContainElement(sandboxspec.SandboxName(tenant, job.Name)))
	g.Expect(sandboxStatus(ctx, g, client.ObjectKeyFromObject(failing)).Status.Phase).To(Equal(openshellv1alpha1.SandboxPhaseError), "no TTL: it stays")
}

// TestPodLabelAllowlistOf015: a gateway from 0.1.5 refuses template labels
// its driver does not allowlist. One whose allowed_pod_labels lacks the
// operator's labels refuses the sandbox, and the sandbox says which label
// and which setting (RejectedByGateway, not retried); the stack's gateways
// list them as docs/gateway-lines.md tells platform admins to.
func TestPodLabelAllowlistOf015(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := cluster.Client
	st, tenant, sbNS := startLineStack(ctx, t, g, "allow")
	strict, strictObj, err := st.AddGatewayWith(ctx, c, "strict", sbNS, func(o *testgateway.Options, _ *openshellv1alpha1.OpenShellGateway) {
		o.AllowedPodLabels = nil // not configured for the operator
	})
	g.Expect(err).NotTo(HaveOccurred())
	upgradeInPlace(ctx, g, st.Gateway, st.GatewayObj, "0.1.5")
	upgradeInPlace(ctx, g, strict, strictObj, "0.1.5")
	allowed, refused := sandboxOn(tenant, "allowed", st.GatewayObj), sandboxOn(tenant, "refused", strictObj)
	for _, sb := range []*openshellv1alpha1.OpenShellSandbox{allowed, refused} {
		g.Expect(c.Create(ctx, sb)).To(Succeed())
	}
	waitPhase(ctx, g, client.ObjectKeyFromObject(allowed), openshellv1alpha1.SandboxPhaseReady)
	g.Eventually(func(g Gomega) {
		cur := sandboxStatus(ctx, g, client.ObjectKeyFromObject(refused))
		synced := meta.FindStatusCondition(cur.Status.Conditions, openshellv1alpha1.ConditionSynced)
		g.Expect(synced).NotTo(BeNil())
		g.Expect(synced.Reason).To(Equal(openshellv1alpha1.SandboxReasonRejectedByGateway), "%+v", cur.Status.Conditions)
		g.Expect(synced.Message).To(And(ContainSubstring(sandboxspec.TemplateLabel), ContainSubstring("allowed_pod_labels")))
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
	g.Expect(strict.LineCalls()["0.1 CreateSandbox"]).To(BeNumerically(">=", 1))
}

// startLineStack starts a stack (the operator and a test gateway, at
// 0.0.111) watching a platform, a sandbox and a tenant namespace named
// after prefix; it stops with the test.
func startLineStack(ctx context.Context, t *testing.T, g Gomega, prefix string) (st *stack.Stack, tenant, sandboxNS string) {
	t.Helper()
	st, tenants, sandboxNS := startLineStackWith(ctx, t, g, prefix, 1)
	return st, tenants[0], sandboxNS
}

// startLineStackWith is startLineStack with n tenant namespaces, each
// watched and admitted.
func startLineStackWith(ctx context.Context, t *testing.T, g Gomega, prefix string, n int, controllers ...operator.ControllerOptions) (
	st *stack.Stack, tenants []string, sandboxNS string) {
	t.Helper()
	c := cluster.Client
	gwNS, sbNS := framework.CreateNamespace(ctx, t, c, prefix+"-platform"), framework.CreateNamespace(ctx, t, c, prefix+"-sandboxes")
	for i := range n {
		name := prefix + "-tenant"
		if i > 0 {
			name = fmt.Sprintf("%s-tenant%d", prefix, i+1)
		}
		tenants = append(tenants, framework.CreateNamespace(ctx, t, c, name))
	}
	mopts := operator.Options{WatchNamespaces: append([]string{gwNS, sbNS}, tenants...)}
	for _, o := range controllers {
		mopts.Controllers = o
	}
	st, err := stack.Start(ctx, cluster.Config, c, stack.Options{GatewayNamespace: gwNS, SandboxNamespace: sbNS, Manager: mopts})
	g.ExpectWithOffset(1, err).NotTo(HaveOccurred())
	t.Cleanup(func() { g.Expect(st.Stop()).To(Succeed()) })
	return st, tenants, sbNS
}

// upgradeInPlace makes a test gateway report version (and speak its line's
// wire from its next call on), and waits until the operator has seen it.
func upgradeInPlace(ctx context.Context, g Gomega, gw *testgateway.Gateway, obj *openshellv1alpha1.OpenShellGateway, version string) {
	gw.ReportVersion(version)
	poke(ctx, g, obj)
	g.EventuallyWithOffset(1, func(g Gomega) {
		cur := &openshellv1alpha1.OpenShellGateway{}
		g.Expect(cluster.Client.Get(ctx, client.ObjectKeyFromObject(obj), cur)).To(Succeed())
		g.Expect(cur.Status.Version).To(Equal(version))
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
}

// TestCreateIsIdempotentOn01: on a 0.1 gateway a sandbox create carries a
// request_id. When the gateway created the sandbox but its answer was
// lost, the operator's retry carries the same key and is answered with
// the same sandbox (replayed, not a second create nor an adoption); when
// the gateway later loses that sandbox, the create that replaces it
// carries a key of its own (status.replacedSandboxID), so it is not
// answered with the replay of the first — which names a sandbox that no
// longer exists — and the sandbox is Ready again under a new ID.
func TestCreateIsIdempotentOn01(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := cluster.Client
	st, tenant, _ := startLineStack(ctx, t, g, "reqid")
	upgradeInPlace(ctx, g, st.Gateway, st.GatewayObj, "0.1.5")
	gw := st.Gateway

	gw.LoseNextResponse("CreateSandbox")
	sb := sandboxOn(tenant, "agent", st.GatewayObj)
	g.Expect(c.Create(ctx, sb)).To(Succeed())
	waitPhase(ctx, g, client.ObjectKeyFromObject(sb), openshellv1alpha1.SandboxPhaseReady)
	first := sandboxStatus(ctx, g, client.ObjectKeyFromObject(sb)).Status.SandboxID
	g.Expect(gw.Replayed()).To(Equal(1), "the retry after the lost answer was not answered from the replay")
	ws, name := sandboxWorkspace(ctx, g, tenant), sandboxspec.SandboxName(tenant, sb.Name)
	g.Expect(gw.SandboxNames(ws)).To(Equal([]string{name}))

	// The gateway loses it (its admin deletes it): re-created, new key.
	_, err := gw.DeleteSandbox(ctx, &legacyopenshellv1.DeleteSandboxRequest{Name: name, Workspace: ws})
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func(g Gomega) {
		cur := sandboxStatus(ctx, g, client.ObjectKeyFromObject(sb))
		g.Expect(cur.Status.SandboxID).NotTo(BeElementOf("", first), "not re-created: phase %s, %+v, located %+v (live: %s); %s; the operator's log:\n%s",
			cur.Status.Phase, cur.Status.Conditions, cur.Status.AgentSandbox, agentSandboxLive(ctx, cur.Status.AgentSandbox), gw.Describe(ws),
			framework.RecentLogs(40, tenant, first))
		g.Expect(cur.Status.ReplacedSandboxID).To(Equal(first))
		g.Expect(cur.Status.Phase).To(Equal(openshellv1alpha1.SandboxPhaseReady), "%+v", cur.Status.Conditions)
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
	g.Expect(gw.Replayed()).To(Equal(1), "the replacement was answered with the first incarnation's replay")
}

// agentSandboxLive says, for a failure message, what the API server holds
// of the agents.x-k8s.io Sandbox status located: gone, or its deletion
// timestamp and finalizers.
func agentSandboxLive(ctx context.Context, ref *openshellv1alpha1.AgentSandboxReference) string {
	if ref == nil {
		return "none located"
	}
	o := &metav1.PartialObjectMetadata{}
	o.SetGroupVersionKind(schema.FromAPIVersionAndKind(ref.APIVersion, "Sandbox"))
	if err := cluster.Client.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, o); err != nil {
		return err.Error()
	}
	return fmt.Sprintf("exists, deletionTimestamp %v, finalizers %v, resourceVersion %s", o.DeletionTimestamp, o.Finalizers, o.ResourceVersion)
}
