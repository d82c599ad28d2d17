package sandbox

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/sandboxcontrols"
)

func TestChargedBefore(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC))
	later := metav1.NewTime(now.Add(time.Second))
	sb := func(name string, created metav1.Time) *openshellv1alpha1.OpenShellSandbox {
		return &openshellv1alpha1.OpenShellSandbox{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: created}}
	}
	running := sb("c", later)
	running.Status.SandboxID = "id"
	for name, tc := range map[string]struct {
		peer                     *openshellv1alpha1.OpenShellSandbox
		sbAccepted, peerAccepted bool
		want                     bool
	}{
		"older":                                   {peer: sb("z", now), want: true},
		"newer":                                   {peer: sb("c", later)},
		"same second, name first":                 {peer: sb("a", later), want: true},
		"same second, name after":                 {peer: sb("c", later)},
		"newer but running":                       {peer: running, sbAccepted: true, want: true},
		"newer but accepted, sb not":              {peer: sb("c", later), peerAccepted: true, want: true},
		"older but not accepted, sb is":           {peer: sb("z", now), sbAccepted: true},
		"both accepted, not running: the earlier": {peer: sb("z", now), sbAccepted: true, peerAccepted: true, want: true},
		"both accepted, not running: not a later": {peer: sb("c", later), sbAccepted: true, peerAccepted: true},
	} {
		t.Run(name, func(t *testing.T) {
			if got := chargedBefore(sb("b", later), tc.peer, tc.sbAccepted, tc.peerAccepted); got != tc.want {
				t.Errorf("chargedBefore = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestBudgetLedger: an acceptance is charged to the namespace's other
// sandboxes until the cache shows it (running, or accepted for its current
// spec; its own working copy showing an ID, before its write lands, is not
// enough), or it is refused while not running, and only for the
// incarnation that was accepted.
func TestBudgetLedger(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC))
	mk := func(name string, uid types.UID) openshellv1alpha1.OpenShellSandbox {
		return openshellv1alpha1.OpenShellSandbox{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team", UID: uid, CreationTimestamp: now, Generation: 1}}
	}
	// In the same second, "later" sorts after "judged": only its acceptance
	// can charge it to judged.
	later, judged := mk("later", "uid-2"), mk("judged", "uid-1")
	var l budgetLedger
	s, unlock := l.lock("team")
	names := func(peers []openshellv1alpha1.OpenShellSandbox) []string {
		var out []string
		for _, p := range peers {
			out = append(out, p.Name)
		}
		return out
	}
	if got := names(s.charged(&judged, []openshellv1alpha1.OpenShellSandbox{later, judged})); len(got) != 0 {
		t.Fatalf("before any acceptance: charged %v", got)
	}
	// Accepted, its ID restored into its own working copy only (the
	// status write waits): the entry stays.
	working := later
	working.Status.SandboxID = "id"
	s.record(&working, true)
	if got := names(s.charged(&judged, []openshellv1alpha1.OpenShellSandbox{later, judged})); len(got) != 1 || got[0] != "later" {
		t.Fatalf("after accepting %q: charged %v", later.Name, got)
	}
	// Refused while it runs (a held edit): still charged.
	s.record(&working, false)
	if got := names(s.charged(&judged, []openshellv1alpha1.OpenShellSandbox{later})); len(got) != 1 {
		t.Fatalf("a refused sandbox that runs is not charged: %v", got)
	}
	recreated := mk("later", "uid-3")
	if got := s.charged(&judged, []openshellv1alpha1.OpenShellSandbox{recreated}); len(got) != 0 {
		t.Fatalf("another incarnation of the accepted name is charged: %v", names(got))
	}
	if len(s.accepted) != 0 {
		t.Fatalf("another incarnation's entry is kept: %v", s.accepted)
	}
	// Refused while it does not run: no longer charged.
	s.record(&later, true)
	s.record(&later, false)
	if got := s.charged(&judged, []openshellv1alpha1.OpenShellSandbox{later}); len(got) != 0 {
		t.Fatalf("a refused sandbox stays charged: %v", names(got))
	}
	// Once the cache shows it running, the entry goes (the cache charges it).
	s.record(&working, true)
	if got := names(s.charged(&judged, []openshellv1alpha1.OpenShellSandbox{working})); len(got) != 1 {
		t.Fatalf("a running sandbox is not charged: %v", got)
	}
	if len(s.accepted) != 0 {
		t.Fatalf("a sandbox the cache shows running keeps an entry: %v", s.accepted)
	}
	unlock()
	// Another namespace has a shard of its own; forget takes the lock.
	other, unlockOther := l.lock("elsewhere")
	if other == s {
		t.Fatal("namespaces share a shard")
	}
	unlockOther()
	s, unlock = l.lock("team")
	s.record(&later, true)
	unlock()
	l.forget(client.ObjectKeyFromObject(&later))
	if len(s.accepted) != 0 {
		t.Fatalf("forget left %v", s.accepted)
	}
}

// TestAnEarlierAcceptanceDoesNotJumpTheQueue: a sandbox accepted for an
// earlier spec and edited since counts as not accepted, so an accepted
// newer peer is charged before it.
func TestAnEarlierAcceptanceDoesNotJumpTheQueue(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC))
	older := openshellv1alpha1.OpenShellSandbox{ObjectMeta: metav1.ObjectMeta{Name: "older", Namespace: "team", UID: "1", CreationTimestamp: now, Generation: 2}}
	older.Status.Conditions = []metav1.Condition{{Type: openshellv1alpha1.ConditionAccepted, Status: metav1.ConditionTrue, ObservedGeneration: 1}}
	newer := openshellv1alpha1.OpenShellSandbox{ObjectMeta: metav1.ObjectMeta{Name: "newer", Namespace: "team", UID: "2",
		CreationTimestamp: metav1.NewTime(now.Add(time.Second)), Generation: 1}}
	newer.Status.Conditions = []metav1.Condition{{Type: openshellv1alpha1.ConditionAccepted, Status: metav1.ConditionTrue, ObservedGeneration: 1}}
	var l budgetLedger
	s, unlock := l.lock("team")
	defer unlock()
	if got := s.charged(&older, []openshellv1alpha1.OpenShellSandbox{newer}); len(got) != 1 {
		t.Fatalf("the accepted newer sandbox is not charged before an edited older one: %v", got)
	}
	older.Status.Conditions[0].ObservedGeneration = 2
	if got := s.charged(&older, []openshellv1alpha1.OpenShellSandbox{newer}); len(got) != 0 {
		t.Fatalf("both accepted for their specs: the newer one is charged first: %v", got)
	}
}

// TestChargeMayHaveDropped: the events that wake sandboxes waiting for
// their namespace's budget are those after which a peer may charge less;
// status writes that change nothing charged, and creates, do not.
func TestChargeMayHaveDropped(t *testing.T) {
	base := &openshellv1alpha1.OpenShellSandbox{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "a", Generation: 1},
		Status: openshellv1alpha1.OpenShellSandboxStatus{Phase: openshellv1alpha1.SandboxPhaseReady}}
	for name, tc := range map[string]struct {
		edit func(*openshellv1alpha1.OpenShellSandbox)
		want bool
	}{
		"a condition's message": {func(s *openshellv1alpha1.OpenShellSandbox) { s.Status.Conditions = []metav1.Condition{{Type: "Ready"}} }, false},
		"a spec edit":           {func(s *openshellv1alpha1.OpenShellSandbox) { s.Generation = 2 }, true},
		"a phase":               {func(s *openshellv1alpha1.OpenShellSandbox) { s.Status.Phase = openshellv1alpha1.SandboxPhaseCompleted }, true},
		"deletion begun":        {func(s *openshellv1alpha1.OpenShellSandbox) { s.DeletionTimestamp = &metav1.Time{Time: time.Now()} }, true},
		"what it was created with": {func(s *openshellv1alpha1.OpenShellSandbox) {
			s.Status.AppliedResources = &openshellv1alpha1.AppliedResources{}
		}, true},
	} {
		n := base.DeepCopy()
		tc.edit(n)
		if got := chargeMayHaveDropped.Update(event.UpdateEvent{ObjectOld: base, ObjectNew: n}); got != tc.want {
			t.Errorf("%s: %v, want %v", name, got, tc.want)
		}
	}
	if chargeMayHaveDropped.Create(event.CreateEvent{Object: base}) {
		t.Error("a create can only charge more")
	}
	if !chargeMayHaveDropped.Delete(event.DeleteEvent{Object: base}) {
		t.Error("a deletion frees what the sandbox was charged")
	}
}

// TestInheritedResourcesAreCharged: a sandbox's template and namespace
// defaults are not in its spec. Accepted a moment ago (the ledger), it is
// charged with its working copy; shown by the cache, with what its status
// says it inherited. Without that, sandboxes naming a GPU template were
// charged nothing and all accepted over the budget.
func TestInheritedResourcesAreCharged(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC))
	one := int32(1)
	gw := &openshellv1alpha1.OpenShellGateway{ObjectMeta: metav1.ObjectMeta{Name: "gw", Namespace: "platform"},
		Spec: openshellv1alpha1.OpenShellGatewaySpec{SandboxControls: openshellv1alpha1.SandboxControls{
			NamespaceBudget: &openshellv1alpha1.NamespaceBudget{MaxGPUs: &one}}}}
	mk := func(name string, uid types.UID) openshellv1alpha1.OpenShellSandbox {
		return openshellv1alpha1.OpenShellSandbox{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team", UID: uid, CreationTimestamp: now, Generation: 1},
			Spec: openshellv1alpha1.OpenShellSandboxSpec{GatewayRef: openshellv1alpha1.GatewayReference{Name: "gw", Namespace: "platform"},
				TemplateRef: &openshellv1alpha1.LocalObjectReference{Name: "gpu"}}}
	}
	tmpl := &openshellv1alpha1.AppliedTemplate{Name: "gpu", GPU: &openshellv1alpha1.SandboxGPU{Count: 1}}
	first, second := mk("a-first", "uid-1"), mk("b-second", "uid-2")
	var l budgetLedger
	s, unlock := l.lock("team")
	defer unlock()

	// first accepted by this reconciler: its working copy has the GPU.
	working := first.DeepCopy()
	working.Status.Template = tmpl
	sandboxcontrols.OverlayTemplate(&working.Spec, tmpl)
	s.record(working, true)
	judged := second.DeepCopy()
	sandboxcontrols.OverlayTemplate(&judged.Spec, tmpl)
	if v := sandboxcontrols.CheckBudget(gw, judged, s.charged(judged, []openshellv1alpha1.OpenShellSandbox{first, second})); v == nil {
		t.Fatal("a second GPU sandbox was accepted over a budget of one: the first's template GPU was not charged")
	}
	// The cache shows first created, its status naming the template.
	created := first.DeepCopy()
	created.Status.SandboxID, created.Status.Template = "id-1", tmpl
	if v := sandboxcontrols.CheckBudget(gw, judged, s.charged(judged, []openshellv1alpha1.OpenShellSandbox{*created, second})); v == nil {
		t.Fatal("the running template sandbox's GPU was not charged")
	}
}
