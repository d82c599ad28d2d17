package sandbox

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openshell/openshell-operator/internal/preflight"
)

// TestFailedWatchStartIsRetried: a watch of agents.x-k8s.io Sandboxes that
// fails to start is tried again without waiting for preflight to change
// (nothing else would start it, and a deleted Sandbox would go unnoticed
// until the next resync); once started, it is not started again.
func TestFailedWatchStartIsRetried(t *testing.T) {
	pf := preflight.NewStore()
	changes := pf.Subscribe()
	pf.Set(preflight.Result{AgentSandbox: preflight.AgentSandbox{Available: true, Preferred: "v1beta1"}})
	var calls atomic.Int32
	started := make(chan struct{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- followPreflight(ctx, pf, changes, 10*time.Millisecond, func(version string) error {
			if version != "v1beta1" {
				t.Errorf("version %q", version)
			}
			if calls.Add(1) < 3 {
				return errors.New("no matches for kind Sandbox")
			}
			close(started)
			return nil
		})
	}()
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatalf("the watch was tried %d times and never started", calls.Load())
	}
	// Started: no more attempts without a preflight change.
	time.Sleep(50 * time.Millisecond) // a quiet period to observe the absence of retries, not synchronisation
	if n := calls.Load(); n != 3 {
		t.Fatalf("tried %d times, want 3 (two failures, one start)", n)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
