package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sort"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/test/framework"
	"github.com/openshell/openshell-operator/test/stack"
)

// benchPolicy is the OpenShellPolicy every benchmark sandbox references,
// so that the create path includes the policy and fan-out can be measured.
const benchPolicy = "bench-policy"

func newBenchPolicy(ns string) *openshellv1alpha1.OpenShellPolicy {
	return &openshellv1alpha1.OpenShellPolicy{ObjectMeta: metav1.ObjectMeta{Name: benchPolicy, Namespace: ns},
		Spec: openshellv1alpha1.OpenShellPolicySpec{Filesystem: &openshellv1alpha1.FilesystemPolicy{
			ReadOnly: []string{"/usr", "/lib", "/etc"}, ReadWrite: []string{"/tmp"}}}}
}

// FanoutResult is the time from one policy edit to every sandbox that
// references it reporting the new policy applied.
type FanoutResult struct {
	// Client is the operator's client limits ("" for its defaults).
	Client    string        `json:"client,omitempty"`
	Sandboxes int           `json:"sandboxes"`
	Applied   int           `json:"applied"`
	First     time.Duration `json:"first"`
	P50       time.Duration `json:"p50"`
	All       time.Duration `json:"all"`
	// ProbeP50 and ProbeP99 are another client's ConfigMap updates (one
	// every 100 ms) while the fan-out runs: what a faster operator costs
	// the API server's other users.
	ProbeP50 time.Duration `json:"probeP50"`
	ProbeP99 time.Duration `json:"probeP99"`
}

// measureFanout edits the policy of namespace ns and watches until every
// sandbox there has a newer policy version and Synced=True.
func measureFanout(ctx context.Context, c client.Client, w client.WithWatch, ns string) (FanoutResult, error) {
	list := &openshellv1alpha1.OpenShellSandboxList{}
	if err := c.List(ctx, list, client.InNamespace(ns)); err != nil {
		return FanoutResult{}, err
	}
	before := map[string]int64{}
	for _, sb := range list.Items {
		before[sb.Name] = sb.Status.PolicyVersion
	}
	wctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
	defer cancel()
	wi, err := w.Watch(wctx, &openshellv1alpha1.OpenShellSandboxList{}, client.InNamespace(ns),
		&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.ResourceVersion}})
	if err != nil {
		return FanoutResult{}, err
	}
	defer wi.Stop()

	pol := &openshellv1alpha1.OpenShellPolicy{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: benchPolicy}, pol); err != nil {
		return FanoutResult{}, err
	}
	pol.Spec.Filesystem.ReadWrite = append(pol.Spec.Filesystem.ReadWrite, fmt.Sprintf("/var/tmp/edit-%d", time.Now().UnixNano()))
	pr, err := startProbe(ctx, c, ns)
	if err != nil {
		return FanoutResult{}, err
	}
	start := time.Now()
	if err := c.Update(ctx, pol); err != nil {
		pr.stop()
		return FanoutResult{}, fmt.Errorf("edit policy: %w", err)
	}
	applied := map[string]time.Duration{}
	for ev := range wi.ResultChan() {
		if ev.Type != watch.Modified {
			continue
		}
		sb, ok := ev.Object.(*openshellv1alpha1.OpenShellSandbox)
		if !ok {
			continue
		}
		synced := meta.IsStatusConditionTrue(sb.Status.Conditions, openshellv1alpha1.ConditionSynced)
		if _, done := applied[sb.Name]; !done && synced && sb.Status.PolicyVersion > before[sb.Name] {
			applied[sb.Name] = time.Since(start)
		}
		if len(applied) == len(before) {
			break
		}
	}
	probe, err := pr.stop()
	if err != nil {
		return FanoutResult{}, err
	}
	lat := make([]time.Duration, 0, len(applied))
	for _, d := range applied {
		lat = append(lat, d)
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	r := FanoutResult{Sandboxes: len(before), Applied: len(lat), P50: pct(lat, 50), ProbeP50: pct(probe, 50), ProbeP99: pct(probe, 99)}
	if len(lat) > 0 {
		r.First, r.All = lat[0], lat[len(lat)-1]
	}
	return r, nil
}

func printFanout(f *os.File, rs []FanoutResult) {
	if len(rs) == 0 {
		return
	}
	fmt.Fprintf(f, "\nPolicy fan-out: one OpenShellPolicy edit, every sandbox referencing it reports it applied (Synced)\n\n")
	w := tabwriter.NewWriter(f, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "operator client\tsandboxes\tapplied\tfirst\tp50\tall\tother client p50\tp99\t")
	for _, r := range rs {
		client := r.Client
		if client == "" {
			client = "defaults"
		}
		fmt.Fprintf(w, "%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t\n", client, r.Sandboxes, r.Applied, r.First.Round(time.Millisecond),
			r.P50.Round(time.Millisecond), r.All.Round(time.Millisecond), r.ProbeP50.Round(100*time.Microsecond), r.ProbeP99.Round(100*time.Microsecond))
	}
	_ = w.Flush()
}

// probe updates a ConfigMap of its own every 100 ms, as any other client
// of the API server would, and records how long each update took.
type probe struct {
	done chan struct{}
	out  chan probeResult
}

type probeResult struct {
	lat []time.Duration
	err error
}

func startProbe(ctx context.Context, c client.Client, ns string) (*probe, error) {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "bench-probe", Namespace: ns}}
	if err := c.Create(ctx, cm); client.IgnoreAlreadyExists(err) != nil {
		return nil, err
	}
	p := &probe{done: make(chan struct{}), out: make(chan probeResult, 1)}
	go func() {
		var res probeResult
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-p.done:
				sort.Slice(res.lat, func(i, j int) bool { return res.lat[i] < res.lat[j] })
				p.out <- res
				return
			case <-tick.C:
			}
			patch := client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"data":{"n":"%d"}}`, i)))
			start := time.Now()
			if err := c.Patch(ctx, cm, patch); err != nil && res.err == nil {
				res.err = fmt.Errorf("probe update: %w", err)
			}
			res.lat = append(res.lat, time.Since(start))
		}
	}()
	return p, nil
}

// stop ends the probe and returns its latencies, sorted.
func (p *probe) stop() ([]time.Duration, error) {
	close(p.done)
	r := <-p.out
	return r.lat, r.err
}

// measureFanoutQPS repeats the fan-out in namespace ns with the operator
// restarted at each client QPS (burst twice that), once its work queue has
// drained after the restart, then restarts it with its original flags.
func measureFanoutQPS(ctx context.Context, c client.Client, w client.WithWatch, st *stack.Stack, ns string, qps []int, baseArgs []string) ([]FanoutResult, error) {
	var out []FanoutResult
	for _, q := range qps {
		args := append(slices.Clone(baseArgs), fmt.Sprintf("--kube-api-qps=%d", q), fmt.Sprintf("--kube-api-burst=%d", 2*q))
		if err := st.RestartProcessWith(args); err != nil {
			return nil, err
		}
		if err := waitDrained(ctx, st); err != nil {
			return nil, err
		}
		f, err := measureFanout(ctx, c, w, ns)
		if err != nil {
			return nil, err
		}
		f.Client = fmt.Sprintf("qps %d, burst %d", q, 2*q)
		out = append(out, f)
	}
	if err := st.RestartProcessWith(baseArgs); err != nil {
		return nil, err
	}
	return out, waitDrained(ctx, st)
}

// waitDrained waits until a restarted operator has reconciled every
// sandbox its cache replayed: its sandbox work queue is empty and its
// reconcile count stopped moving.
func waitDrained(ctx context.Context, st *stack.Stack) error {
	wctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
	defer cancel()
	last, still := -1, 0
	return framework.WaitFor(wctx, time.Second, func(context.Context) (bool, error) {
		depth, err := st.QueueDepth("openshellsandbox")
		if err != nil {
			return false, nil // the new process may not serve metrics yet
		}
		recs, err := st.Reconciles()
		if err != nil {
			return false, nil
		}
		n := recs["openshellsandbox"].Count
		if depth == 0 && n == last && n > 0 {
			still++
		} else {
			still = 0
		}
		last = n
		return still >= 2, nil
	})
}
