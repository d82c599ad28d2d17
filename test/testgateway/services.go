package testgateway

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/util/validation"

	v01datamodel "github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/datamodelv1"
	v01 "github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/openshellv1"
)

// ServiceDomain is the base domain of the test gateway's service URLs,
// which it answers as the docs give them: <sandbox>--<service>.<domain>.
const ServiceDomain = "services.openshell.test"

// ExposeService stores a named service of a sandbox (an empty name is the
// sandbox's unnamed one): a workspace user's RPC (the descriptors'
// authorization option), as checkScope enforces.
func (s *v01Server) ExposeService(_ context.Context, in *v01.ExposeServiceRequest) (*v01.ServiceEndpointResponse, error) {
	if err := requireSelector(in); err != nil {
		return nil, err
	}
	if in.GetName() != "" && len(validation.IsDNS1123Label(in.GetName())) > 0 {
		return nil, status.Errorf(codes.InvalidArgument, "service name %q must be a DNS label", in.GetName())
	}
	if p := in.GetTargetPort(); p < 1 || p > 65535 {
		return nil, status.Errorf(codes.InvalidArgument, "target_port %d is not a TCP port", p)
	}
	s.g.mu.Lock()
	defer s.g.mu.Unlock()
	r, err := s.g.lookup(in.GetWorkspaceScope().GetWorkspace(), in.GetSandbox())
	if err != nil {
		return nil, err
	}
	if r.services == nil {
		r.services = map[string]*v01.ServiceEndpoint{}
	}
	ep := &v01.ServiceEndpoint{
		Metadata: &v01datamodel.ObjectMeta{Id: fmt.Sprintf("svc-%d", time.Now().UnixNano()), Name: in.GetName(),
			Workspace: r.sb.GetMetadata().GetWorkspace(), ResourceVersion: 1},
		SandboxId: r.sb.GetMetadata().GetId(), Sandbox: in.GetSandbox(), Name: in.GetName(), TargetPort: in.GetTargetPort(),
		Domain: in.GetDomain(), AuthorizationMode: in.GetAuthorizationMode(),
	}
	if old, ok := r.services[in.GetName()]; ok {
		ep.Metadata.Id, ep.Metadata.ResourceVersion = old.GetMetadata().GetId(), old.GetMetadata().GetResourceVersion()+1
	}
	r.services[in.GetName()] = ep
	return serviceResponse(ep), nil
}

// ListServices pages through a workspace's services, of one sandbox when
// sandbox is set (the pre-0.1 source's rule: empty lists them all).
func (s *v01Server) ListServices(_ context.Context, in *v01.ListServicesRequest) (*v01.ListServicesResponse, error) {
	if err := requireSelector(in); err != nil {
		return nil, err
	}
	ws := defaultWorkspace(in.GetWorkspaceScope().GetWorkspace())
	s.g.mu.Lock()
	var all []*v01.ServiceEndpoint
	for k, r := range s.g.sandboxes {
		if k.ws != ws || (in.GetSandbox() != "" && k.name != in.GetSandbox()) {
			continue
		}
		for _, ep := range r.services {
			all = append(all, proto.Clone(ep).(*v01.ServiceEndpoint))
		}
	}
	s.g.mu.Unlock()
	slices.SortFunc(all, func(a, b *v01.ServiceEndpoint) int {
		return strings.Compare(a.GetSandbox()+"/"+a.GetName(), b.GetSandbox()+"/"+b.GetName())
	})
	page, next, err := pageOf(all, in.GetPageSize(), in.GetPageToken())
	if err != nil {
		return nil, err
	}
	out := &v01.ListServicesResponse{NextPageToken: next}
	for _, ep := range page {
		out.Services = append(out.Services, serviceResponse(ep))
	}
	return out, nil
}

// DeleteService deletes one service of a sandbox.
func (s *v01Server) DeleteService(_ context.Context, in *v01.DeleteServiceRequest) (*v01.DeleteServiceResponse, error) {
	if err := requireSelector(in); err != nil {
		return nil, err
	}
	s.g.mu.Lock()
	defer s.g.mu.Unlock()
	r, err := s.g.lookup(in.GetWorkspaceScope().GetWorkspace(), in.GetSandbox())
	if err == nil {
		if _, ok := r.services[in.GetName()]; ok {
			delete(r.services, in.GetName())
			return &v01.DeleteServiceResponse{Outcome: v01.DeletionOutcome_DELETION_OUTCOME_COMPLETED}, nil
		}
	}
	if in.GetAllowMissing() {
		return &v01.DeleteServiceResponse{Outcome: v01.DeletionOutcome_DELETION_OUTCOME_ALREADY_ABSENT}, nil
	}
	return nil, status.Errorf(codes.NotFound, "service %q of sandbox %q not found", in.GetName(), in.GetSandbox())
}

func serviceResponse(ep *v01.ServiceEndpoint) *v01.ServiceEndpointResponse {
	host := ep.GetSandbox()
	if ep.GetName() != "" {
		host += "--" + ep.GetName()
	}
	return &v01.ServiceEndpointResponse{Endpoint: proto.Clone(ep).(*v01.ServiceEndpoint), Url: "https://" + host + "." + ServiceDomain + "/"}
}

// Services lists a workspace's services as "sandbox/name" (tests).
func (g *Gateway) Services(ws string) []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []string
	for k, r := range g.sandboxes {
		if k.ws != defaultWorkspace(ws) {
			continue
		}
		for name := range r.services {
			out = append(out, k.name+"/"+name)
		}
	}
	slices.Sort(out)
	return out
}
