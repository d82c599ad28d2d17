package provider

import (
	"context"
	"maps"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/datamodelv1"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/openshellv1"
	v01dm "github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/datamodelv1"
)

// tamper is what a Tenant Admin's gateway token can do to the provider
// directly: UpdateProvider merges credentials and config.
func (f *fixture) tamper(t *testing.T, creds, config map[string]string) {
	t.Helper()
	_, err := f.env.Gateway.UpdateProvider(context.Background(), &openshellv1.UpdateProviderRequest{Workspace: workspace,
		Provider: &datamodelv1.Provider{Metadata: &datamodelv1.ObjectMeta{Name: provName}, Credentials: creds, Config: config}})
	if err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) driftEvents() []string {
	var out []string
	for {
		select {
		case e := <-f.rec.Events:
			if strings.Contains(e, "DriftReverted") {
				out = append(out, e)
			}
		default:
			return out
		}
	}
}

var pushed = map[string]string{"API_KEY": secretValue, "OLD_KEY": "old-value"}

// TestAChangeAtTheGatewayIsWrittenAgain: a value changed, a key added and
// config set at the gateway directly last at most one drift period; the
// comparison names what differs, never a value, and a steady comparison
// writes nothing.
func TestAChangeAtTheGatewayIsWrittenAgain(t *testing.T) {
	for name, tc := range map[string]struct {
		creds, config map[string]string
		names         string
	}{
		"a value only":          {creds: map[string]string{"API_KEY": "sk-attacker"}, names: "resource version"},
		"a key added":           {creds: map[string]string{"EXFIL_URL": "https://attacker.example"}, names: "credential keys [API_KEY, EXFIL_URL, OLD_KEY]"},
		"config set":            {config: map[string]string{"base_url": "https://attacker.example"}, names: "config differs"},
		"a key deleted (empty)": {creds: map[string]string{"OLD_KEY": ""}, names: "credential keys [API_KEY]"},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, options{})
			f.reconcile(t)
			f.driftEvents()
			f.tamper(t, tc.creds, tc.config)

			// Within the period nothing is read back.
			gets := f.env.Gateway.Calls()["GetProvider"]
			f.reconcile(t)
			if f.env.Gateway.Calls()["GetProvider"] != gets {
				t.Fatal("compared within the drift period")
			}

			f.r.DriftPeriod = time.Nanosecond
			pushes := f.pushes()
			res := f.reconcile(t)
			if got := f.env.Gateway.StoredCredentials(workspace, provName); !maps.Equal(got, pushed) {
				t.Fatalf("stored credentials %v after the comparison, want the Secret's", got)
			}
			if f.pushes() != pushes+1 {
				t.Errorf("pushes %d → %d, want one", pushes, f.pushes())
			}
			if res.RequeueAfter != time.Nanosecond {
				t.Errorf("requeue after %v, want the drift period", res.RequeueAfter)
			}
			ev := f.driftEvents()
			if len(ev) != 1 || !strings.Contains(ev[0], tc.names) || strings.Contains(ev[0], "sk-attacker") || strings.Contains(ev[0], secretValue) {
				t.Fatalf("DriftReverted events %q, want one naming %q and no value", ev, tc.names)
			}
			p := f.provider(t)
			wantReady(t, p, metav1.ConditionTrue, openshellv1alpha1.ProviderReasonSynced)
			got, err := f.env.Gateway.GetProvider(context.Background(), &openshellv1.GetProviderRequest{Workspace: workspace, Name: provName})
			if err != nil {
				t.Fatal(err)
			}
			if rv := got.GetProvider().GetMetadata().GetResourceVersion(); p.Status.Gateways[0].GatewayResourceVersion != rv {
				t.Errorf("status records resource version %d, the gateway holds %d", p.Status.Gateways[0].GatewayResourceVersion, rv)
			}
			if len(got.GetProvider().GetConfig()) != 0 {
				t.Errorf("config %v left at the gateway", got.GetProvider().GetConfig())
			}

			// Compared again, nothing differs: no push, no write.
			*f.writes, pushes = 0, f.pushes()
			f.reconcile(t)
			if *f.writes != 0 || f.pushes() != pushes || len(f.driftEvents()) != 0 {
				t.Errorf("a steady comparison wrote %d objects and pushed %d times", *f.writes, f.pushes()-pushes)
			}
		})
	}
}

// TestAProviderDeletedAtTheGatewayIsCreatedAgain, without any change in
// the cluster to prompt it.
func TestAProviderDeletedAtTheGatewayIsCreatedAgain(t *testing.T) {
	f := newFixture(t, options{})
	f.reconcile(t)
	if _, err := f.env.Gateway.DeleteProvider(context.Background(), &openshellv1.DeleteProviderRequest{Workspace: workspace, Name: provName}); err != nil {
		t.Fatal(err)
	}
	f.r.DriftPeriod = time.Nanosecond
	f.reconcile(t)
	if got := f.env.Gateway.StoredCredentials(workspace, provName); !maps.Equal(got, pushed) {
		t.Fatalf("stored credentials %v", got)
	}
	if ev := f.driftEvents(); len(ev) != 1 || !strings.Contains(ev[0], "deleted at gateway") {
		t.Fatalf("events %q", ev)
	}
}

// TestAProviderReplacedByAnotherOwnerIsNeverWritten: deleted and created
// again under the operator's name by someone else, it is a conflict, and
// the Secret's values never reach it.
func TestAProviderReplacedByAnotherOwnerIsNeverWritten(t *testing.T) {
	f := newFixture(t, options{})
	f.reconcile(t)
	ctx := context.Background()
	if _, err := f.env.Gateway.DeleteProvider(ctx, &openshellv1.DeleteProviderRequest{Workspace: workspace, Name: provName}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.env.Gateway.CreateProvider(ctx, &openshellv1.CreateProviderRequest{Workspace: workspace, Provider: &datamodelv1.Provider{
		Metadata: &datamodelv1.ObjectMeta{Name: provName, Labels: map[string]string{"owner": "someone-else"}}, Type: "anthropic",
		Credentials: map[string]string{"API_KEY": "theirs"}}}); err != nil {
		t.Fatal(err)
	}
	f.r.DriftPeriod = time.Nanosecond
	f.reconcile(t)
	if got := f.env.Gateway.StoredCredentials(workspace, provName); !maps.Equal(got, map[string]string{"API_KEY": "theirs"}) {
		t.Fatalf("stored credentials %v: the operator wrote into another owner's provider", got)
	}
	wantReady(t, f.provider(t), metav1.ConditionFalse, openshellv1alpha1.ReasonProviderConflict)
}

// TestAnEntryWithoutAResourceVersionAdoptsIt: pushed by an operator that
// did not record it, an unchanged provider is not pushed again.
func TestAnEntryWithoutAResourceVersionAdoptsIt(t *testing.T) {
	f := newFixture(t, options{})
	f.reconcile(t)
	p := f.provider(t)
	rv := p.Status.Gateways[0].GatewayResourceVersion
	if rv == 0 {
		t.Fatal("no resource version recorded at the push")
	}
	p.Status.Gateways[0].GatewayResourceVersion = 0
	if err := f.env.Client.Status().Update(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	f.r.DriftPeriod = time.Nanosecond
	pushes := f.pushes()
	f.reconcile(t)
	if got := f.provider(t).Status.Gateways[0].GatewayResourceVersion; got != rv || f.pushes() != pushes {
		t.Fatalf("resource version %d (want %d), %d pushes", got, rv, f.pushes()-pushes)
	}
}

// TestProviderDrift is the comparison alone.
func TestProviderDrift(t *testing.T) {
	p := &openshellv1alpha1.OpenShellProvider{Spec: openshellv1alpha1.OpenShellProviderSpec{Type: "anthropic", Config: map[string]string{"a": "1"}}}
	e := openshellv1alpha1.ProviderGatewayStatus{Name: provName, Gateway: gatewayKey, CredentialKeys: []string{"K"}, GatewayResourceVersion: 3}
	same := func() *v01dm.Provider {
		return &v01dm.Provider{Metadata: &v01dm.ObjectMeta{ResourceVersion: 3}, Type: "Anthropic", Credentials: map[string]string{"K": "REDACTED"},
			Config: map[string]string{"a": "1"}}
	}
	if msg := providerDrift(e, p, same(), nil); msg != "" {
		t.Errorf("same provider: %q", msg)
	}
	for want, change := range map[string]func(*v01dm.Provider){
		"resource version 4":       func(g *v01dm.Provider) { g.Metadata.ResourceVersion = 4 },
		"credential keys [K, L]":   func(g *v01dm.Provider) { g.CredentialHandles = map[string]*v01dm.CredentialHandle{"L": {}} },
		"config differs":           func(g *v01dm.Provider) { g.Config = nil },
		`type "openai"`:            func(g *v01dm.Provider) { g.Type = "openai" },
		`profile workspace "ws-x"`: func(g *v01dm.Provider) { g.ProfileWorkspace = "ws-x" },
	} {
		g := same()
		change(g)
		if msg := providerDrift(e, p, g, nil); !strings.Contains(msg, want) || !strings.Contains(msg, "spec") {
			t.Errorf("%s: %q", want, msg)
		}
	}
	e.GatewayResourceVersion = 0
	g := same()
	g.Metadata.ResourceVersion = 9
	if msg := providerDrift(e, p, g, nil); msg != "" {
		t.Errorf("no recorded resource version: %q", msg)
	}
}

// TestARecordMadeAgainWithCopiedLabelsIsNeverWritten: owner labels can be
// read and copied; the record's ID cannot. Neither the drift comparison
// nor a rotation writes the Secret's values into a record of the name
// that someone else created again.
func TestARecordMadeAgainWithCopiedLabelsIsNeverWritten(t *testing.T) {
	for name, trigger := range map[string]func(*testing.T, *fixture){
		"drift comparison": func(_ *testing.T, f *fixture) { f.r.DriftPeriod = time.Nanosecond },
		"rotation": func(t *testing.T, f *fixture) {
			s := f.secret(t)
			s.Data = map[string][]byte{"API_KEY": []byte("sk-rotated")}
			if err := f.env.Client.Update(context.Background(), s); err != nil {
				t.Fatal(err)
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			f := newFixture(t, options{})
			f.reconcile(t)
			got, err := f.env.Gateway.GetProvider(ctx, &openshellv1.GetProviderRequest{Workspace: workspace, Name: provName})
			if err != nil {
				t.Fatal(err)
			}
			labels := got.GetProvider().GetMetadata().GetLabels()
			if _, err := f.env.Gateway.DeleteProvider(ctx, &openshellv1.DeleteProviderRequest{Workspace: workspace, Name: provName}); err != nil {
				t.Fatal(err)
			}
			if _, err := f.env.Gateway.CreateProvider(ctx, &openshellv1.CreateProviderRequest{Workspace: workspace, Provider: &datamodelv1.Provider{
				Metadata: &datamodelv1.ObjectMeta{Name: provName, Labels: labels}, Type: "anthropic",
				Credentials: map[string]string{"API_KEY": "theirs"}}}); err != nil {
				t.Fatal(err)
			}
			trigger(t, f)
			f.reconcile(t)
			if got := f.env.Gateway.StoredCredentials(workspace, provName); !maps.Equal(got, map[string]string{"API_KEY": "theirs"}) {
				t.Fatalf("stored credentials %v: the operator wrote into a record it did not create", got)
			}
			wantReady(t, f.provider(t), metav1.ConditionFalse, openshellv1alpha1.ReasonProviderConflict)
		})
	}
}
