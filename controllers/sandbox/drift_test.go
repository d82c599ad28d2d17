package sandbox

import (
	"strings"
	"testing"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/openshellv1"
	"github.com/openshell/openshell-operator/internal/gatewayline"
)

// TestProvidersDrift: only a 0.1 gateway's report counts, order does not,
// and the message names both sides.
func TestProvidersDrift(t *testing.T) {
	sb := &openshellv1alpha1.OpenShellSandbox{Status: openshellv1alpha1.OpenShellSandboxStatus{AttachedProviders: []string{"anthropic", "github"}}}
	at := func(p ...string) *openshellv1.Sandbox { return &openshellv1.Sandbox{Spec: &openshellv1.SandboxSpec{Providers: p}} }
	if d := providersDrift(gatewayline.V01, sb, at("github", "anthropic")); d != "" {
		t.Errorf("the same providers in another order: %s", d)
	}
	if d := providersDrift(gatewayline.V01, sb, at("github")); !strings.Contains(d, "[github]") || !strings.Contains(d, "[anthropic, github]") {
		t.Errorf("a detached provider: %q", d)
	}
	if d := providersDrift(gatewayline.Legacy, sb, at()); d != "" {
		t.Errorf("a 0.0.x gateway's report counted: %s", d)
	}
	if d := providersDrift(gatewayline.V01, sb, nil); d != "" {
		t.Errorf("no report counted: %s", d)
	}
}
