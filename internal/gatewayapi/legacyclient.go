package gatewayapi

import (
	"context"
	"strconv"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	legacy "github.com/openshell/openshell-operator/internal/gatewayapi/pb/openshellv1"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/datamodelv1"
	v01 "github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/openshellv1"
)

// legacyClient speaks the 0.1 client API to a 0.0.x gateway: each request
// is translated into its 0.0.x twin and each response back (transcode.go),
// and the few semantics 0.0.x lacks are played here: deletion outcomes,
// allow_missing, page tokens, and watching by name. What 0.0.x has no
// equivalent for (provider profiles, the caller's identity) is
// Unimplemented, as a 0.1 driver without a feature answers.
type legacyClient struct{ c legacy.OpenShellClient }

// NewLegacyClient returns the 0.1 client API over a 0.0.x gateway's
// connection.
func NewLegacyClient(cc grpc.ClientConnInterface) v01.OpenShellClient {
	return legacyClient{legacy.NewOpenShellClient(legacyConn{cc})}
}

var _ v01.OpenShellClient = legacyClient{}

// translated calls a 0.0.x method with the translation of req and
// translates its response into resp.
func translated[LReq, LResp proto.Message](ctx context.Context, req proto.Message, lreq LReq, resp proto.Message,
	call func(context.Context, LReq, ...grpc.CallOption) (LResp, error), opts []grpc.CallOption) error {
	if err := transcode(toLegacy, req.ProtoReflect(), lreq.ProtoReflect()); err != nil {
		return status.Errorf(codes.FailedPrecondition, "0.0.x gateway: %v", err)
	}
	lresp, err := call(ctx, lreq, opts...)
	if err != nil {
		return err
	}
	if err := transcode(fromLegacy, lresp.ProtoReflect(), resp.ProtoReflect()); err != nil {
		return status.Errorf(codes.Internal, "0.0.x gateway response: %v", err)
	}
	return nil
}

func (l legacyClient) Health(ctx context.Context, in *v01.HealthRequest, opts ...grpc.CallOption) (*v01.HealthResponse, error) {
	out := &v01.HealthResponse{}
	return result(out, translated(ctx, in, &legacy.HealthRequest{}, out, l.c.Health, opts))
}

func (l legacyClient) GetGatewayInfo(ctx context.Context, in *v01.GetGatewayInfoRequest, opts ...grpc.CallOption) (*v01.GetGatewayInfoResponse, error) {
	out := &v01.GetGatewayInfoResponse{}
	return result(out, translated(ctx, in, &legacy.GetGatewayInfoRequest{}, out, l.c.GetGatewayInfo, opts))
}

func (legacyClient) GetCurrentUser(context.Context, *v01.GetCurrentUserRequest, ...grpc.CallOption) (*v01.GetCurrentUserResponse, error) {
	return nil, unimplemented("GetCurrentUser")
}

func (l legacyClient) CreateSandbox(ctx context.Context, in *v01.CreateSandboxRequest, opts ...grpc.CallOption) (*v01.SandboxResponse, error) {
	out := &v01.SandboxResponse{}
	return result(out, translated(ctx, in, &legacy.CreateSandboxRequest{}, out, l.c.CreateSandbox, opts))
}

func (l legacyClient) GetSandbox(ctx context.Context, in *v01.GetSandboxRequest, opts ...grpc.CallOption) (*v01.SandboxResponse, error) {
	out := &v01.SandboxResponse{}
	return result(out, translated(ctx, in, &legacy.GetSandboxRequest{}, out, l.c.GetSandbox, opts))
}

// ListSandboxes pages by offset (PagedByOffset).
func (l legacyClient) ListSandboxes(ctx context.Context, in *v01.ListSandboxesRequest, opts ...grpc.CallOption) (*v01.ListSandboxesResponse, error) {
	req := PagedByOffset(in)
	out := &v01.ListSandboxesResponse{}
	if err := translated(ctx, req, &legacy.ListSandboxesRequest{}, out, l.c.ListSandboxes, opts); err != nil {
		return nil, err
	}
	out.NextPageToken = NextPageToken(req, len(out.Sandboxes))
	return out, nil
}

// The 0.1 paging bounds (a page size of 0 means 100; more than 1000 is
// coerced), applied to 0.0.x's limit too.
const (
	defaultPageSize = 100
	maxPageSize     = 1000
)

// PagedByOffset is a list request with 0.1's page size bounds applied, for
// a 0.0.x list, which pages by offset: the page token is the offset of the
// next page as a decimal number.
func PagedByOffset(in *v01.ListSandboxesRequest) *v01.ListSandboxesRequest {
	req := proto.Clone(in).(*v01.ListSandboxesRequest)
	if req.PageSize <= 0 || req.PageSize > maxPageSize {
		req.PageSize = defaultPageSize
	}
	return req
}

// NextPageToken is the token of the page after one of n items that req
// (PagedByOffset) asked for: none when the page was not full.
func NextPageToken(req *v01.ListSandboxesRequest, n int) string {
	if n < int(req.PageSize) {
		return ""
	}
	offset, _ := strconv.ParseUint(req.PageToken, 10, 32)
	return strconv.FormatUint(offset+uint64(req.PageSize), 10)
}

// DeleteSandbox: 0.0.x answers deleted=true when its driver deleted the
// runtime object (the row then stays DELETING until it is gone: 0.1's
// ACCEPTED) and false when the object was already absent.
func (l legacyClient) DeleteSandbox(ctx context.Context, in *v01.DeleteSandboxRequest, opts ...grpc.CallOption) (*v01.DeleteSandboxResponse, error) {
	lreq := &legacy.DeleteSandboxRequest{}
	out := &v01.DeleteSandboxResponse{}
	err := translated(ctx, in, lreq, out, func(ctx context.Context, r *legacy.DeleteSandboxRequest, o ...grpc.CallOption) (*legacy.DeleteSandboxResponse, error) {
		resp, err := l.c.DeleteSandbox(ctx, r, o...)
		if err == nil {
			out.Outcome = LegacyOutcome(resp.GetDeleted(), v01.DeletionOutcome_DELETION_OUTCOME_ACCEPTED)
		}
		return resp, err
	}, opts)
	return missing(out, err, in.GetAllowMissing(), func() { out.Outcome = v01.DeletionOutcome_DELETION_OUTCOME_ALREADY_ABSENT })
}

func (l legacyClient) StopSandbox(ctx context.Context, in *v01.StopSandboxRequest, opts ...grpc.CallOption) (*v01.SandboxResponse, error) {
	out := &v01.SandboxResponse{}
	return result(out, translated(ctx, in, &legacy.StopSandboxRequest{}, out, l.c.StopSandbox, opts))
}

func (l legacyClient) StartSandbox(ctx context.Context, in *v01.StartSandboxRequest, opts ...grpc.CallOption) (*v01.SandboxResponse, error) {
	out := &v01.SandboxResponse{}
	return result(out, translated(ctx, in, &legacy.StartSandboxRequest{}, out, l.c.StartSandbox, opts))
}

// WatchSandbox: 0.0.x watches by the sandbox's ID, so the name is looked
// up first in the request's workspace.
func (l legacyClient) WatchSandbox(ctx context.Context, in *v01.WatchSandboxRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[v01.SandboxStreamEvent], error) {
	got, err := l.GetSandbox(ctx, &v01.GetSandboxRequest{Name: in.GetSandbox(), WorkspaceScope: in.GetWorkspaceScope()})
	if err != nil {
		return nil, err
	}
	lreq := &legacy.WatchSandboxRequest{}
	if err := transcode(toLegacy, in.ProtoReflect(), lreq.ProtoReflect()); err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "0.0.x gateway: %v", err)
	}
	lreq.Id = got.GetSandbox().GetMetadata().GetId()
	stream, err := l.c.WatchSandbox(ctx, lreq, opts...)
	if err != nil {
		return nil, err
	}
	return legacyWatch{stream}, nil
}

// legacyWatch translates each streamed event.
type legacyWatch struct {
	grpc.ServerStreamingClient[legacy.SandboxStreamEvent]
}

func (w legacyWatch) Recv() (*v01.SandboxStreamEvent, error) {
	ev, err := w.ServerStreamingClient.Recv()
	if err != nil {
		return nil, err
	}
	out := &v01.SandboxStreamEvent{}
	if err := transcode(fromLegacy, ev.ProtoReflect(), out.ProtoReflect()); err != nil {
		return nil, status.Errorf(codes.Internal, "0.0.x gateway event: %v", err)
	}
	return out, nil
}

func (l legacyClient) AttachSandboxProvider(ctx context.Context, in *v01.AttachSandboxProviderRequest, opts ...grpc.CallOption) (*v01.AttachSandboxProviderResponse, error) {
	out := &v01.AttachSandboxProviderResponse{}
	return result(out, translated(ctx, in, &legacy.AttachSandboxProviderRequest{}, out, l.c.AttachSandboxProvider, opts))
}

func (l legacyClient) DetachSandboxProvider(ctx context.Context, in *v01.DetachSandboxProviderRequest, opts ...grpc.CallOption) (*v01.DetachSandboxProviderResponse, error) {
	out := &v01.DetachSandboxProviderResponse{}
	return result(out, translated(ctx, in, &legacy.DetachSandboxProviderRequest{}, out, l.c.DetachSandboxProvider, opts))
}

func (l legacyClient) ListSandboxProviders(ctx context.Context, in *v01.ListSandboxProvidersRequest, opts ...grpc.CallOption) (*v01.ListSandboxProvidersResponse, error) {
	out := &v01.ListSandboxProvidersResponse{}
	return result(out, translated(ctx, in, &legacy.ListSandboxProvidersRequest{}, out, l.c.ListSandboxProviders, opts))
}

func (l legacyClient) CreateProvider(ctx context.Context, in *v01.CreateProviderRequest, opts ...grpc.CallOption) (*v01.ProviderResponse, error) {
	out := &v01.ProviderResponse{}
	return result(out, translated(ctx, in, &legacy.CreateProviderRequest{}, out, l.c.CreateProvider, opts))
}

func (l legacyClient) GetProvider(ctx context.Context, in *v01.GetProviderRequest, opts ...grpc.CallOption) (*v01.ProviderResponse, error) {
	out := &v01.ProviderResponse{}
	return result(out, translated(ctx, in, &legacy.GetProviderRequest{}, out, l.c.GetProvider, opts))
}

func (l legacyClient) UpdateProvider(ctx context.Context, in *v01.UpdateProviderRequest, opts ...grpc.CallOption) (*v01.ProviderResponse, error) {
	out := &v01.ProviderResponse{}
	return result(out, translated(ctx, in, &legacy.UpdateProviderRequest{}, out, l.c.UpdateProvider, opts))
}

// DeleteProvider: 0.0.x answers deleted=false for an unknown name.
func (l legacyClient) DeleteProvider(ctx context.Context, in *v01.DeleteProviderRequest, opts ...grpc.CallOption) (*v01.DeleteProviderResponse, error) {
	out := &v01.DeleteProviderResponse{}
	err := translated(ctx, in, &legacy.DeleteProviderRequest{}, out, func(ctx context.Context, r *legacy.DeleteProviderRequest, o ...grpc.CallOption) (*legacy.DeleteProviderResponse, error) {
		resp, err := l.c.DeleteProvider(ctx, r, o...)
		if err == nil {
			out.Outcome = LegacyOutcome(resp.GetDeleted(), v01.DeletionOutcome_DELETION_OUTCOME_COMPLETED)
		}
		return resp, err
	}, opts)
	return missing(out, err, in.GetAllowMissing(), func() { out.Outcome = v01.DeletionOutcome_DELETION_OUTCOME_ALREADY_ABSENT })
}

func (legacyClient) ListProviderProfiles(context.Context, *v01.ListProviderProfilesRequest, ...grpc.CallOption) (*v01.ListProviderProfilesResponse, error) {
	return nil, unimplemented("ListProviderProfiles")
}

func (legacyClient) GetProviderProfile(context.Context, *v01.GetProviderProfileRequest, ...grpc.CallOption) (*v01.ProviderProfileResponse, error) {
	return nil, unimplemented("GetProviderProfile")
}

func (legacyClient) ImportProviderProfiles(context.Context, *v01.ImportProviderProfilesRequest, ...grpc.CallOption) (*v01.ImportProviderProfilesResponse, error) {
	return nil, unimplemented("ImportProviderProfiles")
}

func (legacyClient) UpdateProviderProfiles(context.Context, *v01.UpdateProviderProfilesRequest, ...grpc.CallOption) (*v01.UpdateProviderProfilesResponse, error) {
	return nil, unimplemented("UpdateProviderProfiles")
}

// Workspace templates are a 0.1 feature.

func (legacyClient) CreateSandboxTemplate(context.Context, *v01.CreateSandboxTemplateRequest, ...grpc.CallOption) (*v01.SandboxTemplateResponse, error) {
	return nil, unimplemented("CreateSandboxTemplate")
}

func (legacyClient) GetSandboxTemplate(context.Context, *v01.GetSandboxTemplateRequest, ...grpc.CallOption) (*v01.SandboxTemplateResponse, error) {
	return nil, unimplemented("GetSandboxTemplate")
}

func (legacyClient) ListSandboxTemplates(context.Context, *v01.ListSandboxTemplatesRequest, ...grpc.CallOption) (*v01.ListSandboxTemplatesResponse, error) {
	return nil, unimplemented("ListSandboxTemplates")
}

func (legacyClient) DeleteSandboxTemplate(context.Context, *v01.DeleteSandboxTemplateRequest, ...grpc.CallOption) (*v01.DeleteSandboxTemplateResponse, error) {
	return nil, unimplemented("DeleteSandboxTemplate")
}

func (legacyClient) DeleteProviderProfile(context.Context, *v01.DeleteProviderProfileRequest, ...grpc.CallOption) (*v01.DeleteProviderProfileResponse, error) {
	return nil, unimplemented("DeleteProviderProfile")
}

func (l legacyClient) UpdateConfig(ctx context.Context, in *v01.UpdateConfigRequest, opts ...grpc.CallOption) (*v01.UpdateConfigResponse, error) {
	out := &v01.UpdateConfigResponse{}
	return result(out, translated(ctx, in, &legacy.UpdateConfigRequest{}, out, l.c.UpdateConfig, opts))
}

func (l legacyClient) GetSandboxPolicyStatus(ctx context.Context, in *v01.GetSandboxPolicyStatusRequest, opts ...grpc.CallOption) (*v01.GetSandboxPolicyStatusResponse, error) {
	out := &v01.GetSandboxPolicyStatusResponse{}
	return result(out, translated(ctx, in, &legacy.GetSandboxPolicyStatusRequest{}, out, l.c.GetSandboxPolicyStatus, opts))
}

func (l legacyClient) CreateWorkspace(ctx context.Context, in *v01.CreateWorkspaceRequest, opts ...grpc.CallOption) (*v01.CreateWorkspaceResponse, error) {
	out := &v01.CreateWorkspaceResponse{}
	return result(out, translated(ctx, in, &legacy.CreateWorkspaceRequest{}, out, l.c.CreateWorkspace, opts))
}

func (l legacyClient) GetWorkspace(ctx context.Context, in *v01.GetWorkspaceRequest, opts ...grpc.CallOption) (*v01.GetWorkspaceResponse, error) {
	out := &v01.GetWorkspaceResponse{}
	return result(out, translated(ctx, in, &legacy.GetWorkspaceRequest{}, out, l.c.GetWorkspace, opts))
}

func (l legacyClient) DeleteWorkspace(ctx context.Context, in *v01.DeleteWorkspaceRequest, opts ...grpc.CallOption) (*v01.DeleteWorkspaceResponse, error) {
	out := &v01.DeleteWorkspaceResponse{}
	err := translated(ctx, in, &legacy.DeleteWorkspaceRequest{}, out, func(ctx context.Context, r *legacy.DeleteWorkspaceRequest, o ...grpc.CallOption) (*legacy.DeleteWorkspaceResponse, error) {
		resp, err := l.c.DeleteWorkspace(ctx, r, o...)
		if err == nil {
			out.Outcome = LegacyOutcome(resp.GetDeleted(), v01.DeletionOutcome_DELETION_OUTCOME_COMPLETED)
		}
		return resp, err
	}, opts)
	return missing(out, err, in.GetAllowMissing(), func() { out.Outcome = v01.DeletionOutcome_DELETION_OUTCOME_ALREADY_ABSENT })
}

// LegacyOutcome reads 0.0.x's deleted flag: true is done (or, for
// sandboxes, accepted), false means there was nothing to delete.
func LegacyOutcome(deleted bool, done v01.DeletionOutcome) v01.DeletionOutcome {
	if deleted {
		return done
	}
	return v01.DeletionOutcome_DELETION_OUTCOME_ALREADY_ABSENT
}

// missing plays 0.1's allow_missing over 0.0.x's NotFound.
func missing[T any](out *T, err error, allow bool, absent func()) (*T, error) {
	if status.Code(err) == codes.NotFound && allow {
		absent()
		return out, nil
	}
	return result(out, err)
}

// result answers as a generated client does: no response with an error.
func result[T any](out *T, err error) (*T, error) {
	if err != nil {
		return nil, err
	}
	return out, nil
}

func unimplemented(method string) error {
	return status.Errorf(codes.Unimplemented, "%s needs a 0.1 gateway; this gateway runs 0.0.x", method)
}

// Workspace selects one workspace.
func Workspace(name string) *datamodelv1.WorkspaceSelector {
	return &datamodelv1.WorkspaceSelector{Selection: &datamodelv1.WorkspaceSelector_Workspace{Workspace: name}}
}

// AllWorkspaces selects every workspace.
func AllWorkspaces() *datamodelv1.WorkspaceSelector {
	return &datamodelv1.WorkspaceSelector{Selection: &datamodelv1.WorkspaceSelector_AllWorkspaces{AllWorkspaces: &datamodelv1.AllWorkspaces{}}}
}

// Workspace membership and consumer access (exec, logs, forwarding) are
// 0.1 features the operator does not translate: a 0.0.x gateway has no
// membership, so a consumer's identity could not be checked there.

func (legacyClient) AddWorkspaceMember(context.Context, *v01.AddWorkspaceMemberRequest, ...grpc.CallOption) (*v01.AddWorkspaceMemberResponse, error) {
	return nil, unimplemented("AddWorkspaceMember")
}

func (legacyClient) RemoveWorkspaceMember(context.Context, *v01.RemoveWorkspaceMemberRequest, ...grpc.CallOption) (*v01.RemoveWorkspaceMemberResponse, error) {
	return nil, unimplemented("RemoveWorkspaceMember")
}

func (legacyClient) ListWorkspaceMembers(context.Context, *v01.ListWorkspaceMembersRequest, ...grpc.CallOption) (*v01.ListWorkspaceMembersResponse, error) {
	return nil, unimplemented("ListWorkspaceMembers")
}

func (legacyClient) ExecSandbox(context.Context, *v01.ExecSandboxRequest, ...grpc.CallOption) (grpc.ServerStreamingClient[v01.ExecSandboxEvent], error) {
	return nil, unimplemented("ExecSandbox")
}

func (legacyClient) ExecSandboxInteractive(context.Context, ...grpc.CallOption) (grpc.BidiStreamingClient[v01.ExecSandboxInput, v01.ExecSandboxEvent], error) {
	return nil, unimplemented("ExecSandboxInteractive")
}

func (legacyClient) ForwardTcp(context.Context, ...grpc.CallOption) (grpc.BidiStreamingClient[v01.TcpForwardFrame, v01.TcpForwardFrame], error) {
	return nil, unimplemented("ForwardTcp")
}

func (legacyClient) GetSandboxLogs(context.Context, *v01.GetSandboxLogsRequest, ...grpc.CallOption) (*v01.GetSandboxLogsResponse, error) {
	return nil, unimplemented("GetSandboxLogs")
}

// The operator reads the policy advisor's drafts on 0.1 gateways only: it
// enables the advisor with a typed setting value, which 0.0.x's
// UpdateConfig does not carry.

func (legacyClient) GetDraftPolicy(context.Context, *v01.GetDraftPolicyRequest, ...grpc.CallOption) (*v01.GetDraftPolicyResponse, error) {
	return nil, unimplemented("GetDraftPolicy")
}

func (legacyClient) RejectDraftChunk(context.Context, *v01.RejectDraftChunkRequest, ...grpc.CallOption) (*v01.RejectDraftChunkResponse, error) {
	return nil, unimplemented("RejectDraftChunk")
}

func (legacyClient) GetDraftHistory(context.Context, *v01.GetDraftHistoryRequest, ...grpc.CallOption) (*v01.GetDraftHistoryResponse, error) {
	return nil, unimplemented("GetDraftHistory")
}

// 0.0.x gateways have sandbox services too, but no workspaces and no
// tenant tokens: only their admin can expose one, so the operator neither
// uses nor audits them there.

func (legacyClient) ExposeService(context.Context, *v01.ExposeServiceRequest, ...grpc.CallOption) (*v01.ServiceEndpointResponse, error) {
	return nil, unimplemented("ExposeService")
}

func (legacyClient) ListServices(context.Context, *v01.ListServicesRequest, ...grpc.CallOption) (*v01.ListServicesResponse, error) {
	return nil, unimplemented("ListServices")
}

func (legacyClient) DeleteService(context.Context, *v01.DeleteServiceRequest, ...grpc.CallOption) (*v01.DeleteServiceResponse, error) {
	return nil, unimplemented("DeleteService")
}

func (legacyClient) GetProviderRefreshStatus(context.Context, *v01.GetProviderRefreshStatusRequest, ...grpc.CallOption) (*v01.GetProviderRefreshStatusResponse, error) {
	return nil, unimplemented("GetProviderRefreshStatus")
}

func (legacyClient) ConfigureProviderRefresh(context.Context, *v01.ConfigureProviderRefreshRequest, ...grpc.CallOption) (*v01.ConfigureProviderRefreshResponse, error) {
	return nil, unimplemented("ConfigureProviderRefresh")
}

func (legacyClient) RotateProviderCredential(context.Context, *v01.RotateProviderCredentialRequest, ...grpc.CallOption) (*v01.RotateProviderCredentialResponse, error) {
	return nil, unimplemented("RotateProviderCredential")
}

func (legacyClient) DeleteProviderRefresh(context.Context, *v01.DeleteProviderRefreshRequest, ...grpc.CallOption) (*v01.DeleteProviderRefreshResponse, error) {
	return nil, unimplemented("DeleteProviderRefresh")
}
