package main

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/openshell/openshell-operator/operator"
	"github.com/openshell/openshell-operator/test/framework"
	"github.com/openshell/openshell-operator/test/stack"
)

// SteadyResult is what the operator did, with every sandbox Ready, over one
// window: API requests by verb, gateway calls, and reconciles run.
type SteadyResult struct {
	Phase      string         `json:"phase"`
	Sandboxes  int            `json:"sandboxes"`
	Window     time.Duration  `json:"window"`
	Requests   map[string]int `json:"apiRequests"`
	Gateway    map[string]int `json:"gatewayCalls"`
	Reconciles int            `json:"reconciles"`
}

// Writes sums the mutating API requests.
func (r SteadyResult) Writes() int {
	return r.Requests["POST"] + r.Requests["PUT"] + r.Requests["PATCH"] + r.Requests["DELETE"]
}

// MutatingCalls sums the gateway calls that change state.
func (r SteadyResult) MutatingCalls() int {
	n := 0
	for m, c := range r.Gateway {
		if isMutatingRPC(m) {
			n += c
		}
	}
	return n
}

func isMutatingRPC(method string) bool {
	for _, p := range []string{"Create", "Delete", "Update", "Set", "Put", "Attach", "Detach"} {
		if strings.HasPrefix(method, p) {
			return true
		}
	}
	return false
}

// FootprintResult is what the kernel accounts to the operator and to the
// Agent Sandbox controller at one point of the run.
type FootprintResult struct {
	Phase        string          `json:"phase"`
	Objects      string          `json:"objects"`
	Operator     framework.Usage `json:"operator"`
	AgentSandbox framework.Usage `json:"agentSandboxController"`
}

// footprint reads both processes; nothing when the operator runs in the
// benchmark's own process (its figures would include the benchmark).
func footprint(cluster *framework.Cluster, st *stack.Stack, phase, objects string) (*FootprintResult, error) {
	if st.Pid() == 0 {
		return nil, nil
	}
	op, err := framework.ReadUsage(st.Pid())
	if err != nil {
		return nil, fmt.Errorf("read operator usage: %w", err)
	}
	as, err := framework.ReadUsage(cluster.Process(agentSandboxController).Pid())
	if err != nil {
		return nil, fmt.Errorf("read agent-sandbox-controller usage: %w", err)
	}
	return &FootprintResult{Phase: phase, Objects: objects, Operator: op, AgentSandbox: as}, nil
}

const agentSandboxController = "agent-sandbox-controller"

// measureSteady watches the operator for window while nothing changes,
// then restarts it with a sync period short enough that the caches replay
// every object to the reconcilers several times within a second window.
// Both windows should make no writes and no mutating gateway calls. The
// Agent Sandbox controller restarts with it, so that both start from empty
// caches over the same objects and their footprints compare like for like.
func measureSteady(cluster *framework.Cluster, st *stack.Stack, sandboxes int, window time.Duration) ([]SteadyResult, []FootprintResult, error) {
	var prints []FootprintResult
	objects := fmt.Sprintf("%d OpenShellSandboxes; %d Sandboxes, pods, services", sandboxes, sandboxes)
	observe := func(phase string, act func() error) (SteadyResult, error) {
		reqs, err := st.RequestCounts()
		if err != nil {
			return SteadyResult{}, err
		}
		recs, err := st.Reconciles()
		if err != nil {
			return SteadyResult{}, err
		}
		calls, pid := st.Gateway.Calls(), st.Pid()
		if act != nil {
			if err := act(); err != nil {
				return SteadyResult{}, err
			}
		}
		if pid != st.Pid() {
			// A new operator process counts from zero.
			reqs, recs = map[string]int{}, map[string]stack.Reconcile{}
		}
		time.Sleep(window) // the measurement window itself, not synchronisation
		reqsAfter, err := st.RequestCounts()
		if err != nil {
			return SteadyResult{}, err
		}
		recsAfter, err := st.Reconciles()
		if err != nil {
			return SteadyResult{}, err
		}
		fp, err := footprint(cluster, st, phase, objects)
		if err != nil {
			return SteadyResult{}, err
		}
		if fp != nil {
			prints = append(prints, *fp)
		}
		return SteadyResult{Phase: phase, Sandboxes: sandboxes, Window: window,
			Requests: diff(reqsAfter, reqs), Gateway: diff(st.Gateway.Calls(), calls),
			Reconciles: totalReconciles(recsAfter) - totalReconciles(recs)}, nil
	}
	idle, err := observe("idle", nil)
	if err != nil {
		return nil, nil, err
	}
	resync := window / 4
	restarted, err := observe(fmt.Sprintf("restart, resync every %s", resync), func() error {
		if err := cluster.Restart(agentSandboxController); err != nil {
			return err
		}
		return st.RestartManagerWith(func(o *operator.Options) { o.SyncPeriod = &resync })
	})
	if err != nil {
		return nil, nil, fmt.Errorf("restart operator: %w", err)
	}
	return []SteadyResult{idle, restarted}, prints, nil
}

func totalReconciles(m map[string]stack.Reconcile) int {
	n := 0
	for _, r := range m {
		n += r.Count
	}
	return n
}

func diff(now, before map[string]int) map[string]int {
	out := map[string]int{}
	for k, v := range now {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

func printSteady(f *os.File, rs []SteadyResult) {
	if len(rs) == 0 {
		return
	}
	fmt.Fprintf(f, "\nSteady state, %d Ready OpenShellSandboxes, %s per window (target: 0 writes, 0 mutating gateway calls)\n\n",
		rs[0].Sandboxes, rs[0].Window)
	w := tabwriter.NewWriter(f, 2, 4, 2, ' ', 0)
	fmt.Fprintln(w, "phase\treconciles\twrites\treads (GET/LIST)\twatches\tgateway mutating\tgateway calls\t")
	// From an operator process, client-go counts a watch as a GET.
	for _, r := range rs {
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t%d\t%s\t\n", r.Phase, r.Reconciles, r.Writes(), r.Requests["GET"],
			r.Requests["WATCH"], r.MutatingCalls(), formatCounts(r.Gateway))
	}
	_ = w.Flush()
}

func printFootprint(f *os.File, rs []FootprintResult) {
	if len(rs) == 0 {
		return
	}
	fmt.Fprintf(f, "\nFootprint, operator (its own process) next to the Agent Sandbox controller (target: operator RSS ≤ controller RSS)\n\n")
	w := tabwriter.NewWriter(f, 2, 4, 2, ' ', 0)
	fmt.Fprintln(w, "phase\tobjects\toperator RSS (anon + file)\tpeak\tCPU\tcontroller RSS (anon + file)\tpeak\tCPU\tRSS ratio\tanon ratio\t")
	ratio := func(a, b int64) string {
		if b == 0 {
			return ""
		}
		return fmt.Sprintf("%.2f", float64(a)/float64(b))
	}
	for _, r := range rs {
		op, as := r.Operator, r.AgentSandbox
		fmt.Fprintf(w, "%s\t%s\t%s (%s + %s)\t%s\t%s\t%s (%s + %s)\t%s\t%s\t%s\t%s\t\n", r.Phase, r.Objects,
			mib(op.RSS), mib(op.AnonRSS), mib(op.FileRSS), mib(op.PeakRSS), op.CPU.Round(10*time.Millisecond),
			mib(as.RSS), mib(as.AnonRSS), mib(as.FileRSS), mib(as.PeakRSS), as.CPU.Round(10*time.Millisecond),
			ratio(op.RSS, as.RSS), ratio(op.AnonRSS, as.AnonRSS))
	}
	_ = w.Flush()
	fmt.Fprintln(f, "CPU is since the process started; after the restart both started at the same moment.")
	fmt.Fprintln(f, "anon: heap and stacks, what grows with the objects held; file: pages of the executable in memory.")
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

func formatCounts(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}
