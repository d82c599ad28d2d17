package e2e

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	accessv1alpha1 "github.com/openshell/openshell-operator/api/access/v1alpha1"
	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/controllers/relayscale"
	"github.com/openshell/openshell-operator/internal/relayload"
	"github.com/openshell/openshell-operator/operator"
	"github.com/openshell/openshell-operator/test/framework"
	"github.com/openshell/openshell-operator/test/stack"
)

// TestRelayScalesOnSessions: the relay's replicas publish their sessions,
// the operator scales the relay's Deployment on their sum (up at once, down
// after the delay), and a user's limit holds across the replicas. Two
// relay replicas run as two pods would (each names a Pod as its Lease's
// owner); the sessions are followed log reads, as the front proxy forwards
// them.
func TestRelayScalesOnSessions(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := cluster.Client
	gwNS, sbNS := framework.CreateNamespace(ctx, t, c, "scale-platform"), framework.CreateNamespace(ctx, t, c, "scale-sandboxes")
	tenant := framework.CreateNamespace(ctx, t, c, "scale-tenant")
	const delay = 2 * time.Second
	st, err := stack.Start(ctx, cluster.Config, c, stack.Options{GatewayNamespace: gwNS, SandboxNamespace: sbNS,
		Manager: operator.Options{WatchNamespaces: []string{gwNS, sbNS, tenant}, Controllers: operator.ControllerOptions{
			RelayScaling: relayload.Scaling{Min: 2, Max: 3, SessionsPerReplica: 1, ScaleDownDelay: delay}}}})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { g.Expect(st.Stop()).To(Succeed()) })
	upgradeInPlace(ctx, g, st.Gateway, st.GatewayObj, "0.1.5")
	installOLMAggregatedRoles(ctx, t)
	bind(ctx, t, tenant, "dave", "openshell-sandbox-user")
	sb := sandboxOn(tenant, "agent", st.GatewayObj)
	g.Expect(c.Create(ctx, sb)).To(Succeed())
	waitPhase(ctx, g, client.ObjectKeyFromObject(sb), openshellv1alpha1.SandboxPhaseReady)

	// The relay's Deployment as the bundle installs it (its pods are not
	// what serves here), and two pods the replicas run as.
	dep := createRelayDeployment(ctx, g, gwNS)
	replica := func(name string) relayload.Replica {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: gwNS, Name: name},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "relay", Image: "relay"}}}}
		g.Expect(c.Create(ctx, pod)).To(Succeed())
		return relayload.Replica{Pod: name, UID: pod.UID}
	}
	start := func(name string) *stack.Relay {
		r, err := st.StartRelayReplica(cluster.Config, gwNS, stack.RelayOptions{Replica: replica(name), MaxSessionsPerUser: 3,
			Log: zap.New(zap.WriteTo(io.Discard))})
		g.Expect(err).NotTo(HaveOccurred())
		t.Cleanup(func() { _ = r.Drain() })
		return r
	}
	a, b := start("relay-a"), start("relay-b")

	replicas := func(g Gomega) int32 { return relayReplicas(ctx, g, dep) }
	var open []io.Closer
	closeAll := func() {
		for _, o := range open {
			_ = o.Close()
		}
		open = nil
	}
	defer closeAll()
	for _, r := range []*stack.Relay{a, a, b} {
		code, body, msg := follow(ctx, g, r, "dave", tenant, "agent")
		g.Expect(code).To(Equal(http.StatusOK), msg)
		open = append(open, body)
	}

	t.Run("three sessions scale the relay to three replicas", func(t *testing.T) {
		g := NewWithT(t)
		g.Eventually(replicas).WithContext(ctx).WithTimeout(30 * time.Second).Should(Equal(int32(3)))
		g.Eventually(func(g Gomega) {
			list := &eventsv1.EventList{}
			g.Expect(c.List(ctx, list, client.InNamespace(gwNS))).To(Succeed())
			var notes []string
			for _, e := range list.Items {
				if e.Regarding.Name == relayscale.Deployment && e.Reason == relayscale.ReasonScaled {
					notes = append(notes, e.Note)
				}
			}
			g.Expect(notes).To(ContainElement(ContainSubstring("from 2 to 3 replicas: 3 open sessions")))
		}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
	})
	t.Run("replicas put back, as OLM does when it reinstalls, are scaled again", func(t *testing.T) {
		// No session changes: only the Deployment's own change can bring
		// the operator back.
		g := NewWithT(t)
		g.Expect(c.SubResource("scale").Update(ctx, dep, client.WithSubResourceBody(&autoscalingv1.Scale{
			ObjectMeta: metav1.ObjectMeta{Namespace: gwNS, Name: relayscale.Deployment}, Spec: autoscalingv1.ScaleSpec{Replicas: 2}}))).To(Succeed())
		g.Eventually(replicas).WithContext(ctx).WithTimeout(30 * time.Second).Should(Equal(int32(3)))
	})
	t.Run("a user's limit holds across the replicas", func(t *testing.T) {
		// dave holds two sessions on a and one on b: a refuses a fourth
		// once it has read b's Lease (each replica alone holds fewer).
		g := NewWithT(t)
		g.Eventually(func(g Gomega) {
			code, body, msg := follow(ctx, g, a, "dave", tenant, "agent")
			if body != nil {
				_ = body.Close()
			}
			g.Expect(code).To(Equal(http.StatusTooManyRequests), msg)
			g.Expect(msg).To(ContainSubstring("dave has 3 open sessions, the most one user may"))
		}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
	})
	t.Run("the relay is scaled down once the sessions have ended for the delay", func(t *testing.T) {
		g := NewWithT(t)
		closed := time.Now()
		closeAll()
		g.Eventually(replicas).WithContext(ctx).WithTimeout(time.Minute).Should(Equal(int32(2)))
		t.Logf("figure: scaled down %s after the last session ended (delay %s)", time.Since(closed).Round(100*time.Millisecond), delay)
	})
	t.Run("a replica's load goes with its pod", func(t *testing.T) {
		g := NewWithT(t)
		lease := &coordinationv1.Lease{}
		key := client.ObjectKey{Namespace: gwNS, Name: relayload.Name("relay-b")}
		g.Expect(c.Get(ctx, key, lease)).To(Succeed())
		g.Expect(c.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: gwNS, Name: "relay-b"}},
			client.GracePeriodSeconds(0))).To(Succeed())
		g.Eventually(func() bool {
			return apierrors.IsNotFound(c.Get(ctx, key, lease))
		}).WithContext(ctx).WithTimeout(time.Minute).Should(BeTrue(), "the garbage collector deletes the Lease of a pod that is gone")
	})
}

// follow opens a followed log read of a sandbox on relay r as user, as the
// front proxy forwards it, and returns the status, the open body (on 200:
// the session, until closed) and, on a refusal, its message.
func follow(ctx context.Context, g Gomega, r *stack.Relay, user, ns, name string) (int, io.ReadCloser, string) {
	resp := openDirect(ctx, g, r, cluster.FrontProxy.Client, accessv1alpha1.Path(ns, name, accessv1alpha1.SubresourceLog)+"?follow=true&tailLines=1", user)
	if resp.StatusCode == http.StatusOK {
		return resp.StatusCode, resp.Body, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, nil, string(b)
}

// createRelayDeployment creates the relay's Deployment in ns as the bundle
// names it, with the bundle's two replicas (its pods are kwok's).
func createRelayDeployment(ctx context.Context, g Gomega, ns string) *appsv1.Deployment {
	labels := map[string]string{"app.kubernetes.io/name": "openshell-relay"}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: relayscale.Deployment},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](2), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "relay", Image: "relay"}}}}}}
	g.ExpectWithOffset(1, cluster.Client.Create(ctx, dep)).To(Succeed())
	return dep
}

// relayReplicas is the relay Deployment's replicas, as its scale reads.
func relayReplicas(ctx context.Context, g Gomega, dep *appsv1.Deployment) int32 {
	s := &autoscalingv1.Scale{}
	g.Expect(cluster.Client.SubResource("scale").Get(ctx, dep, s)).To(Succeed())
	return s.Spec.Replicas
}
