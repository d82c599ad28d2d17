package main

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/openshell/openshell-operator/internal/manager"
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

// measureSteady watches the operator for window while nothing changes,
// then restarts it with a sync period short enough that the caches replay
// every object to the reconcilers several times within a second window.
// Both windows should make no writes and no mutating gateway calls.
func measureSteady(st *stack.Stack, sandboxes int, window time.Duration) ([]SteadyResult, error) {
	observe := func(phase string, act func() error) (SteadyResult, error) {
		reqs, calls, recs := st.Requests.Snapshot(), st.Gateway.Calls(), int(framework.ReconcileCount(""))
		if act != nil {
			if err := act(); err != nil {
				return SteadyResult{}, err
			}
		}
		time.Sleep(window) // the measurement window itself, not synchronisation
		return SteadyResult{Phase: phase, Sandboxes: sandboxes, Window: window,
			Requests: diff(st.Requests.Snapshot(), reqs), Gateway: diff(st.Gateway.Calls(), calls),
			Reconciles: int(framework.ReconcileCount("")) - recs}, nil
	}
	idle, err := observe("idle", nil)
	if err != nil {
		return nil, err
	}
	resync := window / 4
	restarted, err := observe(fmt.Sprintf("restart, resync every %s", resync), func() error {
		return st.RestartManagerWith(func(o *manager.Options) { o.SyncPeriod = &resync })
	})
	if err != nil {
		return nil, fmt.Errorf("restart operator: %w", err)
	}
	return []SteadyResult{idle, restarted}, nil
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
	for _, r := range rs {
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t%d\t%s\t\n", r.Phase, r.Reconciles, r.Writes(), r.Requests["GET"],
			r.Requests["WATCH"], r.MutatingCalls(), formatCounts(r.Gateway))
	}
	_ = w.Flush()
}

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
