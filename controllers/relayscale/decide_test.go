package relayscale

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/openshell/openshell-operator/internal/relayload"
)

// TestDecide: up at once; down only as far as the window's
// recommendations allow, with a recheck when the highest leaves it; a
// restart's first look holds the replicas found.
func TestDecide(t *testing.T) {
	p := relayload.Scaling{Min: 2, Max: 10, SessionsPerReplica: 300, ScaleDownDelay: 5 * time.Minute}
	t0 := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	at := func(min int) time.Time { return t0.Add(time.Duration(min) * time.Minute) }
	for _, tc := range []struct {
		name    string
		current int32
		history []sample
		now     time.Time
		want    decision
	}{
		{"more sessions scale up at once", 2, []sample{{at(0), 2}, {at(1), 4}}, at(1), decision{replicas: 4}},
		{"steady", 3, []sample{{at(0), 3}}, at(60), decision{replicas: 3}},
		{"fewer sessions wait for the window", 4, []sample{{at(0), 4}, {at(1), 2}}, at(2),
			decision{replicas: 4, recheck: 4 * time.Minute}},
		{"down once the window has passed", 4, []sample{{at(0), 4}, {at(1), 2}}, at(6), decision{replicas: 2}},
		{"down in steps as each recommendation leaves", 5, []sample{{at(0), 5}, {at(1), 3}, {at(3), 2}}, at(6),
			decision{replicas: 3, recheck: 2 * time.Minute}},
		{"a burst inside the window holds the replicas", 4, []sample{{at(0), 4}, {at(1), 2}, {at(3), 4}, {at(4), 2}}, at(7),
			decision{replicas: 4, recheck: 2 * time.Minute}},
		{"never above the replicas there are", 3, []sample{{at(0), 6}, {at(1), 2}}, at(2),
			decision{replicas: 3, recheck: 4 * time.Minute}},
		{"a restart holds what it found", 6, []sample{{at(0), 6}, {at(0), 2}}, at(0),
			decision{replicas: 6, recheck: 5 * time.Minute}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := decide(tc.current, tc.history, tc.now, p); got != tc.want {
				t.Errorf("decide(%d, %v) = %+v, want %+v", tc.current, tc.history, got, tc.want)
			}
		})
	}
}

// TestPrune keeps the sample the window starts in and the last one.
func TestPrune(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	h := []sample{{t0, 4}, {t0.Add(time.Minute), 3}, {t0.Add(3 * time.Minute), 2}}
	if got := prune(h, t0.Add(7*time.Minute), 5*time.Minute); len(got) != 2 || got[0].replicas != 3 {
		t.Errorf("prune at +7m: %v, want the samples from +1m", got)
	}
	if got := prune(h, t0.Add(time.Hour), 5*time.Minute); len(got) != 1 || got[0].replicas != 2 {
		t.Errorf("prune at +1h: %v, want the last sample only", got)
	}
}

// TestReconcilerRemembersTheWindow: the reconciler's own history makes a
// lull that ends within the window keep the replicas.
func TestReconcilerRemembersTheWindow(t *testing.T) {
	p := relayload.Scaling{Min: 2, Max: 10, SessionsPerReplica: 1, ScaleDownDelay: time.Minute}
	r := &Reconciler{Scaling: p}
	t0 := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	if d := r.remember(2, p.Recommend(5), t0); d.replicas != 5 {
		t.Fatalf("five sessions: %+v", d)
	}
	if d := r.remember(5, p.Recommend(0), t0.Add(10*time.Second)); d.replicas != 5 || d.recheck != time.Minute {
		t.Fatalf("a lull: %+v, want 5 replicas and a look in a minute", d)
	}
	if d := r.remember(5, p.Recommend(4), t0.Add(20*time.Second)); d.replicas != 5 {
		t.Fatalf("sessions back: %+v", d)
	}
	if d := r.remember(5, p.Recommend(4), t0.Add(90*time.Second)); d.replicas != 4 {
		t.Fatalf("a minute after the lull ended: %+v, want 4", d)
	}
	if d := r.remember(4, p.Recommend(0), t0.Add(200*time.Second)); d.replicas != 4 || d.recheck != time.Minute {
		t.Fatalf("idle: %+v", d)
	}
	if d := r.remember(4, p.Recommend(0), t0.Add(260*time.Second)); d.replicas != 2 {
		t.Fatalf("idle for the window: %+v, want the minimum", d)
	}
}

// TestStep: up one replica past those available at a time; down at once;
// never down for want of available pods.
func TestStep(t *testing.T) {
	for _, tc := range []struct{ current, available, want, next int32 }{
		{2, 2, 5, 3},
		{3, 2, 5, 3}, // the third pod is not ready yet
		{3, 3, 5, 4},
		{5, 5, 2, 2},
		{4, 1, 4, 4},
		{2, 0, 3, 2},
	} {
		if got := step(tc.current, tc.available, tc.want); got != tc.next {
			t.Errorf("step(%d, %d available, want %d) = %d, want %d", tc.current, tc.available, tc.want, got, tc.next)
		}
	}
}

// TestScaleUpStaysAvailable: with the bundle's relay Deployment, each step
// up (one replica past those available) keeps the Deployment Available —
// the Deployment controller's rule, replicas minus maxUnavailable rounded
// down must be ready — so OLM keeps the CSV Succeeded; and a rollout of
// the two replicas stops neither. (test/olm cannot show the failure:
// kwok readies a new pod at once.)
func TestScaleUpStaysAvailable(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "config", "relay", "deployment.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	dep := &appsv1.Deployment{}
	if err := yaml.UnmarshalStrict(b, dep); err != nil {
		t.Fatal(err)
	}
	unavailable := func(replicas int32) int32 {
		n, err := intstr.GetScaledValueFromIntOrPercent(dep.Spec.Strategy.RollingUpdate.MaxUnavailable, int(replicas), false)
		if err != nil {
			t.Fatal(err)
		}
		return int32(n)
	}
	if got := unavailable(relayload.DefaultScaling.Min); got != 0 {
		t.Errorf("a rollout of %d replicas may stop %d of them", relayload.DefaultScaling.Min, got)
	}
	for available := relayload.DefaultScaling.Min; available < 100; available++ {
		next := step(available, available, available+5)
		if need := next - unavailable(next); need > available {
			t.Errorf("from %d available to %d replicas: %d must be ready, the Deployment is not Available", available, next, need)
		}
	}
}
