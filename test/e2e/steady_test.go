package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/operator"
	"github.com/openshell/openshell-operator/test/framework"
	"github.com/openshell/openshell-operator/test/stack"
)

// TestRestartWritesNothing creates sandboxes concurrently (as a burst of
// tenants would), waits until all are Ready, restarts the operator and lets
// it reconcile every one again: steady state makes no API write (not even
// a no-op apply of the operator's platform objects), and no status changes.
func TestRestartWritesNothing(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := cluster.Client
	// The operator watches this test's namespaces only: in a cluster other
	// tests share, objects they are still deleting would be work of its own.
	e := faultEnv{gwNS: framework.CreateNamespace(ctx, t, c, "steady-platform"), sbNS: framework.CreateNamespace(ctx, t, c, "steady-sandboxes"),
		tenant: framework.CreateNamespace(ctx, t, c, "steady-tenant")}
	var err error
	e.st, err = stack.Start(ctx, cluster.Config, c, stack.Options{GatewayNamespace: e.gwNS, SandboxNamespace: e.sbNS,
		Manager: operator.Options{WatchNamespaces: []string{e.gwNS, e.sbNS, e.tenant}}})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { g.Expect(e.st.Stop()).To(Succeed()) })
	st, tenant := e.st, e.tenant
	g.Expect(c.Create(ctx, &openshellv1alpha1.OpenShellPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: tenant}})).To(Succeed())

	// The in-process workqueue gauges are shared by every manager this test
	// binary ran: one stopped with items queued leaves its depth behind.
	// This manager's queue is empty now, so what the gauge says is that.
	staleDepth, err := st.QueueDepth("openshellsandbox")
	g.Expect(err).NotTo(HaveOccurred())
	const n = 40
	var wg sync.WaitGroup
	sbs := make([]*openshellv1alpha1.OpenShellSandbox, n)
	for i := range n {
		sbs[i] = sandboxOn(tenant, fmt.Sprintf("s-%d", i), st.GatewayObj)
		sbs[i].Spec.PolicyRef = &openshellv1alpha1.LocalObjectReference{Name: "p"}
		wg.Add(1)
		go func(sb *openshellv1alpha1.OpenShellSandbox) {
			defer wg.Done()
			g.Expect(c.Create(ctx, sb)).To(Succeed())
		}(sbs[i])
	}
	wg.Wait()
	for _, sb := range sbs {
		waitPhase(ctx, g, client.ObjectKeyFromObject(sb), openshellv1alpha1.SandboxPhaseReady)
	}
	// Every sandbox settled (its requeues after Ready have run) when the
	// reconciles stop moving with nothing queued.
	waitIdle := func() {
		last, depth := -1, 0
		var recs map[string]stack.Reconcile
		g.Expect(framework.WaitFor(ctx, 500*time.Millisecond, func(context.Context) (bool, error) {
			var err error
			if recs, err = st.Reconciles(); err != nil {
				return false, err
			}
			if depth, err = st.QueueDepth("openshellsandbox"); err != nil {
				return false, err
			}
			now := recs["openshellsandbox"].Count
			idle := depth == staleDepth && now == last
			last = now
			return idle, nil
		})).To(Succeed(), func() string {
			// Read after the wait: what kept the reconciles moving.
			gw := &openshellv1alpha1.OpenShellGateway{}
			_ = c.Get(context.Background(), client.ObjectKeyFromObject(st.GatewayObj), gw)
			return fmt.Sprintf("the sandbox reconciles did not pause: queue depth %d (%d left by earlier managers), reconciles %+v, gateway status %+v",
				depth, staleDepth, recs, gw.Status)
		})
	}
	waitIdle()
	// The policy's count settles a few seconds after its last new user.
	g.Eventually(func(g Gomega) {
		p := &openshellv1alpha1.OpenShellPolicy{}
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: tenant, Name: "p"}, p)).To(Succeed())
		g.Expect(p.Status.SandboxCount).To(BeEquivalentTo(n))
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
	statuses := func() map[string]string {
		list := &openshellv1alpha1.OpenShellSandboxList{}
		g.Expect(c.List(ctx, list, client.InNamespace(tenant))).To(Succeed())
		out := map[string]string{}
		for _, sb := range list.Items {
			b, err := json.Marshal(sb.Status)
			g.Expect(err).NotTo(HaveOccurred())
			out[sb.Name] = sb.ResourceVersion + " " + string(b)
		}
		return out
	}
	gatewayStatus := func() string {
		gw := &openshellv1alpha1.OpenShellGateway{}
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(st.GatewayObj), gw)).To(Succeed())
		b, err := json.Marshal(gw.Status)
		g.Expect(err).NotTo(HaveOccurred())
		return gw.ResourceVersion + " " + string(b)
	}
	before, gwBefore := statuses(), gatewayStatus()
	recsBefore, err := st.Reconciles()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.RestartManagerWith(nil)).To(Succeed())
	writesBefore := writes(st.Requests.Snapshot())
	// The new manager replays every sandbox once.
	g.Eventually(func(g Gomega) {
		recs, err := st.Reconciles()
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(recs["openshellsandbox"].Count - recsBefore["openshellsandbox"].Count).To(BeNumerically(">=", n))
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
	waitIdle()
	g.Expect(statuses()).To(Equal(before), "status changed after the restart")
	g.Expect(gatewayStatus()).To(Equal(gwBefore), func() string {
		evs := &eventsv1.EventList{}
		_ = c.List(ctx, evs, client.InNamespace(e.gwNS))
		var notes []string
		for _, ev := range evs.Items {
			notes = append(notes, ev.Reason+": "+ev.Note)
		}
		return fmt.Sprintf("the gateway's status changed after the restart; its events: %q", notes)
	})
	g.Expect(writes(st.Requests.Snapshot())-writesBefore).To(BeZero(), "API writes after the restart: %v, the last ones %v",
		st.Requests.Snapshot(), st.Requests.Writes())
}

// writes counts the write requests among counts by verb.
func writes(counts map[string]int) int {
	return counts["POST"] + counts["PUT"] + counts["PATCH"] + counts["DELETE"]
}
