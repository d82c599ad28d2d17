package testgateway

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/openshell/openshell-operator/internal/gatewayapi"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/datamodelv1"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/openshellv1"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/sandboxv1"
)

// Validation limits of the gateway API, enforced as the gateway does:
// sandbox and workspace names (sandboxspec.MaxNameLen), providers per
// sandbox, environment variables per sandbox, and a provider's name
// length, type length and number of credentials.
const (
	maxNameLen       = 19
	maxProviders     = 32
	maxEnv           = 128
	maxProviderName  = 253
	maxProviderType  = 64
	maxProviderCreds = 32
)

var envKey = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func validName(kind, n string) error {
	if n == "" || len(n) > maxNameLen || len(validation.IsDNS1123Label(n)) > 0 || strings.Contains(n, "--") {
		return status.Errorf(codes.InvalidArgument, "%s name '%s' must be a DNS-1123 label of at most %d characters without '--'", kind, n, maxNameLen)
	}
	return nil
}

func validLabels(m map[string]string) error {
	for k, v := range m {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return status.Errorf(codes.InvalidArgument, "invalid label key '%s': %s", k, strings.Join(errs, "; "))
		}
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			return status.Errorf(codes.InvalidArgument, "invalid label value '%s': %s", v, strings.Join(errs, "; "))
		}
	}
	return nil
}

func validEnv(m map[string]string) error {
	if len(m) > maxEnv {
		return status.Errorf(codes.InvalidArgument, "at most %d environment variables", maxEnv)
	}
	for k := range m {
		if !envKey.MatchString(k) || strings.HasPrefix(k, "OPENSHELL_") {
			return status.Errorf(codes.InvalidArgument, "invalid environment variable name '%s'", k)
		}
	}
	return nil
}

// Health is unauthenticated and always HEALTHY.
func (g *Gateway) Health(context.Context, *openshellv1.HealthRequest) (*openshellv1.HealthResponse, error) {
	return &openshellv1.HealthResponse{Status: openshellv1.ServiceStatus_SERVICE_STATUS_HEALTHY, Version: g.reportedVersion()}, nil
}

// ReportVersion makes Health report another version (a gateway upgraded
// in place, as the operator sees it); "" restores Version.
func (g *Gateway) ReportVersion(v string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.version = v
}

// ReportedVersion is the version the gateway reports.
func (g *Gateway) ReportedVersion() string { return g.reportedVersion() }

func (g *Gateway) reportedVersion() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.version != "" {
		return g.version
	}
	return Version
}

// GetGatewayInfo reports the Kubernetes driver.
func (g *Gateway) GetGatewayInfo(context.Context, *openshellv1.GetGatewayInfoRequest) (*openshellv1.GetGatewayInfoResponse, error) {
	return &openshellv1.GetGatewayInfoResponse{Status: openshellv1.ServiceStatus_SERVICE_STATUS_HEALTHY, GatewayVersion: Version,
		ComputeDrivers: []*openshellv1.ComputeDriverInfo{{Name: "kubernetes", Capabilities: &openshellv1.ComputeDriverCapabilities{DriverName: "kubernetes", DriverVersion: Version}}}}, nil
}

// CreateWorkspace creates an active workspace.
func (g *Gateway) CreateWorkspace(_ context.Context, req *openshellv1.CreateWorkspaceRequest) (*openshellv1.CreateWorkspaceResponse, error) {
	if err := validName("workspace", req.Name); err != nil {
		return nil, err
	}
	if err := validLabels(req.Labels); err != nil {
		return nil, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.workspaces[req.Name]; ok {
		return nil, status.Error(codes.AlreadyExists, "workspace already exists")
	}
	w := newWorkspace(req.Name)
	w.Metadata.Labels = req.Labels
	g.workspaces[req.Name] = w
	return &openshellv1.CreateWorkspaceResponse{Workspace: proto.Clone(w).(*datamodelv1.Workspace)}, nil
}

// GetWorkspace returns a workspace.
func (g *Gateway) GetWorkspace(_ context.Context, req *openshellv1.GetWorkspaceRequest) (*openshellv1.GetWorkspaceResponse, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	w, ok := g.workspaces[req.Name]
	if !ok {
		return nil, status.Error(codes.NotFound, "workspace not found")
	}
	return &openshellv1.GetWorkspaceResponse{Workspace: proto.Clone(w).(*datamodelv1.Workspace)}, nil
}

// DeleteWorkspace refuses while the workspace holds resources.
func (g *Gateway) DeleteWorkspace(_ context.Context, req *openshellv1.DeleteWorkspaceRequest) (*openshellv1.DeleteWorkspaceResponse, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if req.Name == "default" {
		return nil, status.Error(codes.FailedPrecondition, "the default workspace cannot be deleted")
	}
	w, ok := g.workspaces[req.Name]
	if !ok {
		return nil, status.Error(codes.NotFound, "workspace not found")
	}
	w.Status.Phase = datamodelv1.WorkspacePhase_WORKSPACE_PHASE_TERMINATING
	w.Metadata.DeletionTimestampMs = time.Now().UnixMilli()
	for k := range g.sandboxes {
		if k.ws == req.Name {
			return nil, status.Errorf(codes.FailedPrecondition, "workspace '%s' still contains resources: sandboxes", req.Name)
		}
	}
	for k := range g.providers {
		if k.ws == req.Name {
			return nil, status.Errorf(codes.FailedPrecondition, "workspace '%s' still contains resources: providers", req.Name)
		}
	}
	delete(g.workspaces, req.Name)
	return &openshellv1.DeleteWorkspaceResponse{Deleted: true}, nil
}

// CreateSandbox validates, stores and asks the driver to create the CR.
func (g *Gateway) CreateSandbox(ctx context.Context, req *openshellv1.CreateSandboxRequest) (*openshellv1.SandboxResponse, error) {
	g.traced(TraceCreateReceived, req.Name)
	if req.Spec == nil {
		return nil, status.Error(codes.InvalidArgument, "spec is required")
	}
	spec := proto.Clone(req.Spec).(*openshellv1.SandboxSpec)
	if len(spec.Command) == 0 {
		spec.Command, spec.Tty = []string{"/bin/bash", "-l"}, true
	}
	if err := validName("sandbox", req.Name); err != nil {
		return nil, err
	}
	if err := validLabels(req.Labels); err != nil {
		return nil, err
	}
	if err := validEnv(spec.Environment); err != nil {
		return nil, err
	}
	if len(spec.Providers) > maxProviders {
		return nil, status.Errorf(codes.InvalidArgument, "at most %d providers", maxProviders)
	}
	if len(spec.LogLevel) > 32 {
		return nil, status.Error(codes.InvalidArgument, "log_level is longer than 32 bytes")
	}
	if gpu := spec.GetResourceRequirements().GetGpu(); gpu != nil && gpu.Count != nil && *gpu.Count == 0 {
		return nil, status.Error(codes.InvalidArgument, "gpu count must be at least 1")
	}
	g.mu.Lock()
	ws, err := g.workspaceOf(req.Workspace)
	if err != nil {
		g.mu.Unlock()
		return nil, err
	}
	if _, ok := g.sandboxes[wsName{ws, req.Name}]; ok {
		g.mu.Unlock()
		return nil, status.Errorf(codes.AlreadyExists, "sandbox '%s' already exists", req.Name)
	}
	for _, p := range spec.Providers {
		if _, ok := g.providers[wsName{ws, p}]; !ok {
			g.mu.Unlock()
			return nil, status.Errorf(codes.FailedPrecondition, "provider '%s' not found", p)
		}
	}
	if spec.Template == nil {
		spec.Template = &openshellv1.SandboxTemplate{}
	}
	if spec.Template.Image == "" {
		spec.Template.Image = g.opts.DefaultImage
	}
	ns, crName, err := g.place(ctx, ws, req.Name)
	if err != nil {
		g.mu.Unlock()
		return nil, err
	}
	row := &sandboxRow{ns: ns, crName: crName, sb: &openshellv1.Sandbox{
		Metadata: &datamodelv1.ObjectMeta{Id: gatewayapi.NewRequestID(), Name: req.Name, Workspace: ws, CreatedAtMs: time.Now().UnixMilli(),
			ResourceVersion: 1, Labels: req.Labels, Annotations: req.Annotations},
		Spec:   spec,
		Status: &openshellv1.SandboxStatus{Phase: openshellv1.SandboxPhase_SANDBOX_PHASE_PROVISIONING},
	}}
	g.sandboxes[wsName{ws, req.Name}] = row
	if spec.Policy != nil {
		row.policyV = 1
		g.addRevision(row, 1)
	}
	g.byID[row.sb.Metadata.Id] = row
	g.created++
	resp := proto.Clone(row.sb).(*openshellv1.Sandbox)
	g.mu.Unlock()

	if g.driver != nil {
		// The work outlives the request, as on a real server (which commits
		// the row and lets its compute driver create the Sandbox): a client
		// that gives up mid-call must not leave an agents.x-k8s.io Sandbox
		// without its row (every later create would then fail on it).
		if err := g.driver.create(context.WithoutCancel(ctx), row, resp); err != nil {
			g.mu.Lock()
			delete(g.sandboxes, wsName{ws, req.Name})
			delete(g.byID, row.sb.Metadata.Id)
			g.mu.Unlock()
			if status.Code(err) == codes.AlreadyExists || status.Code(err) == codes.FailedPrecondition {
				return nil, err
			}
			return nil, status.Errorf(codes.Internal, "create sandbox failed: %v", err)
		}
	}
	return &openshellv1.SandboxResponse{Sandbox: resp}, nil
}

func (g *Gateway) lookup(ws, name string) (*sandboxRow, error) {
	r, ok := g.sandboxes[wsName{defaultWorkspace(ws), name}]
	if !ok {
		return nil, status.Error(codes.NotFound, "sandbox not found")
	}
	return r, nil
}

// lookupAt is lookup for a compare-and-swap update: a non-zero expected
// resource version must match the stored one.
func (g *Gateway) lookupAt(ws, name string, expected uint64) (*sandboxRow, error) {
	r, err := g.lookup(ws, name)
	if err != nil {
		return nil, err
	}
	if expected != 0 && expected != r.sb.Metadata.ResourceVersion {
		return nil, status.Error(codes.Aborted, "resource version mismatch")
	}
	return r, nil
}

// GetSandbox reads the stored row.
func (g *Gateway) GetSandbox(_ context.Context, req *openshellv1.GetSandboxRequest) (*openshellv1.SandboxResponse, error) {
	g.mu.Lock()
	r, err := g.lookup(req.Workspace, req.Name)
	if err != nil {
		g.mu.Unlock()
		return nil, err
	}
	sb := proto.Clone(r.sb).(*openshellv1.Sandbox)
	g.mu.Unlock()
	if sb.GetStatus().GetPhase() == openshellv1.SandboxPhase_SANDBOX_PHASE_READY {
		g.traced(TraceReadyAnswered, sb.GetMetadata().GetName())
	}
	return &openshellv1.SandboxResponse{Sandbox: sb}, nil
}

// idOf is the ID of a workspace's sandbox of that name.
func (g *Gateway) idOf(workspace, name string) (string, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	r, err := g.lookup(workspace, name)
	if err != nil {
		return "", err
	}
	return r.sb.GetMetadata().GetId(), nil
}

// ListSandboxes lists a workspace, filtered by an equality label selector.
func (g *Gateway) ListSandboxes(ctx context.Context, req *openshellv1.ListSandboxesRequest) (*openshellv1.ListSandboxesResponse, error) {
	if req.AllWorkspaces && req.Workspace != "" {
		return nil, status.Error(codes.InvalidArgument, "all_workspaces cannot be combined with workspace")
	}
	if req.AllWorkspaces && !callerIsAdmin(ctx) {
		return nil, status.Error(codes.PermissionDenied, "listing all workspaces requires the platform admin role")
	}
	want, err := equalitySelector(req.LabelSelector)
	if err != nil {
		return nil, err
	}
	ws := defaultWorkspace(req.Workspace)
	g.mu.Lock()
	defer g.mu.Unlock()
	var all []*openshellv1.Sandbox
	for k, r := range g.sandboxes {
		if !req.AllWorkspaces && k.ws != ws {
			continue
		}
		if matches(r.sb.Metadata.Labels, want) {
			all = append(all, r.sb)
		}
	}
	// Ordered by created_at_ms, then name; limit 0 means 100, capped at 1000.
	slices.SortFunc(all, func(a, b *openshellv1.Sandbox) int {
		if c := cmp.Compare(a.Metadata.CreatedAtMs, b.Metadata.CreatedAtMs); c != 0 {
			return c
		}
		return cmp.Compare(a.Metadata.Workspace+"/"+a.Metadata.Name, b.Metadata.Workspace+"/"+b.Metadata.Name)
	})
	limit := int(req.Limit)
	if limit == 0 {
		limit = 100
	}
	limit = min(limit, 1000)
	out := &openshellv1.ListSandboxesResponse{}
	for i := int(req.Offset); i < len(all) && len(out.Sandboxes) < limit; i++ {
		out.Sandboxes = append(out.Sandboxes, proto.Clone(all[i]).(*openshellv1.Sandbox))
	}
	return out, nil
}

// DeleteSandbox marks the row DELETING and deletes the CR; the row goes
// when the driver sees the CR vanish.
func (g *Gateway) DeleteSandbox(ctx context.Context, req *openshellv1.DeleteSandboxRequest) (*openshellv1.DeleteSandboxResponse, error) {
	g.mu.Lock()
	r, err := g.lookup(req.Workspace, req.Name)
	if err != nil {
		g.mu.Unlock()
		return nil, err
	}
	if r.deleting {
		g.mu.Unlock()
		return &openshellv1.DeleteSandboxResponse{Deleted: true}, nil
	}
	r.deleting = true
	r.sb.Status.Phase = openshellv1.SandboxPhase_SANDBOX_PHASE_DELETING
	r.sb.Metadata.ResourceVersion++
	g.notify(r.sb.Metadata.Id)
	g.mu.Unlock()
	existed := true
	if g.driver != nil {
		existed, err = g.driver.delete(ctx, r)
		if err != nil {
			return nil, status.Errorf(codes.Internal, "delete sandbox failed: %v", err)
		}
	}
	if !existed || g.driver == nil {
		g.remove(r)
	}
	return &openshellv1.DeleteSandboxResponse{Deleted: existed}, nil
}

func (g *Gateway) remove(r *sandboxRow) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.sandboxes, wsName{r.sb.Metadata.Workspace, r.sb.Metadata.Name})
	delete(g.byID, r.sb.Metadata.Id)
	for _, ch := range g.watchers[r.sb.Metadata.Id] {
		close(ch)
	}
	delete(g.watchers, r.sb.Metadata.Id)
}

// WatchSandbox streams snapshots until the row is removed or, with
// stop_on_terminal, until it is READY (other phases keep the stream open).
func (g *Gateway) WatchSandbox(req *openshellv1.WatchSandboxRequest, stream openshellv1.OpenShell_WatchSandboxServer) error {
	g.mu.Lock()
	r, ok := g.byID[req.Id]
	if !ok {
		g.mu.Unlock()
		return status.Error(codes.NotFound, "sandbox not found")
	}
	ch := make(chan struct{}, 1)
	g.watchers[req.Id] = append(g.watchers[req.Id], ch)
	snap := proto.Clone(r.sb).(*openshellv1.Sandbox)
	g.mu.Unlock()
	defer g.unwatch(req.Id, ch)
	for {
		if snap.Status.GetPhase() == openshellv1.SandboxPhase_SANDBOX_PHASE_READY {
			g.traced(TraceReadySent, snap.GetMetadata().GetName())
		}
		if err := stream.Send(&openshellv1.SandboxStreamEvent{Payload: &openshellv1.SandboxStreamEvent_Sandbox{Sandbox: snap}}); err != nil {
			return err
		}
		if req.StopOnTerminal && snap.Status.Phase == openshellv1.SandboxPhase_SANDBOX_PHASE_READY {
			return nil
		}
		select {
		case _, open := <-ch:
			if !open {
				return nil
			}
		case <-stream.Context().Done():
			return nil
		}
		g.mu.Lock()
		r, ok = g.byID[req.Id]
		if ok {
			snap = proto.Clone(r.sb).(*openshellv1.Sandbox)
		}
		g.mu.Unlock()
		if !ok {
			return nil
		}
	}
}

func (g *Gateway) unwatch(id string, ch chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	ws := g.watchers[id]
	for i, c := range ws {
		if c == ch {
			g.watchers[id] = append(ws[:i], ws[i+1:]...)
			break
		}
	}
}

// AttachSandboxProvider adds a provider to a sandbox (idempotent, CAS).
func (g *Gateway) AttachSandboxProvider(_ context.Context, req *openshellv1.AttachSandboxProviderRequest) (*openshellv1.AttachSandboxProviderResponse, error) {
	if req.ProviderName == "" {
		return nil, status.Error(codes.InvalidArgument, "provider_name is required")
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	r, err := g.lookupAt(req.Workspace, req.SandboxName, req.ExpectedResourceVersion)
	if err != nil {
		return nil, err
	}
	if _, ok := g.providers[wsName{r.sb.Metadata.Workspace, req.ProviderName}]; !ok {
		return nil, status.Errorf(codes.FailedPrecondition, "provider '%s' not found", req.ProviderName)
	}
	for _, p := range r.sb.Spec.Providers {
		if p == req.ProviderName {
			return &openshellv1.AttachSandboxProviderResponse{Sandbox: proto.Clone(r.sb).(*openshellv1.Sandbox), Attached: false}, nil
		}
	}
	if len(r.sb.Spec.Providers) >= maxProviders {
		return nil, status.Errorf(codes.InvalidArgument, "at most %d providers", maxProviders)
	}
	r.sb.Spec.Providers = append(r.sb.Spec.Providers, req.ProviderName)
	r.sb.Metadata.ResourceVersion++
	g.notify(r.sb.Metadata.Id)
	return &openshellv1.AttachSandboxProviderResponse{Sandbox: proto.Clone(r.sb).(*openshellv1.Sandbox), Attached: true}, nil
}

// DetachSandboxProvider removes a provider from a sandbox (idempotent, CAS).
func (g *Gateway) DetachSandboxProvider(_ context.Context, req *openshellv1.DetachSandboxProviderRequest) (*openshellv1.DetachSandboxProviderResponse, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	r, err := g.lookupAt(req.Workspace, req.SandboxName, req.ExpectedResourceVersion)
	if err != nil {
		return nil, err
	}
	for i, p := range r.sb.Spec.Providers {
		if p == req.ProviderName {
			r.sb.Spec.Providers = append(r.sb.Spec.Providers[:i], r.sb.Spec.Providers[i+1:]...)
			r.sb.Metadata.ResourceVersion++
			g.notify(r.sb.Metadata.Id)
			return &openshellv1.DetachSandboxProviderResponse{Sandbox: proto.Clone(r.sb).(*openshellv1.Sandbox), Detached: true}, nil
		}
	}
	return &openshellv1.DetachSandboxProviderResponse{Sandbox: proto.Clone(r.sb).(*openshellv1.Sandbox), Detached: false}, nil
}

func redacted(p *datamodelv1.Provider) *datamodelv1.Provider {
	out := proto.Clone(p).(*datamodelv1.Provider)
	for k := range out.Credentials {
		out.Credentials[k] = "REDACTED"
	}
	return out
}

func validProvider(p *datamodelv1.Provider) error {
	if p == nil || p.Metadata == nil {
		return status.Error(codes.InvalidArgument, "provider is required")
	}
	if len(p.Metadata.Name) > maxProviderName {
		return status.Error(codes.InvalidArgument, "provider name is longer than 253 bytes")
	}
	if len(p.CredentialHandles) > 0 {
		return status.Error(codes.InvalidArgument, "credential_handles cannot be set by clients")
	}
	if len(p.Credentials) > maxProviderCreds || len(p.Config) > 64 {
		return status.Error(codes.InvalidArgument, "too many credentials or config keys")
	}
	for k, v := range p.Credentials {
		if v == "REDACTED" {
			// A client wrote a fetched provider back: refuse rather than
			// store the literal placeholder.
			return status.Errorf(codes.InvalidArgument, "credential '%s' holds the REDACTED placeholder", k)
		}
	}
	return nil
}

// CreateProvider stores a provider; responses are redacted.
func (g *Gateway) CreateProvider(_ context.Context, req *openshellv1.CreateProviderRequest) (*openshellv1.ProviderResponse, error) {
	p := req.Provider
	if err := validProvider(p); err != nil {
		return nil, err
	}
	if t := strings.TrimSpace(p.Type); t == "" || len(t) > maxProviderType {
		return nil, status.Error(codes.InvalidArgument, "provider.type must be non-empty and at most 64 bytes")
	}
	if len(p.Credentials) == 0 {
		return nil, status.Error(codes.InvalidArgument, "provider.credentials must not be empty")
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	ws, err := g.workspaceOf(req.Workspace)
	if err != nil {
		return nil, err
	}
	if _, ok := g.providers[wsName{ws, p.Metadata.Name}]; ok {
		return nil, status.Error(codes.AlreadyExists, "provider already exists")
	}
	stored := proto.Clone(p).(*datamodelv1.Provider)
	stored.Metadata.Id, stored.Metadata.Workspace, stored.Metadata.ResourceVersion = gatewayapi.NewRequestID(), ws, 1
	g.providers[wsName{ws, p.Metadata.Name}] = stored
	return &openshellv1.ProviderResponse{Provider: redacted(stored)}, nil
}

// GetProvider returns a redacted provider.
func (g *Gateway) GetProvider(_ context.Context, req *openshellv1.GetProviderRequest) (*openshellv1.ProviderResponse, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	ws := defaultWorkspace(req.Workspace)
	p, ok := g.providers[wsName{ws, req.Name}]
	if !ok {
		return nil, status.Error(codes.NotFound, "provider not found")
	}
	return &openshellv1.ProviderResponse{Provider: redacted(p)}, nil
}

// UpdateProvider merges credentials and config (empty value deletes).
func (g *Gateway) UpdateProvider(_ context.Context, req *openshellv1.UpdateProviderRequest) (*openshellv1.ProviderResponse, error) {
	p := req.Provider
	if err := validProvider(p); err != nil {
		return nil, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	ws := defaultWorkspace(req.Workspace)
	cur, ok := g.providers[wsName{ws, p.Metadata.Name}]
	if !ok {
		return nil, status.Error(codes.NotFound, "provider not found")
	}
	if p.Type != "" && !strings.EqualFold(p.Type, cur.Type) {
		return nil, status.Error(codes.InvalidArgument, "provider type cannot change")
	}
	if rv := p.Metadata.ResourceVersion; rv != 0 && rv != cur.Metadata.ResourceVersion {
		return nil, status.Error(codes.Aborted, "resource version mismatch")
	}
	merge := func(dst *map[string]string, src map[string]string) {
		if *dst == nil {
			*dst = map[string]string{}
		}
		for k, v := range src {
			if v == "" {
				delete(*dst, k)
			} else {
				(*dst)[k] = v
			}
		}
	}
	merge(&cur.Credentials, p.Credentials)
	merge(&cur.Config, p.Config)
	cur.Metadata.ResourceVersion++
	return &openshellv1.ProviderResponse{Provider: redacted(cur)}, nil
}

// DeleteProvider refuses while the provider is attached.
func (g *Gateway) DeleteProvider(_ context.Context, req *openshellv1.DeleteProviderRequest) (*openshellv1.DeleteProviderResponse, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	ws := defaultWorkspace(req.Workspace)
	if _, ok := g.providers[wsName{ws, req.Name}]; !ok {
		return &openshellv1.DeleteProviderResponse{Deleted: false}, nil
	}
	var users []string
	for k, r := range g.sandboxes {
		for _, p := range r.sb.Spec.Providers {
			if k.ws == ws && p == req.Name {
				users = append(users, k.name)
			}
		}
	}
	if len(users) > 0 {
		return nil, status.Errorf(codes.FailedPrecondition, "provider '%s' is attached to sandbox(es): %s", req.Name, strings.Join(users, ", "))
	}
	delete(g.providers, wsName{ws, req.Name})
	g.forgetRefreshesLocked(ws, req.Name) // its refreshes go with it
	return &openshellv1.DeleteProviderResponse{Deleted: true}, nil
}

// UpdateConfig replaces a sandbox policy, keeping static parts unchanged.
func (g *Gateway) UpdateConfig(_ context.Context, req *openshellv1.UpdateConfigRequest) (*openshellv1.UpdateConfigResponse, error) {
	if (req.Policy != nil) == (req.SettingKey != "") {
		return nil, status.Error(codes.InvalidArgument, "exactly one of policy or setting_key must be set")
	}
	if req.Global || req.Policy == nil {
		return nil, status.Error(codes.Unimplemented, "only sandbox policy updates are supported by the test gateway")
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	r, err := g.lookupAt(req.Workspace, req.Name, req.ExpectedResourceVersion)
	if err != nil {
		return nil, err
	}
	if old := r.sb.Spec.Policy; old != nil {
		if !proto.Equal(old.Landlock, req.Policy.Landlock) {
			return nil, status.Error(codes.InvalidArgument, "landlock policy cannot be changed on a live sandbox")
		}
		if !proto.Equal(old.Process, req.Policy.Process) {
			return nil, status.Error(codes.InvalidArgument, "process policy cannot be changed on a live sandbox")
		}
		if err := additive(old.Filesystem, req.Policy.Filesystem); err != nil {
			return nil, err
		}
	}
	b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(req.Policy)
	sum := sha256.Sum256(b)
	if old := r.sb.Spec.Policy; old != nil && proto.Equal(old, req.Policy) {
		return &openshellv1.UpdateConfigResponse{Version: r.policyV, PolicyHash: hex.EncodeToString(sum[:])}, nil
	}
	r.sb.Spec.Policy = proto.Clone(req.Policy).(*sandboxv1.SandboxPolicy)
	r.policyV++
	r.sb.Metadata.ResourceVersion++
	g.notify(r.sb.Metadata.Id)
	g.addRevision(r, r.policyV)
	return &openshellv1.UpdateConfigResponse{Version: r.policyV, PolicyHash: hex.EncodeToString(sum[:])}, nil
}

// GetSandboxConfig returns a sandbox's policy (0.0.x: what its supervisor
// and the CLI's `sandbox get` read). Global policies and settings are not
// played: the source is always the sandbox.
func (g *Gateway) GetSandboxConfig(_ context.Context, req *sandboxv1.GetSandboxConfigRequest) (*sandboxv1.GetSandboxConfigResponse, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	r, ok := g.byID[req.SandboxId]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "sandbox %q not found", req.SandboxId)
	}
	resp := &sandboxv1.GetSandboxConfigResponse{Workspace: r.sb.Metadata.Workspace}
	if p := r.sb.Spec.Policy; p != nil {
		b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(p)
		sum := sha256.Sum256(b)
		resp.Policy, resp.Version, resp.PolicyHash = proto.Clone(p).(*sandboxv1.SandboxPolicy), r.policyV, hex.EncodeToString(sum[:])
		resp.PolicySource = sandboxv1.PolicySource_POLICY_SOURCE_SANDBOX
	}
	return resp, nil
}

func additive(old, next *sandboxv1.FilesystemPolicy) error {
	if old == nil {
		return nil
	}
	if next == nil {
		return status.Error(codes.InvalidArgument, "the filesystem policy cannot be removed")
	}
	if old.IncludeWorkdir != next.IncludeWorkdir {
		return status.Error(codes.InvalidArgument, "include_workdir cannot change")
	}
	contains := func(list []string, s string) bool {
		for _, x := range list {
			if x == s {
				return true
			}
		}
		return false
	}
	for _, p := range old.ReadOnly {
		if !contains(next.ReadOnly, p) {
			return status.Errorf(codes.InvalidArgument, "read_only path '%s' cannot be removed", p)
		}
	}
	for _, p := range old.ReadWrite {
		if !contains(next.ReadWrite, p) {
			return status.Errorf(codes.InvalidArgument, "read_write path '%s' cannot be removed", p)
		}
	}
	return nil
}

// equalitySelector parses a label_selector of k=v pairs joined by commas
// (the only form the gateway serves).
func equalitySelector(sel string) (map[string]string, error) {
	want := map[string]string{}
	if sel == "" {
		return want, nil
	}
	for _, kv := range strings.Split(sel, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, status.Error(codes.InvalidArgument, "label_selector supports k=v pairs only")
		}
		want[k] = v
	}
	return want, nil
}

// matches says whether labels hold every pair of want.
func matches(labels, want map[string]string) bool {
	for k, v := range want {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// defaultWorkspace applies the gateway's rule: an empty workspace is "default".
func defaultWorkspace(ws string) string {
	if ws == "" {
		return "default"
	}
	return ws
}
