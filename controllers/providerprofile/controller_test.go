package providerprofile

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/openshellv1"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/sandboxv1"
	"github.com/openshell/openshell-operator/internal/gatewayline"
	"github.com/openshell/openshell-operator/internal/sandboxspec"
	"github.com/openshell/openshell-operator/internal/tenancy"
	"github.com/openshell/openshell-operator/test/fakeclient"
	"github.com/openshell/openshell-operator/test/gatewaytest"
)

const (
	ns    = "team-a"
	nsUID = "ns-uid-1"
)

var workspace = sandboxspec.WorkspaceName(ns, nsUID)

// fixture: a test gateway speaking 0.1 (External "platform/gw"), a
// tenant's provider of type github attached by a sandbox on it, the
// tenant's profile github, and a reconciler whose writes are counted.
type fixture struct {
	r      *Reconciler
	env    *gatewaytest.Env
	writes *int
}

type options struct {
	version string // the gateway's release (default 0.1.5)
	gateway func(*openshellv1alpha1.OpenShellGateway)
	objs    []client.Object
}

func port(p int32) *int32 { return &p }

func profile(namespace, host string) *openshellv1alpha1.OpenShellProviderProfile {
	return &openshellv1alpha1.OpenShellProviderProfile{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "github", UID: types.UID("prof-" + namespace), Generation: 1},
		Spec: openshellv1alpha1.OpenShellProviderProfileSpec{Endpoints: []openshellv1alpha1.NetworkEndpoint{{Host: host, Port: port(443)}}}}
}

func newFixture(t *testing.T, o options) *fixture {
	t.Helper()
	ctx := context.Background()
	var writes *int
	configure := func(b *fake.ClientBuilder) {
		writes = &fakeclient.CountWrites(b).All
		fakeclient.WithIndexes(t, b)
	}
	objs := append([]client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, UID: nsUID}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "platform", UID: "platform-uid"}},
		&openshellv1alpha1.OpenShellProvider{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bot"},
			Spec: openshellv1alpha1.OpenShellProviderSpec{Type: "github"}},
		&openshellv1alpha1.OpenShellSandbox{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "agent"},
			Spec: openshellv1alpha1.OpenShellSandboxSpec{GatewayRef: openshellv1alpha1.GatewayReference{Name: "gw", Namespace: "platform"},
				Providers: []string{"bot"}}},
		profile(ns, "api.github.com"),
	}, o.objs...)
	env := gatewaytest.StartWith(t, configure, objs...)
	version := o.version
	if version == "" {
		version = gatewayline.V01WireRelease
	}
	env.Gateway.ReportVersion(version)
	if o.gateway != nil {
		o.gateway(env.Object)
	}
	if err := env.Client.Create(ctx, env.Object); err != nil {
		t.Fatal(err)
	}
	env.Object.Status.Version = version
	if err := env.Client.Status().Update(ctx, env.Object); err != nil {
		t.Fatal(err)
	}
	*writes = 0
	r := &Reconciler{Client: env.Client, Gateways: env.Resolver, Recorder: events.NewFakeRecorder(100),
		Platform: tenancy.Platform{OperatorNamespace: "platform", GatewayNamespaces: []string{"platform"}}}
	return &fixture{r: r, env: env, writes: writes}
}

func (f *fixture) reconcile(t *testing.T, namespace string) {
	t.Helper()
	if _, err := f.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Namespace: namespace, Name: "github"}}); err != nil {
		t.Fatalf("reconcile: %v", err)
	}
}

func (f *fixture) profile(t *testing.T, namespace string) *openshellv1alpha1.OpenShellProviderProfile {
	t.Helper()
	p := &openshellv1alpha1.OpenShellProviderProfile{}
	if err := f.env.Client.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: "github"}, p); err != nil {
		t.Fatal(err)
	}
	return p
}

func (f *fixture) expectReason(t *testing.T, namespace, reason string) *openshellv1alpha1.OpenShellProviderProfile {
	t.Helper()
	p := f.profile(t, namespace)
	if c := meta.FindStatusCondition(p.Status.Conditions, openshellv1alpha1.ConditionReady); c == nil || c.Reason != reason {
		t.Fatalf("Ready = %+v, want reason %s", c, reason)
	}
	return p
}

func hosts(p *openshellv1.ProviderProfile) []string {
	var out []string
	for _, e := range p.GetEndpoints() {
		out = append(out, e.GetHost())
	}
	return out
}

// TestImportsIntoTheWorkspaceCatalog: the tenant's profile reaches its
// workspace's catalog only, carrying the owner marks; a second reconcile
// makes no write and no gateway call; a spec change is imported again
// with the gateway's resource version.
func TestImportsIntoTheWorkspaceCatalog(t *testing.T) {
	f := newFixture(t, options{})
	f.reconcile(t, ns)
	p := f.expectReason(t, ns, openshellv1alpha1.ProfileReasonImported)
	got := f.env.Gateway.Profile(workspace, "github")
	if got == nil || got.GetAnnotations()[sandboxspec.LabelOwnerUID] != "prof-"+ns {
		t.Fatalf("workspace catalog holds %v", got)
	}
	if f.env.Gateway.Profile("", "github") != nil {
		t.Fatal("a tenant's profile reached the platform catalog")
	}
	if len(p.Finalizers) != 1 || len(p.Status.Gateways) != 1 || p.Status.Gateways[0].ObservedGeneration != 1 || p.Status.Gateways[0].Workspace != workspace {
		t.Fatalf("profile = %+v %+v", p.Finalizers, p.Status.Gateways)
	}

	calls, w := f.env.Gateway.Calls(), *f.writes
	f.reconcile(t, ns)
	if *f.writes != w || len(f.env.Gateway.Calls()) != len(calls) || f.env.Gateway.Calls()["GetProviderProfile"] != calls["GetProviderProfile"] {
		t.Fatalf("steady state: %d writes, calls %v -> %v", *f.writes-w, calls, f.env.Gateway.Calls())
	}

	p.Spec.Endpoints = append(p.Spec.Endpoints, openshellv1alpha1.NetworkEndpoint{Host: "uploads.github.com", Port: port(443)})
	p.Generation = 2
	if err := f.env.Client.Update(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	f.reconcile(t, ns)
	got = f.env.Gateway.Profile(workspace, "github")
	if h := hosts(got); len(h) != 2 || got.GetResourceVersion() != 2 {
		t.Fatalf("after the change: hosts %v, resource version %d", h, got.GetResourceVersion())
	}
}

// TestForeignProfileIsNeverTouched: a profile of the id that the gateway's
// admin imported by hand is neither overwritten (ProfileConflict) nor
// deleted with the object.
func TestForeignProfileIsNeverTouched(t *testing.T) {
	f := newFixture(t, options{})
	f.env.Gateway.ImportProfile(workspace, &openshellv1.ProviderProfile{Id: "github", Endpoints: []*sandboxv1.NetworkEndpoint{{Host: "github.example.com", Port: 443}}})
	f.reconcile(t, ns)
	f.expectReason(t, ns, openshellv1alpha1.ProfileReasonConflict)
	if h := hosts(f.env.Gateway.Profile(workspace, "github")); len(h) != 1 || h[0] != "github.example.com" {
		t.Fatalf("the foreign profile was overwritten: %v", h)
	}
	if err := f.env.Client.Delete(context.Background(), f.profile(t, ns)); err != nil {
		t.Fatal(err)
	}
	f.reconcile(t, ns)
	if f.env.Gateway.Profile(workspace, "github") == nil {
		t.Fatal("deleting the object deleted the gateway admin's profile")
	}
}

// TestDeletionWithdrawsTheProfile: the finalizer holds until the profile
// is gone from the catalog it was imported into.
func TestDeletionWithdrawsTheProfile(t *testing.T) {
	f := newFixture(t, options{})
	f.reconcile(t, ns)
	if err := f.env.Client.Delete(context.Background(), f.profile(t, ns)); err != nil {
		t.Fatal(err)
	}
	f.reconcile(t, ns)
	if f.env.Gateway.Profile(workspace, "github") != nil {
		t.Fatal("the profile is still in the workspace catalog")
	}
	if err := f.env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "github"}, &openshellv1alpha1.OpenShellProviderProfile{}); err == nil {
		t.Fatal("the finalizer was not released")
	}
}

// TestLegacyGatewayIsLeftAlone: a 0.0.x gateway builds its profiles in:
// nothing is imported, finalized or called.
func TestLegacyGatewayIsLeftAlone(t *testing.T) {
	f := newFixture(t, options{version: gatewayline.LegacyManaged})
	f.reconcile(t, ns)
	p := f.expectReason(t, ns, openshellv1alpha1.ProfileReasonUnused)
	if len(p.Finalizers) != 0 || len(p.Status.Gateways) != 0 || len(f.env.Gateway.Calls()) != 0 {
		t.Fatalf("finalizers %v, status %+v, calls %v", p.Finalizers, p.Status.Gateways, f.env.Gateway.Calls())
	}
}

// TestPlatformProfileShadowsTheTenants: a gateway that lists github in
// spec.providerProfiles gets the platform's profile in its platform
// catalog, and the tenant's github is not imported there.
func TestPlatformProfileShadowsTheTenants(t *testing.T) {
	f := newFixture(t, options{objs: []client.Object{profile("platform", "api.github.com")},
		gateway: func(gw *openshellv1alpha1.OpenShellGateway) { gw.Spec.ProviderProfiles = []string{"github"} }})
	f.reconcile(t, ns)
	f.expectReason(t, ns, openshellv1alpha1.ProfileReasonShadowed)
	if f.env.Gateway.Profile(workspace, "github") != nil {
		t.Fatal("a shadowed tenant profile was imported")
	}
	f.reconcile(t, "platform")
	p := f.expectReason(t, "platform", openshellv1alpha1.ProfileReasonImported)
	if f.env.Gateway.Profile("", "github") == nil || p.Status.Gateways[0].Scope != openshellv1alpha1.ProfileScopePlatform {
		t.Fatalf("platform catalog: %v, status %+v", f.env.Gateway.Profile("", "github"), p.Status.Gateways)
	}
}

// TestUnservedGatewayIsNeverCalled: a gateway in a namespace the operator
// does not serve (a tenant's own) that lists the tenant's profile is never
// dialled: it could point anywhere.
func TestUnservedGatewayIsNeverCalled(t *testing.T) {
	rogue := &openshellv1alpha1.OpenShellGateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "rogue"},
		Spec: openshellv1alpha1.OpenShellGatewaySpec{Mode: openshellv1alpha1.GatewayModeExternal, ProviderProfiles: []string{"github"},
			External: &openshellv1alpha1.ExternalGatewaySpec{Endpoint: "https://127.0.0.1:1", CASecretRef: openshellv1alpha1.SecretKeyReference{Name: "ca", Key: "ca.crt"}}},
		Status: openshellv1alpha1.OpenShellGatewayStatus{Version: gatewayline.V01WireRelease}}
	f := newFixture(t, options{objs: []client.Object{rogue}})
	f.reconcile(t, ns)
	p := f.expectReason(t, ns, openshellv1alpha1.ProfileReasonImported)
	for _, e := range p.Status.Gateways {
		if e.Gateway == ns+"/rogue" {
			t.Fatalf("the unserved gateway is a target: %+v", p.Status.Gateways)
		}
	}
}
