package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/operator"
	"github.com/openshell/openshell-operator/test/framework"
	"github.com/openshell/openshell-operator/test/stack"
)

// TestLeaderFailover runs two replicas behind one webhook address and one
// OIDC issuer address (balancers, as the Services are) and takes the leader
// away in the middle of a stream of sandbox creates: stopped, as a rolling
// update deletes a pod (the Lease is released), and SIGKILLed, as when its
// node dies (the Lease runs out). Either way the other replica takes the
// Lease, every create is admitted (the webhook stays available), and every
// sandbox ends Ready exactly once.
func TestLeaderFailover(t *testing.T) {
	t.Run("stopped", func(t *testing.T) { leaderFailover(t, "stop", false) })
	t.Run("killed", func(t *testing.T) { leaderFailover(t, "kill", true) })
}

func leaderFailover(t *testing.T, prefix string, kill bool) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := cluster.Client
	installOLMAggregatedRoles(ctx, t)
	gwNS := tenancyNamespace(ctx, t, "failover-"+prefix+"-platform", nil)
	sbNS := framework.CreateNamespace(ctx, t, c, "failover-"+prefix+"-sandboxes")
	tenant := tenancyNamespace(ctx, t, "failover-"+prefix+"-tenant", nil)
	certDir, caPEM, portA := webhookServing(t)
	portB, err := framework.FreePort()
	g.Expect(err).NotTo(HaveOccurred())
	lb, err := framework.StartBalancer(fmt.Sprintf("127.0.0.1:%d", portA), fmt.Sprintf("127.0.0.1:%d", portB))
	g.Expect(err).NotTo(HaveOccurred())
	defer lb.Stop()

	var proc *stack.ProcessOptions
	if kill {
		// The first leader runs as a process, so that it can be SIGKILLed.
		bin, err := framework.OperatorBinary()
		g.Expect(err).NotTo(HaveOccurred())
		proc = &stack.ProcessOptions{Binary: bin, Kubeconfig: cluster.KubeconfigPath, Dir: t.TempDir()}
	}
	st, err := stack.Start(ctx, cluster.Config, c, stack.Options{GatewayNamespace: gwNS, SandboxNamespace: sbNS, BalancedIssuer: true, Process: proc,
		Manager: operator.Options{WebhookHost: "127.0.0.1", WebhookPort: portA, WebhookCertDir: certDir,
			LeaderElection: true, LeaderElectionNamespace: gwNS, Controllers: operator.ControllerOptions{EnableWebhooks: true}}})
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { g.Expect(st.Stop()).To(Succeed()) }()
	holder := func(g Gomega) string {
		l := &coordinationv1.Lease{}
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: gwNS, Name: operator.LeaderElectionID}, l)).To(Succeed())
		g.Expect(l.Spec.HolderIdentity).NotTo(BeNil())
		return *l.Spec.HolderIdentity
	}
	var first string
	// Polled every 250 ms, not gomega's 10 ms: a hundred Lease GETs a
	// second are load on the control plane the test is timing.
	g.Eventually(func(g Gomega) { first = holder(g) }).WithContext(ctx).WithTimeout(time.Minute).WithPolling(250 * time.Millisecond).Should(Succeed())
	_, err = st.StartReplica(func(o *operator.Options) { o.WebhookPort = portB })
	g.Expect(err).NotTo(HaveOccurred())
	installWebhooks(ctx, t, caPEM, lb.Port())

	n := faultSandboxes()
	var stopped time.Time
	var refused []error
	broken := 0
	var sbs []*openshellv1alpha1.OpenShellSandbox
	for i := range n {
		sb := sandboxOn(tenant, fmt.Sprintf("f-%d", i), st.GatewayObj)
		err := c.Create(ctx, sb)
		if kill && brokenWebhookConnection(err) {
			// A request in flight on a connection to the replica that was
			// killed fails (the API server does not retry a broken POST),
			// as it would through a Service to a pod whose node died; the
			// client's retry reaches the survivor.
			broken++
			err = c.Create(ctx, sb)
		}
		if err != nil {
			refused = append(refused, err)
			continue
		}
		sbs = append(sbs, sb)
		if i == n/2 {
			if kill {
				g.Expect(st.Crash()).To(Succeed()) // the leader's node dies
			} else {
				g.Expect(st.StopManager()).To(Succeed()) // the leader's pod goes
			}
			stopped = time.Now()
		}
	}
	g.Expect(refused).To(BeEmpty(), "admission requests failed while the leader went")
	var second string
	g.Eventually(func(g Gomega) {
		second = holder(g)
		g.Expect(second).NotTo(Equal(first))
	}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(250 * time.Millisecond).Should(Succeed())
	took := time.Since(stopped)
	expectAllReadyOnce(ctx, t, st, tenant, sbNS, sbs)
	how := map[bool]string{false: "stopped", true: "SIGKILLed"}[kill]
	t.Logf("figure: leader %s after %d of %d creates: new leader within %s, 0 refused admission requests (%d retried after a connection to the killed replica broke), all Ready once %s after it went",
		how, n/2+1, n, took.Round(100*time.Millisecond), broken, time.Since(stopped).Round(100*time.Millisecond))
}

// brokenWebhookConnection reports an admission request that failed because
// the connection to the webhook broke, not because the webhook refused it.
func brokenWebhookConnection(err error) bool {
	if err == nil || !apierrors.IsInternalError(err) {
		return false
	}
	msg := err.Error()
	return strings.Contains(msg, "failed calling webhook") &&
		(strings.Contains(msg, "broken pipe") || strings.Contains(msg, "connection reset") || strings.Contains(msg, "EOF"))
}
