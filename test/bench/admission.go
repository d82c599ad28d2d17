package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"slices"
	"sort"
	"sync"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/scheme"
	"github.com/openshell/openshell-operator/internal/tenancy"
	"github.com/openshell/openshell-operator/internal/webhook"
	"github.com/openshell/openshell-operator/operator"
	"github.com/openshell/openshell-operator/test/framework"
)

// AdmissionResult is the validating webhook's latency under concurrent
// creates: as served (the handler from decoding the request to writing the
// answer, timed at the webhook server) and as the creating client saw it
// (the whole API request), once with every process sharing the cores and
// once with the webhook on a core of its own.
type AdmissionResult struct {
	Concurrency   int            `json:"concurrency"`
	PolicyEntries int            `json:"policyEntries"`
	Rows          []AdmissionRow `json:"rows"`
}

// AdmissionRow is one placement's figures.
type AdmissionRow struct {
	Placement  string        `json:"placement"`
	Requests   int           `json:"requests"`
	Denied     int           `json:"denied"`
	WebhookP50 time.Duration `json:"webhookP50"`
	WebhookP90 time.Duration `json:"webhookP90"`
	WebhookP95 time.Duration `json:"webhookP95"`
	WebhookP99 time.Duration `json:"webhookP99"`
	// GoSchedP99 is the 99th percentile of how long the webhook process's
	// goroutines waited to run (runtime/metrics /sched/latencies) and
	// RunQueueWaitPerCall how long its threads waited for a CPU, per
	// webhook call (/proc schedstat): where the handler's tail comes from.
	GoSchedP99          time.Duration `json:"goSchedP99"`
	RunQueueWaitPerCall time.Duration `json:"runQueueWaitPerCall"`
	// FinalizerP50 and FinalizerP99 time the mutating webhook that sets the
	// sandbox finalizer (the same creates, before validation).
	FinalizerP50 time.Duration `json:"finalizerP50"`
	FinalizerP99 time.Duration `json:"finalizerP99"`
	ClientP50    time.Duration `json:"clientP50"`
	ClientP99    time.Duration `json:"clientP99"`
	// WarmupMax is the slowest request of the unmeasured first round.
	WarmupMax time.Duration `json:"warmupMax"`
}

// benchDigest pins the images: the policy's mirrors need digests.
const benchDigest = "@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// latencies records how long each admission handler call took, by path
// (a create passes the finalizer webhook, then the validating one).
type latencies struct {
	mu sync.Mutex
	d  map[string][]time.Duration
}

func (l *latencies) wrap(path string, next http.Handler) http.Handler {
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
		if l.d == nil {
			l.d = map[string][]time.Duration{}
		}
		l.d[path] = append(l.d[path], d)
		l.mu.Unlock()
	})
}

func (l *latencies) sorted(path string) []time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := append([]time.Duration(nil), l.d[path]...)
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
	mgr, err := operator.New(env.Config, operator.Options{MetricsAddr: "0", ProbeAddr: "0",
		WebhookHost: wh.LocalServingHost, WebhookPort: wh.LocalServingPort, WebhookCertDir: wh.LocalServingCertDir,
		// The namespace plays the operator's own: its gateway is served there.
		Controllers: operator.ControllerOptions{EnableWebhooks: true, Platform: tenancy.Platform{OperatorNamespace: admissionNamespace,
			GatewayNamespaces: []string{admissionNamespace}}},
		SkipControllerNameValidation: true, WebhookMiddleware: rec.wrap})
	if err != nil {
		return AdmissionResult{}, err
	}
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	defer func() { cancel(); <-done }()

	c := env.Client
	ns := admissionNamespace
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		return AdmissionResult{}, err
	}
	gw := &openshellv1alpha1.OpenShellGateway{ObjectMeta: metav1.ObjectMeta{Name: "gw", Namespace: ns},
		Spec: openshellv1alpha1.OpenShellGatewaySpec{ImagePolicy: openshellv1alpha1.ImagePolicyEnforcement{
			Mode: openshellv1alpha1.ImagePolicyEnforce, WhenNoPolicy: openshellv1alpha1.NoPolicyDeny},
			SandboxControls: openshellv1alpha1.SandboxControls{RequirePolicy: ptr.To(false)}}}
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

	// The creating client runs in a process of its own: 200 goroutines
	// encoding and sending requests in this process would share its
	// scheduler and garbage collector with the webhook being measured,
	// which runs alone in the operator's process when deployed.
	dir, err := os.MkdirTemp("", "bench-admission-")
	if err != nil {
		return AdmissionResult{}, err
	}
	defer os.RemoveAll(dir)
	kubeconfig, err := env.WriteKubeconfig(dir)
	if err != nil {
		return AdmissionResult{}, err
	}
	spec := admissionClientSpec{Kubeconfig: kubeconfig, Namespace: ns, Gateway: gw.Name,
		Concurrency: concurrency, Rounds: rounds, Entries: entries}
	res := AdmissionResult{Concurrency: concurrency, PolicyEntries: entries}
	row, err := runAdmissionRounds(ctx, spec, rec, nil)
	if err != nil {
		return AdmissionResult{}, err
	}
	row.Placement = "all processes share the cores"
	res.Rows = append(res.Rows, row)
	place, restore := nicePlacement()
	row, err = runAdmissionRounds(ctx, spec, rec, place)
	restore()
	if err != nil {
		return AdmissionResult{}, err
	}
	row.Placement = "shared cores, the others at nice 10"
	res.Rows = append(res.Rows, row)
	if runtime.NumCPU() < 2 {
		return res, nil
	}
	// In a cluster the API server runs on control-plane nodes and the
	// operator elsewhere: on one machine, the closest is a core for the
	// webhook (this process) and the other cores for the rest.
	others := []int{}
	for c := range runtime.NumCPU() - 1 {
		others = append(others, c+1)
	}
	pin := func(int) error {
		children, err := framework.Children()
		if err != nil {
			return err
		}
		for pid := range children {
			if err := framework.SetAffinity(pid, others...); err != nil {
				return err
			}
		}
		// One core, one P: two Ps would take turns on it.
		runtime.GOMAXPROCS(1)
		return framework.SetAffinity(os.Getpid(), 0)
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	defer func() {
		children, _ := framework.Children()
		for pid := range children {
			_ = framework.SetAffinity(pid)
		}
		_ = framework.SetAffinity(os.Getpid())
	}()
	row, err = runAdmissionRounds(ctx, spec, rec, pin)
	if err != nil {
		return AdmissionResult{}, err
	}
	row.Placement = "webhook on a core of its own"
	res.Rows = append(res.Rows, row)
	return res, nil
}

// nicePlacement shares the cores but gives every other process nice 10,
// as a CPU request's larger cgroup weight would favour the operator's pod
// on a node it shares with the control plane; restore sets them back.
func nicePlacement() (place func(int) error, restore func()) {
	set := func(n int) error {
		children, err := framework.Children()
		if err != nil {
			return err
		}
		for pid := range children {
			if err := framework.SetNice(pid, n); err != nil {
				return err
			}
		}
		return nil
	}
	return func(int) error { return set(10) }, func() { _ = set(0) }
}

// runAdmissionRounds starts the client process, calls place (when set)
// with its PID, and returns the figures of its measured rounds.
func runAdmissionRounds(ctx context.Context, spec admissionClientSpec, rec *latencies, place func(pid int) error) (AdmissionRow, error) {
	raw, _ := json.Marshal(spec)
	self, err := os.Executable()
	if err != nil {
		return AdmissionRow{}, err
	}
	cmd := exec.CommandContext(ctx, self)
	cmd.Env = append(os.Environ(), admissionClientEnv+"="+string(raw))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return AdmissionRow{}, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return AdmissionRow{}, err
	}
	if err := cmd.Start(); err != nil {
		return AdmissionRow{}, fmt.Errorf("start the admission client: %w", err)
	}
	defer func() { _ = stdin.Close(); _ = cmd.Wait() }()
	if place != nil {
		if err := place(cmd.Process.Pid); err != nil {
			return AdmissionRow{}, err
		}
	}
	dec := json.NewDecoder(stdout)
	// The first round warms the webhook's connections and compiles the
	// allowlist index; it is reported apart, not in the figures.
	var warm admissionClientResult
	if err := dec.Decode(&warm); err != nil {
		return AdmissionRow{}, fmt.Errorf("admission client warm-up: %w", err)
	}
	rec.mu.Lock()
	rec.d = nil
	rec.mu.Unlock()
	schedBefore, err := readSched()
	if err != nil {
		return AdmissionRow{}, err
	}
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		return AdmissionRow{}, err
	}
	var res admissionClientResult
	if err := dec.Decode(&res); err != nil {
		return AdmissionRow{}, fmt.Errorf("admission client: %w", err)
	}
	schedAfter, err := readSched()
	if err != nil {
		return AdmissionRow{}, err
	}
	if warm.Failure != "" || res.Failure != "" {
		return AdmissionRow{}, errors.New(warm.Failure + res.Failure)
	}
	clientLat := res.Latencies
	sort.Slice(clientLat, func(i, j int) bool { return clientLat[i] < clientLat[j] })
	served, fin := rec.sorted(validateSandboxPath), rec.sorted(webhook.FinalizerPath)
	return AdmissionRow{Requests: len(clientLat), Denied: res.Denied,
		WebhookP50: pct(served, 50), WebhookP90: pct(served, 90), WebhookP95: pct(served, 95), WebhookP99: pct(served, 99),
		FinalizerP50: pct(fin, 50), FinalizerP99: pct(fin, 99),
		ClientP50: pct(clientLat, 50), ClientP99: pct(clientLat, 99), WarmupMax: slices.Max(warm.Latencies),
		GoSchedP99:          schedAfter.goLatencyP99Since(schedBefore),
		RunQueueWaitPerCall: (schedAfter.runQueue - schedBefore.runQueue) / time.Duration(max(len(served)+len(fin), 1))}, nil
}

// schedState is where this process's time went between two readings: the
// Go scheduler's latency histogram (goroutines runnable, waiting for a P)
// and the kernel's run-queue wait of its threads (runnable, waiting for a
// CPU).
type schedState struct {
	goLatency *metrics.Float64Histogram
	runQueue  time.Duration
}

func readSched() (schedState, error) {
	sample := []metrics.Sample{{Name: "/sched/latencies:seconds"}}
	metrics.Read(sample)
	if sample[0].Value.Kind() != metrics.KindFloat64Histogram {
		return schedState{}, errors.New("runtime/metrics has no /sched/latencies:seconds")
	}
	h := sample[0].Value.Float64Histogram()
	rq, err := framework.RunQueueWait(os.Getpid())
	return schedState{goLatency: &metrics.Float64Histogram{Counts: slices.Clone(h.Counts), Buckets: h.Buckets}, runQueue: rq}, err
}

// goLatencyP99Since is the 99th percentile of the Go scheduler latencies
// recorded since before (the upper bound of its bucket).
func (s schedState) goLatencyP99Since(before schedState) time.Duration {
	var total uint64
	counts := make([]uint64, len(s.goLatency.Counts))
	for i, c := range s.goLatency.Counts {
		counts[i] = c - before.goLatency.Counts[i]
		total += counts[i]
	}
	if total == 0 {
		return 0
	}
	want, seen := (total*99+99)/100, uint64(0)
	for i, c := range counts {
		if seen += c; seen >= want {
			return time.Duration(s.goLatency.Buckets[i+1] * float64(time.Second))
		}
	}
	return 0
}

// admissionClientEnv makes this program the admission client (a JSON
// admissionClientSpec) instead of the benchmark.
const admissionClientEnv = "BENCH_ADMISSION_CLIENT"

type admissionClientSpec struct {
	Kubeconfig, Namespace, Gateway string
	Concurrency, Rounds, Entries   int
}

// admissionClientResult is one report of the client: the warm-up round,
// then the measured rounds.
type admissionClientResult struct {
	Latencies []time.Duration `json:"latencies"`
	Denied    int             `json:"denied"`
	Failure   string          `json:"failure,omitempty"`
}

// runAdmissionClient sends the rounds of concurrent dry-run creates: one
// warm-up round, a report, a "go" on stdin, then the measured rounds and
// their report, each report a JSON line on stdout.
func runAdmissionClient(specJSON string) error {
	var spec admissionClientSpec
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", spec.Kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = -1, 0 // no client-side throttling: the API server sees the concurrency
	creator, err := client.New(cfg, client.Options{Scheme: scheme.New()})
	if err != nil {
		return err
	}
	ctx := context.Background()
	out := json.NewEncoder(os.Stdout)
	round := func(r int) admissionClientResult {
		var (
			mu  sync.Mutex
			res admissionClientResult
			wg  sync.WaitGroup
		)
		for w := range spec.Concurrency {
			wg.Add(1)
			go func() {
				defer wg.Done()
				i := r*spec.Concurrency + w
				image := fmt.Sprintf("mirror.example.com/team-%d/agent%s", i%spec.Entries, benchDigest)
				if i%10 == 9 {
					image = fmt.Sprintf("docker.io/team-%d/agent%s", i, benchDigest)
				}
				sb := &openshellv1alpha1.OpenShellSandbox{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("adm-%d", i), Namespace: spec.Namespace},
					Spec: openshellv1alpha1.OpenShellSandboxSpec{GatewayRef: openshellv1alpha1.GatewayReference{Name: spec.Gateway}, Image: image}}
				start := time.Now()
				err := creator.Create(ctx, sb, client.DryRunAll)
				d := time.Since(start)
				mu.Lock()
				defer mu.Unlock()
				res.Latencies = append(res.Latencies, d)
				switch {
				case err == nil:
					if i%10 == 9 && res.Failure == "" {
						res.Failure = fmt.Sprintf("an unmirrored image was admitted: %s", image)
					}
				case apierrors.IsForbidden(err) || apierrors.IsInvalid(err):
					res.Denied++
					if i%10 != 9 && res.Failure == "" {
						res.Failure = fmt.Sprintf("a mirrored image was denied: %v", err)
					}
				default:
					if res.Failure == "" {
						res.Failure = fmt.Sprintf("create %s: %v", sb.Name, err)
					}
				}
			}()
		}
		wg.Wait()
		return res
	}
	if err := out.Encode(round(0)); err != nil {
		return err
	}
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		return fmt.Errorf("wait for go: %w", err)
	}
	var all admissionClientResult
	for r := 1; r <= spec.Rounds; r++ {
		res := round(r)
		all.Latencies = append(all.Latencies, res.Latencies...)
		all.Denied += res.Denied
		if all.Failure == "" {
			all.Failure = res.Failure
		}
	}
	return out.Encode(all)
}

func printAdmission(f *os.File, r *AdmissionResult) {
	if r == nil || len(r.Rows) == 0 {
		return
	}
	fmt.Fprintf(f, "\nAdmission, %d concurrent dry-run creates × %d, image policy of %d entries (target: webhook p99 < 5ms)\n\n",
		r.Concurrency, r.Rows[0].Requests/max(r.Concurrency, 1), r.PolicyEntries)
	w := tabwriter.NewWriter(f, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "placement\trequests\tdenied (not mirrored)\twebhook p50\tp90\tp95\tp99\tfinalizer p50\tp99\tGo sched p99\tCPU wait per call\tclient p50\tclient p99\twarm-up round max\t")
	for _, row := range r.Rows {
		fmt.Fprintf(w, "%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", row.Placement, row.Requests, row.Denied,
			row.WebhookP50.Round(time.Microsecond), row.WebhookP90.Round(time.Microsecond), row.WebhookP95.Round(time.Microsecond),
			row.WebhookP99.Round(time.Microsecond), row.FinalizerP50.Round(time.Microsecond), row.FinalizerP99.Round(time.Microsecond),
			row.GoSchedP99.Round(time.Microsecond), row.RunQueueWaitPerCall.Round(time.Microsecond),
			row.ClientP50.Round(time.Microsecond), row.ClientP99.Round(time.Microsecond),
			row.WarmupMax.Round(time.Millisecond))
	}
	_ = w.Flush()
}

// validateSandboxPath is the validating webhook the figures are about.
const validateSandboxPath = "/validate-openshell-ai-v1alpha1-openshellsandbox"

// admissionNamespace holds the admission benchmark's gateway and sandboxes.
const admissionNamespace = "admission"
