package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openshell/openshell-operator/test/stack"
)

// scaleNamespace holds the scale run's OpenShellSandboxes.
const scaleNamespace = "bench-scale"

// ScaleResult is the creation of the scale run's sandboxes (BENCH_SCALE);
// the steady-state, footprint and fan-out figures then include them.
type ScaleResult struct {
	Sandboxes  int           `json:"sandboxes"`
	Rate       int           `json:"ratePerSecond"`
	CreateRate float64       `json:"createRatePerSecond"`
	Wall       time.Duration `json:"wall"`
	P50        time.Duration `json:"p50"`
	P99        time.Duration `json:"p99"`
	// Reconciles are the sandbox reconciles the creation took.
	Reconciles int `json:"reconciles"`
}

// measureScale creates n OpenShellSandboxes at rate and waits until every
// one is Ready.
func measureScale(ctx context.Context, c client.Client, w client.WithWatch, st *stack.Stack, p path, n, rate int) (ScaleResult, error) {
	before, err := st.Reconciles()
	if err != nil {
		return ScaleResult{}, err
	}
	o, err := offer(ctx, c, w, p, scaleNamespace, rate, n, time.Duration(3*n/rate)*time.Second+10*time.Minute)
	if err != nil {
		return ScaleResult{}, err
	}
	after, err := st.Reconciles()
	if err != nil {
		return ScaleResult{}, err
	}
	lat := o.tracker.latencies()
	return ScaleResult{Sandboxes: n, Rate: rate, CreateRate: o.createRate(), Wall: o.wall, P50: pct(lat, 50), P99: pct(lat, 99),
		Reconciles: after["openshellsandbox"].Count - before["openshellsandbox"].Count}, nil
}

func printScale(f *os.File, r *ScaleResult) {
	if r == nil {
		return
	}
	fmt.Fprintf(f, "\nScale: %d OpenShellSandboxes offered at %d/s (created %.1f/s), all Ready in %s; p50 %s, p99 %s; %d sandbox reconciles\n",
		r.Sandboxes, r.Rate, r.CreateRate, r.Wall.Round(time.Second), r.P50.Round(time.Millisecond), r.P99.Round(time.Millisecond), r.Reconciles)
}
