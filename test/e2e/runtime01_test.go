package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	render "github.com/openshell/openshell-operator/internal/render/gateway"
	"github.com/openshell/openshell-operator/test/stack"
	"github.com/openshell/openshell-operator/test/testgateway"
)

// TestManagedGatewayRuns01Runtime: a Managed gateway on the operator's
// default 0.1 release provisions a tenant's sandbox as the two-pod
// runtime, with exactly the RBAC the operator granted its ServiceAccount
// (the test gateway playing its pod makes every Kubernetes request as that
// account): the namespace fence, the workload Pod the Agent Sandbox
// controller creates from the gated template, the supervisor Pod, the
// boundary Service and both bootstrap Secrets; both Pods run without a
// capability once released. Suspending ends the generation's Pods and
// resuming starts the next one. Deleting the sandbox removes every runtime
// object. Three things beyond it are checked refused: Secret reads in the
// sandbox namespace, and Pod or Secret creation in a tenant namespace.
func TestManagedGatewayRuns01Runtime(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := cluster.Client
	rt := startRuntime01Sandbox(ctx, t, g, "rt01")
	m, tenant, key, ns, id := rt.gateway, rt.tenant, rt.key, rt.ns, rt.id
	n := render.NamesFor(m.Object)

	for _, name := range []string{testgateway.FenceWorkloads, testgateway.FenceSupervisors} {
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &networkingv1.NetworkPolicy{})).To(Succeed(), "fence %s", name)
	}
	runtimePods := func(g Gomega) (workload, supervisor *corev1.Pod) { return runtimePods01(ctx, g, ns, id) }
	workload, supervisor := runtimePods(g)
	for _, p := range []*corev1.Pod{workload, supervisor} {
		g.Expect(p.Spec.SchedulingGates).To(BeEmpty(), "%s is still gated", p.Name)
		g.Expect(p.Spec.AutomountServiceAccountToken).To(HaveValue(BeFalse()), p.Name)
		for _, ctr := range append(append([]corev1.Container{}, p.Spec.InitContainers...), p.Spec.Containers...) {
			g.Expect(ctr.SecurityContext.Capabilities.Add).To(BeEmpty(), "%s/%s adds capabilities", p.Name, ctr.Name)
			g.Expect(ctr.SecurityContext.Capabilities.Drop).To(ConsistOf(corev1.Capability("ALL")), "%s/%s", p.Name, ctr.Name)
			g.Expect(ctr.SecurityContext.RunAsNonRoot).To(HaveValue(BeTrue()), "%s/%s", p.Name, ctr.Name)
		}
	}
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "os-boundary-" + strings.ToLower(id)}, &corev1.Service{})).To(Succeed())
	secrets := func(g Gomega) []string {
		list := &corev1.SecretList{}
		g.Expect(c.List(ctx, list, client.InNamespace(ns))).To(Succeed())
		var names []string
		for _, s := range list.Items {
			if s.Labels["openshell.ai/component"] == "sandbox-bootstrap" || s.Labels["openshell.ai/component"] == "supervisor-bootstrap" {
				names = append(names, s.Name)
			}
		}
		return names
	}
	bootstrapSecrets := func(gen string) []string {
		return []string{"os-sandbox-" + strings.ToLower(id) + "-" + gen, "os-supervisor-" + strings.ToLower(id) + "-" + gen}
	}
	g.Expect(secrets(g)).To(ConsistOf(bootstrapSecrets("000000000001")))

	// The account's grants go no further than the runtime needs.
	as := func(attrs authorizationv1.ResourceAttributes) bool {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:   serviceaccount.MakeUsername(m.Object.Namespace, n.Fullname),
			Groups: append(serviceaccount.MakeGroupNames(m.Object.Namespace), user.AllAuthenticated), ResourceAttributes: &attrs}}
		g.Expect(c.Create(ctx, sar)).To(Succeed())
		return sar.Status.Allowed
	}
	g.Expect(as(authorizationv1.ResourceAttributes{Namespace: ns, Verb: "get", Resource: "secrets"})).To(BeFalse(), "the gateway may read Secrets in its sandbox namespace")
	g.Expect(as(authorizationv1.ResourceAttributes{Namespace: tenant, Verb: "create", Resource: "pods"})).To(BeFalse(), "the gateway may create Pods in a tenant namespace")
	g.Expect(as(authorizationv1.ResourceAttributes{Namespace: tenant, Verb: "create", Resource: "secrets"})).To(BeFalse(), "the gateway may create Secrets in a tenant namespace")

	// Suspend: the generation's Pods go. Resume: the next generation.
	setSuspend(ctx, g, key, true)
	waitPhase(ctx, g, key, openshellv1alpha1.SandboxPhaseSuspended)
	g.Eventually(func(g Gomega) {
		pods := &corev1.PodList{}
		g.Expect(c.List(ctx, pods, client.InNamespace(ns), client.MatchingLabels{testgateway.LabelBoundaryPair: strings.ToLower(id)})).To(Succeed())
		g.Expect(pods.Items).To(BeEmpty(), "runtime Pods left while suspended")
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
	setSuspend(ctx, g, key, false)
	waitPhase(ctx, g, key, openshellv1alpha1.SandboxPhaseReady)
	g.Eventually(func(g Gomega) {
		_, sup := runtimePods(g)
		g.Expect(sup.UID).NotTo(Equal(supervisor.UID))
		g.Expect(sup.Spec.SchedulingGates).To(BeEmpty())
		g.Expect(secrets(g)).To(ContainElements(bootstrapSecrets("000000000002")))
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())

	// Deletion: nothing of the runtime stays (the garbage collector
	// follows the owner references the driver set).
	g.Expect(c.Delete(ctx, rt.sandbox)).To(Succeed())
	g.Eventually(func(g Gomega) {
		pods := &corev1.PodList{}
		g.Expect(c.List(ctx, pods, client.InNamespace(ns), client.MatchingLabels{testgateway.LabelBoundaryPair: strings.ToLower(id)})).To(Succeed())
		g.Expect(pods.Items).To(BeEmpty(), "runtime Pods left")
		g.Expect(secrets(g)).To(BeEmpty(), "bootstrap Secrets left")
		svc := &corev1.ServiceList{}
		g.Expect(c.List(ctx, svc, client.InNamespace(ns), client.MatchingLabels{testgateway.LabelSandboxID: id})).To(Succeed())
		g.Expect(svc.Items).To(BeEmpty(), "boundary Service left")
		crs := &unstructured.UnstructuredList{}
		crs.SetGroupVersionKind(sandboxGVK)
		g.Expect(c.List(ctx, crs, client.InNamespace(ns), client.MatchingLabels{testgateway.LabelSandboxID: id})).To(Succeed())
		g.Expect(crs.Items).To(BeEmpty(), "agents.x-k8s.io Sandbox left")
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
}

// runtimePods01 finds a 0.1 sandbox's live (not terminating) workload and
// supervisor Pods by their boundary labels.
// runtime01Sandbox is the sample tenant's sandbox, Ready, at a Managed
// gateway on the operator's default 0.1 release: the gateway, the sandbox,
// the tenant namespace, its key, the gateway's sandbox namespace and the
// sandbox's ID there.
type runtime01Sandbox struct {
	gateway        *stack.ManagedGateway
	sandbox        *openshellv1alpha1.OpenShellSandbox
	tenant, ns, id string
	key            client.ObjectKey
}

func startRuntime01Sandbox(ctx context.Context, t *testing.T, g Gomega, prefix string) runtime01Sandbox {
	t.Helper()
	_, m, tenant := startManagedStack(ctx, t, g, prefix, "")
	declareSampleProfile(ctx, t, tenant)
	_, sb := createSampleTenant(ctx, t, tenant, "sk-rt", client.ObjectKeyFromObject(m.Object))
	key := client.ObjectKeyFromObject(sb)
	waitPhase(ctx, g, key, openshellv1alpha1.SandboxPhaseReady)
	return runtime01Sandbox{gateway: m, sandbox: sb, tenant: tenant, key: key, ns: render.NamesFor(m.Object).SandboxNamespace,
		id: sandboxStatus(ctx, g, key).Status.SandboxID}
}

func runtimePods01(ctx context.Context, g Gomega, ns, id string) (workload, supervisor *corev1.Pod) {
	pods := &corev1.PodList{}
	g.Expect(cluster.Client.List(ctx, pods, client.InNamespace(ns), client.MatchingLabels{testgateway.LabelBoundaryPair: strings.ToLower(id)})).To(Succeed())
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp != nil {
			continue
		}
		switch p.Labels[testgateway.LabelBoundaryRole] {
		case "workload":
			workload = p
		case "supervisor":
			supervisor = p
		}
	}
	g.Expect(workload).NotTo(BeNil(), "no workload Pod")
	g.Expect(supervisor).NotTo(BeNil(), "no supervisor Pod")
	return workload, supervisor
}

// TestRuntime01ResumeWaitsForTheOldWorkloadPod: a resume while the previous
// generation's workload Pod is still terminating (held here by a finalizer;
// a slow kubelet does the same). The new generation's Pod has the same
// name. While the old Pod stays, the sandbox is neither Ready nor failed
// and no Secret of the new generation exists; once it goes, the sandbox is
// Ready on a new Pod that mounts the new generation's Secret, which it
// owns, ungated. (Here the resume itself waits for the old Pod; the
// bootstrap's own guard against a terminating Pod is not reached.)
func TestRuntime01ResumeWaitsForTheOldWorkloadPod(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := cluster.Client
	rt := startRuntime01Sandbox(ctx, t, g, "rt01old")
	key, ns, id := rt.key, rt.ns, rt.id
	old, _ := runtimePods01(ctx, g, ns, id)

	const hold = "openshell-e2e/hold"
	g.Expect(c.Patch(ctx, old, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":["`+hold+`"]}}`)))).To(Succeed())
	release := func() {
		_ = c.Patch(context.Background(), old, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
	}
	defer release()
	setSuspend(ctx, g, key, true)
	waitPhase(ctx, g, key, openshellv1alpha1.SandboxPhaseSuspended)
	g.Eventually(func(g Gomega) {
		cur := &corev1.Pod{}
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(old), cur)).To(Succeed())
		g.Expect(cur.DeletionTimestamp).NotTo(BeNil())
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed(), "the suspended generation's workload Pod is not terminating")
	setSuspend(ctx, g, key, false)
	// The operator has acted on the resume before the window is watched.
	g.Eventually(func(g Gomega) {
		cur := sandboxStatus(ctx, g, key)
		g.Expect(cur.Status.ObservedGeneration).To(Equal(cur.Generation))
	}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
	gen2 := client.ObjectKey{Namespace: ns, Name: "os-sandbox-" + strings.ToLower(id) + "-000000000002"}
	g.Consistently(func(g Gomega) {
		phase := sandboxStatus(ctx, g, key).Status.Phase
		g.Expect(phase).NotTo(BeElementOf(openshellv1alpha1.SandboxPhaseReady, openshellv1alpha1.SandboxPhaseError))
		cur := &corev1.Pod{}
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(old), cur)).To(Succeed())
		g.Expect(cur.UID).To(Equal(old.UID))
		err := c.Get(ctx, gen2, &corev1.Secret{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the new generation was bootstrapped on the old Pod: %v", err)
	}).WithContext(ctx).WithTimeout(3 * time.Second).WithPolling(250 * time.Millisecond).Should(Succeed())
	release()
	waitPhase(ctx, g, key, openshellv1alpha1.SandboxPhaseReady)
	workload, _ := runtimePods01(ctx, g, ns, id)
	g.Expect(workload.UID).NotTo(Equal(old.UID))
	g.Expect(workload.Spec.SchedulingGates).To(BeEmpty())
	var mounted []string
	for _, v := range workload.Spec.Volumes {
		if v.Secret != nil {
			mounted = append(mounted, v.Secret.SecretName)
		}
	}
	g.Expect(mounted).To(ContainElement(gen2.Name))
	secret := &corev1.Secret{}
	g.Expect(c.Get(ctx, gen2, secret)).To(Succeed())
	g.Expect(secret.OwnerReferences).To(ContainElement(HaveField("UID", workload.UID)), "owned by the new Pod")
}

// setSuspend sets an OpenShellSandbox's spec.suspend.
func setSuspend(ctx context.Context, g Gomega, key client.ObjectKey, v bool) {
	g.ExpectWithOffset(1, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &openshellv1alpha1.OpenShellSandbox{}
		if err := cluster.Client.Get(ctx, key, cur); err != nil {
			return err
		}
		cur.Spec.Suspend = v
		return cluster.Client.Update(ctx, cur)
	})).To(Succeed())
}
