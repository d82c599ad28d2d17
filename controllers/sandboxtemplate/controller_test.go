package sandboxtemplate

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/gatewayapi"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/datamodelv1"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/openshellv1"
	"github.com/openshell/openshell-operator/internal/gatewayline"
	"github.com/openshell/openshell-operator/internal/imagepolicy"
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

type fixture struct {
	r      *Reconciler
	env    *gatewaytest.Env
	writes *int
}

type options struct {
	version  string // the gateway's release (default 0.1.5)
	noUser   bool   // no sandbox names the template
	policies []client.Object
}

func template() *openshellv1alpha1.OpenShellSandboxTemplate {
	cpu, mem := resource.MustParse("500m"), resource.MustParse("1Gi")
	return &openshellv1alpha1.OpenShellSandboxTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "claude", UID: "tmpl-uid", Generation: 1},
		Spec: openshellv1alpha1.OpenShellSandboxTemplateSpec{Image: "mirror.corp/agents/claude:1",
			Env:       []openshellv1alpha1.TemplateEnvVar{{Name: "MODE", Value: "review"}},
			Resources: &openshellv1alpha1.TemplateResources{CPU: &cpu, Memory: &mem},
			Startup:   &openshellv1alpha1.TemplateStartup{ReadyWithin: &metav1.Duration{Duration: 30 * time.Second}, MaxBurst: 2}}}
}

func sandbox(name string) *openshellv1alpha1.OpenShellSandbox {
	return &openshellv1alpha1.OpenShellSandbox{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("sb-uid-" + name)},
		Spec: openshellv1alpha1.OpenShellSandboxSpec{GatewayRef: openshellv1alpha1.GatewayReference{Name: "gw", Namespace: "platform"},
			TemplateRef: &openshellv1alpha1.LocalObjectReference{Name: "claude"}}}
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
		template(),
	}, o.policies...)
	if !o.noUser {
		objs = append(objs, sandbox("agent"))
	}
	env := gatewaytest.StartWith(t, configure, objs...)
	version := o.version
	if version == "" {
		version = gatewayline.V01WireRelease
	}
	env.Gateway.ReportVersion(version)
	if err := env.Client.Create(ctx, env.Object); err != nil {
		t.Fatal(err)
	}
	env.Object.Status.Version = version
	if err := env.Client.Status().Update(ctx, env.Object); err != nil {
		t.Fatal(err)
	}
	*writes = 0
	r := &Reconciler{Client: env.Client, Gateways: env.Resolver, Recorder: events.NewFakeRecorder(100), Policies: imagepolicy.NewCache(),
		Platform: tenancy.Platform{OperatorNamespace: "platform", GatewayNamespaces: []string{"platform"}}}
	return &fixture{r: r, env: env, writes: writes}
}

func (f *fixture) reconcile(t *testing.T) ctrl.Result {
	t.Helper()
	res, err := f.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: "claude"}})
	if err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	return res
}

func (f *fixture) template(t *testing.T) *openshellv1alpha1.OpenShellSandboxTemplate {
	t.Helper()
	tmpl := &openshellv1alpha1.OpenShellSandboxTemplate{}
	if err := f.env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "claude"}, tmpl); err != nil {
		t.Fatal(err)
	}
	return tmpl
}

func wantReady(t *testing.T, tmpl *openshellv1alpha1.OpenShellSandboxTemplate, s metav1.ConditionStatus, reason string) *metav1.Condition {
	t.Helper()
	c := meta.FindStatusCondition(tmpl.Status.Conditions, openshellv1alpha1.ConditionReady)
	if c == nil || c.Status != s || c.Reason != reason {
		t.Fatalf("Ready = %+v, want %s/%s", c, s, reason)
	}
	return c
}

// TestSyncsWhereSandboxesNameIt: the template reaches the workspace of
// the gateway its sandbox uses, named after its spec, with the owner
// labels and everything the spec says; a second reconcile makes no call
// and no write.
func TestSyncsWhereSandboxesNameIt(t *testing.T) {
	f := newFixture(t, options{})
	f.reconcile(t)
	tmpl := f.template(t)
	wantReady(t, tmpl, metav1.ConditionTrue, openshellv1alpha1.TemplateReasonSynced)
	name := sandboxspec.GatewayTemplateName(tmpl)
	got := f.env.Gateway.SandboxTemplate(workspace, name)
	if got == nil {
		t.Fatalf("gateway templates %v, want %s", f.env.Gateway.SandboxTemplates(workspace), name)
	}
	w := got.GetSpec().GetWorkload()
	if w.GetImage() != tmpl.Spec.Image || w.GetEnvironment()["MODE"] != "review" || w.GetResources().GetCpu() != "500m" || w.GetResources().GetMemory() != "1Gi" ||
		got.GetSpec().GetDesiredServiceLevel().GetStartup().GetMaxBurst() != 2 ||
		got.GetSpec().GetDesiredServiceLevel().GetStartup().GetReadyWithin().AsDuration() != 30*time.Second {
		t.Errorf("gateway template %v", got)
	}
	if got.GetMetadata().GetLabels()[sandboxspec.LabelOwnerUID] != "tmpl-uid" {
		t.Errorf("labels %v", got.GetMetadata().GetLabels())
	}
	if len(tmpl.Status.Gateways) != 1 || tmpl.Status.Gateways[0].Name != name || tmpl.Status.Gateways[0].ResourceVersion != got.GetMetadata().GetResourceVersion() ||
		tmpl.Status.Gateways[0].ObservedGeneration != 1 || !controllerutil.ContainsFinalizer(tmpl, Finalizer) {
		t.Fatalf("status %+v, finalizers %v", tmpl.Status.Gateways, tmpl.Finalizers)
	}

	w0, before := *f.writes, f.env.Gateway.Calls()
	f.reconcile(t)
	after := f.env.Gateway.Calls()
	if *f.writes != w0 || after["GetSandboxTemplate"] != before["GetSandboxTemplate"] || after["CreateSandboxTemplate"] != before["CreateSandboxTemplate"] {
		t.Errorf("steady state: %d writes, calls %v → %v", *f.writes-w0, before, after)
	}
}

// TestUnusedTemplateGoesNowhere: no sandbox names it, so no gateway call
// and no finalizer.
func TestUnusedTemplateGoesNowhere(t *testing.T) {
	f := newFixture(t, options{noUser: true})
	f.reconcile(t)
	tmpl := f.template(t)
	wantReady(t, tmpl, metav1.ConditionTrue, openshellv1alpha1.TemplateReasonUnused)
	if len(tmpl.Finalizers) != 0 || f.env.Gateway.Calls()["CreateSandboxTemplate"] != 0 {
		t.Fatalf("finalizers %v, calls %v", tmpl.Finalizers, f.env.Gateway.Calls())
	}
}

// TestRefusals: an image the namespace's policy does not allow, and a
// gateway without templates, keep the template from the gateway, with
// the reason.
func TestRefusals(t *testing.T) {
	policy := &openshellv1alpha1.OpenShellImagePolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "mirror"},
		Spec: openshellv1alpha1.OpenShellImagePolicySpec{AllowedMirrors: []string{"quay.io/allowed"}}}
	for name, tc := range map[string]struct {
		o      options
		reason string
	}{
		"image not allowed": {options{policies: []client.Object{policy}}, openshellv1alpha1.TemplateReasonImageNotAllowed},
		"0.0.x gateway":     {options{version: "0.0.111"}, openshellv1alpha1.TemplateReasonUnsupported},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, tc.o)
			f.reconcile(t)
			wantReady(t, f.template(t), metav1.ConditionFalse, tc.reason)
			if n := f.env.Gateway.Calls()["CreateSandboxTemplate"]; n != 0 {
				t.Fatalf("%d creates", n)
			}
		})
	}
}

// TestAChangedSpecIsANewTemplate: the gateway has no update; a sandbox
// created from the old spec keeps its template, which goes once it is gone.
func TestAChangedSpecIsANewTemplate(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, options{})
	f.reconcile(t)
	old := sandboxspec.GatewayTemplateName(f.template(t))
	sb := &openshellv1alpha1.OpenShellSandbox{}
	if err := f.env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "agent"}, sb); err != nil {
		t.Fatal(err)
	}
	sb.Status.SandboxID, sb.Status.Template = "id-1", &openshellv1alpha1.AppliedTemplate{Name: "claude", Generation: 1, GatewayName: old}
	if err := f.env.Client.Status().Update(ctx, sb); err != nil {
		t.Fatal(err)
	}
	tmpl := f.template(t)
	tmpl.Spec.Image, tmpl.Generation = "mirror.corp/agents/claude:2", 2
	if err := f.env.Client.Update(ctx, tmpl); err != nil {
		t.Fatal(err)
	}
	f.reconcile(t)
	current := sandboxspec.GatewayTemplateName(f.template(t))
	if got := f.env.Gateway.SandboxTemplates(workspace); len(got) != 2 || current == old {
		t.Fatalf("gateway templates %v, want %s and %s", got, old, current)
	}
	// The sandbox goes: so does the template it was created from, and the
	// current one stays only while a sandbox uses the gateway.
	if err := f.env.Client.Delete(ctx, sb); err != nil {
		t.Fatal(err)
	}
	f.reconcile(t)
	if got := f.env.Gateway.SandboxTemplates(workspace); len(got) != 0 {
		t.Fatalf("gateway templates %v after the last sandbox went, want none", got)
	}
}

// TestDriftAndConflict: a template deleted at the gateway directly is
// created again within a drift period; one someone else put under the
// name is a conflict, never adopted.
func TestDriftAndConflict(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, options{})
	f.reconcile(t)
	name := sandboxspec.GatewayTemplateName(f.template(t))
	conn, err := f.r.Gateways.Connect(ctx, f.env.Object)
	if err != nil {
		t.Fatal(err)
	}
	del := func() {
		t.Helper()
		if _, err := conn.DeleteSandboxTemplate(ctx, &openshellv1.DeleteSandboxTemplateRequest{Name: name, WorkspaceScope: gatewayapi.Workspace(workspace)}); err != nil {
			t.Fatal(err)
		}
	}
	del()
	f.reconcile(t) // within the period: not read back
	if f.env.Gateway.SandboxTemplate(workspace, name) != nil {
		t.Fatal("read back within the drift period")
	}
	f.r.DriftPeriod = time.Nanosecond
	f.reconcile(t)
	if f.env.Gateway.SandboxTemplate(workspace, name) == nil {
		t.Fatal("the template deleted at the gateway was not created again")
	}
	del()
	if _, err := conn.CreateSandboxTemplate(ctx, &openshellv1.CreateSandboxTemplateRequest{WorkspaceScope: gatewayapi.Workspace(workspace),
		Template: &openshellv1.SandboxWorkloadTemplate{Metadata: &datamodelv1.ObjectMeta{Name: name},
			Spec: &openshellv1.SandboxWorkloadTemplateSpec{Workload: &openshellv1.SandboxWorkloadConfig{Image: "attacker.example/agent:1"}}}}); err != nil {
		t.Fatal(err)
	}
	f.reconcile(t)
	c := wantReady(t, f.template(t), metav1.ConditionFalse, openshellv1alpha1.TemplateReasonConflict)
	if !strings.Contains(c.Message, name) {
		t.Errorf("message %q", c.Message)
	}
	if got := f.template(t).Status.Gateways; len(got) != 0 {
		t.Errorf("status still offers the replaced template to sandboxes: %+v", got)
	}
	if got := f.env.Gateway.SandboxTemplate(workspace, name); got.GetSpec().GetWorkload().GetImage() != "attacker.example/agent:1" {
		t.Fatal("someone else's template was replaced")
	}
}

// TestDeletionWaitsForItsSandboxes, then deletes at the gateway.
func TestDeletionWaitsForItsSandboxes(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, options{})
	f.reconcile(t)
	if err := f.env.Client.Delete(ctx, f.template(t)); err != nil {
		t.Fatal(err)
	}
	f.reconcile(t)
	wantReady(t, f.template(t), metav1.ConditionFalse, openshellv1alpha1.TemplateReasonInUse)
	if len(f.env.Gateway.SandboxTemplates(workspace)) != 1 {
		t.Fatal("deleted at the gateway while a sandbox names it")
	}
	if err := f.env.Client.Delete(ctx, sandbox("agent")); err != nil {
		t.Fatal(err)
	}
	f.reconcile(t)
	if got := f.env.Gateway.SandboxTemplates(workspace); len(got) != 0 {
		t.Fatalf("gateway templates %v", got)
	}
	tmpl := &openshellv1alpha1.OpenShellSandboxTemplate{}
	if err := f.env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "claude"}, tmpl); err == nil {
		t.Fatalf("template still there: %+v", tmpl.Finalizers)
	}
}
