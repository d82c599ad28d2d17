package testgateway

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/openshell/openshell-operator/internal/gatewayapi"
	v01 "github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/openshellv1"
)

// Workspace templates (0.1): SandboxWorkloadTemplate, workspace-scoped,
// created and deleted by workspace admins (the strictest reading of "workspace
// admins create templates"), with no update RPC. A sandbox created with
// workload_template takes its image, environment and resources from the
// template, and its request must not name them itself (the strict reading
// of a proto that does not say which wins); it records the template's name
// and resource version. A template a live sandbox was created from cannot
// be deleted (again the strict reading: nothing documents what deleting it
// does to such sandboxes).

// maxTemplateName bounds a template's name as a Kubernetes label value.
const maxTemplateName = 63

func (s *v01Server) CreateSandboxTemplate(_ context.Context, in *v01.CreateSandboxTemplateRequest) (*v01.SandboxTemplateResponse, error) {
	t := in.GetTemplate()
	name := t.GetMetadata().GetName()
	switch {
	case name == "" || len(name) > maxTemplateName:
		return nil, status.Errorf(codes.InvalidArgument, "template.metadata.name must be 1 to %d characters", maxTemplateName)
	case t.GetSpec().GetWorkload().GetImage() == "":
		return nil, status.Error(codes.InvalidArgument, "template.spec.workload.image is required")
	case len(t.GetSpec().GetDriverConfig().GetFields()) > 0:
		return nil, status.Error(codes.FailedPrecondition, "driver_config is not allowed: a gateway administrator must enable allow_driver_config")
	}
	g := s.g
	g.mu.Lock()
	defer g.mu.Unlock()
	ws, err := g.workspaceOf(in.GetWorkspaceScope().GetWorkspace())
	if err != nil {
		return nil, err
	}
	k := wsName{ws, name}
	if _, ok := g.templates[k]; ok {
		return nil, status.Errorf(codes.AlreadyExists, "sandbox template '%s' already exists", name)
	}
	stored := proto.Clone(t).(*v01.SandboxWorkloadTemplate)
	stored.Metadata.Id, stored.Metadata.Workspace, stored.Metadata.ResourceVersion = gatewayapi.NewRequestID(), ws, 1
	stored.Metadata.CreatedTime = timestamppb.Now()
	g.templates[k] = stored
	return &v01.SandboxTemplateResponse{Template: proto.Clone(stored).(*v01.SandboxWorkloadTemplate)}, nil
}

func (s *v01Server) GetSandboxTemplate(_ context.Context, in *v01.GetSandboxTemplateRequest) (*v01.SandboxTemplateResponse, error) {
	g := s.g
	g.mu.Lock()
	defer g.mu.Unlock()
	t, ok := g.templates[wsName{in.GetWorkspaceScope().GetWorkspace(), in.GetName()}]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "sandbox template '%s' not found", in.GetName())
	}
	return &v01.SandboxTemplateResponse{Template: proto.Clone(t).(*v01.SandboxWorkloadTemplate)}, nil
}

// ListSandboxTemplates lists one workspace's templates by name, paged, with
// an equality label selector (k=v,k2=v2).
func (s *v01Server) ListSandboxTemplates(_ context.Context, in *v01.ListSandboxTemplatesRequest) (*v01.ListSandboxTemplatesResponse, error) {
	want, err := equalitySelector(in.GetLabelSelector())
	if err != nil {
		return nil, err
	}
	g := s.g
	g.mu.Lock()
	defer g.mu.Unlock()
	ws := in.GetWorkspaceScope().GetWorkspace()
	var all []*v01.SandboxWorkloadTemplate
	for k, t := range g.templates {
		if (ws == "" && in.GetWorkspaceScope().GetAllWorkspaces() != nil || k.ws == ws) && matches(t.GetMetadata().GetLabels(), want) {
			all = append(all, proto.Clone(t).(*v01.SandboxWorkloadTemplate))
		}
	}
	slices.SortFunc(all, func(a, b *v01.SandboxWorkloadTemplate) int {
		return strings.Compare(a.GetMetadata().GetWorkspace()+"/"+a.GetMetadata().GetName(), b.GetMetadata().GetWorkspace()+"/"+b.GetMetadata().GetName())
	})
	out := &v01.ListSandboxTemplatesResponse{}
	if out.Templates, out.NextPageToken, err = pageOf(all, in.GetPageSize(), in.GetPageToken()); err != nil {
		return nil, err
	}
	return out, nil
}

// pageOf is one page of a sorted list: page tokens are offsets into it,
// and a size of 0 or less means 100.
func pageOf[T any](all []T, pageSize int32, token string) (page []T, next string, err error) {
	size := int(pageSize)
	if size <= 0 {
		size = 100
	}
	from := 0
	if token != "" {
		if from, err = strconv.Atoi(token); err != nil || from < 0 {
			return nil, "", status.Error(codes.InvalidArgument, "invalid page_token")
		}
	}
	if from < len(all) {
		page = all[from:min(from+size, len(all))]
	}
	if from+size < len(all) {
		next = strconv.Itoa(from + size)
	}
	return page, next, nil
}

func (s *v01Server) DeleteSandboxTemplate(_ context.Context, in *v01.DeleteSandboxTemplateRequest) (*v01.DeleteSandboxTemplateResponse, error) {
	g := s.g
	g.mu.Lock()
	defer g.mu.Unlock()
	ws := in.GetWorkspaceScope().GetWorkspace()
	k := wsName{ws, in.GetName()}
	if _, ok := g.templates[k]; !ok {
		if in.GetAllowMissing() {
			return &v01.DeleteSandboxTemplateResponse{Outcome: v01.DeletionOutcome_DELETION_OUTCOME_ALREADY_ABSENT}, nil
		}
		return nil, status.Errorf(codes.NotFound, "sandbox template '%s' not found", in.GetName())
	}
	for id, from := range g.fromTemplate {
		if row, ok := g.byID[id]; ok && !row.deleting && row.sb.GetMetadata().GetWorkspace() == ws && from.GetName() == in.GetName() {
			return nil, status.Errorf(codes.FailedPrecondition, "sandbox template '%s' is in use by sandbox '%s'", in.GetName(), row.sb.GetMetadata().GetName())
		}
	}
	delete(g.templates, k)
	return &v01.DeleteSandboxTemplateResponse{Outcome: v01.DeletionOutcome_DELETION_OUTCOME_COMPLETED}, nil
}

// fromWorkloadTemplate gives a create naming a workload template the
// template's workload, and says where it came from; a create that names
// none is returned as it is.
func (g *Gateway) fromWorkloadTemplate(in *v01.CreateSandboxRequest) (*v01.CreateSandboxRequest, *v01.SandboxWorkloadTemplateProvenance, error) {
	name := in.GetWorkloadTemplate()
	if name == "" {
		return in, nil, nil
	}
	tmpl := in.GetSpec().GetTemplate()
	if tmpl.GetImage() != "" || len(tmpl.GetEnvironment()) > 0 || len(tmpl.GetResources().GetFields()) > 0 {
		return nil, nil, status.Errorf(codes.InvalidArgument,
			"workload_template '%s' sets the workload: spec.template.image, environment and resources must be empty", name)
	}
	g.mu.Lock()
	t, ok := g.templates[wsName{in.GetWorkspaceScope().GetWorkspace(), name}]
	g.mu.Unlock()
	if !ok {
		return nil, nil, status.Errorf(codes.NotFound, "sandbox template '%s' not found", name)
	}
	out := proto.Clone(in).(*v01.CreateSandboxRequest)
	out.WorkloadTemplate = ""
	if out.Spec == nil {
		out.Spec = &v01.SandboxSpec{}
	}
	if out.Spec.Template == nil {
		out.Spec.Template = &v01.SandboxTemplate{}
	}
	w := t.GetSpec().GetWorkload()
	out.Spec.Template.Image, out.Spec.Template.Environment = w.GetImage(), w.GetEnvironment()
	if r := w.GetResources(); r.GetCpu() != "" || r.GetMemory() != "" {
		out.Spec.Template.Resources = templateResources(r)
	}
	if gpu := w.GetResources().GetGpu(); gpu != nil {
		out.Spec.ResourceRequirements = &v01.ResourceRequirements{Gpu: gpu}
	}
	return out, &v01.SandboxWorkloadTemplateProvenance{Name: name, ResourceVersion: fmt.Sprint(t.GetMetadata().GetResourceVersion())}, nil
}

// SandboxTemplate returns a copy of a workspace's template, or nil.
func (g *Gateway) SandboxTemplate(workspace, name string) *v01.SandboxWorkloadTemplate {
	g.mu.Lock()
	defer g.mu.Unlock()
	if t, ok := g.templates[wsName{workspace, name}]; ok {
		return proto.Clone(t).(*v01.SandboxWorkloadTemplate)
	}
	return nil
}

// SandboxTemplates names a workspace's templates, sorted.
func (g *Gateway) SandboxTemplates(workspace string) []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []string
	for k := range g.templates {
		if k.ws == workspace {
			out = append(out, k.name)
		}
	}
	slices.Sort(out)
	return out
}

// templateResources renders a template's cpu and memory as the inline
// template's resources: requests and limits both (the release does not say
// which the pair means; the operator's ceilings and budgets count both).
func templateResources(r *v01.SandboxResources) *structpb.Struct {
	q := map[string]any{}
	if r.GetCpu() != "" {
		q["cpu"] = r.GetCpu()
	}
	if r.GetMemory() != "" {
		q["memory"] = r.GetMemory()
	}
	st, _ := structpb.NewStruct(map[string]any{"limits": q, "requests": q})
	return st
}

// CreatedFrom names the template a workspace's sandbox was created from
// ("" for none).
func (g *Gateway) CreatedFrom(workspace, sandbox string) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	row, ok := g.sandboxes[wsName{workspace, sandbox}]
	if !ok {
		return ""
	}
	return g.fromTemplate[row.sb.GetMetadata().GetId()].GetName()
}
