package sandbox

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"

	"github.com/openshell/openshell-operator/internal/gatewayapi"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/openshellv1"
	"github.com/openshell/openshell-operator/internal/sandboxspec"
)

// TestSweepDeletesServicesExposedInOurWorkspaces: a service exposed at a
// 0.1 gateway in a workspace of this cluster's (with a gateway token) is
// deleted by the sweep, with a Warning event naming it; one in a
// workspace of a namespace of the same name on another cluster sharing
// the gateway is not ours to judge and stays. A second sweep finds
// nothing to do.
func TestSweepDeletesServicesExposedInOurWorkspaces(t *testing.T) {
	ctx := context.Background()
	f := newV01Fixture(t)
	c := f.r.Client
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a", UID: fixtureNamespaceUID}}); err != nil {
		t.Fatal(err)
	}
	sb := sandboxWith(nil)
	f.sync(t, sb)
	f.sync(t, sb) // stores the status the first left: the sweep knows the sandbox as ours by its ID
	ws, name := f.workspace(), sandboxspec.SandboxName("team-a", "agent")
	twinWS := sandboxspec.WorkspaceName("team-a", "uid-of-another-cluster")
	f.gw.SeedSandbox(twinWS, name, nil)
	conn, err := f.r.Gateways.Connect(ctx, f.obs.gateway)
	if err != nil {
		t.Fatal(err)
	}
	for _, at := range []string{ws, twinWS} {
		if _, err := conn.ExposeService(ctx, &openshellv1.ExposeServiceRequest{WorkspaceScope: gatewayapi.Workspace(at), Sandbox: name, Name: "web",
			TargetPort: 8000}); err != nil {
			t.Fatal(err)
		}
	}
	rec := events.NewFakeRecorder(10)
	s := f.sweeper(rec)
	if _, err := s.Sweep(ctx, f.obs.gateway); err != nil {
		t.Fatal(err)
	}
	if got := f.gw.Services(ws); len(got) != 0 {
		t.Errorf("services left in our workspace: %v", got)
	}
	if got := f.gw.Services(twinWS); !slices.Equal(got, []string{name + "/web"}) {
		t.Errorf("another cluster's workspace: %v, want its service kept", got)
	}
	if len(rec.Events) != 1 {
		t.Fatalf("%d events, want 1", len(rec.Events))
	}
	if ev := <-rec.Events; !strings.Contains(ev, "DriftReverted") || !strings.Contains(ev, `"web" (port 8000) of sandbox `+name) {
		t.Errorf("event %q does not name the service", ev)
	}
	deletes := f.gw.Calls()["DeleteService"]
	if _, err := s.Sweep(ctx, f.obs.gateway); err != nil {
		t.Fatal(err)
	}
	if f.gw.Calls()["DeleteService"] != deletes || len(rec.Events) != 0 {
		t.Error("a second sweep deleted again")
	}
}

// TestServiceAuditGoesOnAndIsBounded: a workspace this process verified is
// audited once its sandboxes are gone; one failed delete spares no other
// service (the next sweep retries it); a flood of services writes at most
// maxServiceEvents Events and one more that counts the rest.
func TestServiceAuditGoesOnAndIsBounded(t *testing.T) {
	ctx := context.Background()
	f := newV01Fixture(t)
	c := f.r.Client
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a", UID: fixtureNamespaceUID}}); err != nil {
		t.Fatal(err)
	}
	f.sync(t, sandboxWith(nil)) // verifies the workspace; the object is then gone from the sweep's view
	ws := f.workspace()
	f.gw.SeedSandbox(ws, "made-with-a-token", nil)
	conn, err := f.r.Gateways.Connect(ctx, f.obs.gateway)
	if err != nil {
		t.Fatal(err)
	}
	const n = maxServiceEvents + 5
	for i := range n {
		if _, err := conn.ExposeService(ctx, &openshellv1.ExposeServiceRequest{WorkspaceScope: gatewayapi.Workspace(ws), Sandbox: "made-with-a-token",
			Name: fmt.Sprintf("web-%02d", i), TargetPort: 8000}); err != nil {
			t.Fatal(err)
		}
	}
	f.gw.FailNext("DeleteService", codes.Internal) // not retried by the client, as Unavailable is
	rec := events.NewFakeRecorder(2 * n)
	s := f.sweeper(rec)
	if _, err := s.Sweep(ctx, f.obs.gateway); err != nil {
		t.Fatal(err)
	}
	if got := f.gw.Services(ws); len(got) != 1 {
		t.Fatalf("after a sweep with one failed delete: %v, want that one left", got)
	}
	if len(rec.Events) != maxServiceEvents+1 {
		t.Fatalf("%d events, want %d and one that counts the rest", len(rec.Events), maxServiceEvents)
	}
	for range maxServiceEvents {
		<-rec.Events
	}
	if more := <-rec.Events; !strings.Contains(more, fmt.Sprintf("deleted %d more services", n-1-maxServiceEvents)) {
		t.Errorf("the last event %q does not count the rest", more)
	}
	if _, err := s.Sweep(ctx, f.obs.gateway); err != nil {
		t.Fatal(err)
	}
	if got := f.gw.Services(ws); len(got) != 0 {
		t.Errorf("the next sweep left %v", got)
	}
}

// TestPages: the page loop hands back each token, stops at an empty one,
// on an error and at its bound.
func TestPages(t *testing.T) {
	next := map[string]string{"": "a", "a": "b", "b": ""}
	var seen []string
	read := func(token string) (string, error) { seen = append(seen, token); return next[token], nil }
	if err := pages(0, read); err != nil || !slices.Equal(seen, []string{"", "a", "b"}) {
		t.Errorf("unbounded: %v %q", err, seen)
	}
	seen = nil
	if err := pages(2, read); err != nil || !slices.Equal(seen, []string{"", "a"}) {
		t.Errorf("two pages: %v %q", err, seen)
	}
	seen = nil
	failed := fmt.Errorf("gone")
	if err := pages(0, func(token string) (string, error) { seen = append(seen, token); return "a", failed }); err != failed || len(seen) != 1 {
		t.Errorf("an error: %v after %q", err, seen)
	}
}
