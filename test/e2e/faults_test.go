package e2e

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/controllers/sandbox"
	"github.com/openshell/openshell-operator/internal/sandboxspec"
	"github.com/openshell/openshell-operator/operator"
	"github.com/openshell/openshell-operator/test/framework"
	"github.com/openshell/openshell-operator/test/stack"
	"github.com/openshell/openshell-operator/test/testgateway"
)

// faultEnv is a stack (operator plus test gateway) with its own platform,
// sandbox and tenant namespaces, for one fault scenario.
type faultEnv struct {
	st                 *stack.Stack
	gwNS, sbNS, tenant string
}

func newFaultEnv(ctx context.Context, t *testing.T, prefix string, proc *stack.ProcessOptions) faultEnv {
	t.Helper()
	return newFaultEnvWith(ctx, t, prefix, stack.Options{Process: proc})
}

// newFaultEnvWith is newFaultEnv with more stack options.
func newFaultEnvWith(ctx context.Context, t *testing.T, prefix string, opts stack.Options) faultEnv {
	t.Helper()
	c := cluster.Client
	e := faultEnv{gwNS: framework.CreateNamespace(ctx, t, c, prefix+"-platform"), sbNS: framework.CreateNamespace(ctx, t, c, prefix+"-sandboxes"),
		tenant: framework.CreateNamespace(ctx, t, c, prefix+"-tenant")}
	opts.GatewayNamespace, opts.SandboxNamespace = e.gwNS, e.sbNS
	st, err := stack.Start(ctx, cluster.Config, c, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := st.Stop(); err != nil {
			t.Error(err)
		}
	})
	e.st = st
	return e
}

// TestDeleteDuringCreate deletes an OpenShellSandbox while its
// CreateSandbox is in flight: the gateway has created the sandbox, the
// response has not arrived, and the create's status write then loses to
// the deletion. Nothing may be orphaned, at the gateway or in
// agents.x-k8s.io: the deletion asks the gateway by the names the operator
// derives.
func TestDeleteDuringCreate(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := cluster.Client
	e := newFaultEnv(ctx, t, "faults", nil)
	sb, at, release := heldCreate(ctx, t, e, "racer")
	defer release()
	g.Expect(c.Delete(ctx, sb)).To(Succeed())
	release()
	expectGoneEverywhere(ctx, t, e, sb, at)
}

// gatewaySandbox names a sandbox at the test gateway.
type gatewaySandbox struct{ workspace, name string }

// heldCreate creates a sandbox and returns once the gateway has created it
// and holds the answer to CreateSandbox until release.
func heldCreate(ctx context.Context, t *testing.T, e faultEnv, name string) (*openshellv1alpha1.OpenShellSandbox, gatewaySandbox, func()) {
	t.Helper()
	g := NewWithT(t)
	c := cluster.Client
	reached, release := e.st.Gateway.HoldNext("CreateSandbox")
	sb := sandboxOn(e.tenant, name, e.st.GatewayObj)
	g.Expect(c.Create(ctx, sb)).To(Succeed())
	select {
	case <-reached:
	case <-ctx.Done():
		release()
		t.Fatal("CreateSandbox never reached the gateway")
	}
	return sb, createdAtGateway(ctx, g, e, sb), release
}

// createdAtGateway names sb's sandbox at the test gateway and checks the
// gateway created it.
func createdAtGateway(ctx context.Context, g Gomega, e faultEnv, sb *openshellv1alpha1.OpenShellSandbox) gatewaySandbox {
	ns := &corev1.Namespace{}
	g.Expect(cluster.Client.Get(ctx, client.ObjectKey{Name: e.tenant}, ns)).To(Succeed())
	at := gatewaySandbox{sandboxspec.WorkspaceName(e.tenant, ns.UID), sandboxspec.SandboxName(e.tenant, sb.Name)}
	g.Expect(e.st.Gateway.SandboxNames(at.workspace)).To(ContainElement(at.name), "the gateway created the sandbox")
	return at
}

// expectGoneEverywhere waits until the object is released and checks that
// nothing of it is left at the gateway or in agents.x-k8s.io.
func expectGoneEverywhere(ctx context.Context, t *testing.T, e faultEnv, sb *openshellv1alpha1.OpenShellSandbox, at gatewaySandbox) {
	t.Helper()
	g := NewWithT(t)
	c := cluster.Client
	g.Eventually(func() error { return c.Get(ctx, client.ObjectKeyFromObject(sb), sb) }).WithContext(ctx).WithTimeout(time.Minute).
		Should(Satisfy(apierrors.IsNotFound), "the sandbox was not released")
	g.Expect(e.st.Gateway.SandboxNames(at.workspace)).NotTo(ContainElement(at.name), "orphaned at the gateway")
	g.Eventually(func(g Gomega) {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(sandboxGVK)
		g.Expect(c.List(ctx, list, client.InNamespace(e.sbNS))).To(Succeed())
		g.Expect(list.Items).To(BeEmpty(), "orphaned agents.x-k8s.io Sandboxes")
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
}

// TestCrashBeforeTheFirstStatusWrite kills the operator after the gateway
// created a sandbox and before any status write recorded it (the first
// report of a create waits for the sandbox to settle, and its memory of the
// create dies with the process), then deletes the object while the
// operator is down. The restarted operator finds the sandbox by the names
// it derives and deletes it: nothing is orphaned.
func TestCrashBeforeTheFirstStatusWrite(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := cluster.Client
	bin, err := framework.OperatorBinary()
	g.Expect(err).NotTo(HaveOccurred())
	e := newFaultEnv(ctx, t, "crash", &stack.ProcessOptions{Binary: bin, Kubeconfig: cluster.KubeconfigPath, Dir: t.TempDir()})
	sb, at, release := heldCreate(ctx, t, e, "crasher")
	defer release()
	g.Expect(e.st.Crash()).To(Succeed())
	release()
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(sb), sb)).To(Succeed())
	g.Expect(sb.Finalizers).To(ContainElement(openshellv1alpha1.SandboxFinalizer))
	g.Expect(sb.Status.SandboxID).To(BeEmpty(), "status recorded the create: this test needs it unrecorded")
	g.Expect(sb.Status.Workspace).To(BeEmpty(), "status recorded the create: this test needs it unrecorded")

	// The restarted operator's first look at the gateway fails (under load
	// its first calls can: a deadline, the gateway fetching the new
	// process's signing keys). Nothing recorded a gateway sandbox, yet one
	// may exist — this one does — so the deletion must wait for the
	// gateway's word rather than release.
	e.st.Gateway.SetUnavailable(true)
	g.Expect(c.Delete(ctx, sb)).To(Succeed())
	g.Expect(e.st.RestartManagerWith(nil)).To(Succeed())
	g.Eventually(func(g Gomega) {
		cur := sandboxStatus(ctx, g, client.ObjectKeyFromObject(sb))
		g.Expect(cur.Status.Phase).To(Equal(openshellv1alpha1.SandboxPhaseDeleting))
		r := meta.FindStatusCondition(cur.Status.Conditions, openshellv1alpha1.ConditionGatewayReachable)
		g.Expect(r).NotTo(BeNil())
		g.Expect(r.Status).To(Equal(metav1.ConditionFalse))
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed(), "released (or not reported) while the gateway could not say")
	e.st.Gateway.SetUnavailable(false)
	expectGoneEverywhere(ctx, t, e, sb, at)
}

// TestDeleteDuringCreateOfAPendingSandbox is TestDeleteDuringCreate for a
// sandbox whose status already says Pending when its create is sent (it
// waited for its provider to be pushed): the create's status write loses
// to the deletion, and status records no gateway sandbox, only Pending.
// The deletion must still ask the gateway by the names it derives, and
// the provider the sandbox attached must be withdrawn from it.
func TestDeleteDuringCreateOfAPendingSandbox(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := cluster.Client
	e := newFaultEnv(ctx, t, "pending", nil)
	g.Expect(c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds", Namespace: e.tenant},
		StringData: map[string]string{"API_KEY": "k"}})).To(Succeed())
	prov := &openshellv1alpha1.OpenShellProvider{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: e.tenant},
		Spec: openshellv1alpha1.OpenShellProviderSpec{Type: "generic",
			CredentialsSecretRef: &openshellv1alpha1.ProviderCredentialsReference{Name: "creds"}}}
	g.Expect(c.Create(ctx, prov)).To(Succeed())
	// The sandbox makes the provider go to its gateway; while that push is
	// held, the sandbox's status says Pending.
	provReached, provRelease := e.st.Gateway.HoldNext("CreateProvider")
	defer provRelease()
	createReached, createRelease := e.st.Gateway.HoldNext("CreateSandbox")
	defer createRelease()
	sb := sandboxOn(e.tenant, "late", e.st.GatewayObj)
	sb.Spec.Providers = []string{"p"}
	g.Expect(c.Create(ctx, sb)).To(Succeed())
	waitPhase(ctx, g, client.ObjectKeyFromObject(sb), openshellv1alpha1.SandboxPhasePending)
	select {
	case <-provReached:
	case <-ctx.Done():
		t.Fatal("CreateProvider never reached the gateway")
	}
	provRelease()
	select {
	case <-createReached:
	case <-ctx.Done():
		t.Fatal("CreateSandbox never reached the gateway")
	}
	at := createdAtGateway(ctx, g, e, sb)
	g.Expect(c.Delete(ctx, sb)).To(Succeed())
	createRelease()
	expectGoneEverywhere(ctx, t, e, sb, at)
	// With the sandbox gone the provider is attached nowhere: it can go too.
	g.Expect(c.Delete(ctx, prov)).To(Succeed())
	g.Eventually(func() error { return c.Get(ctx, client.ObjectKeyFromObject(prov), prov) }).WithContext(ctx).WithTimeout(time.Minute).
		Should(Satisfy(apierrors.IsNotFound), "the provider stayed: still attached to an orphan?")
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
	e := newFaultEnv(ctx, t, "drain", nil)
	st, tenant := e.st, e.tenant
	sb := sandboxOn(tenant, "tenant-agent", st.GatewayObj)
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
	e := newFaultEnv(ctx, t, "sick", nil)
	st, sbNS, tenant := e.st, e.sbNS, e.tenant
	sick, sickObj, err := st.AddGateway(ctx, c, "sick", sbNS)
	g.Expect(err).NotTo(HaveOccurred())
	newSandbox := func(name string, gw *openshellv1alpha1.OpenShellGateway) *openshellv1alpha1.OpenShellSandbox {
		sb := sandboxOn(tenant, name, gw)
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

// TestCreateDeleteRacesWithoutWebhooks: where no admission webhook sets
// the finalizer (make demo, an install without OLM), the controller adds
// it, and a DELETE that read the object before that write still removes
// it (the API server decides immediate deletion from what it read first),
// so a create can land at the gateway with no owner left. The sweep deletes
// what such races leave: nothing stays orphaned beyond one sweep period.
func TestCreateDeleteRacesWithoutWebhooks(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := cluster.Client
	const period = 3 * time.Second
	e := newFaultEnvWith(ctx, t, "rawraces", stack.Options{Manager: operator.Options{Controllers: operator.ControllerOptions{SweepPeriod: period}}})
	n := faultSandboxes()
	var wg sync.WaitGroup
	for i := range n {
		sb := sandboxOn(e.tenant, fmt.Sprintf("race-%d", i), e.st.GatewayObj)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.Create(ctx, sb); err != nil {
				t.Error(err)
				return
			}
			time.Sleep(time.Duration(rand.IntN(1000)) * time.Millisecond) // the race's own timing, not a synchronisation
			if err := client.IgnoreNotFound(c.Delete(ctx, sb)); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	g.Eventually(func(g Gomega) {
		list := &openshellv1alpha1.OpenShellSandboxList{}
		g.Expect(c.List(ctx, list, client.InNamespace(e.tenant))).To(Succeed())
		g.Expect(list.Items).To(BeEmpty(), "sandboxes not released")
	}).WithContext(ctx).WithTimeout(3 * time.Minute).WithPolling(time.Second).Should(Succeed())
	released := time.Now()
	ns := &corev1.Namespace{}
	g.Expect(c.Get(ctx, client.ObjectKey{Name: e.tenant}, ns)).To(Succeed())
	ws := sandboxspec.WorkspaceName(e.tenant, ns.UID)
	orphans := len(e.st.Gateway.SandboxNames(ws))
	g.Eventually(func(g Gomega) {
		g.Expect(e.st.Gateway.SandboxNames(ws)).To(BeEmpty(), "orphaned at the gateway after a sweep")
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(sandboxGVK)
		g.Expect(c.List(ctx, list, client.InNamespace(e.sbNS))).To(Succeed())
		g.Expect(list.Items).To(BeEmpty(), "orphaned agents.x-k8s.io Sandboxes after a sweep")
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
	t.Logf("figure: %d create→delete races without webhooks: %d gateway sandboxes outlived their object, all swept %s after the last release (sweep period %s)",
		n, orphans, time.Since(released).Round(100*time.Millisecond), period)
}

// faultSandboxes is how many sandboxes the crash and restart scenarios
// create (make chaos runs more: CHAOS_SANDBOXES).
func faultSandboxes() int {
	if n, err := strconv.Atoi(os.Getenv("CHAOS_SANDBOXES")); err == nil && n > 0 {
		return n
	}
	return 24
}

// expectAllReadyOnce waits until every sandbox is Ready and checks that the
// gateway and agents.x-k8s.io hold exactly one sandbox each: nothing lost,
// duplicated or orphaned.
func expectAllReadyOnce(ctx context.Context, t *testing.T, st *stack.Stack, tenant, sbNS string, sbs []*openshellv1alpha1.OpenShellSandbox) {
	t.Helper()
	expectReadyOnceOn(ctx, t, tenant, sbNS, map[*testgateway.Gateway][]*openshellv1alpha1.OpenShellSandbox{st.Gateway: sbs})
}

// expectReadyOnceOn is expectAllReadyOnce for sandboxes on several gateways
// that share one sandbox namespace.
func expectReadyOnceOn(ctx context.Context, t *testing.T, tenant, sbNS string, byGateway map[*testgateway.Gateway][]*openshellv1alpha1.OpenShellSandbox) {
	t.Helper()
	g := NewWithT(t)
	ns := &corev1.Namespace{}
	g.Expect(cluster.Client.Get(ctx, client.ObjectKey{Name: tenant}, ns)).To(Succeed())
	ws := sandboxspec.WorkspaceName(tenant, ns.UID)
	total := 0
	for gw, sbs := range byGateway {
		var want []string
		for _, sb := range sbs {
			waitPhase(ctx, g, client.ObjectKeyFromObject(sb), openshellv1alpha1.SandboxPhaseReady)
			want = append(want, sandboxspec.SandboxName(tenant, sb.Name))
		}
		g.Expect(gw.SandboxNames(ws)).To(ConsistOf(want), "the gateway holds exactly one sandbox per object")
		total += len(sbs)
	}
	g.Eventually(func(g Gomega) {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(sandboxGVK)
		g.Expect(cluster.Client.List(ctx, list, client.InNamespace(sbNS))).To(Succeed())
		g.Expect(list.Items).To(HaveLen(total), "agents.x-k8s.io Sandboxes: one per object, none orphaned")
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
}

// sandboxOn is a sandbox named name in namespace ns on gateway gw.
func sandboxOn(ns, name string, gw *openshellv1alpha1.OpenShellGateway) *openshellv1alpha1.OpenShellSandbox {
	return &openshellv1alpha1.OpenShellSandbox{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: openshellv1alpha1.OpenShellSandboxSpec{GatewayRef: openshellv1alpha1.GatewayReference{Name: gw.Name, Namespace: gw.Namespace}}}
}

// createSandboxes creates n sandboxes on the stack's gateway, calling
// between after each (to inject a fault at that point).
func createSandboxes(ctx context.Context, g Gomega, st *stack.Stack, tenant string, n int, between func(i int)) []*openshellv1alpha1.OpenShellSandbox {
	var out []*openshellv1alpha1.OpenShellSandbox
	for i := range n {
		sb := sandboxOn(tenant, fmt.Sprintf("s-%d", i), st.GatewayObj)
		g.Expect(cluster.Client.Create(ctx, sb)).To(Succeed())
		out = append(out, sb)
		between(i)
	}
	return out
}

// TestOperatorKilledDuringCreates SIGKILLs the operator process at random
// moments while sandboxes are being created (a crash mid-reconcile, between
// a gateway call and its status write), restarting it each time: every
// sandbox ends Ready exactly once at the gateway and in agents.x-k8s.io.
func TestOperatorKilledDuringCreates(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin, err := framework.OperatorBinary()
	g.Expect(err).NotTo(HaveOccurred())
	e := newFaultEnv(ctx, t, "kill", &stack.ProcessOptions{Binary: bin, Kubeconfig: cluster.KubeconfigPath, Dir: t.TempDir()})
	st, sbNS, tenant := e.st, e.sbNS, e.tenant

	n := faultSandboxes()
	kills := 0
	start := time.Now()
	sbs := createSandboxes(ctx, g, st, tenant, n, func(i int) {
		if rand.IntN(n/3+1) == 0 || i == n/2 {
			time.Sleep(time.Duration(rand.IntN(200)) * time.Millisecond) // a random point in the reconciles
			g.Expect(st.KillManager()).To(Succeed())
			kills++
		}
	})
	expectAllReadyOnce(ctx, t, st, tenant, sbNS, sbs)
	t.Logf("figure: %d sandboxes, operator SIGKILLed %d times during the creates: all Ready once after %s; 0 lost, 0 duplicated, 0 orphaned",
		n, kills, time.Since(start).Round(100*time.Millisecond))
}

// TestAPIServerPausedDuringCreates freezes kube-apiserver (SIGSTOP, as a
// stalled control plane or a slow etcd looks to clients) for a while in the
// middle of the creates: the operator recovers without a restart of its
// own, and every sandbox ends Ready exactly once.
func TestAPIServerPausedDuringCreates(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	e := newFaultEnv(ctx, t, "apipause", nil)
	st, sbNS, tenant := e.st, e.sbNS, e.tenant
	u, err := url.Parse(cluster.Config.Host)
	g.Expect(err).NotTo(HaveOccurred())
	pid := framework.FindProcess("kube-apiserver", "--secure-port="+u.Port())
	g.Expect(pid).NotTo(BeZero(), "kube-apiserver not found")

	n := faultSandboxes()
	const pause = 8 * time.Second
	var resumed time.Time
	sbs := createSandboxes(ctx, g, st, tenant, n, func(i int) {
		if i == n/2 {
			g.Expect(syscall.Kill(pid, syscall.SIGSTOP)).To(Succeed())
			time.Sleep(pause) // the fault's duration, not a synchronisation
			g.Expect(syscall.Kill(pid, syscall.SIGCONT)).To(Succeed())
			resumed = time.Now()
		}
	})
	expectAllReadyOnce(ctx, t, st, tenant, sbNS, sbs)
	t.Logf("figure: kube-apiserver frozen %s after %d of %d creates: all Ready once %s after it resumed, the operator not restarted",
		pause, n/2+1, n, time.Since(resumed).Round(100*time.Millisecond))

	// The freeze may leave one of the operator's HTTP/2 connections to
	// kube-apiserver write-blocked (a fresh-clone run: 20 requests queued
	// behind a TLS write, its stream reset unable to flush, 25 s after the
	// resume). Nothing is lost by it — every sandbox is Ready once — but a
	// request on it waits for client-go's health check (45 s at most), and
	// so may the operator's shutdown. That, and only that, is the freeze's
	// doing; any other runnable that outlives the grace fails the test.
	var grace *stack.StopGraceError
	if err := st.StopManager(); errors.As(err, &grace) && grace.StuckInHTTP2Write() {
		t.Logf("figure: the operator's stop took its whole grace: a connection the freeze left write-blocked (%v)", grace.Err)
	} else if err != nil {
		t.Error(err)
	}
}

// TestAgentSandboxDeletedByHand (Ready means running): the agents.x-k8s.io
// Sandbox of a Ready sandbox is deleted behind the operator's back. The
// sandbox does not stay Ready on the strength of a gateway row: the
// operator follows those objects, so it looks at once, and the sandbox runs
// again with a new one (or says why not). Without the watch nothing would
// look until the next resync, hours later.
//
// "noticed at once" is a gateway that drops its row when the object goes
// (0.1); "noticed late" one that keeps reporting the sandbox READY until
// its sweep's grace has passed (0.0.111): meanwhile the sandbox says it
// does not run (Ready False, UpstreamSandboxMissing), and once the gateway
// notices it runs again. "while the gateway's watch is down": the
// gateway's connections to the kube-apiserver drop (a partition, or a
// watch the API server closed under load) and the object goes before it
// reconnects; no watch event will ever tell it, so it must list again
// (as its driver's watcher does, and its sweep would), or the sandbox
// stays in Error for good.
func TestAgentSandboxDeletedByHand(t *testing.T) {
	for _, tc := range []struct {
		name        string
		late, blind bool
	}{{name: "noticed at once"}, {name: "noticed late", late: true}, {name: "while the gateway's watch is down", blind: true}} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			c := cluster.Client
			opts, link := stack.Options{}, (*framework.Balancer)(nil)
			if tc.blind {
				u, err := url.Parse(cluster.Config.Host)
				g.Expect(err).NotTo(HaveOccurred())
				link, err = framework.StartBalancer(u.Host)
				g.Expect(err).NotTo(HaveOccurred())
				defer link.Stop()
				opts.GatewayConfig = rest.CopyConfig(cluster.Config)
				opts.GatewayConfig.Host = fmt.Sprintf("https://127.0.0.1:%d", link.Port())
			}
			e := newFaultEnvWith(ctx, t, "byhand", opts)
			sb := sandboxOn(e.tenant, "victim", e.st.GatewayObj)
			g.Expect(c.Create(ctx, sb)).To(Succeed())
			key := client.ObjectKeyFromObject(sb)
			waitPhase(ctx, g, key, openshellv1alpha1.SandboxPhaseReady)
			first := sandboxStatus(ctx, g, key).Status.SandboxID
			list := &unstructured.UnstructuredList{}
			list.SetGroupVersionKind(sandboxGVK)
			g.Expect(c.List(ctx, list, client.InNamespace(e.sbNS))).To(Succeed())
			g.Expect(list.Items).To(HaveLen(1))
			g.Expect(sandboxStatus(ctx, g, key).Status.AgentSandbox).To(HaveField("Namespace", e.sbNS), "an External gateway's Sandbox is located in the cluster")
			notice := func() {}
			switch {
			case tc.late:
				notice = e.st.Gateway.DelayRuntimeDeletionNotice()
				defer notice()
			case tc.blind:
				link.Cut()
				notice = link.Restore
				defer notice()
			}
			ws := sandboxWorkspace(ctx, g, e.tenant)
			deleted := time.Now()
			g.Expect(c.Delete(ctx, &list.Items[0])).To(Succeed())
			if tc.late || tc.blind {
				expectUpstreamMissing(ctx, g, e, key, first)
				t.Logf("figure: the loss was reported %s after the deletion", time.Since(deleted).Round(100*time.Millisecond))
				notice()
			}
			g.Eventually(func(g Gomega) {
				cur := sandboxStatus(ctx, g, key)
				g.Expect(cur.Status.SandboxID).NotTo(Equal(first), "not re-created: phase %s, %+v, located %+v; %s; the operator's log:\n%s",
					cur.Status.Phase, cur.Status.Conditions, cur.Status.AgentSandbox, e.st.Gateway.Describe(ws), framework.RecentLogs(40, e.tenant, first))
				g.Expect(cur.Status.Phase).To(Equal(openshellv1alpha1.SandboxPhaseReady))
				g.Expect(meta.FindStatusCondition(cur.Status.Conditions, openshellv1alpha1.SandboxConditionUpstreamSandboxReady)).To(BeNil(),
					"the loss is still reported after the sandbox was re-created")
				expectOnlySandboxOf(ctx, g, e.sbNS, cur.Status.SandboxID)
			}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
			t.Logf("figure: a Ready sandbox whose agents.x-k8s.io Sandbox was deleted by hand ran again %s later", time.Since(deleted).Round(100*time.Millisecond))
		})
	}
}

// TestAgentSandboxDeletedAsItBecomesReady (Ready means running): the
// agents.x-k8s.io Sandbox goes at the moment the gateway tells the
// operator that the sandbox is Ready, so the operator's status write, the
// first to name the gateway sandbox's ID, races the deletion's event: that
// event may reach the operator while its cache has no sandbox with that
// ID yet. The sandbox must still be re-created, not left Ready on a gateway
// sandbox that is gone until the next resync, hours later (in CI this left
// TestCreateIsIdempotentOn01's loss unnoticed).
func TestAgentSandboxDeletedAsItBecomesReady(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := cluster.Client
	e := newFaultEnv(ctx, t, "asready", nil)
	var once sync.Once
	var at time.Time
	deleted := make(chan struct{})
	// The first READY the operator is told, on the stream or in a read: the
	// Sandbox is deleted before the answer leaves the gateway.
	e.st.Gateway.Trace(func(event, name string) {
		if event != testgateway.TraceReadySent && event != testgateway.TraceReadyAnswered {
			return
		}
		once.Do(func() {
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(sandboxGVK)
			if err := c.DeleteAllOf(ctx, u, client.InNamespace(e.sbNS), client.MatchingLabels{testgateway.LabelSandboxName: name}); err != nil {
				t.Errorf("delete the Sandbox of %s: %v", name, err)
			}
			at = time.Now()
			close(deleted)
		})
	})
	// The create's answer is lost, so the operator learns the sandbox only
	// once it is Ready (on the retry): its first status write names the ID
	// and says Ready at once, as the settle window makes it do for any
	// sandbox that is quick to start.
	e.st.Gateway.LoseNextResponse("CreateSandbox")
	sb := sandboxOn(e.tenant, "ephemeral", e.st.GatewayObj)
	g.Expect(c.Create(ctx, sb)).To(Succeed())
	select {
	case <-deleted:
	case <-ctx.Done():
		t.Fatal("the gateway never reported the sandbox READY")
	}
	key := client.ObjectKeyFromObject(sb)
	g.Eventually(func(g Gomega) {
		cur := sandboxStatus(ctx, g, key)
		g.Expect(cur.Status.ReplacedSandboxID).NotTo(BeEmpty(), "the loss went unnoticed: status %+v", cur.Status)
		g.Expect(cur.Status.SandboxID).NotTo(BeElementOf("", cur.Status.ReplacedSandboxID))
		g.Expect(cur.Status.Phase).To(Equal(openshellv1alpha1.SandboxPhaseReady))
		expectOnlySandboxOf(ctx, g, e.sbNS, cur.Status.SandboxID)
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
	t.Logf("figure: a sandbox whose Sandbox went as it became Ready ran again %s later", time.Since(at).Round(100*time.Millisecond))
	g.Expect(e.st.Gateway.Created()).To(Equal(2), "the first incarnation and the one that replaced it, none created from a stale cache")
}

// TestAgentSandboxesLostTogether (Ready means running): every
// agents.x-k8s.io Sandbox of the sandbox namespace goes at once, in one
// collection delete — what a namespace emptied by hand, or the Sandbox
// CRD's deletion cascading to its objects, does to them. Each
// OpenShellSandbox runs again with a new one; none stays Ready on its old
// incarnation, and none is re-created twice.
func TestAgentSandboxesLostTogether(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := cluster.Client
	e := newFaultEnv(ctx, t, "lost", nil)
	const n = 3
	first := readySandboxes(ctx, g, e, n)
	gone := &unstructured.Unstructured{}
	gone.SetGroupVersionKind(sandboxGVK)
	deleted := time.Now()
	g.Expect(c.DeleteAllOf(ctx, gone, client.InNamespace(e.sbNS))).To(Succeed())
	expectRunningAgain(ctx, g, e, first, time.Minute)
	t.Logf("figure: %d Ready sandboxes whose agents.x-k8s.io Sandboxes were deleted together all ran again %s later",
		n, time.Since(deleted).Round(100*time.Millisecond))
}

// TestAgentSandboxCRDLost (Ready means running): the Sandbox CRD itself is
// deleted, taking every agents.x-k8s.io Sandbox with it, and later
// installed again. While it is gone no OpenShellSandbox says Ready, in its
// phase or its condition, and each says why (AgentSandboxCRDMissing); once
// it is back each runs again on a new one, none twice. The
// CRD is restored before the test ends, so the suites after it find the
// cluster as they expect (no e2e test runs in parallel).
func TestAgentSandboxCRDLost(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := cluster.Client
	e := newFaultEnv(ctx, t, "crdlost", nil)
	const n = 2
	first := readySandboxes(ctx, g, e, n)

	crd, err := framework.AgentSandboxCRD(framework.AgentSandboxBetaOnly)
	g.Expect(err).NotTo(HaveOccurred())
	restored := false
	// Restored with a context of its own (the test's may have run out), and
	// only once the deletion has finished: an update of a CRD still
	// terminating would "succeed" and then go with it.
	restore := func() {
		if restored {
			return
		}
		restored = true
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		g.Eventually(func() bool {
			return apierrors.IsNotFound(c.Get(rctx, client.ObjectKeyFromObject(crd), &apiextensionsv1.CustomResourceDefinition{}))
		}).WithContext(rctx).WithTimeout(time.Minute).Should(BeTrue(), "the Sandbox CRD is not gone")
		g.Expect(framework.InstallCRD(rctx, c, crd)).To(Succeed())
		g.Eventually(func(g Gomega) {
			cur := &apiextensionsv1.CustomResourceDefinition{}
			g.Expect(c.Get(rctx, client.ObjectKeyFromObject(crd), cur)).To(Succeed())
			g.Expect(cur.DeletionTimestamp).To(BeNil())
			established := false
			for _, cond := range cur.Status.Conditions {
				established = established || (cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue)
			}
			g.Expect(established).To(BeTrue(), "the Sandbox CRD is not Established")
		}).WithContext(rctx).WithTimeout(time.Minute).Should(Succeed())
		g.Expect(framework.WaitCRDReady(rctx, c, crd)).To(Succeed())
	}
	defer restore()
	deleted := time.Now()
	g.Expect(c.Delete(ctx, crd.DeepCopy())).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(c.Get(ctx, client.ObjectKeyFromObject(crd), &apiextensionsv1.CustomResourceDefinition{}))
	}).WithContext(ctx).WithTimeout(time.Minute).Should(BeTrue(), "the Sandbox CRD is not gone")
	g.Eventually(func(g Gomega) {
		for key := range first {
			cur := sandboxStatus(ctx, g, key)
			g.Expect(cur.Status.Phase).To(Equal(openshellv1alpha1.SandboxPhasePending), "%s %+v", key.Name, cur.Status.Conditions)
			ready := meta.FindStatusCondition(cur.Status.Conditions, openshellv1alpha1.ConditionReady)
			g.Expect(ready).NotTo(BeNil())
			g.Expect(ready.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(ready.Reason).To(Equal(openshellv1alpha1.SandboxReasonAgentSandboxCRDMissing))
			g.Expect(ready.Message).To(ContainSubstring("sandboxes.agents.x-k8s.io"))
		}
	}).WithContext(ctx).WithTimeout(30*time.Second).Should(Succeed(), "a sandbox whose Sandbox CRD is gone still says Ready")
	t.Logf("figure: %d Ready sandboxes stopped saying Ready %s after the Sandbox CRD's deletion began", n, time.Since(deleted).Round(100*time.Millisecond))

	restore()
	back := time.Now()
	expectRunningAgain(ctx, g, e, first, 2*time.Minute)
	t.Logf("figure: with the CRD installed again, all %d ran again %s later", n, time.Since(back).Round(100*time.Millisecond))
}

// readySandboxes creates n sandboxes on the fault env's gateway and
// returns their gateway IDs once each is Ready.
func readySandboxes(ctx context.Context, g Gomega, e faultEnv, n int) map[client.ObjectKey]string {
	first := map[client.ObjectKey]string{}
	for i := range n {
		sb := sandboxOn(e.tenant, fmt.Sprintf("victim-%d", i), e.st.GatewayObj)
		g.Expect(cluster.Client.Create(ctx, sb)).To(Succeed())
		first[client.ObjectKeyFromObject(sb)] = ""
	}
	for key := range first {
		waitPhase(ctx, g, key, openshellv1alpha1.SandboxPhaseReady)
		first[key] = sandboxStatus(ctx, g, key).Status.SandboxID
	}
	return first
}

// expectRunningAgain waits until every sandbox of first runs again on a
// new gateway sandbox, with exactly one agents.x-k8s.io Sandbox each and
// none that no OpenShellSandbox names.
func expectRunningAgain(ctx context.Context, g Gomega, e faultEnv, first map[client.ObjectKey]string, within time.Duration) {
	g.Eventually(func(g Gomega) {
		ids := map[string]bool{}
		for key, was := range first {
			cur := sandboxStatus(ctx, g, key)
			g.Expect(cur.Status.SandboxID).NotTo(Equal(was), "%s not re-created", key.Name)
			g.Expect(cur.Status.Phase).To(Equal(openshellv1alpha1.SandboxPhaseReady))
			ids[cur.Status.SandboxID] = true
		}
		l := &unstructured.UnstructuredList{}
		l.SetGroupVersionKind(sandboxGVK)
		g.Expect(cluster.Client.List(ctx, l, client.InNamespace(e.sbNS))).To(Succeed())
		g.Expect(l.Items).To(HaveLen(len(first)), "one agents.x-k8s.io Sandbox per OpenShellSandbox")
		for _, item := range l.Items {
			g.Expect(ids).To(HaveKey(item.GetLabels()[sandbox.LabelSandboxID]), "a Sandbox no OpenShellSandbox names")
		}
		g.Expect(e.st.Gateway.SandboxNames(sandboxWorkspace(ctx, g, e.tenant))).To(HaveLen(len(first)))
	}).WithContext(ctx).WithTimeout(within).Should(Succeed(), cluster.CheckProcessesMessage)
}

// expectOnlySandboxOf checks that the sandbox namespace holds one
// agents.x-k8s.io Sandbox, the one of gateway sandbox id: nothing
// orphaned or duplicated beside it.
func expectOnlySandboxOf(ctx context.Context, g Gomega, ns, id string) {
	l := &unstructured.UnstructuredList{}
	l.SetGroupVersionKind(sandboxGVK)
	g.Expect(cluster.Client.List(ctx, l, client.InNamespace(ns))).To(Succeed())
	g.Expect(l.Items).To(HaveLen(1))
	g.Expect(l.Items[0].GetLabels()).To(HaveKeyWithValue(sandbox.LabelSandboxID, id))
}

// expectUpstreamMissing waits for a sandbox whose gateway still reports
// its first incarnation READY to say that it does not run, and checks that
// it stays so (not re-created, not Ready) while the gateway has not
// noticed.
func expectUpstreamMissing(ctx context.Context, g Gomega, e faultEnv, key client.ObjectKey, first string) {
	g.Eventually(func(g Gomega) {
		cur := sandboxStatus(ctx, g, key)
		g.Expect(cur.Status.Phase).To(Equal(openshellv1alpha1.SandboxPhaseError))
		ready := meta.FindStatusCondition(cur.Status.Conditions, openshellv1alpha1.ConditionReady)
		g.Expect(ready).NotTo(BeNil())
		g.Expect(ready.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(ready.Reason).To(Equal(openshellv1alpha1.SandboxReasonUpstreamSandboxMissing))
		up := meta.FindStatusCondition(cur.Status.Conditions, openshellv1alpha1.SandboxConditionUpstreamSandboxReady)
		g.Expect(up).NotTo(BeNil(), "no UpstreamSandboxReady condition")
		g.Expect(up.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(up.Message).To(ContainSubstring(cur.Status.AgentSandbox.Name))
	}).WithContext(ctx).WithTimeout(30*time.Second).Should(Succeed(), "a sandbox whose agents.x-k8s.io Sandbox is gone still says Ready")
	// The gateway still reports READY: nothing may re-create the sandbox
	// under the gateway's feet (a second one would be an orphan).
	g.Consistently(func(g Gomega) {
		cur := sandboxStatus(ctx, g, key)
		g.Expect(cur.Status.SandboxID).To(Equal(first))
		g.Expect(cur.Status.Phase).To(Equal(openshellv1alpha1.SandboxPhaseError))
	}).WithContext(ctx).WithTimeout(2 * time.Second).WithPolling(250 * time.Millisecond).Should(Succeed())
	g.Expect(e.st.Gateway.SandboxNames(sandboxWorkspace(ctx, g, e.tenant))).To(HaveLen(1))
}
