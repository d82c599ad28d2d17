package tenancy

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
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
}
