package sandbox

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/gatewayapi"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/openshellv1"
	"github.com/openshell/openshell-operator/internal/gatewayline"
	"github.com/openshell/openshell-operator/internal/gwconn"
	"github.com/openshell/openshell-operator/internal/oidc"
	"github.com/openshell/openshell-operator/internal/relay"
	"github.com/openshell/openshell-operator/internal/status"
)

// auditMembers removes, at a 0.1 gateway, the members of the operator's
// workspaces that the relay did not grant: the relay makes every
// membership (a token exchange or a session) through a signed Lease and
// always with the user role, so a member without one, or with a higher
// role, was added at the gateway directly (a gateway admin's CLI, or a
// token whose holder could). The workspaces are those of the operator's
// sandboxes seen by this sweep and those the Leases name. Members are
// listed before the Leases are read (relay.Granted says why that order
// never takes a member being granted for a stranger). It removes only;
// the next exchange or session adds back what RBAC allows. It returns the
// workspaces it looked at (the sweep's and the Leases'), which the service
// audit covers too; the caller's map is left as it was.
func (s *Sweeper) auditMembers(ctx context.Context, conn *gatewayapi.Client, gw *openshellv1alpha1.OpenShellGateway, sandboxWorkspaces map[string]bool) (map[string]bool, error) {
	workspaces := maps.Clone(sandboxWorkspaces)
	if s.MembershipNamespace == "" || conn.Line != gatewayline.V01 || !gwconn.UsesIssuer(gw) {
		// No relay grants memberships; 0.0.x gateways have none; and a
		// gateway the operator reaches with client credentials of its
		// own has memberships the relay does not grant (consumer access
		// needs the operator's issuer), and calls the operator by a
		// subject other than oidc.Subject.
		return workspaces, nil
	}
	key := gwconn.Key(gw)
	before, err := relay.Granted(ctx, s.APIReader, s.MembershipNamespace, s.Gateways.Issuer)
	if err != nil {
		return workspaces, err
	}
	for k := range before {
		if k.Gateway == key {
			workspaces[k.Workspace] = true
		}
	}
	members := make(map[string][]*openshellv1.WorkspaceMember, len(workspaces))
	for _, ws := range slices.Sorted(maps.Keys(workspaces)) {
		if members[ws], err = listMembers(ctx, conn, ws); err != nil {
			return workspaces, err
		}
	}
	granted, err := relay.Granted(ctx, s.APIReader, s.MembershipNamespace, s.Gateways.Issuer)
	if err != nil {
		return workspaces, err
	}
	for _, ws := range slices.Sorted(maps.Keys(members)) {
		for subject, why := range strangers(members[ws], granted[relay.WorkspaceKey{Gateway: key, Workspace: ws}]) {
			if _, err := conn.RemoveWorkspaceMember(ctx, &openshellv1.RemoveWorkspaceMemberRequest{WorkspaceScope: gatewayapi.Workspace(ws),
				PrincipalSubject: subject, AllowMissing: true}); err != nil {
				return workspaces, fmt.Errorf("remove member %s of workspace %s: %w", subject, ws, err)
			}
			ctrl.LoggerFrom(ctx).Info("workspace member removed: added at the gateway directly", "gateway", key, "workspace", ws, "subject", subject, "why", why)
			// The action names the member: events.k8s.io folds Events of
			// equal regarding, reason and action into a series that keeps
			// the first note only.
			s.Recorder.Eventf(gw, nil, corev1.EventTypeWarning, openshellv1alpha1.ReasonDriftReverted, status.Clip("RemoveMember "+subject, 128, ""),
				"removed %s from workspace %s: %s (memberships of the operator's workspaces follow Kubernetes RBAC through the relay)", subject, ws, why)
		}
	}
	return workspaces, nil
}

// listMembers pages through one workspace's members; a workspace the
// gateway does not have has none.
func listMembers(ctx context.Context, conn *gatewayapi.Client, ws string) ([]*openshellv1.WorkspaceMember, error) {
	var out []*openshellv1.WorkspaceMember
	err := pages(0, func(token string) (string, error) {
		resp, err := conn.ListWorkspaceMembers(ctx, &openshellv1.ListWorkspaceMembersRequest{WorkspaceScope: gatewayapi.Workspace(ws),
			PageSize: sweepPage, PageToken: token})
		if err != nil {
			return "", err
		}
		out = append(out, resp.GetMembers()...)
		return resp.GetNextPageToken(), nil
	})
	switch {
	case grpcstatus.Code(err) == codes.NotFound:
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("list the members of workspace %s: %w", ws, err)
	}
	return out, nil
}

// strangers are the members of a workspace the relay did not grant, with
// why: no Lease names them, or their role is above the user role the
// relay grants (there is no role-update RPC, so removing is the repair).
// The operator's own subject is never one. Pure.
func strangers(members []*openshellv1.WorkspaceMember, granted map[string]bool) map[string]string {
	out := map[string]string{}
	for _, m := range members {
		switch sub := m.GetPrincipalSubject(); {
		case sub == oidc.Subject:
		case !granted[sub]:
			out[sub] = "no membership Lease grants it"
		case m.GetRole() != openshellv1.WorkspaceRole_WORKSPACE_ROLE_USER:
			out[sub] = fmt.Sprintf("role %s, above the user role its Lease grants", m.GetRole())
		}
	}
	return out
}
