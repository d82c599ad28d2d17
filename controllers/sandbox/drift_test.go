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
	at := func(p ...string) *openshellv1.Sandbox {
		return &openshellv1.Sandbox{Spec: &openshellv1.SandboxSpec{Providers: p}}
	}
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

// TestPolicyDrift: only a version newer than the operator's last counts
// (the creation's is version 1), and only for a policy the operator
// manages.
func TestPolicyDrift(t *testing.T) {
	at := func(v uint32) *openshellv1.Sandbox {
		return &openshellv1.Sandbox{Status: &openshellv1.SandboxStatus{CurrentPolicyVersion: v}}
	}
	managed := func(v int64) *openshellv1alpha1.OpenShellSandbox {
		return &openshellv1alpha1.OpenShellSandbox{Status: openshellv1alpha1.OpenShellSandboxStatus{AppliedPolicyHash: "h", PolicyVersion: v}}
	}
	for _, tc := range []struct {
		name  string
		sb    *openshellv1alpha1.OpenShellSandbox
		cur   *openshellv1.Sandbox
		drift bool
	}{
		{"created with version 1, enforcing it", managed(0), at(1), false},
		{"a version not loaded yet", managed(3), at(2), false},
		{"the operator's version", managed(3), at(3), false},
		{"newer than the operator's", managed(3), at(4), true},
		{"newer than the creation's", managed(0), at(2), true},
		{"no managed policy", &openshellv1alpha1.OpenShellSandbox{}, at(5), false},
		{"no report", managed(3), nil, false},
	} {
		if got := policyDrift(tc.sb, tc.cur) != ""; got != tc.drift {
			t.Errorf("%s: drift %v, want %v", tc.name, got, tc.drift)
		}
	}
}
