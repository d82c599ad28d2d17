package testgateway

import (
	"context"
	"fmt"
	"strconv"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	v01 "github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/openshellv1"
	v01sandbox "github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/sandboxv1"
)

// The policy advisor (0.1): a sandbox's settings and its draft chunks.
//
// Played from the release's descriptors and its source's documented
// behaviour: the setting agent_policy_proposals_enabled (a bool) gates the
// agent's proposals; a chunk's status is "pending", "approved" or
// "rejected"; RejectDraftChunk takes a pending (or approved) chunk,
// records the reviewer's reason as rejection_reason and is refused for a
// chunk already rejected (FailedPrecondition); GetDraftHistory lists a
// "proposed" entry per chunk and one named by its status once decided;
// rejecting is for workspace admins. Approval is not played: the operator
// never approves at the gateway.

// ProposalsSetting is the sandbox setting that enables the advisor.
const ProposalsSetting = "agent_policy_proposals_enabled"

// registeredSettings are the keys the gateway accepts (it refuses others)
// with the kind of value each takes.
var registeredSettings = map[string]string{ProposalsSetting: "bool", "proposal_approval_mode": "string"}

// drafts is a sandbox's advisor state, on its row.
type drafts struct {
	settings map[string]*v01sandbox.SettingValue
	chunks   []*v01.PolicyChunk
	version  uint64
	// decided is when each decided chunk was decided, by ID.
	decided map[string]*timestamppb.Timestamp
}

func (r *sandboxRow) advisor() *drafts {
	if r.drafts == nil {
		r.drafts = &drafts{settings: map[string]*v01sandbox.SettingValue{}, decided: map[string]*timestamppb.Timestamp{}}
	}
	return r.drafts
}

// typed says whether v holds a value of kind.
func typed(kind string, v *v01sandbox.SettingValue) bool {
	switch v.GetValue().(type) {
	case *v01sandbox.SettingValue_BoolValue:
		return kind == "bool"
	case *v01sandbox.SettingValue_StringValue:
		return kind == "string"
	}
	return false
}

// updateSetting is UpdateConfig's sandbox-scoped setting path.
func (g *Gateway) updateSetting(in *v01.UpdateConfigRequest) (*v01.UpdateConfigResponse, error) {
	kind, ok := registeredSettings[in.GetSettingKey()]
	switch {
	case in.GetGlobal():
		return nil, status.Error(codes.Unimplemented, "global settings are not played by the test gateway")
	case !ok:
		return nil, status.Errorf(codes.InvalidArgument, "unknown setting key '%s'", in.GetSettingKey())
	case !in.GetDeleteSetting() && !typed(kind, in.GetSettingValue()):
		return nil, status.Errorf(codes.InvalidArgument, "setting '%s' takes a %s value", in.GetSettingKey(), kind)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	r, err := g.lookup(in.GetWorkspaceScope().GetWorkspace(), in.GetSandbox())
	if err != nil {
		return nil, err
	}
	a := r.advisor()
	if in.GetDeleteSetting() {
		delete(a.settings, in.GetSettingKey())
	} else {
		a.settings[in.GetSettingKey()] = proto.Clone(in.GetSettingValue()).(*v01sandbox.SettingValue)
	}
	r.sb.Metadata.ResourceVersion++
	return &v01.UpdateConfigResponse{Version: r.policyV, SettingsRevision: r.sb.Metadata.ResourceVersion}, nil
}

// advisorOf returns a sandbox's advisor state for assertions (nil: none);
// the caller holds g.mu.
func (g *Gateway) advisorOf(workspace, sandbox string) *drafts {
	r, err := g.lookup(workspace, sandbox)
	if err != nil {
		return nil
	}
	return r.drafts
}

// Setting returns a sandbox's setting (nil: unset), for assertions.
func (g *Gateway) Setting(workspace, sandbox, key string) *v01sandbox.SettingValue {
	g.mu.Lock()
	defer g.mu.Unlock()
	if a := g.advisorOf(workspace, sandbox); a != nil {
		return a.settings[key]
	}
	return nil
}

// Propose plays the agent submitting a proposal through policy.local:
// refused unless the sandbox's advisor is enabled, as the supervisor
// refuses it. It returns the chunk's id.
func (g *Gateway) Propose(workspace, sandbox string, chunk *v01.PolicyChunk) (string, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	r, err := g.lookup(workspace, sandbox)
	if err != nil {
		return "", err
	}
	a := r.advisor()
	if !a.settings[ProposalsSetting].GetBoolValue() {
		return "", fmt.Errorf("agent-driven policy proposals are not enabled in sandbox %s", sandbox)
	}
	c := proto.Clone(chunk).(*v01.PolicyChunk)
	a.version++
	g.chunkSeq++
	c.Id = "chunk-" + strconv.Itoa(g.chunkSeq)
	c.Status = "pending"
	c.CreatedTime, c.FirstSeenTime, c.LastSeenTime = timestamppb.Now(), timestamppb.Now(), timestamppb.Now()
	if c.HitCount == 0 {
		c.HitCount = 1
	}
	a.chunks = append(a.chunks, c)
	return c.Id, nil
}

func (s *v01Server) GetDraftPolicy(_ context.Context, in *v01.GetDraftPolicyRequest) (*v01.GetDraftPolicyResponse, error) {
	if err := requireSelector(in); err != nil {
		return nil, err
	}
	s.g.mu.Lock()
	defer s.g.mu.Unlock()
	r, err := s.g.lookup(in.GetWorkspaceScope().GetWorkspace(), in.GetSandbox())
	if err != nil {
		return nil, err
	}
	out := &v01.GetDraftPolicyResponse{}
	if r.drafts == nil {
		return out, nil
	}
	out.DraftVersion = r.drafts.version
	for _, c := range r.drafts.chunks {
		if in.GetStatusFilter() == "" || c.Status == in.GetStatusFilter() {
			out.Chunks = append(out.Chunks, proto.Clone(c).(*v01.PolicyChunk))
		}
	}
	return out, nil
}

func (s *v01Server) RejectDraftChunk(_ context.Context, in *v01.RejectDraftChunkRequest) (*v01.RejectDraftChunkResponse, error) {
	if err := requireSelector(in); err != nil {
		return nil, err
	}
	if in.GetChunkId() == "" {
		return nil, status.Error(codes.InvalidArgument, "chunk_id is required")
	}
	s.g.mu.Lock()
	defer s.g.mu.Unlock()
	r, err := s.g.lookup(in.GetWorkspaceScope().GetWorkspace(), in.GetSandbox())
	if err != nil {
		return nil, err
	}
	for _, c := range r.advisor().chunks {
		if c.Id != in.GetChunkId() {
			continue
		}
		if c.Status != "pending" && c.Status != "approved" {
			return nil, status.Errorf(codes.FailedPrecondition, "chunk status is '%s', expected 'pending' or 'approved'", c.Status)
		}
		c.Status, c.RejectionReason = "rejected", in.GetReason()
		r.drafts.decided[c.Id] = timestamppb.Now()
		r.drafts.version++
		return &v01.RejectDraftChunkResponse{}, nil
	}
	return nil, status.Error(codes.NotFound, "chunk not found")
}

func (s *v01Server) GetDraftHistory(_ context.Context, in *v01.GetDraftHistoryRequest) (*v01.GetDraftHistoryResponse, error) {
	if err := requireSelector(in); err != nil {
		return nil, err
	}
	s.g.mu.Lock()
	defer s.g.mu.Unlock()
	r, err := s.g.lookup(in.GetWorkspaceScope().GetWorkspace(), in.GetSandbox())
	if err != nil {
		return nil, err
	}
	out := &v01.GetDraftHistoryResponse{}
	a := r.advisor()
	for _, c := range a.chunks {
		out.Entries = append(out.Entries, &v01.DraftHistoryEntry{EventType: "proposed", ChunkId: c.Id, EventTime: c.CreatedTime,
			Description: fmt.Sprintf("Rule '%s' proposed", c.RuleName)})
		if at, ok := a.decided[c.Id]; ok {
			out.Entries = append(out.Entries, &v01.DraftHistoryEntry{EventType: c.Status, ChunkId: c.Id, EventTime: at,
				Description: fmt.Sprintf("Rule '%s' %s", c.RuleName, c.Status)})
		}
	}
	return out, nil
}

// Chunk returns a copy of a sandbox's draft chunk (nil: none), for
// assertions.
func (g *Gateway) Chunk(workspace, sandbox, id string) *v01.PolicyChunk {
	g.mu.Lock()
	defer g.mu.Unlock()
	a := g.advisorOf(workspace, sandbox)
	if a == nil {
		return nil
	}
	for _, c := range a.chunks {
		if c.Id == id {
			return proto.Clone(c).(*v01.PolicyChunk)
		}
	}
	return nil
}

// DraftVersion returns a sandbox's draft version, for assertions.
func (g *Gateway) DraftVersion(workspace, sandbox string) uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	if a := g.advisorOf(workspace, sandbox); a != nil {
		return a.version
	}
	return 0
}
