package testgateway

import (
	"context"
	"maps"
	"slices"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/openshell/openshell-operator/internal/gatewayapi"
	legacy "github.com/openshell/openshell-operator/internal/gatewayapi/pb/openshellv1"
	v01 "github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/openshellv1"
	"github.com/openshell/openshell-operator/internal/gatewayline"
)

// The test gateway speaks the wire of the line of the version it reports
// (Version, or ReportVersion's): a gateway upgraded in place answers the
// next call in the new line's messages. One implementation serves both:
// the 0.0.x methods of Gateway, and v01Server, which translates each 0.1
// request for them and answers in 0.1 terms, playing what translation
// cannot carry: the required workspace selector, deletion outcomes,
// allow_missing and watching by name. docs/real-components.md lists where
// it differs from a real 0.1 gateway.

// line is the release line whose wire the gateway speaks now.
func (g *Gateway) line() gatewayline.Line {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.lineLocked()
}

// lineLocked is line with g.mu held.
func (g *Gateway) lineLocked() gatewayline.Line {
	v := g.version
	if v == "" {
		v = Version
	}
	if l, err := gatewayline.Of(v); err == nil {
		return l
	}
	return gatewayline.Legacy
}

// countLine returns the line a call of method is decoded as, and counts it.
func (g *Gateway) countLine(method string) gatewayline.Line {
	l := g.line()
	g.mu.Lock()
	defer g.mu.Unlock()
	g.lineCalls[string(l)+" "+method]++
	return l
}

// LineCalls counts the calls served by line and method ("0.1 CreateSandbox").
func (g *Gateway) LineCalls() map[string]int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return maps.Clone(g.lineCalls)
}

// serviceDesc serves openshell.v1.OpenShell with each call decoded as the
// line the gateway speaks at that moment.
func (g *Gateway) serviceDesc() *grpc.ServiceDesc {
	old, cur, impl := gatewayapi.LegacyServiceDesc(), v01.OpenShell_ServiceDesc, &v01Server{g: g}
	d := &grpc.ServiceDesc{ServiceName: cur.ServiceName, HandlerType: (*any)(nil), Metadata: cur.Metadata}
	for _, m := range cur.Methods {
		var legacyHandler grpc.MethodHandler
		for _, o := range old.Methods {
			if o.MethodName == m.MethodName {
				legacyHandler = o.Handler
			}
		}
		v01Handler := m.Handler
		d.Methods = append(d.Methods, grpc.MethodDesc{MethodName: m.MethodName,
			Handler: func(_ any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
				if g.countLine(m.MethodName) == gatewayline.V01 {
					return v01Handler(impl, ctx, dec, icpt)
				}
				if legacyHandler == nil {
					return nil, status.Errorf(codes.Unimplemented, "unknown method %s for service %s", m.MethodName, cur.ServiceName)
				}
				return legacyHandler(g, ctx, dec, icpt)
			}})
	}
	for _, s := range cur.Streams {
		var legacyHandler grpc.StreamHandler
		for _, o := range old.Streams {
			if o.StreamName == s.StreamName {
				legacyHandler = o.Handler
			}
		}
		v01Stream := s
		v01Stream.Handler = func(_ any, ss grpc.ServerStream) error {
			if g.countLine(s.StreamName) == gatewayline.V01 {
				return s.Handler(impl, ss)
			}
			if legacyHandler == nil {
				return status.Errorf(codes.Unimplemented, "unknown method %s for service %s", s.StreamName, cur.ServiceName)
			}
			return legacyHandler(g, ss)
		}
		d.Streams = append(d.Streams, v01Stream)
	}
	// Methods only 0.0.x has (GetSandboxConfig, which the 0.0.111 CLI
	// reads) are served while the gateway speaks 0.0.x.
	for _, o := range old.Methods {
		if slices.ContainsFunc(cur.Methods, func(m grpc.MethodDesc) bool { return m.MethodName == o.MethodName }) {
			continue
		}
		legacyHandler := o.Handler
		d.Methods = append(d.Methods, grpc.MethodDesc{MethodName: o.MethodName,
			Handler: func(_ any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
				if g.countLine(o.MethodName) == gatewayline.V01 {
					return nil, status.Errorf(codes.Unimplemented, "unknown method %s for service %s", o.MethodName, cur.ServiceName)
				}
				return legacyHandler(g, ctx, dec, icpt)
			}})
	}
	return d
}

// v01Server is the 0.1 face of a Gateway.
type v01Server struct {
	v01.UnimplementedOpenShellServer
	g *Gateway
}

// serve0 answers a 0.1 request with the 0.0.x method call.
func serve0[LReq, LResp proto.Message](ctx context.Context, in proto.Message, lreq LReq, out proto.Message,
	call func(context.Context, LReq) (LResp, error)) error {
	if err := requireSelector(in); err != nil {
		return err
	}
	if err := gatewayapi.ToLegacy(in, lreq); err != nil {
		return status.Errorf(codes.InvalidArgument, "%v", err)
	}
	resp, err := call(ctx, lreq)
	if err != nil {
		return err
	}
	if err := gatewayapi.FromLegacy(resp, out); err != nil {
		return status.Errorf(codes.Internal, "%v", err)
	}
	return nil
}

// requireSelector plays 0.1's rule that a workspace-scoped request names
// its workspace: omission no longer means "default" (a global config
// update is the exception).
func requireSelector(in proto.Message) error {
	m := in.ProtoReflect()
	fd := m.Descriptor().Fields().ByName("workspace_scope")
	if fd == nil || m.Has(fd) {
		return nil
	}
	if u, ok := in.(*v01.UpdateConfigRequest); ok && u.GetGlobal() {
		return nil
	}
	return status.Error(codes.InvalidArgument, "workspace_scope is required")
}

func (s *v01Server) Health(ctx context.Context, in *v01.HealthRequest) (*v01.HealthResponse, error) {
	out := &v01.HealthResponse{}
	return out, serve0(ctx, in, &legacy.HealthRequest{}, out, s.g.Health)
}

func (s *v01Server) GetGatewayInfo(ctx context.Context, in *v01.GetGatewayInfoRequest) (*v01.GetGatewayInfoResponse, error) {
	out := &v01.GetGatewayInfoResponse{}
	return out, serve0(ctx, in, &legacy.GetGatewayInfoRequest{}, out, s.g.GetGatewayInfo)
}

// CreateSandbox plays 0.1.5's allowlist of template labels and annotations.
func (s *v01Server) CreateSandbox(ctx context.Context, in *v01.CreateSandboxRequest) (*v01.SandboxResponse, error) {
	s.g.mu.Lock()
	s.g.keys = append(s.g.keys, in.GetRequestId())
	s.g.mu.Unlock()
	if err := s.g.allowlisted(in.GetSpec().GetTemplate()); err != nil {
		return nil, err
	}
	if err := s.g.checkProfiles(in.GetWorkspaceScope(), in.GetSpec().GetProviders()); err != nil {
		return nil, err
	}
	return idempotent(s.g, in, func() (*v01.SandboxResponse, error) {
		req, from, err := s.g.fromWorkloadTemplate(in)
		if err != nil {
			return nil, err
		}
		out := &v01.SandboxResponse{}
		if err := serve0(ctx, req, &legacy.CreateSandboxRequest{}, out, s.g.CreateSandbox); err != nil {
			return nil, err
		}
		if from != nil {
			s.g.mu.Lock()
			s.g.fromTemplate[out.GetSandbox().GetMetadata().GetId()] = from
			s.g.mu.Unlock()
			out.Sandbox.CreatedFromWorkloadTemplate = from
		}
		return out, nil
	})
}

// withProvenance adds, to sandboxes read back, the template each was
// created from.
func (g *Gateway) withProvenance(sbs ...*v01.Sandbox) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, sb := range sbs {
		if from, ok := g.fromTemplate[sb.GetMetadata().GetId()]; ok {
			sb.CreatedFromWorkloadTemplate = proto.Clone(from).(*v01.SandboxWorkloadTemplateProvenance)
		}
	}
}

// replay is what a request_id answered, and the request it came with.
type replay struct {
	request  []byte
	response proto.Message
}

// idempotent plays 0.1's request_id: a key seen before with the same
// request is answered with the first result again (for 24 hours, longer
// than any test), whatever happened since — the sandbox it created may be
// gone; the same key with another request is refused. A failed call
// records nothing.
func idempotent[T proto.Message](g *Gateway, in interface {
	proto.Message
	GetRequestId() string
}, call func() (T, error)) (T, error) {
	var zero T
	id := in.GetRequestId()
	if id == "" {
		return call()
	}
	req := proto.Clone(in)
	req.ProtoReflect().Clear(req.ProtoReflect().Descriptor().Fields().ByName("request_id"))
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(req)
	if err != nil {
		return zero, status.Errorf(codes.Internal, "%v", err)
	}
	g.mu.Lock()
	prev, seen := g.replays[id]
	if seen && string(prev.request) == string(b) {
		g.replayed++
	}
	g.mu.Unlock()
	if seen {
		if string(prev.request) != string(b) {
			return zero, status.Errorf(codes.InvalidArgument, "request_id %s was used for a different request", id)
		}
		return proto.Clone(prev.response).(T), nil
	}
	resp, err := call()
	if err != nil {
		return resp, err
	}
	g.mu.Lock()
	g.replays[id] = replay{request: b, response: proto.Clone(resp)}
	g.mu.Unlock()
	return resp, nil
}

// RequestKeys are the request_id values of the 0.1 sandbox creates
// received, in order ("" for a create without one).
func (g *Gateway) RequestKeys() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.keys)
}

// Replayed counts the calls answered from the request_id replay cache.
func (g *Gateway) Replayed() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.replayed
}

// allowlisted refuses, from 0.1.5, template labels and annotations the
// driver configuration does not list (Options.AllowedPodLabels and
// AllowedPodAnnotations: allowed_pod_labels, allowed_pod_annotations).
func (g *Gateway) allowlisted(t *v01.SandboxTemplate) error {
	if !gatewayline.AtLeast(g.reportedVersion(), gatewayline.PodLabelAllowlist) {
		return nil
	}
	for _, c := range []struct {
		what, key string
		got       map[string]string
		allowed   []string
	}{{"label", "allowed_pod_labels", t.GetLabels(), g.opts.AllowedPodLabels}, {"annotation", "allowed_pod_annotations", t.GetAnnotations(), g.opts.AllowedPodAnnotations}} {
		for _, k := range slices.Sorted(maps.Keys(c.got)) {
			if !slices.Contains(c.allowed, k) {
				return status.Errorf(codes.InvalidArgument, "sandbox template %s %q is not allowed: add it to the Kubernetes driver's %s", c.what, k, c.key)
			}
		}
	}
	return nil
}

func (s *v01Server) GetSandbox(ctx context.Context, in *v01.GetSandboxRequest) (*v01.SandboxResponse, error) {
	out := &v01.SandboxResponse{}
	if err := serve0(ctx, in, &legacy.GetSandboxRequest{}, out, s.g.GetSandbox); err != nil {
		return nil, err
	}
	s.g.withProvenance(out.GetSandbox())
	return out, nil
}

// ListSandboxes pages as 0.1 does, with page tokens over the 0.0.x offset.
func (s *v01Server) ListSandboxes(ctx context.Context, in *v01.ListSandboxesRequest) (*v01.ListSandboxesResponse, error) {
	req, out := gatewayapi.PagedByOffset(in), &v01.ListSandboxesResponse{}
	if err := serve0(ctx, req, &legacy.ListSandboxesRequest{}, out, s.g.ListSandboxes); err != nil {
		return nil, err
	}
	out.NextPageToken = gatewayapi.NextPageToken(req, len(out.Sandboxes))
	s.g.withProvenance(out.GetSandboxes()...)
	return out, nil
}

func (s *v01Server) DeleteSandbox(ctx context.Context, in *v01.DeleteSandboxRequest) (*v01.DeleteSandboxResponse, error) {
	out := &v01.DeleteSandboxResponse{}
	err := serve0(ctx, in, &legacy.DeleteSandboxRequest{}, out, func(ctx context.Context, r *legacy.DeleteSandboxRequest) (*legacy.DeleteSandboxResponse, error) {
		resp, err := s.g.DeleteSandbox(ctx, r)
		out.Outcome = gatewayapi.LegacyOutcome(resp.GetDeleted(), v01.DeletionOutcome_DELETION_OUTCOME_ACCEPTED)
		return resp, err
	})
	return allowMissing(out, err, in.GetAllowMissing(), &out.Outcome)
}

func (s *v01Server) StopSandbox(ctx context.Context, in *v01.StopSandboxRequest) (*v01.SandboxResponse, error) {
	out := &v01.SandboxResponse{}
	return out, serve0(ctx, in, &legacy.StopSandboxRequest{}, out, s.g.StopSandbox)
}

func (s *v01Server) StartSandbox(ctx context.Context, in *v01.StartSandboxRequest) (*v01.SandboxResponse, error) {
	out := &v01.SandboxResponse{}
	return out, serve0(ctx, in, &legacy.StartSandboxRequest{}, out, s.g.StartSandbox)
}

// WatchSandbox watches by name in a workspace (0.0.x: by ID).
func (s *v01Server) WatchSandbox(in *v01.WatchSandboxRequest, stream grpc.ServerStreamingServer[v01.SandboxStreamEvent]) error {
	if err := requireSelector(in); err != nil {
		return err
	}
	id, err := s.g.idOf(in.GetWorkspaceScope().GetWorkspace(), in.GetSandbox())
	if err != nil {
		return err
	}
	lreq := &legacy.WatchSandboxRequest{}
	if err := gatewayapi.ToLegacy(in, lreq); err != nil {
		return status.Errorf(codes.InvalidArgument, "%v", err)
	}
	lreq.Id = id
	return s.g.WatchSandbox(lreq, legacyEvents{stream})
}

// legacyEvents sends each 0.0.x event as its 0.1 twin.
type legacyEvents struct {
	grpc.ServerStreamingServer[v01.SandboxStreamEvent]
}

func (e legacyEvents) Send(ev *legacy.SandboxStreamEvent) error {
	out := &v01.SandboxStreamEvent{}
	if err := gatewayapi.FromLegacy(ev, out); err != nil {
		return status.Errorf(codes.Internal, "%v", err)
	}
	return e.ServerStreamingServer.Send(out)
}

func (s *v01Server) AttachSandboxProvider(ctx context.Context, in *v01.AttachSandboxProviderRequest) (*v01.AttachSandboxProviderResponse, error) {
	if err := s.g.checkProfiles(in.GetWorkspaceScope(), []string{in.GetProvider()}); err != nil {
		return nil, err
	}
	out := &v01.AttachSandboxProviderResponse{}
	return out, serve0(ctx, in, &legacy.AttachSandboxProviderRequest{}, out, s.g.AttachSandboxProvider)
}

func (s *v01Server) DetachSandboxProvider(ctx context.Context, in *v01.DetachSandboxProviderRequest) (*v01.DetachSandboxProviderResponse, error) {
	out := &v01.DetachSandboxProviderResponse{}
	return out, serve0(ctx, in, &legacy.DetachSandboxProviderRequest{}, out, s.g.DetachSandboxProvider)
}

func (s *v01Server) ListSandboxProviders(ctx context.Context, in *v01.ListSandboxProvidersRequest) (*v01.ListSandboxProvidersResponse, error) {
	out := &v01.ListSandboxProvidersResponse{}
	return out, serve0(ctx, in, &legacy.ListSandboxProvidersRequest{}, out, s.g.ListSandboxProviders)
}

func (s *v01Server) CreateProvider(ctx context.Context, in *v01.CreateProviderRequest) (*v01.ProviderResponse, error) {
	in = proto.Clone(in).(*v01.CreateProviderRequest)
	record, err := s.g.setProfileWorkspace(in.GetWorkspaceScope(), in.GetProvider())
	if err != nil {
		return nil, err
	}
	out := &v01.ProviderResponse{}
	if err := serve0(ctx, in, &legacy.CreateProviderRequest{}, out, s.g.CreateProvider); err != nil {
		return nil, err
	}
	record()
	return out, nil
}

func (s *v01Server) GetProvider(ctx context.Context, in *v01.GetProviderRequest) (*v01.ProviderResponse, error) {
	out := &v01.ProviderResponse{}
	if err := serve0(ctx, in, &legacy.GetProviderRequest{}, out, s.g.GetProvider); err != nil {
		return nil, err
	}
	// The 0.0.x store underneath has no profile_workspace: the record's
	// own, as 0.1 returns it.
	ws := in.GetWorkspaceScope().GetWorkspace()
	if ws == "" {
		ws = "default"
	}
	out.Provider.ProfileWorkspace, _ = s.g.ProviderProfileWorkspace(ws, in.GetName())
	return out, nil
}

func (s *v01Server) UpdateProvider(ctx context.Context, in *v01.UpdateProviderRequest) (*v01.ProviderResponse, error) {
	in = proto.Clone(in).(*v01.UpdateProviderRequest)
	if err := s.g.refreshOwned(in); err != nil {
		return nil, err
	}
	record, err := s.g.setProfileWorkspace(in.GetWorkspaceScope(), in.GetProvider())
	if err != nil {
		return nil, err
	}
	out := &v01.ProviderResponse{}
	if err := serve0(ctx, in, &legacy.UpdateProviderRequest{}, out, s.g.UpdateProvider); err != nil {
		return nil, err
	}
	record()
	return out, nil
}

func (s *v01Server) DeleteProvider(ctx context.Context, in *v01.DeleteProviderRequest) (*v01.DeleteProviderResponse, error) {
	out := &v01.DeleteProviderResponse{}
	err := serve0(ctx, in, &legacy.DeleteProviderRequest{}, out, func(ctx context.Context, r *legacy.DeleteProviderRequest) (*legacy.DeleteProviderResponse, error) {
		resp, err := s.g.DeleteProvider(ctx, r)
		out.Outcome = gatewayapi.LegacyOutcome(resp.GetDeleted(), v01.DeletionOutcome_DELETION_OUTCOME_COMPLETED)
		if resp.GetDeleted() {
			s.g.forgetProfileRef(in.GetWorkspaceScope(), in.GetName())
		}
		return resp, err
	})
	return allowMissing(out, err, in.GetAllowMissing(), &out.Outcome)
}

func (s *v01Server) UpdateConfig(ctx context.Context, in *v01.UpdateConfigRequest) (*v01.UpdateConfigResponse, error) {
	if in.GetSettingKey() != "" && in.GetPolicy() == nil {
		if err := requireSelector(in); err != nil {
			return nil, err
		}
		return s.g.updateSetting(in)
	}
	out := &v01.UpdateConfigResponse{}
	return out, serve0(ctx, in, &legacy.UpdateConfigRequest{}, out, s.g.UpdateConfig)
}

func (s *v01Server) GetSandboxPolicyStatus(ctx context.Context, in *v01.GetSandboxPolicyStatusRequest) (*v01.GetSandboxPolicyStatusResponse, error) {
	out := &v01.GetSandboxPolicyStatusResponse{}
	return out, serve0(ctx, in, &legacy.GetSandboxPolicyStatusRequest{}, out, s.g.GetSandboxPolicyStatus)
}

func (s *v01Server) CreateWorkspace(ctx context.Context, in *v01.CreateWorkspaceRequest) (*v01.CreateWorkspaceResponse, error) {
	out := &v01.CreateWorkspaceResponse{}
	return out, serve0(ctx, in, &legacy.CreateWorkspaceRequest{}, out, s.g.CreateWorkspace)
}

func (s *v01Server) GetWorkspace(ctx context.Context, in *v01.GetWorkspaceRequest) (*v01.GetWorkspaceResponse, error) {
	out := &v01.GetWorkspaceResponse{}
	return out, serve0(ctx, in, &legacy.GetWorkspaceRequest{}, out, s.g.GetWorkspace)
}

func (s *v01Server) DeleteWorkspace(ctx context.Context, in *v01.DeleteWorkspaceRequest) (*v01.DeleteWorkspaceResponse, error) {
	out := &v01.DeleteWorkspaceResponse{}
	err := serve0(ctx, in, &legacy.DeleteWorkspaceRequest{}, out, func(ctx context.Context, r *legacy.DeleteWorkspaceRequest) (*legacy.DeleteWorkspaceResponse, error) {
		resp, err := s.g.DeleteWorkspace(ctx, r)
		out.Outcome = gatewayapi.LegacyOutcome(resp.GetDeleted(), v01.DeletionOutcome_DELETION_OUTCOME_COMPLETED)
		return resp, err
	})
	return allowMissing(out, err, in.GetAllowMissing(), &out.Outcome)
}

// allowMissing answers ALREADY_ABSENT for a missing object when asked to.
func allowMissing[T any](out T, err error, allow bool, outcome *v01.DeletionOutcome) (T, error) {
	if status.Code(err) == codes.NotFound && allow {
		*outcome = v01.DeletionOutcome_DELETION_OUTCOME_ALREADY_ABSENT
		return out, nil
	}
	return out, err
}
