package olm

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	operatorsv2 "github.com/operator-framework/api/pkg/operators/v2"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	accessv1alpha1 "github.com/openshell/openshell-operator/api/access/v1alpha1"
	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/controllers/operatorcondition"
	"github.com/openshell/openshell-operator/internal/operatorenv"
	"github.com/openshell/openshell-operator/internal/pki"
	"github.com/openshell/openshell-operator/internal/relayload"
	render "github.com/openshell/openshell-operator/internal/render/gateway"
	"github.com/openshell/openshell-operator/internal/sandboxspec"
	"github.com/openshell/openshell-operator/test/framework"
)

const (
	currentCSV = "openshell-operator.v0.1.0"
	nextCSV    = "openshell-operator.v0.1.1"
)

// TestUpgrade subscribes at the current release from a catalog that also
// holds the next one (built here as docs/releasing.md prescribes: make
// bundle with the next version, make catalog keeping the released bundle),
// with manual approval. While a gateway rotates its CA the operator
// reports Upgradeable=False and OLM holds the approved upgrade; once that
// clears, the next CSV succeeds, the old one goes, and the running gateway
// and sandbox are neither lost nor recreated.
func TestUpgrade(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c := cluster.Client
	configs := nextRelease(t)
	lm.ServeBundle(catalogBundleImage(t, configs, currentCSV), bundleDir())
	lm.ServeBundle(catalogBundleImage(t, configs, nextCSV), filepath.Join(filepath.Dir(configs), "bundle"))
	serveCatalog(ctx, t, "openshell-upgrade", configs)
	bin, err := framework.OperatorBinary()
	g.Expect(err).NotTo(HaveOccurred())

	opNS := framework.CreateNamespace(ctx, t, c, "op")
	platform := framework.CreatePlatformNamespace(ctx, t, c, "platform")
	tenant := framework.CreateNamespace(ctx, t, c, "tenant")
	// The cluster admin serves gateways in the platform namespace too, as
	// the documentation says, through the Subscription.
	// And keeps three relay replicas at least, which the operator scales
	// through the Deployment's scale subresource, with the CSV's RBAC.
	cfg := &operatorsv1alpha1.SubscriptionConfig{Env: []corev1.EnvVar{{Name: operatorenv.EnvGatewayNamespaces, Value: platform},
		{Name: relayload.EnvMinReplicas, Value: "3"}}}
	issuerLB, err := framework.StartBalancer()
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(issuerLB.Stop)
	csv := subscribeWith(ctx, t, opNS, nil, "openshell-upgrade", channel, currentCSV, operatorsv1alpha1.ApprovalManual, cfg,
		pods{bin: bin, issuerURL: issuerURLOf(issuerLB)})
	t.Cleanup(func() { unsubscribe(context.Background(), t, opNS) })
	g.Expect(csv.Name).To(Equal(currentCSV))

	ca, err := pki.NewCA("olm-e2e", time.Hour, time.Now())
	g.Expect(err).NotTo(HaveOccurred())
	stopOld, issuerURL := runAsPodStoppable(ctx, t, opNS, bin, ca, issuerLB)
	expectRelayScaledTo(ctx, t, opNS, currentCSV, 3)

	// The data plane: an External gateway of the default line with a Ready
	// sandbox, and a consumer's shell open in it through the relay, which
	// stays open across the upgrade.
	gw, gwObj, sb, sbNS := startDataPlane(ctx, t, opNS, tenant, "survivor", issuerURL, ca, "0.1.5")
	before := dataPlane(ctx, g, sb, sbNS)
	oldRelay, ok := relayProcesses.Load(opNS)
	g.Expect(ok).To(BeTrue(), "no relay runs for %s", opNS)
	shell := openShell(ctx, t, tenant, sb.Name)
	g.Expect(shell.roundTrip("typed before the upgrade\n")).To(Succeed())

	// A managed gateway whose CA is due: its rotation begins, and the
	// operator tells OLM an upgrade must wait.
	// (This cluster has no network plugin to read: its platform admin
	// acknowledges NetworkPolicy enforcement, which 0.1 gateways need.)
	managed := &openshellv1alpha1.OpenShellGateway{ObjectMeta: metav1.ObjectMeta{Name: "rotating", Namespace: platform},
		Spec: openshellv1alpha1.OpenShellGatewaySpec{Managed: &openshellv1alpha1.ManagedGatewaySpec{},
			NetworkPolicyEnforcement: openshellv1alpha1.NetworkPolicyEnforcement{Acknowledged: true}}}
	oldCA, err := pki.NewCA(render.CACommonName, 100*24*time.Hour, time.Now().Add(-90*24*time.Hour))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: render.NamesFor(managed).CA, Namespace: platform,
		Labels: render.Labels(managed, "tls")}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{"tls.crt": oldCA.CertPEM, "tls.key": oldCA.KeyPEM, "ca.crt": oldCA.CertPEM}})).To(Succeed())
	g.Expect(c.Create(ctx, managed)).To(Succeed())
	g.Eventually(func(g Gomega) {
		cond := operatorConditionStatus(ctx, g, opNS, currentCSV)
		g.Expect(cond).NotTo(BeNil())
		g.Expect(cond.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(cond.Reason).To(Equal(operatorcondition.ReasonCARotationInProgress))
	}).WithContext(ctx).WithTimeout(2*time.Minute).Should(Succeed(), "the operator did not report the rotation to OLM")

	// The user approves the upgrade; OLM holds it.
	approveInstallPlan(ctx, t, opNS, nextCSV)
	g.Eventually(func(g Gomega) {
		next := &operatorsv1alpha1.ClusterServiceVersion{}
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: opNS, Name: nextCSV}, next)).To(Succeed())
		g.Expect(next.Status.Reason).To(Equal(operatorsv1alpha1.CSVReasonOperatorConditionNotUpgradeable))
	}).WithContext(ctx).WithTimeout(2*time.Minute).Should(Succeed(), "OLM did not hold the upgrade")
	// Held: the running release stays installed (OLM marks it Replacing)
	// and its Deployment is untouched.
	old := &operatorsv1alpha1.ClusterServiceVersion{}
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: opNS, Name: currentCSV}, old)).To(Succeed())
	g.Expect(old.Status.Phase).To(BeElementOf(operatorsv1alpha1.CSVPhaseSucceeded, operatorsv1alpha1.CSVPhaseReplacing))
	g.Consistently(func(g Gomega) {
		dep := &appsv1.Deployment{}
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: opNS, Name: deploymentName}, dep)).To(Succeed())
		g.Expect(dep.Spec.Template.Spec.Containers[0].Env).To(ContainElement(corev1.EnvVar{Name: "OPERATOR_CONDITION_NAME", Value: currentCSV}))
	}).WithContext(ctx).WithTimeout(5 * time.Second).Should(Succeed())

	// The rotation no longer matters (the gateway goes): OLM upgrades.
	g.Expect(c.Delete(ctx, managed)).To(Succeed())
	g.Eventually(func() bool { return isGone(ctx, managed) }).WithContext(ctx).WithTimeout(time.Minute).Should(BeTrue())
	waitCSV(ctx, t, opNS, nextCSV)
	g.Eventually(func() bool {
		return isGone(ctx, &operatorsv1alpha1.ClusterServiceVersion{ObjectMeta: metav1.ObjectMeta{Namespace: opNS, Name: currentCSV}})
	}).WithContext(ctx).WithTimeout(2*time.Minute).Should(BeTrue(), "the replaced CSV was not removed")

	// The new Deployment's pod replaces the old one.
	stopOld()
	runAsPodStoppable(ctx, t, opNS, bin, ca, issuerLB)
	waitReady(ctx, g, sb)
	// So do the relay's: a pod of the new ReplicaSet starts (the Service
	// sends new connections to it), then the kubelet stops the old one.
	// The open shell finishes on the old replica, which then exits.
	runRelayAsPod(ctx, t, opNS, pods{bin: bin, issuerURL: issuerURLOf(issuerLB)})
	expectSessionSurvivesRelayReplacement(ctx, t, shell, oldRelay.(*framework.Process), tenant, sb.Name)
	// OLM put the new CSV's two relay replicas in place; the new operator
	// scales them again.
	expectRelayScaledTo(ctx, t, opNS, nextCSV, 3)
	// OLM issues the webhook certificate anew when its Secret goes (the
	// garbage collector deletes it with the replaced CSV, which alone owns
	// it, at a moment load decides): force that now. The running operator
	// serves the new certificate as a pod would (the kubelet refreshes the
	// mounted Secret), and admission keeps working.
	// The Secret may be between the collector's deletion and OLM's
	// reissue right now (a fresh-clone run found none): wait for it.
	webhookCert := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: opNS, Name: deploymentName + "-service-cert"}}
	g.Eventually(func() error { return c.Get(ctx, client.ObjectKeyFromObject(webhookCert), webhookCert) }).
		WithContext(ctx).WithTimeout(time.Minute).Should(Succeed(), "OLM issued no webhook certificate Secret")
	g.Expect(client.IgnoreNotFound(c.Delete(ctx, webhookCert))).To(Succeed())
	g.Eventually(func() error {
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cur := &openshellv1alpha1.OpenShellSandbox{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(sb), cur); err != nil {
				return err
			}
			cur.Labels = map[string]string{"rotated": "webhook-certificate"}
			return c.Update(ctx, cur)
		})
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed(), "admission failed after OLM re-issued the webhook certificate")
	g.Consistently(func(g Gomega) {
		g.Expect(dataPlane(ctx, g, sb, sbNS)).To(Equal(before), "the upgrade recreated or changed the running sandbox")
	}).WithContext(ctx).WithTimeout(5 * time.Second).Should(Succeed())
	tenantNS := &corev1.Namespace{}
	g.Expect(c.Get(ctx, client.ObjectKey{Name: tenant}, tenantNS)).To(Succeed())
	g.Expect(gw.SandboxNames(sandboxspec.WorkspaceName(tenant, tenantNS.UID))).To(HaveLen(1), "the gateway holds the one sandbox it had")

	g.Expect(c.Delete(ctx, sb)).To(Succeed())
	g.Expect(c.Delete(ctx, gwObj)).To(Succeed())
	for _, o := range []client.Object{sb, gwObj} {
		g.Eventually(func() bool { return isGone(ctx, o) }).WithContext(ctx).WithTimeout(time.Minute).Should(BeTrue())
	}
}

// nextRelease builds the next release beside this one, as
// docs/releasing.md prescribes, into a temporary folder: the bundle at
// version 0.1.1 (make bundle VERSION=0.1.1) and the catalog re-rendered
// from the released one (make catalog). It returns the catalog folder.
func nextRelease(t *testing.T) string {
	t.Helper()
	tool, err := framework.Binary("openshell-release")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	root := framework.RepoRoot()
	configs := filepath.Join(dir, "catalog")
	if err := os.CopyFS(configs, os.DirFS(filepath.Join(root, "catalog", "configs"))); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) {
		cmd := exec.Command(tool, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("openshell-release %v: %v\n%s", args, err, out)
		}
	}
	bundle := filepath.Join(dir, "bundle")
	run("generate", "-dir", bundle, "-manifests", filepath.Join(root, "config", "manifests"),
		"-images", filepath.Join(root, "config", "manifests", "images.yaml"), "-version", "0.1.1", "-skip-range", ">=0.0.0 <0.1.1")
	run("catalog", "-dir", bundle, "-catalog", configs)
	return configs
}

// shell is a consumer's exec of `cat` through the relay, kept open as a
// shell is: what is typed comes back, until stdin closes.
type shell struct {
	stdin  *io.PipeWriter
	stdout *io.PipeReader
	done   chan error
	opened time.Time
	bytes  int
}

// openShell opens one as dave, a user holding openshell-sandbox-user in
// ns, once the API server's RBAC cache has their binding.
func openShell(ctx context.Context, t *testing.T, ns, name string) *shell {
	t.Helper()
	g := NewWithT(t)
	impersonate(ctx, t, ns, "dave", "openshell-sandbox-user")
	cfg := rest.CopyConfig(cluster.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "dave", Groups: []string{"system:authenticated"}}
	g.Eventually(func() (string, error) { return execOnce(ctx, cfg, ns, name, "echo", "ready") }).
		WithContext(ctx).WithTimeout(30*time.Second).Should(Equal("ready\n"), "dave cannot exec through the relay")
	u, err := framework.ExecURL(cfg, ns, name, true, false, []string{"cat"})
	g.Expect(err).NotTo(HaveOccurred())
	ex, err := remotecommand.NewSPDYExecutor(cfg, http.MethodPost, u)
	g.Expect(err).NotTo(HaveOccurred())
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	s := &shell{stdin: inW, stdout: outR, done: make(chan error, 1), opened: time.Now()}
	go func() {
		var stderr bytes.Buffer
		err := ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: inR, Stdout: outW, Stderr: &stderr})
		if err != nil {
			err = fmt.Errorf("%w (stderr: %s)", err, stderr.String())
		}
		outW.CloseWithError(err)
		s.done <- err
	}()
	return s
}

// roundTrip types line and reads it back; it fails if the session ended
// or what comes back differs.
func (s *shell) roundTrip(line string) error {
	if _, err := io.WriteString(s.stdin, line); err != nil {
		return fmt.Errorf("typing into the shell: %w", err)
	}
	back := make([]byte, len(line))
	if _, err := io.ReadFull(s.stdout, back); err != nil {
		return fmt.Errorf("reading the shell: %w", err)
	}
	if string(back) != line {
		return fmt.Errorf("the shell echoed %q for %q", back, line)
	}
	s.bytes += len(line)
	return nil
}

// close ends stdin, as a user's exit does, and returns how the exec ended.
func (s *shell) close(ctx context.Context) error {
	_ = s.stdin.Close()
	select {
	case err := <-s.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// execOnce runs a command without stdin through the relay and returns its
// stdout.
func execOnce(ctx context.Context, cfg *rest.Config, ns, name string, cmd ...string) (string, error) {
	u, err := framework.ExecURL(cfg, ns, name, false, false, cmd)
	if err != nil {
		return "", err
	}
	ex, err := remotecommand.NewSPDYExecutor(cfg, http.MethodPost, u)
	if err != nil {
		return "", err
	}
	var stdout, stderr bytes.Buffer
	if err := ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr}); err != nil {
		return stdout.String(), fmt.Errorf("%w (stderr: %s)", err, stderr.String())
	}
	return stdout.String(), nil
}

// expectSessionSurvivesRelayReplacement stops the replaced relay replica
// as the kubelet does (SIGTERM) while shell is open on it, with a new
// replica already serving: the shell keeps working, new sessions and
// reads reach the new replica, the shell ends with its exit status and
// every byte, and the old replica exits once it has. The figures go to
// docs/reliability.md.
func expectSessionSurvivesRelayReplacement(ctx context.Context, t *testing.T, sh *shell, old *framework.Process, ns, name string) {
	t.Helper()
	g := NewWithT(t)
	g.Expect(sh.roundTrip("typed while the operator upgraded\n")).To(Succeed())
	stopped := time.Now()
	g.Expect(old.Terminate()).To(Succeed())
	// The old replica drains: the shell still answers.
	g.Expect(sh.roundTrip("typed while the old relay drains\n")).To(Succeed())
	if exited, err := old.Exited(); exited {
		t.Fatalf("the old relay exited with a session open: %v\n%s", err, old.Tail(4000))
	}
	cfg := rest.CopyConfig(cluster.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "dave", Groups: []string{"system:authenticated"}}
	out, err := execOnce(ctx, cfg, ns, name, "echo", "new session")
	g.Expect(err).NotTo(HaveOccurred(), "a new session while the old replica drains")
	g.Expect(out).To(Equal("new session\n"))
	rc, err := framework.RelayClient(cfg)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = rc.Get().AbsPath(accessv1alpha1.Path(ns, name, accessv1alpha1.SubresourceLog)).Param("tailLines", "1").DoRaw(ctx)
	g.Expect(err).NotTo(HaveOccurred(), "a log read while the old replica drains")
	g.Expect(sh.roundTrip("typed last\n")).To(Succeed())
	g.Expect(sh.close(ctx)).To(Succeed(), "the shell did not end with exit status 0")
	closed := time.Now()
	select {
	case <-old.Done():
	case <-ctx.Done():
		t.Fatalf("the old relay did not exit once its last session ended:\n%s", old.Tail(4000))
	}
	_, exitErr := old.Exited()
	g.Expect(exitErr).NotTo(HaveOccurred(), "the old relay's exit:\n%s", old.Tail(4000))
	g.Expect(old.Tail(4000)).To(MatchRegexp(`"msg":"Drained".*"finished":1,"toldToReconnect":0`), "the old relay's log")
	t.Logf("a shell open across the operator upgrade: %d bytes each way intact, exit status 0, open %s; "+
		"the replaced relay exited %s after SIGTERM, %s after the shell closed, with no session ended",
		sh.bytes, closed.Sub(sh.opened).Round(time.Second), time.Since(stopped).Round(10*time.Millisecond),
		time.Since(closed).Round(time.Millisecond))
}

// waitReady waits until the sandbox is Ready.
func waitReady(ctx context.Context, g Gomega, sb *openshellv1alpha1.OpenShellSandbox) {
	g.Eventually(func(g Gomega) {
		cur := &openshellv1alpha1.OpenShellSandbox{}
		g.Expect(cluster.Client.Get(ctx, client.ObjectKeyFromObject(sb), cur)).To(Succeed())
		g.Expect(cur.Status.Phase).To(Equal(openshellv1alpha1.SandboxPhaseReady), "conditions: %v", cur.Status.Conditions)
	}).WithContext(ctx).WithTimeout(2 * time.Minute).Should(Succeed())
}

// dataPlane identifies what runs for a sandbox: the object, the gateway's
// sandbox ID, the agents.x-k8s.io Sandbox and its pod, by UID.
func dataPlane(ctx context.Context, g Gomega, sb *openshellv1alpha1.OpenShellSandbox, sbNS string) map[string]string {
	cur := &openshellv1alpha1.OpenShellSandbox{}
	g.Expect(cluster.Client.Get(ctx, client.ObjectKeyFromObject(sb), cur)).To(Succeed())
	out := map[string]string{"object": string(cur.UID), "sandboxID": cur.Status.SandboxID}
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(schema.GroupVersionKind{Group: "agents.x-k8s.io", Version: "v1beta1", Kind: "SandboxList"})
	g.Expect(cluster.Client.List(ctx, list, client.InNamespace(sbNS))).To(Succeed())
	g.Expect(list.Items).To(HaveLen(1))
	out["agents.x-k8s.io"] = string(list.Items[0].GetUID())
	pods := &corev1.PodList{}
	g.Expect(cluster.Client.List(ctx, pods, client.InNamespace(sbNS))).To(Succeed())
	for _, p := range pods.Items {
		out["pod/"+p.Name] = string(p.UID)
	}
	return out
}

// operatorConditionStatus is the Upgradeable condition OLM copied into the
// OperatorCondition's status.
func operatorConditionStatus(ctx context.Context, g Gomega, ns, name string) *metav1.Condition {
	oc := &operatorsv2.OperatorCondition{}
	g.Expect(cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, oc)).To(Succeed())
	return meta.FindStatusCondition(oc.Status.Conditions, operatorsv2.Upgradeable)
}

// expectRelayScaledTo waits until the operator has scaled the relay's
// Deployment to replicas, all ready, while the CSV is Succeeded: OLM puts
// the CSV's replicas back whenever it installs the Deployment again, and
// the operator scales it again. Scaling never made OLM fail the CSV (its
// Deployment stays Available while a replica is added): no failure over
// the relay's Deployment in the CSV's history.
func expectRelayScaledTo(ctx context.Context, t *testing.T, opNS, csvName string, replicas int32) {
	t.Helper()
	g := NewWithT(t)
	c := cluster.Client
	csv := &operatorsv1alpha1.ClusterServiceVersion{}
	g.Eventually(func(g Gomega) {
		dep := &appsv1.Deployment{}
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: opNS, Name: relayDeployment}, dep)).To(Succeed())
		g.Expect(dep.Spec.Replicas).To(HaveValue(Equal(replicas)), "the relay Deployment's status: %s; its events: %s", deploymentStatus(dep), relayEvents(ctx, opNS))
		g.Expect(dep.Status.ReadyReplicas).To(Equal(replicas), "the relay Deployment's status: %s", deploymentStatus(dep))
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: opNS, Name: csvName}, csv)).To(Succeed())
		g.Expect(csv.Status.Phase).To(Equal(operatorsv1alpha1.CSVPhaseSucceeded))
	}).WithContext(ctx).WithTimeout(2*time.Minute).Should(Succeed(), "the operator did not hold the relay at %d replicas", replicas)
	// (An upgrade has failures of its own, which OLM resolves: a
	// certificate Secret the garbage collector took with the old CSV.)
	for _, cond := range csv.Status.Conditions {
		if cond.Phase == operatorsv1alpha1.CSVPhaseFailed || cond.Reason == operatorsv1alpha1.CSVReasonNeedsReinstall {
			g.Expect(cond.Message).NotTo(ContainSubstring("deployment "+relayDeployment), "OLM failed the CSV over the relay's Deployment")
		}
	}
}

// deploymentStatus says, for a failure's message, where a Deployment's
// rollout stands.
func deploymentStatus(dep *appsv1.Deployment) string {
	st := dep.Status
	out := fmt.Sprintf("generation %d observed %d, replicas %d updated %d ready %d available %d unavailable %d",
		dep.Generation, st.ObservedGeneration, st.Replicas, st.UpdatedReplicas, st.ReadyReplicas, st.AvailableReplicas, st.UnavailableReplicas)
	for _, c := range st.Conditions {
		out += fmt.Sprintf("; %s=%s %s: %s", c.Type, c.Status, c.Reason, c.Message)
	}
	return out
}

// relayEvents are the Events about the relay's Deployment (the operator's
// scaling among them), oldest first.
func relayEvents(ctx context.Context, opNS string) string {
	list := &eventsv1.EventList{}
	if err := cluster.Client.List(ctx, list, client.InNamespace(opNS)); err != nil {
		return err.Error()
	}
	var out []string
	for _, e := range list.Items {
		if e.Regarding.Kind == "Deployment" && e.Regarding.Name == relayDeployment {
			out = append(out, fmt.Sprintf("%s %s %s: %s", e.CreationTimestamp.Format(time.TimeOnly), e.ReportingController, e.Reason, e.Note))
		}
	}
	return strings.Join(out, "; ")
}
