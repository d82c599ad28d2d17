package profilecatalog

import (
	"context"
	"slices"
	"testing"
	"testing/fstest"

	"google.golang.org/grpc/codes"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/openshellv1"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/sandboxv1"
	"github.com/openshell/openshell-operator/internal/gatewayline"
	"github.com/openshell/openshell-operator/internal/profilecatalog"
	"github.com/openshell/openshell-operator/internal/tenancy"
	"github.com/openshell/openshell-operator/test/fakeclient"
	"github.com/openshell/openshell-operator/test/gatewaytest"
)

func manifest(id, host string) *fstest.MapFile {
	return &fstest.MapFile{Data: []byte("apiVersion: openshell.ai/v1alpha1\nkind: OpenShellProviderProfile\nmetadata:\n  name: " + id +
		"\nspec:\n  credentials:\n  - name: TOKEN\n    envVars: [TOKEN]\n  endpoints:\n  - host: " + host + "\n    port: 443\n")}
}

func catalog(t *testing.T, files fstest.MapFS) *profilecatalog.Catalog {
	t.Helper()
	c, err := profilecatalog.Parse(files)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// two is a catalog of two shipped profiles.
func two(t *testing.T) *profilecatalog.Catalog {
	return catalog(t, fstest.MapFS{"profiles/alpha.yaml": manifest("alpha", "alpha.example.com"), "profiles/beta.yaml": manifest("beta", "beta.example.com")})
}

type fixture struct {
	r      *Reconciler
	env    *gatewaytest.Env
	writes *int
	events *events.FakeRecorder
}

// newFixture: an External 0.1 gateway (which imports shipped profiles only
// when asked: policy All) and a reconciler whose writes are counted.
func newFixture(t *testing.T, c *profilecatalog.Catalog, spec func(*openshellv1alpha1.OpenShellGateway)) *fixture {
	t.Helper()
	ctx := context.Background()
	var writes *int
	env := gatewaytest.StartWith(t, func(b *fake.ClientBuilder) { writes = &fakeclient.CountWrites(b).All },
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "platform", UID: "platform-uid"}})
	env.Gateway.ReportVersion(gatewayline.V01WireRelease)
	env.Object.Spec.BuiltinProviderProfiles = &openshellv1alpha1.BuiltinProviderProfiles{Policy: openshellv1alpha1.BuiltinProfilesAll}
	if spec != nil {
		spec(env.Object)
	}
	if err := env.Client.Create(ctx, env.Object); err != nil {
		t.Fatal(err)
	}
	env.Object.Status.Version = gatewayline.V01WireRelease
	if err := env.Client.Status().Update(ctx, env.Object); err != nil {
		t.Fatal(err)
	}
	*writes = 0
	rec := events.NewFakeRecorder(100)
	r := &Reconciler{Client: env.Client, Gateways: env.Resolver, Recorder: rec, Catalog: c,
		Platform: tenancy.Platform{OperatorNamespace: "platform", GatewayNamespaces: []string{"platform"}}}
	return &fixture{r: r, env: env, writes: writes, events: rec}
}

func (f *fixture) reconcile(t *testing.T) ctrl.Result {
	t.Helper()
	res, err := f.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(f.env.Object)})
	if err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	return res
}

func (f *fixture) gateway(t *testing.T) *openshellv1alpha1.OpenShellGateway {
	t.Helper()
	gw := &openshellv1alpha1.OpenShellGateway{}
	if err := f.env.Client.Get(context.Background(), client.ObjectKeyFromObject(f.env.Object), gw); err != nil {
		t.Fatal(err)
	}
	return gw
}

func (f *fixture) update(t *testing.T, change func(*openshellv1alpha1.OpenShellGateway)) {
	t.Helper()
	gw := f.gateway(t)
	change(gw)
	if err := f.env.Client.Update(context.Background(), gw); err != nil {
		t.Fatal(err)
	}
	*f.writes = 0
}

func profileCalls(calls map[string]int) int {
	n := 0
	for _, m := range []string{"GetProviderProfile", "ImportProviderProfiles", "UpdateProviderProfiles", "DeleteProviderProfile"} {
		n += calls[m]
	}
	return n
}

// TestImportsTheShippedProfilesOnce: every shipped profile reaches the
// platform catalog, marked as the operator's; the gateway's status records
// them with the catalog's version; a second reconcile calls nothing and
// writes nothing.
func TestImportsTheShippedProfilesOnce(t *testing.T) {
	f := newFixture(t, two(t), nil)
	f.reconcile(t)
	for _, id := range []string{"alpha", "beta"} {
		p := f.env.Gateway.Profile("", id)
		if p == nil || p.GetAnnotations()[AnnotationCatalog] != catalogOwner || p.GetAnnotations()[AnnotationContentHash] == "" {
			t.Fatalf("platform catalog holds %s as %v", id, p)
		}
	}
	st := f.gateway(t).Status.BuiltinProviderProfiles
	if st == nil || !slices.Equal(st.Imported, []string{"alpha", "beta"}) || st.Catalog != f.r.Catalog.Version || st.Message != "" {
		t.Fatalf("status = %+v", st)
	}
	if len(f.events.Events) != 1 {
		t.Fatalf("events = %d, want 1", len(f.events.Events))
	}
	*f.writes = 0
	before := profileCalls(f.env.Gateway.Calls())
	f.reconcile(t)
	if *f.writes != 0 || profileCalls(f.env.Gateway.Calls()) != before {
		t.Fatalf("steady state: %d writes, %d profile calls", *f.writes, profileCalls(f.env.Gateway.Calls())-before)
	}
}

// TestAnotherProfileIsNeverOverwritten: a profile of a shipped id that the
// gateway's admin imported by hand stays as it is, listed as skipped, and
// is not withdrawn when the id is excluded later.
func TestAnotherProfileIsNeverOverwritten(t *testing.T) {
	f := newFixture(t, two(t), nil)
	f.env.Gateway.ImportProfile("", &openshellv1.ProviderProfile{Id: "alpha", Endpoints: profileEndpoints("admins.example.com")})
	f.reconcile(t)
	if got := f.env.Gateway.Profile("", "alpha"); got.GetEndpoints()[0].GetHost() != "admins.example.com" {
		t.Fatalf("the admin's profile was replaced: %v", got)
	}
	st := f.gateway(t).Status.BuiltinProviderProfiles
	if !slices.Equal(st.Imported, []string{"beta"}) || !slices.Equal(st.Skipped, []string{"alpha"}) {
		t.Fatalf("status = %+v", st)
	}
	f.update(t, func(gw *openshellv1alpha1.OpenShellGateway) {
		gw.Spec.BuiltinProviderProfiles.Exclude = []string{"alpha", "beta"}
	})
	f.reconcile(t)
	if f.env.Gateway.Profile("", "alpha") == nil {
		t.Fatal("the admin's profile was withdrawn")
	}
	if f.env.Gateway.Profile("", "beta") != nil {
		t.Fatal("an excluded shipped profile is still in the catalog")
	}
}

// TestANewCatalogReplacesTheOld: an operator upgrade whose catalog changed
// one profile and dropped another updates the first (compare-and-swap on
// the gateway's resource version) and withdraws the second.
func TestANewCatalogReplacesTheOld(t *testing.T) {
	f := newFixture(t, two(t), nil)
	f.reconcile(t)
	f.r.Catalog = catalog(t, fstest.MapFS{"profiles/alpha.yaml": manifest("alpha", "alpha2.example.com")})
	f.reconcile(t)
	a := f.env.Gateway.Profile("", "alpha")
	if a.GetEndpoints()[0].GetHost() != "alpha2.example.com" || a.GetResourceVersion() != 2 {
		t.Fatalf("alpha = %v, want the new content at resource version 2", a)
	}
	if f.env.Gateway.Profile("", "beta") != nil {
		t.Fatal("a profile the new catalog dropped is still imported")
	}
	if st := f.gateway(t).Status.BuiltinProviderProfiles; !slices.Equal(st.Imported, []string{"alpha"}) || st.Catalog != f.r.Catalog.Version {
		t.Fatalf("status = %+v", st)
	}
}

// TestPolicyNoneWithdrawsOnlyTheOperators and the defaults: an External
// gateway without the field imports nothing; None withdraws what was
// imported.
func TestPolicyNoneWithdrawsOnlyTheOperators(t *testing.T) {
	f := newFixture(t, two(t), func(gw *openshellv1alpha1.OpenShellGateway) { gw.Spec.BuiltinProviderProfiles = nil })
	f.reconcile(t)
	if f.env.Gateway.Profile("", "alpha") != nil || profileCalls(f.env.Gateway.Calls()) != 0 || *f.writes != 0 {
		t.Fatal("an External gateway imported shipped profiles without being asked")
	}
	f.update(t, func(gw *openshellv1alpha1.OpenShellGateway) {
		gw.Spec.BuiltinProviderProfiles = &openshellv1alpha1.BuiltinProviderProfiles{Policy: openshellv1alpha1.BuiltinProfilesAll}
	})
	f.reconcile(t)
	f.env.Gateway.ImportProfile("", &openshellv1.ProviderProfile{Id: "gamma"})
	f.update(t, func(gw *openshellv1alpha1.OpenShellGateway) {
		gw.Spec.BuiltinProviderProfiles.Policy = openshellv1alpha1.BuiltinProfilesNone
	})
	f.reconcile(t)
	if f.env.Gateway.Profile("", "alpha") != nil || f.env.Gateway.Profile("", "beta") != nil || f.env.Gateway.Profile("", "gamma") == nil {
		t.Fatal("policy None did not withdraw exactly the operator's profiles")
	}
	if st := f.gateway(t).Status.BuiltinProviderProfiles; len(st.Imported) != 0 {
		t.Fatalf("status = %+v", st)
	}
}

// TestNewPodsGetThemAgain: a gateway whose pods were replaced (a new
// database, an empty catalog) is given the profiles again.
func TestNewPodsGetThemAgain(t *testing.T) {
	// A gateway with an empty catalog, whose record says the old pods
	// were given both.
	f := newFixture(t, two(t), nil)
	gw := f.gateway(t)
	gw.Status.BuiltinProviderProfiles = &openshellv1alpha1.BuiltinProfilesStatus{Catalog: f.r.Catalog.Version, GatewayInstance: "old-pods",
		Imported: []string{"alpha", "beta"}}
	gw.Status.Instance = "new-pods"
	if err := f.env.Client.Status().Update(context.Background(), gw); err != nil {
		t.Fatal(err)
	}
	f.reconcile(t)
	if f.env.Gateway.Profile("", "alpha") == nil || f.env.Gateway.Profile("", "beta") == nil {
		t.Fatalf("the new pods were not given the shipped profiles: %+v", f.gateway(t).Status)
	}
	if st := f.gateway(t).Status.BuiltinProviderProfiles; st.GatewayInstance != "new-pods" {
		t.Fatalf("status = %+v", st)
	}
}

// TestAFailedImportIsRetried: a refused call is reported in the record and
// asked again; the next reconcile completes it.
func TestAFailedImportIsRetried(t *testing.T) {
	f := newFixture(t, two(t), nil)
	f.env.Gateway.FailNext("ImportProviderProfiles", codes.Internal)
	if res := f.reconcile(t); res.RequeueAfter == 0 {
		t.Fatal("a failed import is not retried")
	}
	st := f.gateway(t).Status.BuiltinProviderProfiles
	if st.Message == "" || len(st.Imported) != 1 {
		t.Fatalf("status = %+v", st)
	}
	f.reconcile(t)
	if st := f.gateway(t).Status.BuiltinProviderProfiles; st.Message != "" || len(st.Imported) != 2 {
		t.Fatalf("status after the retry = %+v", st)
	}
}

// TestCurrent is the steady-state decision.
func TestCurrent(t *testing.T) {
	st := &openshellv1alpha1.BuiltinProfilesStatus{Catalog: "v1", GatewayInstance: "i", Imported: []string{"a"}, Skipped: []string{"b"}}
	for _, tc := range []struct {
		name     string
		st       *openshellv1alpha1.BuiltinProfilesStatus
		catalog  string
		instance string
		wanted   []string
		want     bool
	}{
		{"nothing wanted, nothing recorded", nil, "v1", "i", nil, true},
		{"wanted, nothing recorded", nil, "v1", "i", []string{"a"}, false},
		{"all held", st, "v1", "i", []string{"a", "b"}, true},
		{"another catalog", st, "v2", "i", []string{"a", "b"}, false},
		{"other pods", st, "v1", "j", []string{"a", "b"}, false},
		{"one more wanted", st, "v1", "i", []string{"a", "b", "c"}, false},
		{"one less wanted", st, "v1", "i", []string{"a"}, false},
		{"a failure to retry", &openshellv1alpha1.BuiltinProfilesStatus{Catalog: "v1", GatewayInstance: "i", Imported: []string{"a"}, Message: "x"}, "v1", "i", []string{"a"}, false},
	} {
		if got := current(tc.st, tc.catalog, tc.instance, tc.wanted); got != tc.want {
			t.Errorf("%s: current = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func profileEndpoints(host string) []*sandboxv1.NetworkEndpoint {
	return []*sandboxv1.NetworkEndpoint{{Host: host, Port: 443}}
}
