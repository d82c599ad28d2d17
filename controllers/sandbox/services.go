package sandbox

import (
	"context"
	"errors"
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
	"github.com/openshell/openshell-operator/internal/status"
)

// maxServiceEvents bounds the Events one sweep writes about one gateway's
// deleted services (each its own, see auditServices); past it, one more
// says how many went unnamed. A token could expose thousands.
const maxServiceEvents = 10

// maxServicePages bounds the pages of one workspace's services one sweep
// reads (sweepPage each); the next sweep goes on.
const maxServicePages = 20

// auditServices deletes, at a 0.1 gateway, the services exposed in the
// operator's workspaces: the operator exposes none, and one a gateway
// token exposed may be open to whoever reaches the gateway's port, since
// whether the release authenticates a service's callers is not
// established (docs/agents.md). workspaces are the member audit's (each
// provably this cluster's); those this process verified are added, so
// that a workspace whose sandboxes are gone is still looked at. A failure
// on one service or workspace does not spare the others.
func (s *Sweeper) auditServices(ctx context.Context, conn *gatewayapi.Client, gw *openshellv1alpha1.OpenShellGateway, workspaces map[string]bool) error {
	if conn.Line != gatewayline.V01 {
		return nil // 0.0.x: no workspaces and no tenant tokens
	}
	key := gwconn.Key(gw)
	all := maps.Clone(workspaces)
	for _, ws := range s.Gateways.KnownWorkspaces(key) {
		all[ws] = true
	}
	var errs []error
	deleted := 0
	for _, ws := range slices.Sorted(maps.Keys(all)) {
		if ctx.Err() != nil {
			errs = append(errs, ctx.Err())
			break
		}
		services, err := listServices(ctx, conn, ws)
		if err != nil {
			errs = append(errs, err)
		}
		for _, svc := range services {
			ep := svc.GetEndpoint()
			if _, err := conn.DeleteService(ctx, &openshellv1.DeleteServiceRequest{WorkspaceScope: gatewayapi.Workspace(ws), Sandbox: ep.GetSandbox(),
				Name: ep.GetName(), AllowMissing: true, RequestId: gatewayapi.NewRequestID()}); err != nil {
				errs = append(errs, fmt.Errorf("delete service %q of sandbox %s in workspace %s: %w", ep.GetName(), ep.GetSandbox(), ws, err))
				continue
			}
			deleted++
			ctrl.LoggerFrom(ctx).Info("service deleted: exposed at the gateway directly", "gateway", key, "workspace", ws,
				"sandbox", ep.GetSandbox(), "service", ep.GetName(), "port", ep.GetTargetPort())
			if deleted <= maxServiceEvents {
				// The action names the service: events.k8s.io merges Events
				// of equal regarding, reason and action into a series that
				// keeps the first note only, and each deletion must be read.
				name, sandbox := status.Clip(ep.GetName(), 63, "…"), status.Clip(ep.GetSandbox(), 63, "…")
				s.Recorder.Eventf(gw, nil, corev1.EventTypeWarning, openshellv1alpha1.ReasonDriftReverted, status.Clip("DeleteService "+sandbox+"/"+name, 128, ""),
					"deleted service %q (port %d) of sandbox %s in workspace %s, exposed at the gateway directly: the operator exposes no service there; "+
						"reach an agent's port through openshellsandboxes/proxy", name, ep.GetTargetPort(), sandbox, status.Clip(ws, 63, "…"))
			}
		}
	}
	if deleted > maxServiceEvents {
		s.Recorder.Eventf(gw, nil, corev1.EventTypeWarning, openshellv1alpha1.ReasonDriftReverted, "DeleteService (more)",
			"deleted %d more services exposed at the gateway directly in this sweep; the operator's log names each", deleted-maxServiceEvents)
	}
	return errors.Join(errs...)
}

// listServices pages through one workspace's services (an empty sandbox
// filter lists them all); a gateway without the RPC or the workspace has
// none. On an error it returns the pages it read too: those are still
// deleted.
func listServices(ctx context.Context, conn *gatewayapi.Client, ws string) ([]*openshellv1.ServiceEndpointResponse, error) {
	var out []*openshellv1.ServiceEndpointResponse
	err := pages(maxServicePages, func(token string) (string, error) {
		resp, err := conn.ListServices(ctx, &openshellv1.ListServicesRequest{WorkspaceScope: gatewayapi.Workspace(ws), PageSize: sweepPage, PageToken: token})
		if err != nil {
			return "", err
		}
		out = append(out, resp.GetServices()...)
		return resp.GetNextPageToken(), nil
	})
	switch c := grpcstatus.Code(err); {
	case c == codes.NotFound || c == codes.Unimplemented:
		return nil, nil
	case err != nil:
		return out, fmt.Errorf("list the services of workspace %s: %w", ws, err)
	}
	return out, nil
}
