package sandbox

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
)

func TestChargedBefore(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC))
	later := metav1.NewTime(now.Add(time.Second))
	sb := func(name string, created metav1.Time) *openshellv1alpha1.OpenShellSandbox {
		return &openshellv1alpha1.OpenShellSandbox{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: created}}
	}
	running := sb("b", later)
	running.Status.SandboxID = "id"
	accepted := sb("b", later)
	accepted.Status.Conditions = []metav1.Condition{{Type: openshellv1alpha1.ConditionAccepted, Status: metav1.ConditionTrue}}
	for name, tc := range map[string]struct {
		peer         *openshellv1alpha1.OpenShellSandbox
		acceptedHere bool
		want         bool
	}{
		"older":                               {peer: sb("z", now), want: true},
		"newer":                               {peer: sb("b", later)},
		"same second, name first":             {peer: sb("a", later), want: true},
		"same second, name after":             {peer: sb("c", later)},
		"newer but running":                   {peer: running, want: true},
		"newer but accepted by status":        {peer: accepted, want: true},
		"newer but accepted, not yet written": {peer: sb("c", later), acceptedHere: true, want: true},
	} {
		t.Run(name, func(t *testing.T) {
			if got := chargedBefore(sb("b", later), tc.peer, tc.acceptedHere); got != tc.want {
				t.Errorf("chargedBefore = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestBudgetLedger: an acceptance is charged to the namespace's other
// sandboxes until the cache shows it (or it is refused or released), and
// only for the incarnation that was accepted.
func TestBudgetLedger(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC))
	mk := func(name string, uid types.UID) openshellv1alpha1.OpenShellSandbox {
		return openshellv1alpha1.OpenShellSandbox{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team", UID: uid, CreationTimestamp: now}}
	}
	// In the same second, "later" sorts after "judged": only its acceptance
	// can charge it to judged.
	later, judged := mk("later", "uid-2"), mk("judged", "uid-1")
	var l budgetLedger
	unlock := l.lock()
	defer unlock()
	names := func(peers []openshellv1alpha1.OpenShellSandbox) []string {
		var out []string
		for _, p := range peers {
			out = append(out, p.Name)
		}
		return out
	}
	if got := names(l.charged(&judged, []openshellv1alpha1.OpenShellSandbox{later, judged})); len(got) != 0 {
		t.Fatalf("before any acceptance: charged %v", got)
	}
	l.record(&later, true)
	if got := names(l.charged(&judged, []openshellv1alpha1.OpenShellSandbox{later, judged})); len(got) != 1 || got[0] != "later" {
		t.Fatalf("after accepting %q: charged %v", later.Name, got)
	}
	recreated := mk("later", "uid-3")
	if got := l.charged(&judged, []openshellv1alpha1.OpenShellSandbox{recreated}); len(got) != 0 {
		t.Fatalf("another incarnation of the accepted name is charged: %v", names(got))
	}
	l.record(&later, false)
	if got := l.charged(&judged, []openshellv1alpha1.OpenShellSandbox{later}); len(got) != 0 {
		t.Fatalf("a refused sandbox stays charged: %v", names(got))
	}
	later.Status.SandboxID = "id"
	l.record(&later, true)
	if len(l.accepted) != 0 {
		t.Fatalf("a running sandbox keeps an entry: %v", l.accepted)
	}
}
