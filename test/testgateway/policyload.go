package testgateway

import (
	"context"
	"slices"
	"sort"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/openshellv1"
)

// addRevision records a new policy version as PENDING and supersedes older
// pending ones; g.mu is held. A revision stays PENDING until the sandbox's
// supervisor reports LOADED or FAILED, then is SUPERSEDED by a newer one.
func (g *Gateway) addRevision(r *sandboxRow, version uint32) {
	for _, old := range r.revisions {
		if old.Status == openshellv1.PolicyStatus_POLICY_STATUS_PENDING {
			old.Status = openshellv1.PolicyStatus_POLICY_STATUS_SUPERSEDED
		}
	}
	r.revisions = append(r.revisions, &openshellv1.SandboxPolicyRevision{Version: version,
		Status: openshellv1.PolicyStatus_POLICY_STATUS_PENDING, CreatedAtMs: time.Now().UnixMilli(), Policy: r.sb.Spec.Policy})
	g.supervise(r)
}

// supervise plays the sandbox's supervisor: once the sandbox is READY (its
// supervisor connected), it loads the newest PENDING revision and reports
// LOADED (current_policy_version follows) or, when a test asked, FAILED
// with the load error; g.mu is held.
func (g *Gateway) supervise(r *sandboxRow) {
	if r.sb.Status.GetPhase() != openshellv1.SandboxPhase_SANDBOX_PHASE_READY || len(r.revisions) == 0 {
		return
	}
	latest := r.revisions[len(r.revisions)-1]
	if latest.Status != openshellv1.PolicyStatus_POLICY_STATUS_PENDING {
		return
	}
	if r.failLoad != "" {
		latest.Status, latest.LoadError, r.failLoad = openshellv1.PolicyStatus_POLICY_STATUS_FAILED, r.failLoad, ""
		return
	}
	for _, old := range r.revisions {
		if old.Status == openshellv1.PolicyStatus_POLICY_STATUS_LOADED {
			old.Status = openshellv1.PolicyStatus_POLICY_STATUS_SUPERSEDED
		}
	}
	latest.Status, latest.LoadedAtMs = openshellv1.PolicyStatus_POLICY_STATUS_LOADED, time.Now().UnixMilli()
	r.sb.Status.CurrentPolicyVersion = latest.Version
	r.sb.Metadata.ResourceVersion++
	g.notify(r.sb.Metadata.Id)
}

// FailPolicyLoad makes the supervisor of a sandbox reject the next policy
// version it loads, with loadError (a policy the gateway accepted but the
// supervisor cannot enforce).
func (g *Gateway) FailPolicyLoad(workspace, name, loadError string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if r, ok := g.sandboxes[wsName{workspace, name}]; ok {
		r.failLoad = loadError
	}
}

// GetSandboxPolicyStatus returns a revision (version 0: the newest) and the
// version the supervisor has loaded (current_policy_version).
func (g *Gateway) GetSandboxPolicyStatus(_ context.Context, req *openshellv1.GetSandboxPolicyStatusRequest) (*openshellv1.GetSandboxPolicyStatusResponse, error) {
	if req.Global {
		return nil, status.Error(codes.Unimplemented, "global policy status is not supported by the test gateway")
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	r, err := g.lookup(req.Workspace, req.Name)
	if err != nil {
		return nil, err
	}
	revs := slices.Clone(r.revisions)
	sort.Slice(revs, func(i, j int) bool { return revs[i].Version < revs[j].Version })
	for i := len(revs) - 1; i >= 0; i-- {
		if req.Version == 0 || revs[i].Version == req.Version {
			return &openshellv1.GetSandboxPolicyStatusResponse{Revision: proto.Clone(revs[i]).(*openshellv1.SandboxPolicyRevision),
				ActiveVersion: r.sb.Status.GetCurrentPolicyVersion()}, nil
		}
	}
	return nil, status.Error(codes.NotFound, "policy revision not found")
}
