package olm

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	accessv1alpha1 "github.com/openshell/openshell-operator/api/access/v1alpha1"
	"github.com/openshell/openshell-operator/internal/oidc"
	"github.com/openshell/openshell-operator/internal/relay"
	"github.com/openshell/openshell-operator/internal/relayload"
	"github.com/openshell/openshell-operator/internal/sandboxspec"
	"github.com/openshell/openshell-operator/operator"
	"github.com/openshell/openshell-operator/test/framework"
	"github.com/openshell/openshell-operator/test/testgateway"
)

// relayDeployment is the relay's Deployment as the bundle names it.
const relayDeployment = "openshell-operator-relay"

// relayMetrics is the metrics URL of the relay runRelayAsPod runs, by the
// operator's namespace.
var relayMetrics sync.Map

// relayProcesses is the relay process runRelayAsPod last started, by the
// operator's namespace: the pod a test replaces as the kubelet would.
var relayProcesses sync.Map

// relayPodEnv is the relay container's environment as the kubelet gives it
// to a pod of dep's current template: the relay
// names that pod, by name and UID, as the owner of its load Lease.
func relayPodEnv(ctx context.Context, t *testing.T, opNS string, dep *appsv1.Deployment) []string {
	t.Helper()
	var pod corev1.Pod
	err := framework.WaitFor(ctx, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		list := &corev1.PodList{}
		if err := cluster.Client.List(ctx, list, client.InNamespace(opNS), client.MatchingLabels(dep.Spec.Selector.MatchLabels)); err != nil {
			return false, err
		}
		for _, p := range list.Items {
			// A pod of the Deployment's current template: during an upgrade
			// the replaced ReplicaSet's pods are still listed.
			if p.DeletionTimestamp == nil && len(p.Spec.Containers) > 0 &&
				reflect.DeepEqual(p.Spec.Containers[0].Env, dep.Spec.Template.Spec.Containers[0].Env) {
				pod = p
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("the relay Deployment has no pod: %v", err)
	}
	return podEnv(t, dep.Spec.Template.Spec.Containers[0].Env, &pod)
}

// runRelayAsPod starts the relay as a pod of the Deployment OLM created
// would run it: with its ServiceAccount's token (exactly the RBAC the CSV
// grants it, and the front-proxy bindings OLM adds for an owned
// APIService), the Deployment's arguments, and the serving certificate OLM
// issued, rewritten when OLM issues it anew (as a kubelet refreshes a
// mounted Secret); the API server reaches it through the Service OLM
// created. OLM holds the CSV until the APIService is Available, so this
// runs while the install is in progress. It stops with the test.
func runRelayAsPod(ctx context.Context, t *testing.T, opNS string, run pods) {
	t.Helper()
	c := cluster.Client
	dep := &appsv1.Deployment{}
	var certSecret string
	err := framework.WaitFor(ctx, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, client.ObjectKey{Namespace: opNS, Name: relayDeployment}, dep); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		for _, v := range dep.Spec.Template.Spec.Volumes {
			if v.Name == "apiservice-cert" && v.Secret != nil {
				certSecret = v.Secret.SecretName
			}
		}
		return certSecret != "", nil
	})
	if err != nil {
		t.Fatalf("OLM created no relay Deployment with its APIService certificate: %v", err)
	}
	pod := dep.Spec.Template.Spec
	ctr := pod.Containers[0]
	dir := t.TempDir()
	kubeconfig := serviceAccountKubeconfig(ctx, t, opNS, pod.ServiceAccountName, dir)

	certDir := filepath.Join(dir, "certs")
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		t.Fatal(err)
	}
	s := &corev1.Secret{}
	err = framework.WaitFor(ctx, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, client.ObjectKey{Namespace: opNS, Name: certSecret}, s); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		return len(s.Data["tls.crt"]) > 0, nil
	})
	if err != nil {
		t.Fatalf("OLM issued no relay certificate: %v", err)
	}
	if err := writeCertPair(certDir, s, "apiserver.key", "apiserver.crt"); err != nil {
		t.Fatal(err)
	}
	port, err := framework.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	metricsPort, err := framework.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	var args []string
	metrics := false
	for _, a := range ctr.Args {
		switch {
		case strings.HasPrefix(a, "--bind-address="):
		case strings.HasPrefix(a, "--metrics-bind-address="):
			metrics = true
		default:
			args = append(args, a)
		}
	}
	if len(args) == 0 || args[0] != "relay" {
		t.Fatalf("the relay Deployment runs %v, not the relay command", ctr.Args)
	}
	if !metrics {
		t.Fatalf("the relay Deployment serves no metrics: %v", ctr.Args)
	}
	relayMetrics.Store(opNS, "https://127.0.0.1:"+strconv.Itoa(metricsPort)+"/metrics")
	args = append(args, "--bind-address=127.0.0.1:"+strconv.Itoa(port), "--metrics-bind-address=127.0.0.1:"+strconv.Itoa(metricsPort),
		"--cert-dir="+certDir, "--oidc-issuer-url="+run.issuerURL)
	env := append([]string{"KUBECONFIG=" + kubeconfig}, relayPodEnv(ctx, t, opNS, dep)...)
	p, err := framework.StartProcessEnv(dir, "relay", run.bin, env, args...)
	if err != nil {
		t.Fatal(err)
	}
	relayProcesses.Store(opNS, p)
	refresh, stopRefresh := context.WithCancel(context.Background())
	go refreshSecret(refresh, t, opNS, certSecret, s.ResourceVersion, func(s *corev1.Secret) error { return writeCertPair(certDir, s, "apiserver.key", "apiserver.crt") })
	t.Cleanup(func() {
		stopRefresh()
		if t.Failed() {
			as := &unstructured.Unstructured{}
			as.SetAPIVersion("apiregistration.k8s.io/v1")
			as.SetKind("APIService")
			err := c.Get(context.Background(), client.ObjectKey{Name: "v1alpha1.access.openshell.ai"}, as)
			conds, _, _ := unstructured.NestedSlice(as.Object, "status", "conditions")
			t.Logf("relay log:\n%s\nAPIService: %v %v", p.Tail(4000), conds, err)
		}
		_ = p.Stop(30 * time.Second)
	})

	// The Service sends connections to a pod once it is ready: the
	// Deployment's probe is a TCP connect to its https port.
	err = framework.WaitFor(ctx, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		if done, err := p.Exited(); done {
			return false, fmt.Errorf("the relay exited: %v\n%s", err, p.Tail(3000))
		}
		conn, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), time.Second)
		if err != nil {
			return false, nil
		}
		_ = conn.Close()
		return true, nil
	})
	if err != nil {
		t.Fatalf("the relay never became ready: %v", err)
	}
	svc := &corev1.Service{}
	err = framework.WaitFor(ctx, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, client.ObjectKey{Namespace: opNS, Name: relayDeployment + "-service"}, svc)
		return err == nil, client.IgnoreNotFound(err)
	})
	if err != nil {
		t.Fatalf("OLM created no relay Service: %v", err)
	}
	for _, sp := range svc.Spec.Ports {
		cluster.Network.Route(net.JoinHostPort(svc.Spec.ClusterIP, strconv.Itoa(int(sp.Port))), "127.0.0.1:"+strconv.Itoa(port))
	}
}

// serviceAccountKubeconfig writes a kubeconfig with a token of the
// ServiceAccount, as a pod running under it gets.
func serviceAccountKubeconfig(ctx context.Context, t *testing.T, ns, name, dir string) string {
	t.Helper()
	sa := &corev1.ServiceAccount{}
	if err := cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, sa); err != nil {
		t.Fatal(err)
	}
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}
	if err := cluster.Client.SubResource("token").Create(ctx, sa, tr); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "kubeconfig-"+name)
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: cluster.Config.Host, CertificateAuthorityData: cluster.Config.CAData}
	kc.AuthInfos["sa"] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	kc.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "sa"}
	kc.CurrentContext = "c"
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// expectConsumerAccess: a Sandbox Consumer with the bundle's
// openshell-sandbox-user role reads their sandbox's log and runs a command
// in it through the relay OLM installed (its APIService, its Service, its
// certificate, and the relay with exactly the RBAC the CSV grants it: the
// SubjectAccessReview, the sandbox, its gateway and namespace, the
// gateway's CA Secret, the issuer's keys); a user without the role is
// refused; a Tenant Admin exchanges a token (the membership Lease in the
// relay's namespace). The relay's metrics count the sessions, for a
// scraper allowed to get /metrics (a TokenReview and a
// SubjectAccessReview under the CSV's RBAC) and no one else.
func expectConsumerAccess(ctx context.Context, t *testing.T, gw *testgateway.Gateway, opNS, ns, name string) {
	t.Helper()
	g := NewWithT(t)
	nsObj := &corev1.Namespace{}
	g.Expect(cluster.Client.Get(ctx, client.ObjectKey{Name: ns}, nsObj)).To(Succeed())
	g.Expect(gw.AppendLog(sandboxspec.WorkspaceName(ns, nsObj.UID), sandboxspec.SandboxName(ns, name), "hello from "+ns)).To(Succeed())
	impersonate(ctx, t, ns, "dave", "openshell-sandbox-user")
	as := func(user string) *rest.RESTClient {
		cfg := rest.CopyConfig(cluster.Config)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:authenticated"}}
		rc, err := framework.RelayClient(cfg)
		g.Expect(err).NotTo(HaveOccurred())
		return rc
	}
	read := func(user string) (string, error) {
		b, err := as(user).Get().AbsPath(accessv1alpha1.Path(ns, name, accessv1alpha1.SubresourceLog)).Param("tailLines", "10").DoRaw(ctx)
		return string(b), err
	}
	// RBAC is enforced from the API server's informer cache: retry until
	// the binding is seen.
	g.Eventually(func(g Gomega) {
		out, err := read("dave")
		g.Expect(err).NotTo(HaveOccurred(), "%s", out)
		g.Expect(out).To(ContainSubstring("hello from " + ns))
	}).WithContext(ctx).WithTimeout(30*time.Second).Should(Succeed(), "a sandbox user's log read through the relay OLM installed")
	_, err := read("mallory")
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "a user without the role: %v", err)

	// An exec: an upgraded connection, through the same Service.
	cfg := rest.CopyConfig(cluster.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "dave", Groups: []string{"system:authenticated"}}
	u, err := framework.ExecURL(cfg, ns, name, false, false, []string{"echo", "hi"})
	g.Expect(err).NotTo(HaveOccurred())
	ex, err := remotecommand.NewSPDYExecutor(cfg, http.MethodPost, u)
	g.Expect(err).NotTo(HaveOccurred())
	var stdout, stderr bytes.Buffer
	g.Expect(ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr})).To(Succeed(), "%s", stderr.String())
	g.Expect(stdout.String()).To(Equal("hi\n"))

	// A port-forward, as kubectl port-forward speaks it (SPDY), to the echo
	// inside the sandbox.
	expectPortForward(ctx, g, cfg, ns, name)

	// The relay published its sessions in its pod's load Lease, with the
	// CSV's RBAC, signed so that the operator counts them.
	keys := &oidc.Issuer{Client: cluster.Client, SecretNamespace: opNS, SecretName: operator.OIDCKeySecret}
	g.Expect(keys.Load(ctx)).To(Succeed())
	g.Eventually(func(g Gomega) {
		list := &coordinationv1.LeaseList{}
		g.Expect(cluster.Client.List(ctx, list, client.InNamespace(opNS), client.MatchingLabels{relayload.Label: "true"})).To(Succeed())
		g.Expect(list.Items).NotTo(BeEmpty(), "no load Lease")
		load, err := relayload.Read(&list.Items[0], keys)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(load.Sessions).To(BeZero(), "the exec has ended")
	}).WithContext(ctx).WithTimeout(30*time.Second).Should(Succeed(), "the relay's load Lease")

	url, ok := relayMetrics.Load(opNS)
	g.Expect(ok).To(BeTrue(), "no relay runs for %s", opNS)
	token := framework.MetricsReader(ctx, t, cluster.Client, opNS)
	g.Eventually(func(g Gomega) {
		code, body, err := framework.Scrape(ctx, url.(string), token)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(code).To(Equal(http.StatusOK), "%s", body)
		g.Expect(body).To(ContainSubstring(`openshell_relay_sessions_started_total{subresource="exec"} 1`))
		g.Expect(body).To(ContainSubstring(`openshell_relay_sessions{subresource="exec"} 0`))
		// The CSV lets it follow RBAC changes: sessions and memberships
		// are authorized again after one, not every few seconds.
		g.Expect(body).To(MatchRegexp(`(?m)^` + relay.MetricRBACFollowed + ` 1$`))
		// And ServiceAccounts: a deleted one's sessions end.
		g.Expect(body).To(MatchRegexp(`(?m)^` + relay.MetricServiceAccountsFollowed + ` 1$`))
		// And OpenShift Groups (served here by a stand-in CRD): a user
		// removed from one loses what it gave them.
		g.Expect(body).To(MatchRegexp(`(?m)^` + relay.MetricGroupsFollowed + ` 1$`))
	}).WithContext(ctx).WithTimeout(30*time.Second).Should(Succeed(), "the relay's metrics, scraped as Prometheus does")
	nobody := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "no-metrics", Namespace: opNS}}
	g.Expect(cluster.Client.Create(ctx, nobody)).To(Succeed())
	code, body, err := framework.Scrape(ctx, url.(string), framework.ServiceAccountToken(ctx, t, cluster.Client, nobody))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(code).To(Equal(http.StatusForbidden), "a token not allowed to get /metrics: %s", body)

	// A Tenant Admin's token exchange: the membership's Lease in the
	// relay's namespace, the member added at the gateway.
	impersonate(ctx, t, ns, "tina", "openshell-tenant-admin")
	g.Eventually(func(g Gomega) {
		b, err := as("tina").Post().AbsPath(accessv1alpha1.Path(ns, name, accessv1alpha1.SubresourceToken)).DoRaw(ctx)
		g.Expect(err).NotTo(HaveOccurred(), "%s", b)
		tok := &accessv1alpha1.SandboxToken{}
		g.Expect(json.Unmarshal(b, tok)).To(Succeed())
		g.Expect(tok.Subject).To(Equal(accessv1alpha1.SubjectPrefix + "tina"))
		g.Expect(gw.Members(tok.Workspace)).To(HaveKey(tok.Subject))
	}).WithContext(ctx).WithTimeout(30*time.Second).Should(Succeed(), "a tenant admin's token exchange through the relay OLM installed")
}

// expectPortForward forwards a local port to the echo the test gateway's
// sandboxes serve, through the relay, as cfg's user, and sends a round
// trip through it.
func expectPortForward(ctx context.Context, g Gomega, cfg *rest.Config, ns, name string) {
	transport, upgrader, err := spdy.RoundTripperFor(cfg)
	g.Expect(err).NotTo(HaveOccurred())
	u, err := url.Parse(cfg.Host)
	g.Expect(err).NotTo(HaveOccurred())
	u.Path = accessv1alpha1.Path(ns, name, accessv1alpha1.SubresourcePortForward)
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, http.MethodPost, u)
	stop, ready := make(chan struct{}), make(chan struct{})
	defer close(stop)
	var errOut bytes.Buffer
	fw, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{fmt.Sprintf("0:%d", testgateway.EchoPort)},
		stop, ready, io.Discard, &errOut)
	g.Expect(err).NotTo(HaveOccurred())
	forwarded := make(chan error, 1)
	go func() { forwarded <- fw.ForwardPorts() }()
	select {
	case <-ready:
	case err := <-forwarded:
		g.Expect(err).NotTo(HaveOccurred(), "port-forward through the relay OLM installed: %s", errOut.String())
	case <-ctx.Done():
		g.Expect(ctx.Err()).NotTo(HaveOccurred())
	}
	ports, err := fw.GetPorts()
	g.Expect(err).NotTo(HaveOccurred())
	conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", ports[0].Local))
	g.Expect(err).NotTo(HaveOccurred())
	defer conn.Close()
	_, err = conn.Write([]byte("ping\n"))
	g.Expect(err).NotTo(HaveOccurred())
	got := make([]byte, 5)
	_, err = io.ReadFull(conn, got)
	g.Expect(err).NotTo(HaveOccurred(), "%s", errOut.String())
	g.Expect(string(got)).To(Equal("ping\n"), "the echo inside the sandbox, through the relay OLM installed")
}
