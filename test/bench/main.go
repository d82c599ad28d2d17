// Command bench is the cluster part of `make bench`: on the local e2e
// cluster (real API server, controller-manager, scheduler, kwok, Agent
// Sandbox controller) and the test gateway, it measures create→Ready
// throughput and latency of N raw agents.x-k8s.io Sandboxes (the floor)
// against N OpenShellSandboxes through the operator, in one run, with the
// same creator at the same fixed rate, and prints the ratios. It never
// fails on a number: machines here are noisy.
//
// Environment: BENCH_N (comma list, default "100"), BENCH_RATE (creates per
// second, default 10: below what two cores sustain for the raw path, so the
// ratio compares the paths, not two saturated machines), BENCH_STEADY
// (steady-state window, default 30s; 0 skips it; the figure is 5m),
// BENCH_INFLATE (labelled 100 KiB ConfigMaps a tenant creates to try to
// inflate the operator's cache, default 1000; 0 skips it),
// BENCH_SECRET_ATTACK (1, the default: a tenant's 128 Secrets of 0.9 MiB
// named by greedy sandboxes, the operator's footprint before and after; 0
// skips it), BENCH_SATURATION (the first offered rate of the saturation search,
// default 10; 0 skips it), BENCH_SATURATION_WINDOW (how long each rate is
// offered, default 20s), BENCH_SCALE (OpenShellSandboxes for the scale
// run, default 0: none; the steady-state, footprint and fan-out figures
// include them), BENCH_SCALE_RATE (their offered rate, default BENCH_RATE),
// BENCH_FANOUT_QPS (comma list of operator client QPS at which to repeat
// the largest fan-out, e.g. "50,100,200,400"; process mode), BENCH_PROFILE
// (a folder: CPU profiles of the API server, and in process mode of the
// operator, during each create run), BENCH_REQUEST_COST (requests of each
// kind timed one at a time before the operator starts, default 200; 0 skips
// them), BENCH_ADMISSION (concurrent creates at the webhook, default 200; 0
// skips it), BENCH_OUT (results folder, default
// bench/results), BENCH_GO_RESULTS (a `go test -bench` output to include;
// make bench sets it), BENCH_OPERATOR ("process", the default: the operator
// binary as its own process, so its footprint can be read; "inprocess": the
// manager inside this program), BENCH_OPERATOR_ARGS (further operator flags,
// e.g. "--kube-api-qps=200 --kube-api-burst=400").
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/sandboxspec"
	"github.com/openshell/openshell-operator/operator"
	"github.com/openshell/openshell-operator/test/framework"
	"github.com/openshell/openshell-operator/test/sandboxpod"
	"github.com/openshell/openshell-operator/test/stack"
	"github.com/openshell/openshell-operator/test/testgateway"
)

var sandboxGVK = schema.GroupVersionKind{Group: "agents.x-k8s.io", Version: "v1beta1", Kind: "Sandbox"}

// Result is one path at one N.
type Result struct {
	Path       string        `json:"path"`
	N          int           `json:"n"`
	Ready      int           `json:"ready"`
	P50        time.Duration `json:"p50"`
	P95        time.Duration `json:"p95"`
	P99        time.Duration `json:"p99"`
	Wall       time.Duration `json:"wall"`
	Throughput float64       `json:"throughputPerSecond"`
	// CPU is the CPU time each component spent during the run, by command
	// name ("self" is this program: the creator, the watches and the test
	// gateway).
	CPU map[string]time.Duration `json:"cpu"`
	// APIRequests are the API server's requests during the run, by verb
	// and resource, from every client.
	APIRequests map[string]int `json:"apiRequests"`
	// PostP50 is the median create request.
	PostP50 time.Duration `json:"postP50"`
	// Stages splits the operator path's latency (nil for the raw path).
	Stages *Stages `json:"stages,omitempty"`
}

// Report is everything one run measured.
type Report struct {
	Date       time.Time          `json:"date"`
	Cores      int                `json:"cores"`
	Rate       int                `json:"ratePerSecond"`
	Versions   map[string]string  `json:"versions"`
	Results    []Result           `json:"results"`
	Operator   string             `json:"operator"`
	Steady     []SteadyResult     `json:"steady,omitempty"`
	Footprint  []FootprintResult  `json:"footprint,omitempty"`
	Fanout     []FanoutResult     `json:"fanout,omitempty"`
	Admission  *AdmissionResult   `json:"admission,omitempty"`
	Saturation []SaturationResult `json:"saturation,omitempty"`
	// RequestCosts are the operator path's two requests, one at a time.
	RequestCosts []RequestCost `json:"requestCosts,omitempty"`
	Scale        *ScaleResult  `json:"scale,omitempty"`
	GoBench      []GoBench     `json:"goBenchmarks,omitempty"`
}

func main() {
	if spec := os.Getenv(admissionClientEnv); spec != "" {
		if err := runAdmissionClient(spec); err != nil {
			fmt.Fprintln(os.Stderr, "bench admission client:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run() error {
	framework.SetupLogging()
	set, err := readSettings()
	if err != nil {
		return err
	}
	ns, rate := set.sizes, set.rate
	ctx := context.Background()
	cluster, err := framework.StartCluster(ctx, framework.ClusterOptions{EnvOptions: framework.EnvOptions{AgentSandbox: framework.AgentSandboxBetaOnly}})
	if err != nil {
		return err
	}
	defer func() { _ = cluster.Stop() }()
	c := cluster.Client
	for _, n := range []string{"bench-gateway", "bench-sandboxes"} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}}); err != nil {
			return err
		}
	}
	// Before the operator starts: nothing reacts to the objects measured.
	var costs []RequestCost
	if set.requestCost > 0 {
		if costs, err = measureRequestCosts(ctx, c, set.requestCost); err != nil {
			return fmt.Errorf("request costs: %w", err)
		}
	}
	mode := set.mode
	// The operator serves its webhooks and the API server calls them, as
	// deployed: the finalizer is set at admission.
	whDir := filepath.Join(cluster.Dir, "webhook-certs")
	if err := os.MkdirAll(whDir, 0o700); err != nil {
		return err
	}
	serving, err := framework.ServeWebhooksOnLoopback(whDir)
	if err != nil {
		return err
	}
	sopts := stack.Options{GatewayNamespace: "bench-gateway", SandboxNamespace: "bench-sandboxes",
		Manager: operator.Options{WebhookHost: "127.0.0.1", WebhookPort: serving.Port, WebhookCertDir: serving.CertDir,
			Controllers: operator.ControllerOptions{EnableWebhooks: true}}}
	var operatorPprof string // the operator process's profiles (BENCH_PROFILE)
	switch mode {
	case "process":
		bin := filepath.Join(cluster.Dir, "manager")
		// Built as make images builds the image's binary.
		if err := framework.BuildOperator(bin); err != nil {
			return err
		}
		sopts.Process = &stack.ProcessOptions{Binary: bin, Kubeconfig: cluster.KubeconfigPath, Dir: cluster.Dir,
			Args: strings.Fields(set.operatorArgs)}
		if os.Getenv("BENCH_PROFILE") != "" {
			port, err := framework.FreePort()
			if err != nil {
				return err
			}
			addr := fmt.Sprintf("127.0.0.1:%d", port)
			sopts.Process.Args = append(sopts.Process.Args, "--pprof-bind-address="+addr)
			operatorPprof = "http://" + addr
		}
	case "inprocess":
	default:
		return fmt.Errorf("BENCH_OPERATOR: %q is neither process nor inprocess", mode)
	}
	st, err := stack.Start(ctx, cluster.Config, c, sopts)
	if err != nil {
		return err
	}
	defer func() { _ = st.Stop() }()
	if _, err := framework.InstallWebhooks(ctx, c, "openshell-bench", serving, nil); err != nil {
		return err
	}
	watcher, err := client.NewWithWatch(cluster.Config, client.Options{Scheme: c.Scheme()})
	if err != nil {
		return err
	}

	rep := Report{Date: time.Now().UTC(), Cores: runtime.NumCPU(), Rate: rate, Operator: strings.TrimSpace(mode + " " + set.operatorArgs), Versions: map[string]string{
		"kubernetes": "v1.34.4", "agent-sandbox": framework.AgentSandboxBetaOnly, "kwok": "v0.8.0", "gateway": "test gateway (stand-in)", "go": runtime.Version()},
		GoBench: set.goBench, RequestCosts: costs}
	for _, n := range ns {
		raw, err := measure(ctx, cluster.Config, c, watcher, "raw", n, rate, rawPath)
		if err != nil {
			return err
		}
		opPath := operatorPath(st, sopts.SandboxNamespace)
		opPath.pprof = operatorPprof
		op, err := measure(ctx, cluster.Config, c, watcher, "operator", n, rate, opPath)
		if err != nil {
			return err
		}
		rep.Results = append(rep.Results, raw, op)
		if err := reportReconciles(os.Stdout, st); err != nil {
			return err
		}
	}
	var fanoutNamespaces []string
	for _, n := range ns {
		fanoutNamespaces = append(fanoutNamespaces, fmt.Sprintf("bench-operator-%d", n))
	}
	if set.scale > 0 {
		sc, err := measureScale(ctx, c, watcher, st, operatorPath(st, sopts.SandboxNamespace), set.scale, set.scaleRate)
		if err != nil {
			return fmt.Errorf("scale: %w", err)
		}
		rep.Scale = &sc
		fanoutNamespaces = append(fanoutNamespaces, scaleNamespace)
	}
	total, raws := 0, 0
	for _, r := range rep.Results {
		if r.Path == "operator" {
			total += r.Ready
		} else {
			raws += r.Ready
		}
	}
	if rep.Scale != nil {
		total += rep.Scale.Sandboxes
	}
	fp, err := footprint(cluster, st, "after the creates", fmt.Sprintf("%d OpenShellSandboxes; %d Sandboxes, pods, services", total, total+raws))
	if err != nil {
		return err
	}
	if fp != nil {
		rep.Footprint = append(rep.Footprint, *fp)
	}
	// From here on both the operator and the Agent Sandbox controller
	// handle the same sandboxes: the raw ones go.
	var rawNamespaces []string
	for _, n := range ns {
		rawNamespaces = append(rawNamespaces, fmt.Sprintf("bench-raw-%d", n))
	}
	if err := deleteNamespaces(ctx, c, rawNamespaces); err != nil {
		return fmt.Errorf("delete the raw sandboxes: %w", err)
	}
	if set.steady > 0 {
		// Every OpenShellSandbox created above is still there and Ready.
		steadyRes, prints, err := measureSteady(cluster, st, total, set.steady)
		if err != nil {
			return err
		}
		rep.Steady, rep.Footprint = steadyRes, append(rep.Footprint, prints...)
	}
	// Fan-out in each operator namespace, one after the other, after the
	// steady-state windows (the edit is a change by design).
	for _, n := range fanoutNamespaces {
		f, err := measureFanout(ctx, c, watcher, n)
		if err != nil {
			return fmt.Errorf("policy fan-out: %w", err)
		}
		rep.Fanout = append(rep.Fanout, f)
	}
	if len(set.fanoutQPS) > 0 {
		// The largest namespace, at each client QPS.
		fs, err := measureFanoutQPS(ctx, c, watcher, st, fanoutNamespaces[len(fanoutNamespaces)-1], set.fanoutQPS, strings.Fields(set.operatorArgs))
		if err != nil {
			return fmt.Errorf("policy fan-out by client QPS: %w", err)
		}
		rep.Fanout = append(rep.Fanout, fs...)
	}
	if set.inflate > 0 {
		prints, err := measureInflation(ctx, cluster, st, set.inflate)
		if err != nil {
			return fmt.Errorf("cache inflation: %w", err)
		}
		rep.Footprint = append(rep.Footprint, prints...)
	}
	if set.secretAttack {
		prints, err := measureSecretAttack(ctx, cluster, st)
		if err != nil {
			return fmt.Errorf("secret attack: %w", err)
		}
		rep.Footprint = append(rep.Footprint, prints...)
	}
	if set.admission > 0 {
		a, err := measureAdmission(ctx, set.admission, 5, 1000)
		if err != nil {
			return fmt.Errorf("admission: %w", err)
		}
		rep.Admission = &a
	}
	if set.saturationFrom > 0 {
		sat, err := measureSaturation(ctx, c, watcher, operatorPath(st, sopts.SandboxNamespace), set.saturationFrom, set.saturationWindow)
		if err != nil {
			return fmt.Errorf("saturation: %w", err)
		}
		rep.Saturation = sat
	}
	printReport(os.Stdout, rep)
	return write(set.out, rep)
}

// measureSaturation searches both paths' maximum sustained rate, raw
// first; the raw steps' namespaces go before the operator's steps run.
func measureSaturation(ctx context.Context, c client.Client, w client.WithWatch, op path, from int, window time.Duration) ([]SaturationResult, error) {
	const limit = 200
	raw, err := saturate(ctx, c, w, "raw", rawPath, from, limit, window)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, s := range raw.Steps {
		names = append(names, fmt.Sprintf("sat-raw-%d", s.Rate))
	}
	if err := deleteNamespaces(ctx, c, names); err != nil {
		return nil, err
	}
	opRes, err := saturate(ctx, c, w, "operator", op, from, limit, window)
	if err != nil {
		return nil, err
	}
	return []SaturationResult{raw, opRes}, nil
}

// path creates object i in namespace ns and says how to read readiness
// from watch events.
type path struct {
	// prefix starts the name of object i; the number follows.
	prefix string
	// gatewaySandboxes is where gateway creates the agents.x-k8s.io
	// Sandboxes of this path's objects ("" for the raw path).
	gatewaySandboxes string
	gateway          *testgateway.Gateway
	// setup prepares the namespace (nil: nothing to do).
	setup  func(ctx context.Context, c client.Client, ns string) error
	list   func() client.ObjectList
	create func(ctx context.Context, c client.Client, ns string, i int) error
	ready  func(obj any) (string, bool)
	// pprof serves the Go profiles of this path's own component, profiled
	// next to the API server under BENCH_PROFILE ("": none).
	pprof string
}

// rawPath creates the Sandbox the gateway's compute driver would create for
// an OpenShellSandbox (the sidecar topology, internal/sandboxpod), directly:
// the floor is the same object without the operator and the gateway in
// between, so the ratio measures what they add, not a smaller pod.
var rawPath = path{
	prefix: "raw-",
	list: func() client.ObjectList {
		l := &unstructured.UnstructuredList{}
		l.SetGroupVersionKind(sandboxGVK)
		return l
	},
	create: func(ctx context.Context, c client.Client, ns string, i int) error {
		name := fmt.Sprintf("raw-%d", i)
		id := fmt.Sprintf("00000000-0000-4000-8000-%012d", i)
		pod := sandboxpod.Sidecar(sandboxpod.Inputs{ServiceAccount: "openshell-sandbox", AgentImage: framework.TestImages.Legacy.Sandbox,
			SupervisorImage: framework.TestImages.Legacy.Supervisor, ClientTLSSecret: "openshell-client-tls", SandboxID: id, SandboxName: name,
			GRPCEndpoint: "https://openshell.bench-gateway.svc:8080", BinaryAware: true})
		sb, err := testgateway.RenderSandbox(sandboxGVK, testgateway.SandboxCR{Name: name, Namespace: ns, GatewayID: "bench",
			SandboxID: id, SandboxName: name, Workspace: ns, Pod: pod})
		if err != nil {
			return err
		}
		return c.Create(ctx, sb)
	},
	ready: func(o any) (string, bool) {
		u, ok := o.(*unstructured.Unstructured)
		if !ok {
			return "", false
		}
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, cnd := range conds {
			m, _ := cnd.(map[string]any)
			if m["type"] == "Ready" && m["status"] == "True" {
				return u.GetName(), true
			}
		}
		return u.GetName(), false
	},
}

func operatorPath(st *stack.Stack, gatewaySandboxes string) path {
	return path{
		prefix: "os-", gatewaySandboxes: gatewaySandboxes, gateway: st.Gateway,
		setup: func(ctx context.Context, c client.Client, ns string) error {
			return c.Create(ctx, newBenchPolicy(ns))
		},
		list: func() client.ObjectList { return &openshellv1alpha1.OpenShellSandboxList{} },
		create: func(ctx context.Context, c client.Client, ns string, i int) error {
			return c.Create(ctx, &openshellv1alpha1.OpenShellSandbox{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("os-%d", i), Namespace: ns},
				Spec: openshellv1alpha1.OpenShellSandboxSpec{GatewayRef: openshellv1alpha1.GatewayReference{
					Name: st.GatewayObj.Name, Namespace: st.GatewayObj.Namespace},
					PolicyRef: &openshellv1alpha1.LocalObjectReference{Name: benchPolicy}}})
		},
		ready: func(o any) (string, bool) {
			s, ok := o.(*openshellv1alpha1.OpenShellSandbox)
			if !ok {
				return "", false
			}
			return s.Name, s.Status.Phase == openshellv1alpha1.SandboxPhaseReady
		},
	}
}

// measure creates n objects at a fixed rate and records create→Ready.
func measure(ctx context.Context, cfg *rest.Config, c client.Client, w client.WithWatch, name string, n, rate int, p path) (Result, error) {
	ns := fmt.Sprintf("bench-%s-%d", name, n)
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		return Result{}, err
	}
	if p.setup != nil {
		if err := p.setup(ctx, c, ns); err != nil {
			return Result{}, fmt.Errorf("set up %s: %w", ns, err)
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	tr, stop, err := track(wctx, w, p, ns, n)
	if err != nil {
		return Result{}, err
	}
	defer stop()
	var stages *stageWatch
	if p.gatewaySandboxes != "" {
		names := map[string]string{}
		for i := 0; i < n; i++ {
			own := fmt.Sprintf("%s%d", p.prefix, i)
			names[sandboxspec.SandboxName(ns, own)] = own
		}
		var stopStages func()
		if stages, stopStages, err = watchStages(wctx, w, p.gateway, p.gatewaySandboxes, names); err != nil {
			return Result{}, err
		}
		defer stopStages()
	}
	usageBefore, err := framework.ChildrenUsage()
	if err != nil {
		return Result{}, err
	}
	reqsBefore, err := apiRequests(ctx, cfg)
	if err != nil {
		return Result{}, err
	}
	waitProfile := func() error { return nil }
	if dir := os.Getenv("BENCH_PROFILE"); dir != "" {
		waitAPIServer := profileAPIServer(ctx, cfg, n/rate+1, filepath.Join(dir, fmt.Sprintf("apiserver-%s-%d.pprof", name, n)))
		waitOwn := func() error { return nil }
		if p.pprof != "" {
			waitOwn = profileURL(ctx, p.pprof+"/debug/pprof/profile", n/rate+1, filepath.Join(dir, fmt.Sprintf("%s-%d.pprof", name, n)))
		}
		waitProfile = func() error { return errors.Join(waitAPIServer(), waitOwn()) }
	}
	start := time.Now()
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	for i := 0; i < n; i++ {
		<-tick.C
		obj := fmt.Sprintf("%s%d", p.prefix, i)
		tr.markCreated(obj)
		if err := p.create(ctx, c, ns, i); err != nil {
			return Result{}, fmt.Errorf("create %s %d: %w", name, i, err)
		}
		tr.markPosted(obj)
	}
	tr.wait(wctx)
	wall := time.Since(start)
	usageAfter, err := framework.ChildrenUsage()
	if err != nil {
		return Result{}, err
	}
	if err := waitProfile(); err != nil {
		return Result{}, err
	}
	reqsAfter, err := apiRequests(ctx, cfg)
	if err != nil {
		return Result{}, err
	}
	cpu := map[string]time.Duration{}
	for name, u := range usageAfter {
		cpu[name] = u.CPU - usageBefore[name].CPU
	}
	lat := tr.latencies()
	r := Result{Path: name, N: n, Ready: len(lat), Wall: wall, CPU: cpu, APIRequests: diff(reqsAfter, reqsBefore), P50: pct(lat, 50), P95: pct(lat, 95), P99: pct(lat, 99),
		PostP50: tr.postP50()}
	if wall > 0 {
		r.Throughput = float64(len(lat)) / wall.Seconds()
	}
	if stages != nil {
		r.Stages = stages.split(tr)
	}
	return r, nil
}

func pct(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := (len(sorted)*p + 99) / 100
	return sorted[min(max(i-1, 0), len(sorted)-1)]
}

func printReport(f *os.File, rep Report) {
	fmt.Fprintf(f, "\nCreate → Ready, %d cores, %d creates/s, Kubernetes %s, Agent Sandbox %s, kwok %s\n\n",
		rep.Cores, rep.Rate, rep.Versions["kubernetes"], rep.Versions["agent-sandbox"], rep.Versions["kwok"])
	w := tabwriter.NewWriter(f, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "N\tpath\tready\tp50\tp95\tp99\twall\tper s\tp50 ratio\twall ratio\t")
	byN := map[int]Result{}
	for _, r := range rep.Results {
		if r.Path == "raw" {
			byN[r.N] = r
		}
	}
	for _, r := range rep.Results {
		ratio, wallRatio := "", ""
		if base, ok := byN[r.N]; ok && r.Path != "raw" && base.P50 > 0 && base.Wall > 0 {
			ratio = fmt.Sprintf("%.2f", float64(r.P50)/float64(base.P50))
			wallRatio = fmt.Sprintf("%.2f", float64(r.Wall)/float64(base.Wall))
		}
		fmt.Fprintf(w, "%d\t%s\t%d\t%s\t%s\t%s\t%s\t%.1f\t%s\t%s\t\n", r.N, r.Path, r.Ready,
			r.P50.Round(time.Millisecond), r.P95.Round(time.Millisecond), r.P99.Round(time.Millisecond),
			r.Wall.Round(time.Millisecond), r.Throughput, ratio, wallRatio)
	}
	_ = w.Flush()
	printStages(f, rep.Results)
	printCPU(f, rep.Results)
	printAPIRequests(f, rep.Results)
	printScale(f, rep.Scale)
	printSteady(f, rep.Steady)
	printFootprint(f, rep.Footprint)
	printFanout(f, rep.Fanout)
	printAdmission(f, rep.Admission)
	printSaturation(f, rep.Saturation)
	printRequestCosts(f, rep.RequestCosts, rep.Results)
	printGoBench(f, rep.GoBench)
}

// printStages shows where the operator path's time goes, next to the raw
// path's create request and p50.
func printStages(f *os.File, rs []Result) {
	raw := map[int]Result{}
	for _, r := range rs {
		if r.Path == "raw" {
			raw[r.N] = r
		}
	}
	header := false
	for _, r := range rs {
		if r.Stages == nil {
			continue
		}
		if !header {
			fmt.Fprintf(f, "\nOperator path, p50 of each stage (raw: its create request, then until Ready)\n\n")
			header = true
		}
		ms := func(d time.Duration) string { return d.Round(100 * time.Microsecond).String() }
		s, b := r.Stages, raw[r.N]
		fmt.Fprintf(f, "  N=%d operator: create request %s, to the gateway's CreateSandbox %s, gateway creates the Sandbox %s, "+
			"Sandbox Ready %s, gateway sends READY %s, OpenShellSandbox Ready %s\n", r.N, ms(s.Post), ms(s.ToGateway), ms(s.GatewayCreate),
			ms(s.Inner), ms(s.GatewayNotice), ms(s.Report))
		fmt.Fprintf(f, "  N=%d raw: create request %s, until Ready %s\n", r.N, ms(b.PostP50), ms(b.P50-b.PostP50))
	}
}

// printCPU shows where each path spent the machine's CPU.
func printCPU(f *os.File, rs []Result) {
	names := map[string]bool{}
	for _, r := range rs {
		for n, d := range r.CPU {
			if d > 0 {
				names[n] = true
			}
		}
	}
	if len(names) == 0 {
		return
	}
	cols := make([]string, 0, len(names))
	for n := range names {
		cols = append(cols, n)
	}
	sort.Strings(cols)
	fmt.Fprintf(f, "\nCPU seconds per component during each run (self: the creator, the watches and the test gateway)\n\n")
	w := tabwriter.NewWriter(f, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "N\tpath\t%s\ttotal\t\n", strings.Join(cols, "\t"))
	for _, r := range rs {
		var total time.Duration
		cells := make([]string, 0, len(cols))
		for _, c := range cols {
			total += r.CPU[c]
			cells = append(cells, fmt.Sprintf("%.2f", r.CPU[c].Seconds()))
		}
		fmt.Fprintf(w, "%d\t%s\t%s\t%.2f\t\n", r.N, r.Path, strings.Join(cells, "\t"), total.Seconds())
	}
	_ = w.Flush()
}

func write(dir string, rep Report) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	stamp := rep.Date.Format("20060102T150405Z")
	if err := os.WriteFile(filepath.Join(dir, "bench-"+stamp+".json"), b, 0o644); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "bench-"+stamp+".md"))
	if err != nil {
		return err
	}
	defer f.Close()
	// The tables are aligned text: fenced, they read the same rendered.
	fmt.Fprintf(f, "# Benchmark report, %s\n\n```text", rep.Date.Format(time.RFC3339))
	printReport(f, rep)
	_, err = fmt.Fprintln(f, "```")
	return err
}

// reportReconciles prints how many reconciles each controller ran and their
// mean duration, from the operator's controller-runtime metrics.
func reportReconciles(f *os.File, st *stack.Stack) error {
	recs, err := st.Reconciles()
	if err != nil {
		return fmt.Errorf("read reconcile metrics: %w", err)
	}
	names := make([]string, 0, len(recs))
	for n := range recs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if r := recs[n]; r.Count > 0 {
			fmt.Fprintf(f, "  reconciles %-22s %6d, mean %s\n", n, r.Count, (r.Total / time.Duration(r.Count)).Round(time.Microsecond))
		}
	}
	return nil
}

// deleteNamespaces deletes the namespaces and waits until the namespace
// controller (and, for raw Sandboxes, the Agent Sandbox controller) has
// removed everything in them.
func deleteNamespaces(ctx context.Context, c client.Client, names []string) error {
	for _, n := range names {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}}
		if err := c.Delete(ctx, ns); client.IgnoreNotFound(err) != nil {
			return err
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	err := framework.WaitFor(wctx, time.Second, func(ctx context.Context) (bool, error) {
		for _, n := range names {
			err := c.Get(ctx, client.ObjectKey{Name: n}, &corev1.Namespace{})
			if !apierrors.IsNotFound(err) {
				return false, err
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("delete namespaces %v: %w", names, err)
	}
	return nil
}
