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
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"
	"sigs.k8s.io/controller-runtime/pkg/client"

	accessv1alpha1 "github.com/openshell/openshell-operator/api/access/v1alpha1"
	"github.com/openshell/openshell-operator/internal/oidc"
	"github.com/openshell/openshell-operator/internal/relay"
	"github.com/openshell/openshell-operator/internal/relayload"
	"github.com/openshell/openshell-operator/internal/sandboxspec"
	"github.com/openshell/openshell-operator/operator"
	"github.com/openshell/openshell-operator/test/framework"
	"github.com/openshell/openshell-operator/test/olmcluster"
	"github.com/openshell/openshell-operator/test/testgateway"
)

// relayDeployment is the relay's Deployment as the bundle names it.
const relayDeployment = olmcluster.RelayDeployment

// relayMetrics is the metrics URL of the relay runRelayAsPod runs, by the
// operator's namespace.
var relayMetrics sync.Map

// relayProcesses is the relay process runRelayAsPod last started, by the
// operator's namespace: the pod a test replaces as the kubelet would.
var relayProcesses sync.Map

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
