package testgateway

import (
	"context"
	"sort"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/openshellv1"
)

// revision is one policy version of a sandbox, as the gateway keeps them:
// PENDING until the sandbox's supervisor reports LOADED or FAILED, then
// SUPERSEDED by a newer one.
type revision struct {
	rev *openshellv1.SandboxPolicyRevision
}

// addRevision records a new policy version as PENDING and supersedes older
// pending ones; g.mu is held.
func (g *Gateway) addRevision(r *sandboxRow, version uint32) {
	for _, old := range r.revisions {
		if old.rev.Status == openshellv1.PolicyStatus_POLICY_STATUS_PENDING {
			old.rev.Status = openshellv1.PolicyStatus_POLICY_STATUS_SUPERSEDED
		}
	}
	r.revisions = append(r.revisions, &revision{rev: &openshellv1.SandboxPolicyRevision{Version: version,
		Status: openshellv1.PolicyStatus_POLICY_STATUS_PENDING, CreatedAtMs: time.Now().UnixMilli(), Policy: r.sb.Spec.Policy}})
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
	latest := r.revisions[len(r.revisions)-1].rev
	if latest.Status != openshellv1.PolicyStatus_POLICY_STATUS_PENDING {
		return
	}
	if r.failLoad != "" {
		latest.Status, latest.LoadError, r.failLoad = openshellv1.PolicyStatus_POLICY_STATUS_FAILED, r.failLoad, ""
		return
	}
	for _, old := range r.revisions {
		if old.rev.Status == openshellv1.PolicyStatus_POLICY_STATUS_LOADED {
			old.rev.Status = openshellv1.PolicyStatus_POLICY_STATUS_SUPERSEDED
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
	revs := append([]*revision(nil), r.revisions...)
	sort.Slice(revs, func(i, j int) bool { return revs[i].rev.Version < revs[j].rev.Version })
	for i := len(revs) - 1; i >= 0; i-- {
		if req.Version == 0 || revs[i].rev.Version == req.Version {
			return &openshellv1.GetSandboxPolicyStatusResponse{Revision: proto.Clone(revs[i].rev).(*openshellv1.SandboxPolicyRevision),
				ActiveVersion: r.sb.Status.GetCurrentPolicyVersion()}, nil
		}
	}
	return nil, status.Error(codes.NotFound, "policy revision not found")
}
