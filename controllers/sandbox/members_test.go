package sandbox

import (
	"context"
	"maps"
	"slices"
	"testing"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/gatewayapi"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/openshellv1"
	"github.com/openshell/openshell-operator/internal/gatewayline"
	"github.com/openshell/openshell-operator/internal/oidc"
)

func TestStrangers(t *testing.T) {
	user, admin := openshellv1.WorkspaceRole_WORKSPACE_ROLE_USER, openshellv1.WorkspaceRole_WORKSPACE_ROLE_ADMIN
	m := func(sub string, role openshellv1.WorkspaceRole) *openshellv1.WorkspaceMember {
		return &openshellv1.WorkspaceMember{PrincipalSubject: sub, Role: role}
	}
	members := []*openshellv1.WorkspaceMember{
		m("openshell:user:tina", user),  // granted: kept
		m("openshell:user:gus", admin),  // granted as user, raised to admin at the gateway
		m("mallory@example.com", user),  // no Lease
		m("openshell:user:ghost", user), // the relay's prefix, but no Lease (revoked, re-added by hand)
		m(oidc.Subject, admin),          // the operator itself
	}
	granted := map[string]bool{"openshell:user:tina": true, "openshell:user:gus": true}
	got := strangers(members, granted)
	if want := []string{"mallory@example.com", "openshell:user:ghost", "openshell:user:gus"}; !slices.Equal(slices.Sorted(maps.Keys(got)), want) {
		t.Fatalf("strangers %v, want %v", got, want)
	}
	if got["openshell:user:gus"] == got["mallory@example.com"] {
		t.Errorf("the reasons do not say why: %v", got)
	}
	if len(strangers(members[:1], granted)) != 0 || len(strangers(nil, nil)) != 0 {
		t.Error("a granted user member is a stranger")
	}
}

// TestNoAuditWhereTheRelayGrantsNothing: on a gateway the operator reaches
// with client credentials of its own, the relay grants no memberships and
// the operator is another subject: its members are not audited (the
// audit would remove every one of them, the operator's own included).
func TestNoAuditWhereTheRelayGrantsNothing(t *testing.T) {
	gw := &openshellv1alpha1.OpenShellGateway{Spec: openshellv1alpha1.OpenShellGatewaySpec{Mode: openshellv1alpha1.GatewayModeExternal,
		External: &openshellv1alpha1.ExternalGatewaySpec{CredentialsSecretRef: &openshellv1alpha1.LocalObjectReference{Name: "idp"}}}}
	// No client, no reader: any call would fail the test.
	s := &Sweeper{MembershipNamespace: "operator"}
	if _, err := s.auditMembers(context.Background(), &gatewayapi.Client{Line: gatewayline.V01}, gw, map[string]bool{"ws-1": true}); err != nil {
		t.Fatal(err)
	}
}
