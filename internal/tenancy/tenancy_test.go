package tenancy

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/scheme"
)

func gateway(ns string, an openshellv1alpha1.AllowedNamespaces) *openshellv1alpha1.OpenShellGateway {
	gw := &openshellv1alpha1.OpenShellGateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gw"}}
	gw.Spec.Tenancy.AllowedNamespaces = an
	return gw
}

func TestGatewayAccess(t *testing.T) {
	p := Platform{OperatorNamespace: "openshell", GatewayNamespaces: []string{"openshell", "platform", "unlabelled"}}
	team := &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}}
	served := map[string]Namespace{
		"openshell":  {Name: "openshell"},
		"platform":   {Name: "platform", Labels: map[string]string{LabelServeGateways: "true"}},
		"unlabelled": {Name: "unlabelled"},
		"team-a":     {Name: "team-a", Labels: map[string]string{LabelServeGateways: "true"}}, // labelled, not listed
	}
	for _, tc := range []struct {
		name string
		gw   *openshellv1alpha1.OpenShellGateway
		ns   Namespace
		want string // "" allowed, else a substring of the refusal
	}{
		{"own namespace, default Same", gateway("openshell", openshellv1alpha1.AllowedNamespaces{}), Namespace{Name: "openshell"}, ""},
		{"other namespace, default Same", gateway("openshell", openshellv1alpha1.AllowedNamespaces{}), Namespace{Name: "team-a"}, "admits only its own namespace"},
		{"other namespace, Same", gateway("openshell", openshellv1alpha1.AllowedNamespaces{From: openshellv1alpha1.NamespacesFromSame}), Namespace{Name: "team-a"}, "ask the platform admin to admit namespace team-a"},
		{"All", gateway("platform", openshellv1alpha1.AllowedNamespaces{From: openshellv1alpha1.NamespacesFromAll}), Namespace{Name: "team-a"}, ""},
		{"Selector matches", gateway("openshell", openshellv1alpha1.AllowedNamespaces{From: openshellv1alpha1.NamespacesFromSelector, Selector: team}),
			Namespace{Name: "team-a", Labels: map[string]string{"team": "a"}}, ""},
		{"Selector does not match", gateway("openshell", openshellv1alpha1.AllowedNamespaces{From: openshellv1alpha1.NamespacesFromSelector, Selector: team}),
			Namespace{Name: "team-b", Labels: map[string]string{"team": "b"}}, "admits only namespaces labelled team=a"},
		{"Selector without labels", gateway("openshell", openshellv1alpha1.AllowedNamespaces{From: openshellv1alpha1.NamespacesFromSelector, Selector: team}),
			Namespace{Name: "team-c"}, "namespace team-c is not"},
		{"invalid selector", gateway("openshell", openshellv1alpha1.AllowedNamespaces{From: openshellv1alpha1.NamespacesFromSelector,
			Selector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "team", Operator: "Bogus"}}}}),
			Namespace{Name: "team-a"}, "invalid spec.tenancy.allowedNamespaces.selector"},
		{"gateway in a tenant namespace, even its own", gateway("team-a", openshellv1alpha1.AllowedNamespaces{From: openshellv1alpha1.NamespacesFromAll}),
			Namespace{Name: "team-a"}, "is not a platform gateway"},
		{"gateway in a tenant namespace, from another", gateway("team-a", openshellv1alpha1.AllowedNamespaces{From: openshellv1alpha1.NamespacesFromAll}),
			Namespace{Name: "team-b"}, "serves gateways only in openshell, platform, unlabelled"},
		{"gateway in a listed namespace without the label", gateway("unlabelled", openshellv1alpha1.AllowedNamespaces{From: openshellv1alpha1.NamespacesFromAll}),
			Namespace{Name: "team-b"}, "is not a platform gateway"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := p.GatewayAccess(tc.gw, served[tc.gw.Namespace], tc.ns)
			switch {
			case tc.want == "" && got != "":
				t.Fatalf("want allowed, got %q", got)
			case tc.want != "" && !strings.Contains(got, tc.want):
				t.Fatalf("want refusal containing %q, got %q", tc.want, got)
			}
		})
	}
}

func TestGatewayServed(t *testing.T) {
	p := Platform{OperatorNamespace: "openshell", GatewayNamespaces: []string{"openshell", "platform"}}
	if msg := p.GatewayServed(Namespace{Name: "openshell"}); msg != "" {
		t.Fatalf("operator namespace refused: %s", msg)
	}
	if msg := p.GatewayServed(Namespace{Name: "platform", Labels: map[string]string{LabelServeGateways: "true"}}); msg != "" {
		t.Fatalf("listed and labelled namespace refused: %s", msg)
	}
	for _, tc := range []struct {
		ns   Namespace
		want []string
	}{
		{Namespace{Name: "team-a"}, []string{"(openshell, platform)", `add "team-a" to OPENSHELL_GATEWAY_NAMESPACES`, "spec.config.env",
			"label the namespace openshell.ai/serve-gateways=true"}},
		// A self-provisioner's project of a listed name carries no label.
		{Namespace{Name: "platform"}, []string{"listed in OPENSHELL_GATEWAY_NAMESPACES but not labelled openshell.ai/serve-gateways=true"}},
		{Namespace{Name: "platform", Labels: map[string]string{LabelServeGateways: "yes"}}, []string{"not labelled"}},
		// The label alone is not enough: a cluster admin also lists it.
		{Namespace{Name: "team-a", Labels: map[string]string{LabelServeGateways: "true"}}, []string{"designates"}},
	} {
		msg := p.GatewayServed(tc.ns)
		for _, want := range tc.want {
			if !strings.Contains(msg, want) {
				t.Errorf("%v: message %q lacks %q", tc.ns, msg, want)
			}
		}
	}
	if msg := (Platform{}).GatewayServed(Namespace{Name: "openshell"}); !strings.Contains(msg, "(none)") {
		t.Errorf("no gateway namespaces: %q", msg)
	}
}

func TestImageOverride(t *testing.T) {
	gw := gateway("openshell", openshellv1alpha1.AllowedNamespaces{})
	if msg := (Platform{}).ImageOverride(gw); msg != "" {
		t.Fatalf("no managed spec: %q", msg)
	}
	gw.Spec.Managed = &openshellv1alpha1.ManagedGatewaySpec{}
	if msg := (Platform{}).ImageOverride(gw); msg != "" {
		t.Fatalf("no overrides: %q", msg)
	}
	gw.Spec.Managed.Images.Gateway = "evil.example/gateway:latest"
	gw.Spec.Managed.Images.Sandbox = "evil.example/sandbox:latest"
	msg := (Platform{}).ImageOverride(gw)
	if !strings.Contains(msg, "spec.managed.images.gateway, spec.managed.images.sandbox") || !strings.Contains(msg, "OPENSHELL_ALLOW_OPERAND_IMAGE_OVERRIDES=true") {
		t.Fatalf("refusal: %q", msg)
	}
	if msg := (Platform{AllowImageOverrides: true}).ImageOverride(gw); msg != "" {
		t.Fatalf("overrides allowed by the platform: %q", msg)
	}
	// The 0.1 sandbox runtime is every agent container's first process,
	// the one that enforces its policy: overriding it is refused alike.
	gw.Spec.Managed.Images = openshellv1alpha1.GatewayImages{SandboxRuntime: "evil.example/sandbox-runtime:latest"}
	if msg := (Platform{}).ImageOverride(gw); !strings.Contains(msg, "spec.managed.images.sandboxRuntime") {
		t.Fatalf("a sandbox runtime override: %q", msg)
	}
}

func managedIn(ns, name, sandboxNS string, created time.Time) *openshellv1alpha1.OpenShellGateway {
	return &openshellv1alpha1.OpenShellGateway{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, CreationTimestamp: metav1.NewTime(created)},
		Spec: openshellv1alpha1.OpenShellGatewaySpec{Mode: openshellv1alpha1.GatewayModeManaged,
			Managed: &openshellv1alpha1.ManagedGatewaySpec{Sandboxes: openshellv1alpha1.SandboxPlacement{Namespace: sandboxNS}}}}
}

func TestSandboxNamespaceServed(t *testing.T) {
	served := map[string]string{corev1.LabelMetadataName: "x", LabelServeGateways: "true"}
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "openshell-operator"}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "platform", Labels: served}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "sandboxes", Labels: served}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "other-gateway", Labels: served}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "unlabelled"}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kube-system"}},
		&openshellv1alpha1.OpenShellGateway{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "other-gateway"}},
		// N11: "first" places its sandboxes in "shared" before anyone else;
		// a tenant's gateway (not served) claimed "sandboxes" earlier still.
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shared", Labels: served}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}},
		managedIn("platform", "first", "shared", time.Unix(100, 0)),
		managedIn("team-a", "squatter", "sandboxes", time.Unix(1, 0)),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "twins", Labels: served}},
		managedIn("twins", "twin", "", time.Unix(100, 0)),
	}
	c := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(objs...).Build()
	p := Platform{OperatorNamespace: "openshell-operator", GatewayNamespaces: []string{"openshell-operator", "platform", "sandboxes", "other-gateway", "unlabelled", "shared", "twins"}}
	for _, tc := range []struct {
		name, gwNS, sandboxNS, want string
	}{
		{"its own platform namespace", "platform", "platform", ""},
		{"a served namespace of its own", "platform", "sandboxes", ""},
		{"the operator's namespace, by default", "openshell-operator", "openshell-operator", "the operator's namespace"},
		{"the operator's namespace, named", "platform", "openshell-operator", "could run as the operator's ServiceAccount"},
		{"another gateway's namespace", "platform", "other-gateway", "holds OpenShellGateway other-gateway/b"},
		{"an unlabelled namespace", "platform", "unlabelled", "not labelled openshell.ai/serve-gateways=true"},
		{"an unlisted namespace", "platform", "kube-system", "not a platform namespace"},
		{"a namespace another gateway's sandboxes use", "platform", "shared", "already holds the sandboxes of OpenShellGateway platform/first"},
		{"its own namespace, which an earlier gateway there uses", "twins", "twins", "already holds the sandboxes of OpenShellGateway twins/twin"},
	} {
		gw := managedIn(tc.gwNS, "a", tc.sandboxNS, time.Unix(200, 0))
		got, err := p.SandboxNamespaceServed(context.Background(), c, gw, tc.sandboxNS)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
	}
}
