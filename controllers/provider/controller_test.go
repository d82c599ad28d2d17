package provider

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/datamodelv1"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/openshellv1"
	v01 "github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/openshellv1"
	"github.com/openshell/openshell-operator/internal/gatewayline"
	"github.com/openshell/openshell-operator/internal/sandboxspec"
	"github.com/openshell/openshell-operator/internal/tenancy"
	"github.com/openshell/openshell-operator/test/fakeclient"
	"github.com/openshell/openshell-operator/test/gatewaytest"
)

const (
	ns          = "team-a"
	nsUID       = "ns-uid-1"
	provName    = "anthropic"
	provUID     = "prov-uid-1"
	secretName  = "anthropic-creds"
	secretValue = "sk-very-secret-1"
	gatewayKey  = "platform/gw"
)

var workspace = sandboxspec.WorkspaceName(ns, nsUID)

// fixture is the in-process test gateway, a fake client with the
// production indexes that counts its writes, and a provider reconciler.
type fixture struct {
	r      *Reconciler
	env    *gatewaytest.Env
	rec    *events.FakeRecorder
	writes *int
}

type options struct {
	noSandbox bool
	noSecret  bool
	secret    map[string][]byte
	keys      []string
	gateway   func(*openshellv1alpha1.OpenShellGateway)
}

func newFixture(t *testing.T, o options) *fixture {
	t.Helper()
	ctx := context.Background()
	var writes *int
	configure := func(b *fake.ClientBuilder) {
		writes = &fakeclient.CountWrites(b).All
		fakeclient.WithIndexes(t, b)
	}
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, UID: nsUID}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "platform", UID: "platform-uid"}},
		&openshellv1alpha1.OpenShellProvider{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: provName, UID: provUID, Generation: 1},
			Spec: openshellv1alpha1.OpenShellProviderSpec{Type: "anthropic",
				CredentialsSecretRef: &openshellv1alpha1.ProviderCredentialsReference{Name: secretName, Keys: o.keys}},
		},
	}
	if !o.noSandbox {
		objs = append(objs, &openshellv1alpha1.OpenShellSandbox{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "agent", UID: "sb-uid-1"},
			Spec: openshellv1alpha1.OpenShellSandboxSpec{GatewayRef: openshellv1alpha1.GatewayReference{Name: "gw", Namespace: "platform"},
				Image: "registry.example.com/agent:1", Providers: []string{"github", provName}},
		})
	}
	if !o.noSecret {
		data := o.secret
		if data == nil {
			data = map[string][]byte{"API_KEY": []byte(secretValue), "OLD_KEY": []byte("old-value")}
		}
		objs = append(objs, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: secretName}, Data: data})
	}
	env := gatewaytest.StartWith(t, configure, objs...)
	if o.gateway != nil {
		o.gateway(env.Object)
	}
	if err := env.Client.Create(ctx, env.Object); err != nil {
		t.Fatal(err)
	}
	*writes = 0
	rec := events.NewFakeRecorder(100)
	r := &Reconciler{Client: env.Client, APIReader: env.Client, Gateways: env.Resolver, Recorder: rec,
		Platform: tenancy.Platform{OperatorNamespace: "platform", GatewayNamespaces: []string{"platform"}}}
	return &fixture{r: r, env: env, rec: rec, writes: writes}
}

func (f *fixture) reconcile(t *testing.T) ctrl.Result {
	t.Helper()
	res, err := f.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: provName}})
	if err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	return res
}

func (f *fixture) provider(t *testing.T) *openshellv1alpha1.OpenShellProvider {
	t.Helper()
	p := &openshellv1alpha1.OpenShellProvider{}
	if err := f.env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: provName}, p); err != nil {
		t.Fatal(err)
	}
	return p
}

func (f *fixture) secret(t *testing.T) *corev1.Secret {
	t.Helper()
	s := &corev1.Secret{}
	if err := f.env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: secretName}, s); err != nil {
		t.Fatal(err)
	}
	return s
}

// pushes counts the provider writes the gateway received.
func (f *fixture) pushes() int {
	c := f.env.Gateway.Calls()
	return c["CreateProvider"] + c["UpdateProvider"]
}

func ready(t *testing.T, p *openshellv1alpha1.OpenShellProvider) *metav1.Condition {
	t.Helper()
	c := meta.FindStatusCondition(p.Status.Conditions, openshellv1alpha1.ConditionReady)
	if c == nil {
		t.Fatalf("no Ready condition: %+v", p.Status)
	}
	return c
}

func wantReady(t *testing.T, p *openshellv1alpha1.OpenShellProvider, s metav1.ConditionStatus, reason string) *metav1.Condition {
	t.Helper()
	c := ready(t, p)
	if c.Status != s || c.Reason != reason {
		t.Fatalf("Ready = %s/%s (%q), want %s/%s", c.Status, c.Reason, c.Message, s, reason)
	}
	return c
}

func TestPushesAProviderAttachedByASandbox(t *testing.T) {
	f := newFixture(t, options{})
	f.reconcile(t)
	p := f.provider(t)
	wantReady(t, p, metav1.ConditionTrue, openshellv1alpha1.ProviderReasonSynced)
	if !controllerutil.ContainsFinalizer(p, Finalizer) {
		t.Errorf("finalizers %v, want %s", p.Finalizers, Finalizer)
	}
	if p.Status.ObservedGeneration != 1 {
		t.Errorf("observedGeneration %d", p.Status.ObservedGeneration)
	}
	want := []openshellv1alpha1.ProviderGatewayStatus{{Gateway: gatewayKey, Workspace: workspace, Name: provName,
		SecretResourceVersion: f.secret(t).ResourceVersion, ObservedGeneration: 1, CredentialKeys: []string{"API_KEY", "OLD_KEY"}}}
	if len(p.Status.Gateways) != 1 || !equalEntry(p.Status.Gateways[0], want[0]) {
		t.Fatalf("status.gateways %+v, want %+v", p.Status.Gateways, want)
	}
	if got := f.env.Gateway.StoredCredentials(workspace, provName); !maps.Equal(got, map[string]string{"API_KEY": secretValue, "OLD_KEY": "old-value"}) {
		t.Fatalf("stored credentials %v", got)
	}
	got, err := f.env.Gateway.GetProvider(context.Background(), &openshellv1.GetProviderRequest{Workspace: workspace, Name: provName})
	if err != nil {
		t.Fatal(err)
	}
	labels := got.GetProvider().GetMetadata().GetLabels()
	for k, v := range map[string]string{sandboxspec.LabelNamespace: ns, sandboxspec.LabelNamespaceUID: nsUID, sandboxspec.LabelOwnerUID: provUID} {
		if labels[k] != v {
			t.Errorf("gateway provider label %s = %q, want %q (labels %v)", k, labels[k], v, labels)
		}
	}
	if got.GetProvider().GetType() != "anthropic" {
		t.Errorf("type %q", got.GetProvider().GetType())
	}
	// Values never leave through status or events.
	raw, _ := json.Marshal(p.Status)
	if strings.Contains(string(raw), secretValue) {
		t.Errorf("status holds a credential value: %s", raw)
	}
	close(f.rec.Events)
	n := 0
	for e := range f.rec.Events {
		n++
		if strings.Contains(e, secretValue) {
			t.Errorf("event holds a credential value: %s", e)
		}
	}
	if n == 0 {
		t.Error("no CredentialsPushed event")
	}
}

func equalEntry(a, b openshellv1alpha1.ProviderGatewayStatus) bool {
	return a.Gateway == b.Gateway && a.Workspace == b.Workspace && a.Name == b.Name &&
		a.SecretResourceVersion == b.SecretResourceVersion && a.ObservedGeneration == b.ObservedGeneration &&
		slices.Equal(a.CredentialKeys, b.CredentialKeys)
}

func TestSteadyStateMakesNoPushAndNoWrite(t *testing.T) {
	f := newFixture(t, options{})
	f.reconcile(t)
	if f.pushes() == 0 || *f.writes == 0 {
		t.Fatalf("first reconcile: pushes %d, writes %d", f.pushes(), *f.writes)
	}
	calls, rv := f.env.Gateway.Calls(), f.provider(t).ResourceVersion
	*f.writes = 0
	f.reconcile(t)
	after := f.env.Gateway.Calls()
	for _, m := range []string{"CreateProvider", "UpdateProvider", "GetProvider"} {
		if after[m] != calls[m] {
			t.Errorf("%s calls %d → %d on a steady-state reconcile", m, calls[m], after[m])
		}
	}
	if *f.writes != 0 || f.provider(t).ResourceVersion != rv {
		t.Errorf("steady-state reconcile wrote %d times (resourceVersion %s → %s)", *f.writes, rv, f.provider(t).ResourceVersion)
	}
}

func TestSecretRotationPushesAgainAndDeletesRemovedKeys(t *testing.T) {
	f := newFixture(t, options{})
	f.reconcile(t)
	s := f.secret(t)
	before, updates := s.ResourceVersion, f.env.Gateway.Calls()["UpdateProvider"]
	s.Data = map[string][]byte{"API_KEY": []byte("sk-rotated-2")}
	if err := f.env.Client.Update(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	if s.ResourceVersion == before {
		t.Fatal("the Secret update did not change its resourceVersion")
	}
	f.reconcile(t)
	if got := f.env.Gateway.Calls()["UpdateProvider"]; got != updates+1 {
		t.Errorf("UpdateProvider calls %d → %d, want one more", updates, got)
	}
	if got := f.env.Gateway.StoredCredentials(workspace, provName); !maps.Equal(got, map[string]string{"API_KEY": "sk-rotated-2"}) {
		t.Fatalf("stored credentials after rotation %v, want only the rotated API_KEY", got)
	}
	p := f.provider(t)
	wantReady(t, p, metav1.ConditionTrue, openshellv1alpha1.ProviderReasonSynced)
	if len(p.Status.Gateways) != 1 || p.Status.Gateways[0].SecretResourceVersion != s.ResourceVersion ||
		!slices.Equal(p.Status.Gateways[0].CredentialKeys, []string{"API_KEY"}) {
		t.Fatalf("status.gateways %+v", p.Status.Gateways)
	}
}

func TestAProviderOfAnotherOwnerIsAConflictAndNeverMerged(t *testing.T) {
	f := newFixture(t, options{})
	ctx := context.Background()
	// Our workspace exists; a provider of our name in it belongs to someone else.
	if _, err := f.env.Gateway.CreateWorkspace(ctx, &openshellv1.CreateWorkspaceRequest{Name: workspace,
		Labels: sandboxspec.WorkspaceLabels(ns, nsUID)}); err != nil {
		t.Fatal(err)
	}
	theirs := map[string]string{"API_KEY": "their-key", "THEIR_ONLY": "x"}
	owner := sandboxspec.WorkspaceLabels(ns, nsUID)
	owner[sandboxspec.LabelOwnerUID] = "someone-else"
	if _, err := f.env.Gateway.CreateProvider(ctx, &openshellv1.CreateProviderRequest{Workspace: workspace,
		Provider: &datamodelv1.Provider{Metadata: &datamodelv1.ObjectMeta{Name: provName, Labels: owner}, Type: "anthropic",
			Credentials: maps.Clone(theirs)}}); err != nil {
		t.Fatal(err)
	}
	res := f.reconcile(t)
	p := f.provider(t)
	c := wantReady(t, p, metav1.ConditionFalse, openshellv1alpha1.ReasonProviderConflict)
	if strings.Contains(c.Message, secretValue) {
		t.Errorf("message holds a credential value: %q", c.Message)
	}
	if got := f.env.Gateway.StoredCredentials(workspace, provName); !maps.Equal(got, theirs) {
		t.Fatalf("the other owner's credentials changed: %v", got)
	}
	if n := f.env.Gateway.Calls()["UpdateProvider"]; n != 0 {
		t.Errorf("UpdateProvider called %d times on another owner's provider", n)
	}
	for _, e := range p.Status.Gateways {
		if e.SecretResourceVersion != "" {
			t.Errorf("status.gateways records a push that did not happen: %+v", e)
		}
	}
	if res.RequeueAfter != 0 {
		t.Errorf("a conflict is retried on a timer: %v", res)
	}
	// Deleting ours withdraws nothing of theirs: the recorded intent is
	// checked for ownership at the gateway first.
	if err := f.env.Client.Delete(ctx, p); err != nil {
		t.Fatal(err)
	}
	f.reconcile(t)
	if got := f.env.Gateway.StoredCredentials(workspace, provName); !maps.Equal(got, theirs) {
		t.Fatalf("deleting our provider touched the other owner's: %v", got)
	}
	if err := f.env.Client.Get(ctx, client.ObjectKeyFromObject(p), p); !apierrors.IsNotFound(err) {
		t.Fatalf("our provider was not released: %v (%+v)", err, p.Status)
	}
}

// TestAPushWhoseStatusWriteIsLostIsStillWithdrawn: the push reached the
// gateway but the status write recording it failed; the intent recorded
// before the push lets the deletion find and withdraw it.
func TestAPushWhoseStatusWriteIsLostIsStillWithdrawn(t *testing.T) {
	f := newFixture(t, options{})
	ctx := context.Background()
	f.r.Client = interceptor.NewClient(f.env.Client, interceptor.Funcs{
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			if p, ok := obj.(*openshellv1alpha1.OpenShellProvider); ok && slices.ContainsFunc(p.Status.Gateways,
				func(e openshellv1alpha1.ProviderGatewayStatus) bool { return e.SecretResourceVersion != "" }) {
				return apierrors.NewConflict(openshellv1alpha1.GroupVersion.WithResource("openshellproviders").GroupResource(), p.Name, nil)
			}
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
	})
	if _, err := f.r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: provName}}); err == nil {
		t.Fatal("the lost status write was not reported")
	}
	if f.env.Gateway.StoredCredentials(workspace, provName) == nil {
		t.Fatal("the push did not reach the gateway")
	}
	p := f.provider(t)
	if len(p.Status.Gateways) != 1 || p.Status.Gateways[0].SecretResourceVersion != "" {
		t.Fatalf("want exactly the recorded intent, got %+v", p.Status.Gateways)
	}
	f.r.Client = f.env.Client
	if err := f.env.Client.Delete(ctx, p); err != nil {
		t.Fatal(err)
	}
	f.reconcile(t)
	if got := f.env.Gateway.StoredCredentials(workspace, provName); got != nil {
		t.Fatalf("the credentials stayed at the gateway: %v", got)
	}
}

func TestAnUnusedProviderIsReadyWithoutAFinalizer(t *testing.T) {
	f := newFixture(t, options{noSandbox: true})
	f.reconcile(t)
	p := f.provider(t)
	wantReady(t, p, metav1.ConditionTrue, openshellv1alpha1.ProviderReasonUnused)
	if len(p.Finalizers) != 0 {
		t.Errorf("finalizers %v on an unused provider", p.Finalizers)
	}
	if f.pushes() != 0 || len(p.Status.Gateways) != 0 {
		t.Errorf("an unused provider was pushed: pushes %d, status %+v", f.pushes(), p.Status.Gateways)
	}
}

func TestAGatewayThatDoesNotAdmitTheNamespaceGetsNothing(t *testing.T) {
	f := newFixture(t, options{gateway: func(gw *openshellv1alpha1.OpenShellGateway) {
		gw.Spec.Tenancy.AllowedNamespaces.From = openshellv1alpha1.NamespacesFromSame
	}})
	f.reconcile(t)
	p := f.provider(t)
	c := wantReady(t, p, metav1.ConditionFalse, openshellv1alpha1.ReasonGatewayNotAllowed)
	if !strings.Contains(c.Message, gatewayKey) {
		t.Errorf("message does not name the gateway: %q", c.Message)
	}
	if calls := f.env.Gateway.Calls(); len(calls) != 0 {
		t.Errorf("the refused gateway was called: %v", calls)
	}
	if f.env.Gateway.StoredCredentials(workspace, provName) != nil {
		t.Error("credentials reached a gateway the namespace may not use")
	}
	if len(p.Finalizers) != 0 || len(p.Status.Gateways) != 0 {
		t.Errorf("finalizers %v, status.gateways %+v", p.Finalizers, p.Status.Gateways)
	}
}

func TestDeletion(t *testing.T) {
	deleteAndReconcile := func(t *testing.T, f *fixture) ctrl.Result {
		t.Helper()
		if err := f.env.Client.Delete(context.Background(), f.provider(t)); err != nil {
			t.Fatal(err)
		}
		return f.reconcile(t)
	}
	gone := func(t *testing.T, f *fixture) {
		t.Helper()
		err := f.env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: provName}, &openshellv1alpha1.OpenShellProvider{})
		if !apierrors.IsNotFound(err) {
			t.Fatalf("provider still there (finalizer not removed): %v", err)
		}
	}
	t.Run("deletes the provider at the gateway and removes the finalizer", func(t *testing.T) {
		f := newFixture(t, options{})
		f.reconcile(t)
		if f.env.Gateway.StoredCredentials(workspace, provName) == nil {
			t.Fatal("not pushed")
		}
		deleteAndReconcile(t, f)
		if n := f.env.Gateway.Calls()["DeleteProvider"]; n != 1 {
			t.Errorf("DeleteProvider calls %d, want 1", n)
		}
		if got := f.env.Gateway.StoredCredentials(workspace, provName); got != nil {
			t.Errorf("provider still at the gateway: %v", got)
		}
		gone(t, f)
	})
	t.Run("a provider already gone at the gateway does not block deletion", func(t *testing.T) {
		f := newFixture(t, options{})
		f.reconcile(t)
		f.env.Gateway.FailNext("DeleteProvider", codes.NotFound)
		res := deleteAndReconcile(t, f)
		if n := f.env.Gateway.Calls()["DeleteProvider"]; n != 1 {
			t.Errorf("DeleteProvider calls %d, want 1", n)
		}
		if res.RequeueAfter != 0 {
			t.Errorf("requeued: %v", res)
		}
		gone(t, f)
	})
	t.Run("a gateway refusing the delete keeps the finalizer", func(t *testing.T) {
		f := newFixture(t, options{})
		f.reconcile(t)
		f.env.Gateway.FailNext("DeleteProvider", codes.FailedPrecondition)
		res := deleteAndReconcile(t, f)
		if res.RequeueAfter <= 0 {
			t.Errorf("not requeued: %v", res)
		}
		p := f.provider(t)
		wantReady(t, p, metav1.ConditionFalse, openshellv1alpha1.ProviderReasonAttachedAtGateway)
		if !controllerutil.ContainsFinalizer(p, Finalizer) || len(p.Status.Gateways) != 1 {
			t.Fatalf("finalizers %v, status.gateways %+v", p.Finalizers, p.Status.Gateways)
		}
		f.reconcile(t)
		gone(t, f)
	})
}

func TestCredentialsErrors(t *testing.T) {
	t.Run("a missing Secret is SecretNotFound, naming it", func(t *testing.T) {
		f := newFixture(t, options{noSecret: true})
		res := f.reconcile(t)
		c := wantReady(t, f.provider(t), metav1.ConditionFalse, openshellv1alpha1.ProviderReasonSecretNotFound)
		if !strings.Contains(c.Message, secretName) || !strings.Contains(c.Message, ns) {
			t.Errorf("message does not name the Secret: %q", c.Message)
		}
		if f.pushes() != 0 {
			t.Errorf("pushed without credentials: %v", f.env.Gateway.Calls())
		}
		if res.RequeueAfter != 0 {
			t.Errorf("requeued on a timer (the Secret watch brings it back): %v", res)
		}
	})
	t.Run("a missing key names the key and no value", func(t *testing.T) {
		f := newFixture(t, options{keys: []string{"API_KEY"}, secret: map[string][]byte{"OTHER": []byte(secretValue)}})
		f.reconcile(t)
		c := wantReady(t, f.provider(t), metav1.ConditionFalse, openshellv1alpha1.ProviderReasonSecretNotFound)
		if !strings.Contains(c.Message, secretName) || !strings.Contains(c.Message, "API_KEY") || strings.Contains(c.Message, secretValue) {
			t.Errorf("message %q", c.Message)
		}
		if f.pushes() != 0 {
			t.Errorf("pushed without the listed key: %v", f.env.Gateway.Calls())
		}
	})
}

// TestRevokedAccessTakesTheCredentialsBack: when the gateway stops
// admitting the namespace, the provider is deleted there, not left behind.
func TestRevokedAccessTakesTheCredentialsBack(t *testing.T) {
	f := newFixture(t, options{})
	f.reconcile(t)
	if f.env.Gateway.StoredCredentials(workspace, provName) == nil {
		t.Fatal("not pushed")
	}
	gw := &openshellv1alpha1.OpenShellGateway{}
	if err := f.env.Client.Get(context.Background(), client.ObjectKeyFromObject(f.env.Object), gw); err != nil {
		t.Fatal(err)
	}
	gw.Spec.Tenancy.AllowedNamespaces = openshellv1alpha1.AllowedNamespaces{From: openshellv1alpha1.NamespacesFromSame}
	if err := f.env.Client.Update(context.Background(), gw); err != nil {
		t.Fatal(err)
	}
	f.reconcile(t)
	if got := f.env.Gateway.StoredCredentials(workspace, provName); got != nil {
		t.Fatalf("credentials still at the gateway after access was revoked: %v keys", len(got))
	}
	p := f.provider(t)
	wantReady(t, p, metav1.ConditionFalse, openshellv1alpha1.ReasonGatewayNotAllowed)
	if len(p.Status.Gateways) != 0 {
		t.Errorf("status.gateways %+v after the withdrawal", p.Status.Gateways)
	}
}

// TestAProviderTheGatewayLostIsCreatedAgain: a push that finds the
// provider gone at the gateway (a new database) creates it anew instead of
// failing forever.
func TestAProviderTheGatewayLostIsCreatedAgain(t *testing.T) {
	f := newFixture(t, options{})
	f.reconcile(t)
	if _, err := f.env.Gateway.DeleteProvider(context.Background(), &openshellv1.DeleteProviderRequest{Workspace: workspace, Name: provName}); err != nil {
		t.Fatal(err)
	}
	s := f.secret(t)
	s.Data = map[string][]byte{"API_KEY": []byte("sk-rotated-3")}
	if err := f.env.Client.Update(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	f.reconcile(t)
	if got := f.env.Gateway.StoredCredentials(workspace, provName); !maps.Equal(got, map[string]string{"API_KEY": "sk-rotated-3"}) {
		t.Fatalf("stored credentials %v", got)
	}
	wantReady(t, f.provider(t), metav1.ConditionTrue, openshellv1alpha1.ProviderReasonSynced)
}

// TestProfileGateOn01: a 0.1 gateway builds no profiles in. A provider
// whose type nobody declared and the gateway's platform catalog lacks is
// not pushed (ProfileMissing, naming the id); a declared profile not yet
// imported at this gateway holds it (ProfilePending); once imported, the
// provider is pushed naming its namespace's catalog, and a platform
// profile the gateway lists wins over the namespace's (pushed again,
// naming the platform catalog).
func TestProfileGateOn01(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, options{})
	f.env.Gateway.ReportVersion(gatewayline.V01WireRelease)
	gw := f.env.Object.DeepCopy()
	gw.Status.Version = gatewayline.V01WireRelease
	if err := f.env.Client.Status().Update(ctx, gw); err != nil {
		t.Fatal(err)
	}
	f.reconcile(t)
	c := wantReady(t, f.provider(t), metav1.ConditionFalse, openshellv1alpha1.ProviderReasonProfileMissing)
	if !strings.Contains(c.Message, "provider profile anthropic") || f.pushes() != 0 {
		t.Fatalf("message %q, %d pushes", c.Message, f.pushes())
	}

	prof := &openshellv1alpha1.OpenShellProviderProfile{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "anthropic", Generation: 1}}
	if err := f.env.Client.Create(ctx, prof); err != nil {
		t.Fatal(err)
	}
	f.reconcile(t)
	wantReady(t, f.provider(t), metav1.ConditionFalse, openshellv1alpha1.ProviderReasonProfilePending)
	if f.pushes() != 0 {
		t.Fatal("pushed before its profile was imported")
	}

	// What the profile controller records once it imported the profile.
	prof.Status.Gateways = []openshellv1alpha1.ProviderProfileGatewayStatus{{Gateway: gatewayKey, Scope: openshellv1alpha1.ProfileScopeWorkspace,
		Workspace: workspace, ObservedGeneration: 1}}
	if err := f.env.Client.Status().Update(ctx, prof); err != nil {
		t.Fatal(err)
	}
	f.env.Gateway.ImportProfile(workspace, &v01.ProviderProfile{Id: "anthropic"})
	f.reconcile(t)
	p := f.provider(t)
	wantReady(t, p, metav1.ConditionTrue, openshellv1alpha1.ProviderReasonSynced)
	if pw, _ := f.env.Gateway.ProviderProfileWorkspace(workspace, provName); pw != workspace || p.Status.Gateways[0].ProfileWorkspace != workspace {
		t.Fatalf("profile_workspace %q, status %+v", pw, p.Status.Gateways)
	}

	// The platform defines anthropic for this gateway: pushed again,
	// naming the platform catalog.
	platform := &openshellv1alpha1.OpenShellProviderProfile{ObjectMeta: metav1.ObjectMeta{Namespace: "platform", Name: "anthropic", Generation: 1}}
	if err := f.env.Client.Create(ctx, platform); err != nil {
		t.Fatal(err)
	}
	platform.Status.Gateways = []openshellv1alpha1.ProviderProfileGatewayStatus{{Gateway: gatewayKey, Scope: openshellv1alpha1.ProfileScopePlatform, ObservedGeneration: 1}}
	if err := f.env.Client.Status().Update(ctx, platform); err != nil {
		t.Fatal(err)
	}
	f.env.Gateway.ImportProfile("", &v01.ProviderProfile{Id: "anthropic"})
	cur := &openshellv1alpha1.OpenShellGateway{}
	if err := f.env.Client.Get(ctx, client.ObjectKeyFromObject(f.env.Object), cur); err != nil {
		t.Fatal(err)
	}
	cur.Spec.ProviderProfiles = []string{"anthropic"}
	if err := f.env.Client.Update(ctx, cur); err != nil {
		t.Fatal(err)
	}
	before := f.pushes()
	f.reconcile(t)
	p = f.provider(t)
	wantReady(t, p, metav1.ConditionTrue, openshellv1alpha1.ProviderReasonSynced)
	if pw, _ := f.env.Gateway.ProviderProfileWorkspace(workspace, provName); pw != "" || f.pushes() == before {
		t.Fatalf("profile_workspace %q after the platform took over (%d pushes)", pw, f.pushes()-before)
	}
}

// TestProvidersOfASandbox: a sandbox's events re-queue the providers it
// names and those its gateway still has attached, once each. A provider
// dropped from the spec while attached is freed only by the detach or the
// sandbox's deletion; without it in the list its credentials stayed at
// the gateway (TestTenancy/GatewayAccess found it).
func TestProvidersOfASandbox(t *testing.T) {
	sb := &openshellv1alpha1.OpenShellSandbox{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "agent"},
		Spec:   openshellv1alpha1.OpenShellSandboxSpec{Providers: []string{"openai", "anthropic"}},
		Status: openshellv1alpha1.OpenShellSandboxStatus{AttachedProviders: []string{"anthropic", "github"}}}
	var got []string
	for _, r := range providersOf(sb) {
		if r.Namespace != "team-a" {
			t.Errorf("%v: another namespace", r)
		}
		got = append(got, r.Name)
	}
	if want := []string{"anthropic", "github", "openai"}; !slices.Equal(got, want) {
		t.Errorf("providersOf = %v, want %v", got, want)
	}
	if len(providersOf(&openshellv1alpha1.OpenShellSandbox{})) != 0 {
		t.Error("a sandbox without providers re-queues none")
	}
}
