package testgateway

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/datamodelv1"
	v01 "github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/openshellv1"
)

// The 0.1 provider-profile catalog: import-only, empty on a fresh
// gateway, one catalog for the platform and one per workspace. A provider
// names its type (the profile id) and profile_workspace (the platform's
// catalog when empty, else its own workspace's); attaching it to a
// sandbox, at creation or later, fails while that profile is missing,
// naming the provider, the profile and the import command, as the 0.1
// release notes describe. The catalog lives with the gateway's state: a
// gateway started anew has none.

// catalogKey names one profile: workspace "" is the platform catalog.
type catalogKey struct{ ws, id string }

// catalogOf resolves a request's workspace_scope to a catalog: none is
// the platform's; a named workspace must exist.
func (g *Gateway) catalogOf(sel *datamodelv1.WorkspaceSelector) (string, error) {
	if sel == nil {
		return "", nil
	}
	return g.workspaceOf(sel.GetWorkspace())
}

// Profile returns a copy of the profile id in workspace's catalog ("" the
// platform's), or nil.
func (g *Gateway) Profile(workspace, id string) *v01.ProviderProfile {
	g.mu.Lock()
	defer g.mu.Unlock()
	if p, ok := g.profiles[catalogKey{workspace, id}]; ok {
		return proto.Clone(p).(*v01.ProviderProfile)
	}
	return nil
}

// ImportProfile puts a profile into a catalog as the gateway's admin would
// with `openshell provider profile import` (tests of out-of-band imports).
func (g *Gateway) ImportProfile(workspace string, p *v01.ProviderProfile) {
	g.mu.Lock()
	defer g.mu.Unlock()
	stored := proto.Clone(p).(*v01.ProviderProfile)
	stored.ResourceVersion = 1
	g.profiles[catalogKey{workspace, p.GetId()}] = stored
}

// profileDiagnostics checks what the release's linter would refuse of a
// profile (a subset: an id, endpoints with hosts, named credentials).
func profileDiagnostics(p *v01.ProviderProfile, source string) []*v01.ProviderProfileDiagnostic {
	var out []*v01.ProviderProfileDiagnostic
	add := func(field, msg string) {
		out = append(out, &v01.ProviderProfileDiagnostic{Source: source, ProfileId: p.GetId(), Field: field, Message: msg, Severity: "error"})
	}
	if p.GetId() == "" {
		add("id", "id is required")
	}
	for i, e := range p.GetEndpoints() {
		if e.GetHost() == "" {
			add(fmt.Sprintf("endpoints[%d].host", i), "host is required")
		}
	}
	for i, c := range p.GetCredentials() {
		if c.GetName() == "" {
			add(fmt.Sprintf("credentials[%d].name", i), "name is required")
		}
	}
	return out
}

func (s *v01Server) GetProviderProfile(_ context.Context, in *v01.GetProviderProfileRequest) (*v01.ProviderProfileResponse, error) {
	g := s.g
	g.mu.Lock()
	defer g.mu.Unlock()
	ws, err := g.catalogOf(in.GetWorkspaceScope())
	if err != nil {
		return nil, err
	}
	p, ok := g.profiles[catalogKey{ws, in.GetId()}]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "provider profile '%s' not found", in.GetId())
	}
	return &v01.ProviderProfileResponse{Profile: proto.Clone(p).(*v01.ProviderProfile)}, nil
}

// ImportProviderProfiles registers new profiles; an id the catalog holds
// is a diagnostic (UpdateProviderProfiles replaces).
func (s *v01Server) ImportProviderProfiles(_ context.Context, in *v01.ImportProviderProfilesRequest) (*v01.ImportProviderProfilesResponse, error) {
	g := s.g
	g.mu.Lock()
	defer g.mu.Unlock()
	ws, err := g.catalogOf(in.GetWorkspaceScope())
	if err != nil {
		return nil, err
	}
	out := &v01.ImportProviderProfilesResponse{}
	for _, item := range in.GetProfiles() {
		out.Diagnostics = append(out.Diagnostics, profileDiagnostics(item.GetProfile(), item.GetSource())...)
		if _, ok := g.profiles[catalogKey{ws, item.GetProfile().GetId()}]; ok {
			out.Diagnostics = append(out.Diagnostics, &v01.ProviderProfileDiagnostic{Source: item.GetSource(), ProfileId: item.GetProfile().GetId(),
				Field: "id", Message: "a profile with this id exists; update it instead", Severity: "error"})
		}
	}
	if len(out.Diagnostics) > 0 {
		return out, nil
	}
	for _, item := range in.GetProfiles() {
		p := proto.Clone(item.GetProfile()).(*v01.ProviderProfile)
		p.ResourceVersion, p.Source, p.Scope = 1, item.GetSource(), scopeName(ws)
		g.profiles[catalogKey{ws, p.GetId()}] = p
		out.Profiles = append(out.Profiles, proto.Clone(p).(*v01.ProviderProfile))
	}
	out.Imported = true
	return out, nil
}

func scopeName(ws string) string {
	if ws == "" {
		return "platform"
	}
	return "workspace"
}

// UpdateProviderProfiles replaces one profile, compare-and-swap on its
// resource_version.
func (s *v01Server) UpdateProviderProfiles(_ context.Context, in *v01.UpdateProviderProfilesRequest) (*v01.UpdateProviderProfilesResponse, error) {
	g := s.g
	g.mu.Lock()
	defer g.mu.Unlock()
	ws, err := g.catalogOf(in.GetWorkspaceScope())
	if err != nil {
		return nil, err
	}
	cur, ok := g.profiles[catalogKey{ws, in.GetId()}]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "provider profile '%s' not found", in.GetId())
	}
	if in.GetExpectedResourceVersion() != cur.GetResourceVersion() {
		return nil, status.Errorf(codes.Aborted, "provider profile '%s' is at resource version %d, not %d", in.GetId(), cur.GetResourceVersion(), in.GetExpectedResourceVersion())
	}
	item := in.GetProfile()
	if item.GetProfile().GetId() != in.GetId() {
		return nil, status.Error(codes.InvalidArgument, "the profile's id must be the id updated")
	}
	if d := profileDiagnostics(item.GetProfile(), item.GetSource()); len(d) > 0 {
		return &v01.UpdateProviderProfilesResponse{Diagnostics: d}, nil
	}
	p := proto.Clone(item.GetProfile()).(*v01.ProviderProfile)
	p.ResourceVersion, p.Source, p.Scope = cur.GetResourceVersion()+1, item.GetSource(), scopeName(ws)
	g.profiles[catalogKey{ws, p.GetId()}] = p
	return &v01.UpdateProviderProfilesResponse{Profile: proto.Clone(p).(*v01.ProviderProfile), Updated: true}, nil
}

func (s *v01Server) DeleteProviderProfile(_ context.Context, in *v01.DeleteProviderProfileRequest) (*v01.DeleteProviderProfileResponse, error) {
	g := s.g
	g.mu.Lock()
	defer g.mu.Unlock()
	ws, err := g.catalogOf(in.GetWorkspaceScope())
	if err != nil {
		return nil, err
	}
	k := catalogKey{ws, in.GetId()}
	if _, ok := g.profiles[k]; !ok {
		if in.GetAllowMissing() {
			return &v01.DeleteProviderProfileResponse{Outcome: v01.DeletionOutcome_DELETION_OUTCOME_ALREADY_ABSENT}, nil
		}
		return nil, status.Errorf(codes.NotFound, "provider profile '%s' not found", in.GetId())
	}
	delete(g.profiles, k)
	return &v01.DeleteProviderProfileResponse{Outcome: v01.DeletionOutcome_DELETION_OUTCOME_COMPLETED}, nil
}

// setProfileWorkspace records a provider's profile_workspace, which must
// be empty or the provider's own workspace, and clears it from the
// message (the 0.0.x store underneath has no such field).
func (g *Gateway) setProfileWorkspace(sel *datamodelv1.WorkspaceSelector, p *datamodelv1.Provider) (func(), error) {
	pw := p.GetProfileWorkspace()
	ws := sel.GetWorkspace()
	if ws == "" {
		ws = "default"
	}
	if pw != "" && pw != ws {
		return nil, status.Errorf(codes.InvalidArgument, "provider.profile_workspace must be empty or the provider's workspace %q", ws)
	}
	p.ProfileWorkspace = ""
	key := wsName{ws, p.GetMetadata().GetName()}
	return func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		g.profileRefs[key] = pw
	}, nil
}

// profilesMissing names, for a sandbox's providers in workspace ws, those
// whose profile is not in the catalog the provider resolves in. Called
// with g.mu held.
func (g *Gateway) profilesMissing(ws string, providers []string) error {
	for _, name := range providers {
		p, ok := g.providers[wsName{ws, name}]
		if !ok {
			continue // the 0.0.x path reports a missing provider
		}
		k := catalogKey{g.profileRefs[wsName{ws, name}], p.GetType()}
		if _, ok := g.profiles[k]; !ok {
			scope := "--global"
			if k.ws != "" {
				scope = "--workspace " + k.ws
			}
			return status.Errorf(codes.FailedPrecondition, "provider '%s' uses provider profile '%s', which is not imported: "+
				"run `openshell provider profile import --from <dir> %s`", name, p.GetType(), scope)
		}
	}
	return nil
}

// checkProfiles plays the refusal of a sandbox create or attach whose
// providers' profiles are missing.
func (g *Gateway) checkProfiles(sel *datamodelv1.WorkspaceSelector, providers []string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	ws := sel.GetWorkspace()
	if ws == "" {
		ws = "default"
	}
	return g.profilesMissing(ws, providers)
}

// forgetProfileRef drops a deleted provider's profile_workspace.
func (g *Gateway) forgetProfileRef(sel *datamodelv1.WorkspaceSelector, name string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	ws := sel.GetWorkspace()
	if ws == "" {
		ws = "default"
	}
	delete(g.profileRefs, wsName{ws, name})
}

// ProviderProfileWorkspace is the profile_workspace a provider was last
// given through the 0.1 wire, and whether it was given one at all.
func (g *Gateway) ProviderProfileWorkspace(workspace, name string) (string, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	pw, ok := g.profileRefs[wsName{workspace, name}]
	return pw, ok
}
