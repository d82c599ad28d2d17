package gateway

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
)

func named(ns, name, sandboxNS string) *openshellv1alpha1.OpenShellGateway {
	gw := &openshellv1alpha1.OpenShellGateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: openshellv1alpha1.OpenShellGatewaySpec{Managed: &openshellv1alpha1.ManagedGatewaySpec{}}}
	gw.Spec.Managed.Sandboxes.Namespace = sandboxNS
	return gw
}

// TestNamesOutsideTheNamespaceNeverCollide: everything a gateway owns
// outside its namespace, and its GatewayID, differ between any two
// gateways; server-side apply with forced ownership would otherwise let
// them take each other's objects.
func TestNamesOutsideTheNamespaceNeverCollide(t *testing.T) {
	pairs := [][2]*openshellv1alpha1.OpenShellGateway{
		{named("team-a", "prod", "sandboxes"), named("team", "a-prod", "sandboxes")},
		{named("team-a", "gw", "sandboxes"), named("team-b", "gw", "sandboxes")},
	}
	for _, p := range pairs {
		a, b := NamesFor(p[0]), NamesFor(p[1])
		for what, pair := range map[string][2]string{
			"ClusterScoped": {a.ClusterScoped, b.ClusterScoped},
			"GatewayID":     {a.GatewayID, b.GatewayID},
			"SandboxSA":     {a.SandboxSA, b.SandboxSA},
			"SandboxPolicy": {a.SandboxPolicy, b.SandboxPolicy},
		} {
			if pair[0] == pair[1] {
				t.Errorf("%s/%s and %s/%s share %s %q", p[0].Namespace, p[0].Name, p[1].Namespace, p[1].Name, what, pair[0])
			}
		}
	}
	for _, gw := range []*openshellv1alpha1.OpenShellGateway{named("team-a", "prod", ""), named("ns", "a.b.c-with-a-rather-long-gateway-name-indeed", "x")} {
		id := GatewayID(gw.Namespace, gw.Name)
		if len(id) > 32 || len(validation.IsDNS1123Label(id)) > 0 {
			t.Errorf("GatewayID %q is not a DNS-1123 label of at most 32 characters", id)
		}
	}
	// In its own namespace a gateway keeps the readable names.
	if n := NamesFor(named("team-a", "prod", "")); n.SandboxSA != "prod-sandbox" || n.SandboxPolicy != "prod-sandboxes" {
		t.Errorf("own-namespace names %s, %s", n.SandboxSA, n.SandboxPolicy)
	}
}
