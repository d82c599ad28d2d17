package sandbox

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/gatewayapi"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/openshellv1"
	"github.com/openshell/openshell-operator/internal/gwconn"
	"github.com/openshell/openshell-operator/internal/sandboxspec"
)

// TestFromATemplate: a sandbox naming a template waits for it (missing,
// then not yet at its gateway), takes its image and resources into the
// working copy (judged as its own), and is created from the gateway's
// template: the gateway runs the template's workload, and status records
// the template's resource version there.
func TestFromATemplate(t *testing.T) {
	ctx := context.Background()
	f := newV01Fixture(t)
	sb := sandboxWith(func(s *openshellv1alpha1.OpenShellSandbox) {
		s.Spec.Image = ""
		s.Spec.TemplateRef = &openshellv1alpha1.LocalObjectReference{Name: "claude"}
	})
	raw := sb.Spec.DeepCopy()
	waits, err := f.r.takeTemplate(ctx, sb, raw)
	if err != nil || waits == nil || waits.reason != openshellv1alpha1.SandboxReasonTemplateNotFound {
		t.Fatalf("no template: %+v, %v", waits, err)
	}

	cpu := resource.MustParse("750m")
	tmpl := &openshellv1alpha1.OpenShellSandboxTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "claude", UID: "tmpl-uid", Generation: 1},
		Spec: openshellv1alpha1.OpenShellSandboxTemplateSpec{Image: "mirror.corp/agents/claude:3",
			Env: []openshellv1alpha1.TemplateEnvVar{{Name: "MODE", Value: "review"}}, Resources: &openshellv1alpha1.TemplateResources{CPU: &cpu}}}
	if err := f.r.Client.Create(ctx, tmpl); err != nil {
		t.Fatal(err)
	}
	waits, err = f.r.takeTemplate(ctx, sb, raw)
	if err != nil || waits == nil || waits.reason != openshellv1alpha1.SandboxReasonTemplatePending {
		t.Fatalf("not synced: %+v, %v", waits, err)
	}
	if sb.Spec.Image != tmpl.Spec.Image || raw.Image != tmpl.Spec.Image || sb.Spec.Resources.Limits.Cpu().String() != "750m" {
		t.Fatalf("working copy %+v, raw image %q", sb.Spec, raw.Image)
	}

	// The template controller's work: the template at the gateway, and
	// its status.
	name := sandboxspec.GatewayTemplateName(tmpl)
	conn, err := f.r.Gateways.Connect(ctx, f.obs.gateway)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.CreateSandboxTemplate(ctx, &openshellv1.CreateSandboxTemplateRequest{WorkspaceScope: gatewayapi.Workspace(f.workspace()),
		Template: sandboxspec.WorkloadTemplate(tmpl, name, nil)}); err == nil {
		t.Fatal("created a template in a workspace the gateway does not have")
	}
	if _, err := f.r.Gateways.EnsureWorkspace(ctx, conn, gwconn.Key(f.obs.gateway), "team-a", fixtureNamespaceUID); err != nil {
		t.Fatal(err)
	}
	made, err := conn.CreateSandboxTemplate(ctx, &openshellv1.CreateSandboxTemplateRequest{WorkspaceScope: gatewayapi.Workspace(f.workspace()),
		Template: sandboxspec.WorkloadTemplate(tmpl, name, nil)})
	if err != nil {
		t.Fatal(err)
	}
	tmpl.Status.Gateways = []openshellv1alpha1.SandboxTemplateGatewayStatus{{Gateway: sb.GatewayKey().String(), Name: name, ObservedGeneration: 1,
		ID: made.GetTemplate().GetMetadata().GetId()}}
	if err := f.r.Client.Status().Update(ctx, tmpl); err != nil {
		t.Fatal(err)
	}
	if waits, err = f.r.takeTemplate(ctx, sb, raw); err != nil || waits != nil || sb.Status.Template.GatewayName != name {
		t.Fatalf("synced: %+v, %v, %+v", waits, err, sb.Status.Template)
	}

	f.sync(t, sb)
	if sb.Status.SandboxID == "" || sb.Status.Template.ResourceVersion != "1" {
		t.Fatalf("status %+v (template %+v)", sb.Status, sb.Status.Template)
	}
	got, err := conn.GetSandbox(ctx, &openshellv1.GetSandboxRequest{Name: sandboxspec.SandboxName("team-a", "agent"), WorkspaceScope: gatewayapi.Workspace(f.workspace())})
	if err != nil {
		t.Fatal(err)
	}
	if got.GetSandbox().GetSpec().GetTemplate().GetImage() != tmpl.Spec.Image || got.GetSandbox().GetCreatedFromWorkloadTemplate().GetName() != name {
		t.Fatalf("gateway sandbox %v", got.GetSandbox())
	}
	if got.GetSandbox().GetSpec().GetTemplate().GetEnvironment()["MODE"] != "review" {
		t.Errorf("template env not given: %v", got.GetSandbox().GetSpec().GetTemplate().GetEnvironment())
	}
}

// TestAReplacedTemplateIsNeverUsed: a template deleted and made again at
// the gateway under the operator's name (another workload, a new ID) is
// read just before the create, and nothing is created from it.
func TestAReplacedTemplateIsNeverUsed(t *testing.T) {
	ctx := context.Background()
	f := newV01Fixture(t)
	conn, err := f.r.Gateways.Connect(ctx, f.obs.gateway)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.r.Gateways.EnsureWorkspace(ctx, conn, gwconn.Key(f.obs.gateway), "team-a", fixtureNamespaceUID); err != nil {
		t.Fatal(err)
	}
	tmpl := &openshellv1alpha1.OpenShellSandboxTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "claude", Generation: 1},
		Spec: openshellv1alpha1.OpenShellSandboxTemplateSpec{Image: "mirror.corp/agents/claude:3"}}
	name := sandboxspec.GatewayTemplateName(tmpl)
	made, err := conn.CreateSandboxTemplate(ctx, &openshellv1.CreateSandboxTemplateRequest{WorkspaceScope: gatewayapi.Workspace(f.workspace()),
		Template: sandboxspec.WorkloadTemplate(tmpl, name, nil)})
	if err != nil {
		t.Fatal(err)
	}
	ours := made.GetTemplate().GetMetadata().GetId()
	if _, err := conn.DeleteSandboxTemplate(ctx, &openshellv1.DeleteSandboxTemplateRequest{Name: name, WorkspaceScope: gatewayapi.Workspace(f.workspace())}); err != nil {
		t.Fatal(err)
	}
	evil := sandboxspec.WorkloadTemplate(tmpl, name, nil)
	evil.Spec.Workload.Image = "attacker.example/agent:1"
	if _, err := conn.CreateSandboxTemplate(ctx, &openshellv1.CreateSandboxTemplateRequest{WorkspaceScope: gatewayapi.Workspace(f.workspace()), Template: evil}); err != nil {
		t.Fatal(err)
	}
	sb := sandboxWith(func(s *openshellv1alpha1.OpenShellSandbox) {
		s.Spec.TemplateRef = &openshellv1alpha1.LocalObjectReference{Name: "claude"}
		s.Status.Template = &openshellv1alpha1.AppliedTemplate{Name: "claude", Generation: 1, GatewayName: name, GatewayID: ours, Image: tmpl.Spec.Image}
	})
	f.sync(t, sb)
	if sb.Status.SandboxID != "" || reason(sb, openshellv1alpha1.ConditionReady) != openshellv1alpha1.SandboxReasonTemplateReplaced {
		t.Fatalf("created from a replaced template: %+v", sb.Status)
	}
	if f.gw.Calls()["CreateSandbox"] != 0 {
		t.Fatal("CreateSandbox was called")
	}
}

// TestATemplateSandboxTakesNoDefaultResources: the gateway runs a
// template's workload as the template has it, so namespace default
// resources would be judged and charged but never applied: a sandbox from
// a template takes the namespace's other defaults only.
func TestATemplateSandboxTakesNoDefaultResources(t *testing.T) {
	ctx := context.Background()
	f := newGatewayFixture(t)
	policy := &openshellv1alpha1.OpenShellPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "defaults"},
		Spec: openshellv1alpha1.OpenShellPolicySpec{Default: true, SandboxDefaults: &openshellv1alpha1.SandboxDefaults{RuntimeClassName: "kata",
			Resources: &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}}}}}
	tmpl := &openshellv1alpha1.OpenShellSandboxTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "claude", Generation: 1},
		Spec: openshellv1alpha1.OpenShellSandboxTemplateSpec{Image: "mirror.corp/agents/claude:3"}}
	for _, o := range []client.Object{policy, tmpl} {
		if err := f.r.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	sb := sandboxWith(func(s *openshellv1alpha1.OpenShellSandbox) {
		s.Spec.Image = ""
		s.Spec.TemplateRef = &openshellv1alpha1.LocalObjectReference{Name: "claude"}
	})
	if _, err := f.r.takeInherited(ctx, sb, sb.Spec.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	if d := sb.Status.Defaults; d == nil || d.RuntimeClassName != "kata" || d.Resources != nil || sb.Spec.Resources != nil {
		t.Fatalf("defaults %+v, working resources %v", d, sb.Spec.Resources)
	}
}
