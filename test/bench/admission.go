package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/controllers"
	"github.com/openshell/openshell-operator/internal/manager"
	"github.com/openshell/openshell-operator/test/framework"
)

// AdmissionResult is the validating webhook's latency under concurrent
// creates: as served (the handler from decoding the request to writing the
// answer, timed at the webhook server) and as the
// creating client saw it (the whole API request).
type AdmissionResult struct {
	Concurrency   int           `json:"concurrency"`
	Requests      int           `json:"requests"`
	Denied        int           `json:"denied"`
	PolicyEntries int           `json:"policyEntries"`
	WebhookP50    time.Duration `json:"webhookP50"`
	WebhookP99    time.Duration `json:"webhookP99"`
	ClientP50     time.Duration `json:"clientP50"`
	ClientP99     time.Duration `json:"clientP99"`
	// WarmupMax is the slowest request of the unmeasured first round.
	WarmupMax time.Duration `json:"warmupMax"`
}

// benchDigest pins the images: the policy's mirrors need digests.
const benchDigest = "@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// latencies records how long each admission handler call took.
type latencies struct {
	mu sync.Mutex
	d  []time.Duration
}

func (l *latencies) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The body is read before the clock starts: on two shared cores the
		// API server may stall mid-send, and that wait is not the webhook's.
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		start := time.Now()
		next.ServeHTTP(w, r)
		d := time.Since(start)
		l.mu.Lock()
		l.d = append(l.d, d)
		l.mu.Unlock()
	})
}

func (l *latencies) sorted() []time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := append([]time.Duration(nil), l.d...)
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// measureAdmission starts an API server with the operator's webhook
// configuration, a tenant with an enforcing gateway and an image policy of
// entries allowlist entries, and sends rounds of concurrent dry-run creates
// (the webhook runs, nothing is stored, so only admission is measured).
// Every tenth image is not mirrored and must be denied; the others must
// be admitted.
func measureAdmission(ctx context.Context, concurrency, rounds, entries int) (AdmissionResult, error) {
	env, err := framework.StartEnv(framework.EnvOptions{AgentSandbox: framework.AgentSandboxBetaOnly,
		Webhooks: &envtest.WebhookInstallOptions{Paths: []string{filepath.Join(framework.RepoRoot(), "config", "webhook", "manifests.yaml")}}})
	if err != nil {
		return AdmissionResult{}, err
	}
	defer func() { _ = env.Stop() }()
	rec := &latencies{}
	wh := env.WebhookInstallOptions
	mgr, err := manager.New(env.Config, manager.Options{MetricsAddr: "0", ProbeAddr: "0",
		WebhookHost: wh.LocalServingHost, WebhookPort: wh.LocalServingPort, WebhookCertDir: wh.LocalServingCertDir,
		Controllers: controllers.Options{EnableWebhooks: true}, SkipControllerNameValidation: true, WebhookMiddleware: rec.wrap})
	if err != nil {
		return AdmissionResult{}, err
	}
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	defer func() { cancel(); <-done }()

	c := env.Client
	ns := "admission"
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		return AdmissionResult{}, err
	}
	gw := &openshellv1alpha1.OpenShellGateway{ObjectMeta: metav1.ObjectMeta{Name: "gw", Namespace: ns},
		Spec: openshellv1alpha1.OpenShellGatewaySpec{ImagePolicy: openshellv1alpha1.ImagePolicyEnforcement{
			Mode: openshellv1alpha1.ImagePolicyEnforce, WhenNoPolicy: openshellv1alpha1.NoPolicyDeny}}}
	allowed := make([]string, entries)
	for i := range allowed {
		allowed[i] = fmt.Sprintf("mirror.example.com/team-%d", i)
	}
	pol := &openshellv1alpha1.OpenShellImagePolicy{ObjectMeta: metav1.ObjectMeta{Name: "mirrors", Namespace: ns},
		Spec: openshellv1alpha1.OpenShellImagePolicySpec{AllowedMirrors: allowed}}
	for _, o := range []client.Object{gw, pol} {
		if err := c.Create(ctx, o); err != nil {
			return AdmissionResult{}, err
		}
	}
	// The webhook decides from the manager's cache: wait until the
	// controllers have seen both objects (their status says so).
	err = framework.WaitFor(ctx, 50*time.Millisecond, func(ctx context.Context) (bool, error) {
		g, p := &openshellv1alpha1.OpenShellGateway{}, &openshellv1alpha1.OpenShellImagePolicy{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(gw), g); err != nil {
			return false, err
		}
		if err := c.Get(ctx, client.ObjectKeyFromObject(pol), p); err != nil {
			return false, err
		}
		return g.Status.ObservedGeneration == g.Generation && p.Status.ObservedGeneration == p.Generation &&
			mgr.GetWebhookServer().StartedChecker()(nil) == nil, nil
	})
	if err != nil {
		return AdmissionResult{}, fmt.Errorf("wait for the tenant: %w", err)
	}

	cfg := rest.CopyConfig(env.Config)
	cfg.QPS, cfg.Burst = -1, 0 // no client-side throttling: the API server sees the concurrency
	creator, err := client.New(cfg, client.Options{Scheme: c.Scheme()})
	if err != nil {
		return AdmissionResult{}, err
	}
	var (
		mu        sync.Mutex
		clientLat []time.Duration
		denied    int
		failure   error
		warmup    time.Duration
	)
	for round := range rounds + 1 {
		var wg sync.WaitGroup
		for w := range concurrency {
			wg.Add(1)
			go func() {
				defer wg.Done()
				i := round*concurrency + w
				image := fmt.Sprintf("mirror.example.com/team-%d/agent%s", i%entries, benchDigest)
				if i%10 == 9 {
					image = fmt.Sprintf("docker.io/team-%d/agent%s", i, benchDigest)
				}
				sb := &openshellv1alpha1.OpenShellSandbox{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("adm-%d", i), Namespace: ns},
					Spec: openshellv1alpha1.OpenShellSandboxSpec{GatewayRef: openshellv1alpha1.GatewayReference{Name: gw.Name}, Image: image}}
				start := time.Now()
				err := creator.Create(ctx, sb, client.DryRunAll)
				d := time.Since(start)
				mu.Lock()
				defer mu.Unlock()
				clientLat = append(clientLat, d)
				switch {
				case err == nil:
				case apierrors.IsForbidden(err) || apierrors.IsInvalid(err):
					denied++
					if i%10 != 9 && failure == nil {
						failure = fmt.Errorf("a mirrored image was denied: %w", err)
					}
				default:
					if failure == nil {
						failure = fmt.Errorf("create %s: %w", sb.Name, err)
					}
				}
			}()
		}
		wg.Wait()
		if round == 0 {
			// The first round warms the webhook's connections and compiles
			// the allowlist index; it is reported apart, not in the figures.
			mu.Lock()
			warmup = slices.Max(clientLat)
			clientLat, denied = nil, 0
			mu.Unlock()
			rec.mu.Lock()
			rec.d = nil
			rec.mu.Unlock()
		}
	}
	if failure != nil {
		return AdmissionResult{}, failure
	}
	sort.Slice(clientLat, func(i, j int) bool { return clientLat[i] < clientLat[j] })
	served := rec.sorted()
	return AdmissionResult{Concurrency: concurrency, Requests: len(clientLat), Denied: denied, PolicyEntries: entries,
		WebhookP50: pct(served, 50), WebhookP99: pct(served, 99), ClientP50: pct(clientLat, 50), ClientP99: pct(clientLat, 99), WarmupMax: warmup}, nil
}

func printAdmission(f *os.File, r *AdmissionResult) {
	if r == nil {
		return
	}
	fmt.Fprintf(f, "\nAdmission, %d concurrent dry-run creates × %d, image policy of %d entries (target: webhook p99 < 5ms)\n\n",
		r.Concurrency, r.Requests/max(r.Concurrency, 1), r.PolicyEntries)
	w := tabwriter.NewWriter(f, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "requests\tdenied (not mirrored)\twebhook p50\twebhook p99\tclient p50\tclient p99\twarm-up round max\t")
	fmt.Fprintf(w, "%d\t%d\t%s\t%s\t%s\t%s\t%s\t\n", r.Requests, r.Denied, r.WebhookP50.Round(time.Microsecond),
		r.WebhookP99.Round(time.Microsecond), r.ClientP50.Round(time.Microsecond), r.ClientP99.Round(time.Microsecond),
		r.WarmupMax.Round(time.Millisecond))
	_ = w.Flush()
}
