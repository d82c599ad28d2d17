package providerprofile

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/events"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/gatewayapi"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/openshellv1"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/sandboxv1"
)

// atGateway is a client of the fixture's gateway, as a token holder
// would call it.
func (f *fixture) atGateway(t *testing.T) *gatewayapi.Client {
	t.Helper()
	conn, err := f.r.Gateways.Connect(context.Background(), f.env.Object)
	if err != nil {
		t.Fatal(err)
	}
	return conn
}

func driftEvents(rec events.EventRecorder) []string {
	var out []string
	for {
		select {
		case e := <-rec.(*events.FakeRecorder).Events:
			if strings.Contains(e, "DriftReverted") {
				out = append(out, e)
			}
		default:
			return out
		}
	}
}

// TestAProfileChangedAtTheGatewayIsImportedAgain: a Tenant Admin's
// gateway token widens the imported profile's endpoints, or deletes it;
// within one drift period the operator imports the declared one again,
// and a comparison that finds nothing writes nothing.
func TestAProfileChangedAtTheGatewayIsImportedAgain(t *testing.T) {
	ctx := context.Background()
	for name, tamper := range map[string]func(*testing.T, *gatewayapi.Client, *openshellv1.ProviderProfile){
		"endpoints widened": func(t *testing.T, conn *gatewayapi.Client, cur *openshellv1.ProviderProfile) {
			cur.Endpoints = append(cur.Endpoints, &sandboxv1.NetworkEndpoint{Host: "attacker.example", Port: 443})
			if _, err := conn.UpdateProviderProfiles(ctx, &openshellv1.UpdateProviderProfilesRequest{Id: "github", ExpectedResourceVersion: cur.GetResourceVersion(),
				Profile: &openshellv1.ProviderProfileImportItem{Profile: cur, Source: "cli"}, WorkspaceScope: selector(workspace)}); err != nil {
				t.Fatal(err)
			}
		},
		"deleted": func(t *testing.T, conn *gatewayapi.Client, _ *openshellv1.ProviderProfile) {
			if _, err := conn.DeleteProviderProfile(ctx, &openshellv1.DeleteProviderProfileRequest{Id: "github", WorkspaceScope: selector(workspace)}); err != nil {
				t.Fatal(err)
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, options{})
			f.reconcile(t, ns)
			rv := f.profile(t, ns).Status.Gateways[0].GatewayResourceVersion
			if rv == 0 {
				t.Fatal("the import recorded no resource version")
			}
			tamper(t, f.atGateway(t), f.env.Gateway.Profile(workspace, "github"))

			f.reconcile(t, ns) // within the period: not read back
			if h := hosts(f.env.Gateway.Profile(workspace, "github")); name == "endpoints widened" && len(h) != 2 {
				t.Fatalf("hosts %v", h)
			}

			f.r.DriftPeriod = time.Nanosecond
			f.reconcile(t, ns)
			got := f.env.Gateway.Profile(workspace, "github")
			if h := hosts(got); len(h) != 1 || h[0] != "api.github.com" {
				t.Fatalf("hosts %v after the comparison, want the declared api.github.com", h)
			}
			p := f.expectReason(t, ns, openshellv1alpha1.ProfileReasonImported)
			if p.Status.Gateways[0].GatewayResourceVersion != got.GetResourceVersion() {
				t.Errorf("status records %d, the catalog holds %d", p.Status.Gateways[0].GatewayResourceVersion, got.GetResourceVersion())
			}
			if ev := driftEvents(f.r.Recorder); len(ev) != 1 {
				t.Errorf("DriftReverted events %q, want one", ev)
			}

			w, calls := *f.writes, f.env.Gateway.Calls()
			f.reconcile(t, ns)
			after := f.env.Gateway.Calls()
			if *f.writes != w || after["UpdateProviderProfiles"] != calls["UpdateProviderProfiles"] || after["ImportProviderProfiles"] != calls["ImportProviderProfiles"] {
				t.Errorf("a steady comparison wrote %d objects, calls %v → %v", *f.writes-w, calls, after)
			}
		})
	}
}
