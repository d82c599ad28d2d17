package sandbox

import (
	"context"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/openshellv1"
	"github.com/openshell/openshell-operator/internal/sandboxspec"
)

// TestSweepDeletesOnlyOurOrphans: the sweep deletes the gateway sandboxes
// the operator created whose object is gone (released, or re-created under
// the same name with another UID), and nothing that is not provably the
// operator's: a sandbox without our labels, one naming a namespace this
// cluster does not have, one in another incarnation's workspace, one whose
// name is not the one derived from its annotations, a live object's.
func TestSweepDeletesOnlyOurOrphans(t *testing.T) {
	ctx := context.Background()
	f := newGatewayFixture(t)
	c := f.r.Client
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a", UID: fixtureNamespaceUID}}); err != nil {
		t.Fatal(err)
	}
	named := func(name, uid string) *openshellv1alpha1.OpenShellSandbox {
		return sandboxWith(func(s *openshellv1alpha1.OpenShellSandbox) { s.Name, s.UID = name, types.UID("uid-"+name+uid) })
	}
	kept, released, reborn := named("kept", ""), named("released", ""), named("reborn", "")
	for _, sb := range []*openshellv1alpha1.OpenShellSandbox{kept, released, reborn} {
		f.sync(t, sb)
	}
	if err := c.Delete(ctx, released); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, reborn); err != nil {
		t.Fatal(err)
	}
	again := named("reborn", "2")
	again.ResourceVersion = ""
	if err := c.Create(ctx, again); err != nil {
		t.Fatal(err)
	}
	ws := f.workspace()
	owner := func(ns, name string) (map[string]string, map[string]string) {
		return map[string]string{sandboxspec.LabelOwnerUID: "uid-gone"},
			map[string]string{sandboxspec.AnnotationNamespace: ns, sandboxspec.AnnotationName: name}
	}
	_, a := owner("team-a", "cli")
	f.gw.SeedSandbox(ws, sandboxspec.SandboxName("team-a", "cli"), nil, a) // no owner label: someone's CLI
	l, a := owner("team-b", "ghost")
	otherWS := sandboxspec.WorkspaceName("team-b", "uid-elsewhere")
	f.gw.SeedSandbox(otherWS, sandboxspec.SandboxName("team-b", "ghost"), l, a) // a namespace this cluster lacks
	l, a = owner("team-a", "twin")
	twinWS := sandboxspec.WorkspaceName("team-a", "uid-of-another-cluster")
	f.gw.SeedSandbox(twinWS, sandboxspec.SandboxName("team-a", "twin"), l, a) // team-a of another cluster
	l, a = owner("team-a", "renamed")
	f.gw.SeedSandbox(ws, "hand-made", l, a) // not the derived name

	s := f.sweeper(events.NewFakeRecorder(10))
	n, err := s.Sweep(ctx, f.obs.gateway)
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Errorf("swept %d, want 2 (released, reborn)", n)
	}
	alive := func(ws, name string) bool {
		resp, err := f.gw.GetSandbox(ctx, &openshellv1.GetSandboxRequest{Workspace: ws, Name: name})
		return err == nil && resp.Sandbox.Status.GetPhase() != openshellv1.SandboxPhase_SANDBOX_PHASE_DELETING
	}
	for _, n := range []string{"released", "reborn"} {
		if alive(ws, sandboxspec.SandboxName("team-a", n)) {
			t.Errorf("orphan %s not deleted", n)
		}
	}
	for _, k := range []struct{ ws, name string }{
		{ws, sandboxspec.SandboxName("team-a", "kept")}, {ws, sandboxspec.SandboxName("team-a", "cli")},
		{otherWS, sandboxspec.SandboxName("team-b", "ghost")}, {twinWS, sandboxspec.SandboxName("team-a", "twin")}, {ws, "hand-made"},
	} {
		if !alive(k.ws, k.name) {
			t.Errorf("%s/%s deleted: it is not provably an orphan of ours", k.ws, k.name)
		}
	}
	// A second sweep finds nothing new (deleting sandboxes are the gateway's).
	if n, err := s.Sweep(ctx, f.obs.gateway); err != nil || n != 0 {
		t.Errorf("second sweep: %d, %v", n, err)
	}
	if !slices.Contains(f.gw.SandboxNames(ws), sandboxspec.SandboxName("team-a", "kept")) {
		t.Error("the live sandbox went")
	}
}

// TestSweepGivesUpOnlyWhereItMayNotList: a gateway that refuses to list
// every workspace to the operator (PermissionDenied: its identity there is
// not the gateway's admin) is not asked again, since asking again would
// not change that; any other failure keeps the gateway marked, so that the
// sweep runs once it answers.
func TestSweepGivesUpOnlyWhereItMayNotList(t *testing.T) {
	ctx := context.Background()
	f := newGatewayFixture(t)
	rec := events.NewFakeRecorder(10)
	s := &Sweeper{Client: f.r.Client, APIReader: f.r.Client, Gateways: f.r.Gateways, Recorder: rec}
	if err := f.r.Client.Create(ctx, f.obs.gateway.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(f.obs.gateway)
	pending := func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		_, ok := s.pending[key]
		return ok
	}
	s.Mark(key)
	f.gw.FailNext("ListSandboxes", codes.Internal)
	if left := s.sweepPending(ctx); !left || !pending() {
		t.Fatalf("after a failed list: left %v, still marked %v; want the gateway kept for the next round", left, pending())
	}
	f.gw.FailNext("ListSandboxes", codes.PermissionDenied)
	if left := s.sweepPending(ctx); left || pending() {
		t.Fatalf("after PermissionDenied: left %v, still marked %v; want it given up", left, pending())
	}
	// Given up, but not silently: the gateway's admin is told what is left.
	select {
	case ev := <-rec.Events:
		if !strings.Contains(ev, openshellv1alpha1.GatewayReasonSweepNotPermitted) || !strings.Contains(ev, "Warning") {
			t.Fatalf("event %q, want a Warning %s", ev, openshellv1alpha1.GatewayReasonSweepNotPermitted)
		}
	default:
		t.Fatal("a sweep given up on PermissionDenied recorded no event")
	}
	// Marked again (the next release there), it is swept as usual.
	s.Mark(key)
	if left := s.sweepPending(ctx); left || pending() {
		t.Fatalf("a sweep that succeeds: left %v, still marked %v", left, pending())
	}
	if got := f.gw.Calls()["ListSandboxes"]; got != 3 {
		t.Errorf("ListSandboxes called %d times, want 3 (one per round)", got)
	}
}
