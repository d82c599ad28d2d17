package operator_test

import (
	"context"
	"crypto/tls"
	"net/http"
	"os"
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/operator"
	"github.com/openshell/openshell-operator/test/framework"
)

var env *framework.Env

func TestMain(m *testing.M) {
	os.Exit(framework.RunWithEnv(m, framework.EnvOptions{}, &env))
}

func startManager(t *testing.T, opts operator.Options) {
	t.Helper()
	opts.SkipControllerNameValidation = true
	mgr, err := operator.New(env.Config, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager exited with error: %v", err)
		}
	})
}

func port(t *testing.T) string {
	t.Helper()
	p, err := framework.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return strconv.Itoa(p)
}

// TestWatchNamespaces proves the cache honours WATCH_NAMESPACE: objects in
// a watched namespace are reconciled, others are never seen.
func TestWatchNamespaces(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	watched := framework.CreateNamespace(ctx, t, env.Client, "watched")
	other := framework.CreateNamespace(ctx, t, env.Client, "other")
	startManager(t, operator.Options{WatchNamespaces: []string{watched}, MetricsAddr: "0", ProbeAddr: "0"})

	ignored := &openshellv1alpha1.OpenShellPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: other}}
	g.Expect(env.Client.Create(ctx, ignored)).To(Succeed())
	seen := &openshellv1alpha1.OpenShellPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: watched}}
	g.Expect(env.Client.Create(ctx, seen)).To(Succeed())

	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(seen), seen)).To(Succeed())
		g.Expect(seen.Status.ObservedGeneration).To(Equal(seen.Generation))
	}).WithTimeout(20 * time.Second).Should(Succeed())
	g.Consistently(func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(ignored), ignored)).To(Succeed())
		g.Expect(ignored.Status.ObservedGeneration).To(BeZero())
	}).WithTimeout(2 * time.Second).Should(Succeed())
}

// TestProbesMetricsAndLeaderElection checks the operational surface: health
// and readiness probes answer, metrics refuse anonymous callers, and the
// leader holds a Lease.
func TestProbesMetricsAndLeaderElection(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := framework.CreateNamespace(ctx, t, env.Client, "leader")
	probe, metrics := port(t), port(t)
	startManager(t, operator.Options{
		MetricsAddr: "127.0.0.1:" + metrics, SecureMetrics: true,
		ProbeAddr:      "127.0.0.1:" + probe,
		LeaderElection: true, LeaderElectionNamespace: ns,
	})

	for _, path := range []string{"/healthz", "/readyz"} {
		g.Eventually(func() (int, error) {
			resp, err := http.Get("http://127.0.0.1:" + probe + path)
			if err != nil {
				return 0, err
			}
			_ = resp.Body.Close()
			return resp.StatusCode, nil
		}).WithTimeout(20*time.Second).Should(Equal(http.StatusOK), path)
	}

	insecure := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	g.Eventually(func() (int, error) {
		resp, err := insecure.Get("https://127.0.0.1:" + metrics + "/metrics")
		if err != nil {
			return 0, err
		}
		_ = resp.Body.Close()
		return resp.StatusCode, nil
	}).WithTimeout(20 * time.Second).Should(BeElementOf(http.StatusUnauthorized, http.StatusForbidden))

	lease := &coordinationv1.Lease{}
	g.Eventually(func() error {
		return env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: operator.LeaderElectionID}, lease)
	}).WithTimeout(30 * time.Second).Should(Succeed())
	g.Expect(lease.Spec.HolderIdentity).NotTo(BeNil())
}

// TestSteadyStateMakesNoWrites reconciles an object, then checks its
// resourceVersion is stable: a no-op reconcile must not write status.
func TestSteadyStateMakesNoWrites(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := framework.CreateNamespace(ctx, t, env.Client, "steady")
	startManager(t, operator.Options{WatchNamespaces: []string{ns}, MetricsAddr: "0", ProbeAddr: "0"})
	p := &openshellv1alpha1.OpenShellProvider{
		ObjectMeta: metav1.ObjectMeta{Name: "gh", Namespace: ns},
		Spec:       openshellv1alpha1.OpenShellProviderSpec{Type: "github"},
	}
	g.Expect(env.Client.Create(ctx, p)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(p), p)).To(Succeed())
		g.Expect(p.Status.ObservedGeneration).To(Equal(int64(1)))
	}).WithTimeout(20 * time.Second).Should(Succeed())

	// A label change triggers a reconcile without a new generation, and
	// that reconcile writes nothing.
	reconciles := framework.ReconcileCount("openshellprovider")
	p.Labels = map[string]string{"touched": "yes"}
	g.Expect(env.Client.Update(ctx, p)).To(Succeed())
	rv := p.ResourceVersion
	g.Eventually(func() float64 { return framework.ReconcileCount("openshellprovider") }).
		WithTimeout(10 * time.Second).Should(BeNumerically(">", reconciles))
	cur := &openshellv1alpha1.OpenShellProvider{}
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(p), cur)).To(Succeed())
	g.Expect(cur.ResourceVersion).To(Equal(rv))
}
