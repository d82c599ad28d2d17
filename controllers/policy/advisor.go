package policy

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/gatewayapi"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/openshellv1"
	"github.com/openshell/openshell-operator/internal/gatewayline"
	"github.com/openshell/openshell-operator/internal/sandboxcontrols"
	"github.com/openshell/openshell-operator/internal/sandboxspec"
	"github.com/openshell/openshell-operator/internal/status"
	"github.com/openshell/openshell-operator/internal/tenancy"
)

// The policy advisor, CR-first. The gateway keeps each sandbox's draft
// (the agent's proposals) and its history; this reconciler lists the
// pending proposals on the policy's status and carries out the Tenant
// Admin's decisions (spec.advisor.decisions). It never approves at the
// gateway: an approved rule is a spec.networkPolicies entry, applied to the
// sandboxes like any other edit, and the proposal is then closed at the
// gateway (RejectDraftChunk, the only close the release offers that leaves
// the sandbox's policy alone) with a reason that says it was adopted.

// advisorPoll is how often the drafts of a policy with spec.advisor are
// read: the gateway does not tell the operator of a new proposal (its
// stream is per sandbox, and followed only while one moves).
const advisorPoll = 30 * time.Second

// closedRecheck is how soon drafts are read again after a close.
const closedRecheck = time.Second

// Bounds of what one policy's status lists (the API's MaxItems) and of the
// agent-written text each proposal carries.
const (
	maxProposals = 32
	maxDrafts    = 64
	maxText      = 1024
	maxRule      = 4096
)

// pendingStatus is the release's status of an undecided chunk;
// approvedPrefix starts the reason of a proposal closed as adopted.
const (
	pendingStatus  = "pending"
	approvedPrefix = "approved: adopted"
)

// draft is what was read of one sandbox's draft at its gateway.
type draft struct {
	sandbox *openshellv1alpha1.OpenShellSandbox
	// conn reaches its gateway (nil when err says why not); the closes of
	// this reconcile use it too.
	conn           *gatewayapi.Client
	gateway        string
	gatewaySandbox string
	workspace      string
	version        uint64
	pending        []*openshellv1.PolicyChunk
	// decided are the chunks, no longer pending, that decisions not yet
	// closed name (read only for those: the draft keeps every chunk), and
	// fullErr why that read failed.
	decided map[string]*openshellv1.PolicyChunk
	fullErr error
	// err is why it could not be read; unsupported, that its gateway
	// runs 0.0.x.
	err         error
	unsupported bool
}

// closing is a proposal to close at the gateway: a decision carried out.
type closing struct {
	draft    int
	decision int
	chunk    string
	reason   string
}

// advisorPlan is the pure decision of one reconcile: what to close and
// what status says before the closes' answers are in.
type advisorPlan struct {
	closes []closing
	status *openshellv1alpha1.PolicyAdvisorStatus
}

// advisorUsers are the sandboxes whose drafts the policy reads: of those
// it applies to (naming it, or naming none on a default policy) and that
// run at a gateway, those the advisor is or was on for, or that a decision
// names. With the advisor off and no decisions pending, none is read.
func (r *Reconciler) advisorUsers(ctx context.Context, p *openshellv1alpha1.OpenShellPolicy) ([]openshellv1alpha1.OpenShellSandbox, error) {
	theDefault := false
	if p.Spec.Default {
		// As the sandbox controller decides it: only the namespace's one
		// default applies to sandboxes that name none.
		def, err := r.namespaceDefault(ctx, p.Namespace)
		if err != nil {
			return nil, err
		}
		theDefault = def != nil && def.Name == p.Name
	}
	list := &openshellv1alpha1.OpenShellSandboxList{}
	if err := r.Client.List(ctx, list, client.InNamespace(p.Namespace)); err != nil {
		return nil, fmt.Errorf("list sandboxes of namespace %s: %w", p.Namespace, err)
	}
	out := slices.DeleteFunc(list.Items, func(sb openshellv1alpha1.OpenShellSandbox) bool {
		ref := sb.Spec.PolicyRef
		uses := (ref != nil && ref.Name == p.Name) || (ref == nil && theDefault)
		named := slices.ContainsFunc(p.Spec.Advisor.Decisions, func(d openshellv1alpha1.ProposalDecision) bool { return d.Sandbox == sb.Name })
		wanted := p.Spec.Advisor.Enabled || sb.Status.ProposalsEnabled || named
		return !uses || !wanted || !sb.DeletionTimestamp.IsZero() || sb.Status.SandboxID == "" || sb.Status.Gateway == ""
	})
	slices.SortFunc(out, func(a, b openshellv1alpha1.OpenShellSandbox) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// namespaceDefault is the namespace's one default policy (nil: none, or
// several, when sandboxes naming none are refused).
func (r *Reconciler) namespaceDefault(ctx context.Context, ns string) (*openshellv1alpha1.OpenShellPolicy, error) {
	list := &openshellv1alpha1.OpenShellPolicyList{}
	if err := r.Client.List(ctx, list, client.InNamespace(ns)); err != nil {
		return nil, fmt.Errorf("list policies of namespace %s: %w", ns, err)
	}
	def, _ := sandboxcontrols.NamespaceDefaults(list.Items)
	return def, nil
}

// readDrafts reads the pending proposals of each sandbox at its gateway
// and, for a decision not yet closed whose proposal is no longer pending,
// what became of it.
func (r *Reconciler) readDrafts(ctx context.Context, p *openshellv1alpha1.OpenShellPolicy, ns tenancy.Namespace,
	users []openshellv1alpha1.OpenShellSandbox) []draft {
	out := make([]draft, 0, len(users))
	for i := range users {
		sb := &users[i]
		d := draft{sandbox: sb, gateway: sb.Status.Gateway, gatewaySandbox: sb.Status.GatewaySandboxName, workspace: sb.Status.Workspace}
		conn, err := r.connect(ctx, sb.Status.Gateway, ns)
		switch {
		case err != nil:
			d.err = err
		case conn.Line != gatewayline.V01:
			d.unsupported = true
		default:
			d.conn = conn
			d.err = d.read(ctx, conn, p)
		}
		out = append(out, d)
	}
	return out
}

// read fills the draft from its gateway.
func (d *draft) read(ctx context.Context, conn *gatewayapi.Client, p *openshellv1alpha1.OpenShellPolicy) error {
	get := func(filter string) (*openshellv1.GetDraftPolicyResponse, error) {
		resp, err := conn.GetDraftPolicy(ctx, &openshellv1.GetDraftPolicyRequest{Sandbox: d.gatewaySandbox,
			WorkspaceScope: gatewayapi.Workspace(d.workspace), StatusFilter: filter})
		if err != nil {
			return nil, fmt.Errorf("read the draft of sandbox %s at gateway %s: %w", d.sandbox.Name, d.gateway, err)
		}
		return resp, nil
	}
	resp, err := get(pendingStatus)
	if err != nil {
		return err
	}
	d.version, d.pending = resp.GetDraftVersion(), resp.GetChunks()
	unresolved := map[string]bool{}
	for _, dec := range p.Spec.Advisor.Decisions {
		if dec.Sandbox == d.sandbox.Name && !closed(p.Status.Advisor, dec) && !d.stillNotFound(p.Status.Advisor, dec) &&
			!slices.ContainsFunc(d.pending, func(c *openshellv1.PolicyChunk) bool { return c.GetId() == dec.Proposal }) {
			unresolved[dec.Proposal] = true
		}
	}
	if len(unresolved) == 0 {
		return nil
	}
	all, err := get("")
	if err != nil {
		// Only the decisions that needed it fail; the others go on.
		d.fullErr = err
		return nil
	}
	d.decided = map[string]*openshellv1.PolicyChunk{}
	for _, c := range all.GetChunks() {
		if unresolved[c.GetId()] && c.GetStatus() != pendingStatus {
			d.decided[c.GetId()] = c
		}
	}
	return nil
}

// connect returns a client for the gateway named namespace/name, when the
// policy's namespace (ns) may still use it: the operator never dials a
// gateway it does not serve, nor one the namespace lost access to, on a
// tenant's behalf (as the sandbox and template controllers decide it).
func (r *Reconciler) connect(ctx context.Context, key string, ns tenancy.Namespace) (*gatewayapi.Client, error) {
	gwNS, name, ok := strings.Cut(key, "/")
	if !ok {
		return nil, fmt.Errorf("gateway %q is not namespace/name", key)
	}
	gw := &openshellv1alpha1.OpenShellGateway{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: gwNS, Name: name}, gw); err != nil {
		return nil, fmt.Errorf("get gateway %s: %w", key, err)
	}
	if why, err := r.Platform.Access(ctx, r.Client, gw, ns); err != nil {
		return nil, err
	} else if why != "" {
		return nil, fmt.Errorf("gateway %s: %s", key, why)
	}
	return r.Gateways.Connect(ctx, gw)
}

// planAdvisor decides what to close and what status lists, from the
// drafts read, the spec and the previous status. Pure.
func planAdvisor(p *openshellv1alpha1.OpenShellPolicy, drafts []draft) advisorPlan {
	var prev openshellv1alpha1.PolicyAdvisorStatus
	if p.Status.Advisor != nil {
		prev = *p.Status.Advisor
	}
	plan := advisorPlan{status: &openshellv1alpha1.PolicyAdvisorStatus{}}
	currentHash := sandboxspec.Hash(sandboxspec.Policy(p.Spec))
	for i, dec := range p.Spec.Advisor.Decisions {
		out, close := decide(p, prev, drafts, dec, currentHash)
		if close != nil {
			close.decision = i
			plan.closes = append(plan.closes, *close)
		}
		plan.status.Decisions = append(plan.status.Decisions, out)
	}
	listPending(p, drafts, plan.status)
	return plan
}

// stillNotFound says a decision was NotFound at a draft version the
// gateway still reports: nothing has moved there since, so the whole
// draft is not read again for it (a mistyped ID would otherwise cost a
// full read every poll).
func (d *draft) stillNotFound(prev *openshellv1alpha1.PolicyAdvisorStatus, dec openshellv1alpha1.ProposalDecision) bool {
	if prev == nil || previousOutcome(*prev, dec, openshellv1alpha1.ProposalOutcome{}).State != openshellv1alpha1.ProposalStateNotFound {
		return false
	}
	return slices.ContainsFunc(prev.Drafts, func(r openshellv1alpha1.DraftReference) bool {
		return r.Sandbox == d.sandbox.Name && r.GatewaySandbox == d.gatewaySandbox && r.DraftVersion == int64(d.version)
	})
}

// decide is one decision's outcome, and the close it calls for (nil:
// none). A Closed outcome is final. Pure.
func decide(p *openshellv1alpha1.OpenShellPolicy, prev openshellv1alpha1.PolicyAdvisorStatus, drafts []draft,
	dec openshellv1alpha1.ProposalDecision, currentHash string) (openshellv1alpha1.ProposalOutcome, *closing) {
	out := openshellv1alpha1.ProposalOutcome{Proposal: dec.Proposal, Sandbox: dec.Sandbox}
	if closed(&prev, dec) {
		return previousOutcome(prev, dec, out), nil
	}
	di := slices.IndexFunc(drafts, func(d draft) bool { return d.sandbox.Name == dec.Sandbox })
	switch {
	case di < 0:
		out.State, out.Message = openshellv1alpha1.ProposalStateNotFound, fmt.Sprintf("sandbox %s does not use this policy at a gateway", dec.Sandbox)
		return out, nil
	case drafts[di].unsupported:
		out.State, out.Message = openshellv1alpha1.ProposalStateFailed, "the sandbox's gateway runs 0.0.x, where the operator does not read proposals"
		return out, nil
	case drafts[di].err != nil:
		out.State, out.Message = openshellv1alpha1.ProposalStateFailed, status.Message(drafts[di].err)
		return out, nil
	}
	d := drafts[di]
	if j := slices.IndexFunc(d.pending, func(c *openshellv1.PolicyChunk) bool { return c.GetId() == dec.Proposal }); j >= 0 {
		return decidePending(p, dec, d, di, d.pending[j], currentHash)
	}
	c, ok := d.decided[dec.Proposal]
	switch {
	case !ok && d.stillNotFound(&prev, dec):
		return previousOutcome(prev, dec, out), nil
	case !ok && d.fullErr != nil:
		out.State, out.Message = openshellv1alpha1.ProposalStateFailed, status.Message(d.fullErr)
	case !ok:
		out.State, out.Message = openshellv1alpha1.ProposalStateNotFound, fmt.Sprintf("sandbox %s has no proposal %s", dec.Sandbox, dec.Proposal)
	case c.GetStatus() == "approved" && dec.Decision == openshellv1alpha1.ProposalRejected:
		// Approved at the gateway directly (a token, or auto mode): the
		// release's reject takes an approved rule back out.
		out.State = openshellv1alpha1.ProposalStateWaiting
		return out, &closing{draft: di, chunk: c.GetId(), reason: rejectReason(p, dec)}
	case c.GetStatus() == "approved":
		out.State, out.Message = openshellv1alpha1.ProposalStateClosed, "approved at the gateway directly; the sandbox's policy stays this OpenShellPolicy's"
	case c.GetStatus() == "rejected":
		out.State = openshellv1alpha1.ProposalStateClosed
		if r := c.GetRejectionReason(); r != rejectReason(p, dec) && !strings.HasPrefix(r, approvedPrefix) {
			out.Message = "closed at the gateway: " + status.Clip(r, maxText, "…")
		}
	default:
		// Decided some way this operator does not know: final, and said.
		out.State, out.Message = openshellv1alpha1.ProposalStateClosed, fmt.Sprintf("the gateway reports status %q", status.Clip(c.GetStatus(), 64, "…"))
	}
	return out, nil
}

// decidePending is a decision on a proposal still pending: a rejection is
// closed now, an approval once its rule is in force in the sandbox.
func decidePending(p *openshellv1alpha1.OpenShellPolicy, dec openshellv1alpha1.ProposalDecision, d draft, di int,
	c *openshellv1.PolicyChunk, currentHash string) (openshellv1alpha1.ProposalOutcome, *closing) {
	out := openshellv1alpha1.ProposalOutcome{Proposal: dec.Proposal, Sandbox: dec.Sandbox, State: openshellv1alpha1.ProposalStateWaiting}
	if dec.Decision == openshellv1alpha1.ProposalRejected {
		return out, &closing{draft: di, chunk: c.GetId(), reason: rejectReason(p, dec)}
	}
	out.Edited = edited(p, dec, c)
	if !inForce(d.sandbox, currentHash) {
		out.Message = fmt.Sprintf("rule %s is not in force in sandbox %s yet (applied and loaded by its supervisor)", dec.NetworkPolicy, dec.Sandbox)
		return out, nil
	}
	return out, &closing{draft: di, chunk: c.GetId(), reason: approveReason(p, dec)}
}

// inForce says whether the sandbox's supervisor enforces the policy whose
// hash is current: the gateway took it (appliedPolicyHash) and the
// supervisor loaded it (PolicyLoaded).
func inForce(sb *openshellv1alpha1.OpenShellSandbox, currentHash string) bool {
	return sb.Status.AppliedPolicyHash == currentHash &&
		meta.IsStatusConditionTrue(sb.Status.Conditions, openshellv1alpha1.SandboxConditionPolicyLoaded)
}

// listPending fills the status's pending proposals (those not decided)
// and the drafts that have any or a decision, within the API's bounds.
// Proposals are taken round-robin across sandboxes, each sandbox's oldest
// first, so that one agent's flood cannot hide another's proposal.
func listPending(p *openshellv1alpha1.OpenShellPolicy, drafts []draft, st *openshellv1alpha1.PolicyAdvisorStatus) {
	decided := map[string]bool{}
	for _, d := range p.Spec.Advisor.Decisions {
		decided[d.Sandbox+"/"+d.Proposal] = true
	}
	var queues [][]*openshellv1.PolicyChunk
	var names []string
	for _, d := range drafts {
		if len(d.pending) == 0 && !slices.ContainsFunc(p.Spec.Advisor.Decisions, func(x openshellv1alpha1.ProposalDecision) bool { return x.Sandbox == d.sandbox.Name }) {
			continue
		}
		if len(st.Drafts) < maxDrafts {
			st.Drafts = append(st.Drafts, openshellv1alpha1.DraftReference{Sandbox: d.sandbox.Name, Gateway: d.gateway,
				GatewaySandbox: d.gatewaySandbox, DraftVersion: int64(d.version), Pending: int32(len(d.pending))})
		}
		q := slices.DeleteFunc(slices.Clone(d.pending), func(c *openshellv1.PolicyChunk) bool { return decided[d.sandbox.Name+"/"+c.GetId()] })
		slices.SortStableFunc(q, func(a, b *openshellv1.PolicyChunk) int {
			return a.GetCreatedTime().AsTime().Compare(b.GetCreatedTime().AsTime())
		})
		queues, names = append(queues, q), append(names, d.sandbox.Name)
	}
	for round := 0; ; round++ {
		took := false
		for i, q := range queues {
			if round >= len(q) {
				continue
			}
			took = true
			if len(st.Proposals) == maxProposals {
				st.Omitted++
				continue
			}
			st.Proposals = append(st.Proposals, proposal(names[i], q[round]))
		}
		if !took {
			return
		}
	}
}

// closed says whether the decision's outcome was already Closed: final.
func closed(prev *openshellv1alpha1.PolicyAdvisorStatus, dec openshellv1alpha1.ProposalDecision) bool {
	if prev == nil {
		return false
	}
	return previousOutcome(*prev, dec, openshellv1alpha1.ProposalOutcome{}).State == openshellv1alpha1.ProposalStateClosed
}

// previousOutcome is the decision's outcome in the previous status, or def.
func previousOutcome(prev openshellv1alpha1.PolicyAdvisorStatus, dec openshellv1alpha1.ProposalDecision, def openshellv1alpha1.ProposalOutcome) openshellv1alpha1.ProposalOutcome {
	for _, o := range prev.Decisions {
		if o.Sandbox == dec.Sandbox && o.Proposal == dec.Proposal {
			return o
		}
	}
	return def
}

// edited says whether an approved rule differs from the proposed one.
func edited(p *openshellv1alpha1.OpenShellPolicy, dec openshellv1alpha1.ProposalDecision, c *openshellv1.PolicyChunk) bool {
	i := slices.IndexFunc(p.Spec.NetworkPolicies, func(n openshellv1alpha1.NetworkPolicyRule) bool { return n.Name == dec.NetworkPolicy })
	if i < 0 {
		return true
	}
	proposed, lost := sandboxspec.Rule(dec.NetworkPolicy, c.GetProposedRule())
	return len(lost) > 0 || !equality.Semantic.DeepEqual(proposed, p.Spec.NetworkPolicies[i])
}

// rejectReason is what the agent reads of a rejection.
func rejectReason(p *openshellv1alpha1.OpenShellPolicy, dec openshellv1alpha1.ProposalDecision) string {
	if dec.Reason != "" {
		return dec.Reason
	}
	return fmt.Sprintf("rejected by the Tenant Admin in OpenShellPolicy %s/%s", p.Namespace, p.Name)
}

// approveReason is what the agent and the gateway's history read of an
// adoption: the proposal is closed through the release's reject (the only
// close that leaves the sandbox's policy to the operator), so the reason
// says plainly that it was approved and is in effect.
func approveReason(p *openshellv1alpha1.OpenShellPolicy, dec openshellv1alpha1.ProposalDecision) string {
	msg := fmt.Sprintf(approvedPrefix+" as rule %s of OpenShellPolicy %s/%s (generation %d), now in force in this sandbox; retry the request",
		dec.NetworkPolicy, p.Namespace, p.Name, p.Generation)
	if dec.Reason != "" {
		msg += ". " + dec.Reason
	}
	return status.Clip(msg, maxText, "…")
}

// proposal renders a pending chunk for status.
func proposal(sandbox string, c *openshellv1.PolicyChunk) openshellv1alpha1.PolicyProposal {
	out := openshellv1alpha1.PolicyProposal{ID: c.GetId(), Sandbox: sandbox, RuleName: status.Clip(c.GetRuleName(), 253, "…"),
		Binary: status.Clip(c.GetBinary(), maxText, "…"), Rationale: status.Clip(c.GetRationale(), maxText, "…"), SecurityNotes: status.Clip(c.GetSecurityNotes(), maxText, "…"),
		ValidationResult: status.Clip(c.GetValidationResult(), maxText, "…"), HitCount: c.GetHitCount()}
	if t := c.GetCreatedTime(); t != nil {
		// Whole seconds, as the API stores it: a finer time would differ
		// from what was read back and write on every poll.
		out.Proposed = ptr.To(metav1.NewTime(t.AsTime()).Rfc3339Copy())
	}
	rule, lost := sandboxspec.Rule(c.GetRuleName(), c.GetProposedRule())
	if b, err := yaml.Marshal(rule); err == nil && len(b) <= maxRule {
		out.Rule = string(b)
	} else {
		lost = append(lost, "the rule (too large to list: read it at the gateway)")
	}
	out.NotExpressible = status.Clip(strings.Join(lost, "; "), maxText, "…")
	return out
}

// closeProposals carries out the plan's closes, recording each outcome.
// An answer that the proposal is no longer open (decided meanwhile, or
// closed by the gateway itself) leaves the decision Waiting: the next read
// says what became of it.
func (r *Reconciler) closeProposals(ctx context.Context, drafts []draft, plan advisorPlan) (closedAny bool) {
	for _, c := range plan.closes {
		d := drafts[c.draft]
		out := &plan.status.Decisions[c.decision]
		_, err := d.conn.RejectDraftChunk(ctx, &openshellv1.RejectDraftChunkRequest{Sandbox: d.gatewaySandbox, ChunkId: c.chunk,
			Reason: c.reason, WorkspaceScope: gatewayapi.Workspace(d.workspace),
			RequestId: sandboxspec.RequestID(&openshellv1.RejectDraftChunkRequest{ChunkId: c.chunk, Reason: c.reason}, d.gatewaySandbox)})
		switch code := grpcstatus.Code(err); code {
		case codes.OK:
			out.State, out.Message, closedAny = openshellv1alpha1.ProposalStateClosed, "", true
			if r.Recorder != nil {
				r.Recorder.Eventf(d.sandbox, nil, "Normal", "ProposalClosed", "RejectDraftChunk", "proposal %s closed at the gateway", status.Clip(c.chunk, 128, "…"))
			}
		case codes.FailedPrecondition, codes.NotFound:
			out.State, out.Message = openshellv1alpha1.ProposalStateWaiting, "the gateway answered "+code.String()+": read again at the next poll"
		default:
			out.State, out.Message = openshellv1alpha1.ProposalStateFailed, "closing the proposal at the gateway: "+status.Message(err)
		}
	}
	return closedAny
}

// advisorCondition summarises the outcome on ProposalsSynced.
func advisorCondition(drafts []draft, enabled bool, st *openshellv1alpha1.PolicyAdvisorStatus) (metav1.ConditionStatus, string, string) {
	for _, d := range drafts {
		if d.unsupported {
			return metav1.ConditionFalse, openshellv1alpha1.ProposalsReasonUnsupported,
				fmt.Sprintf("sandbox %s runs on gateway %s (0.0.x): the operator reads proposals on 0.1 gateways only", d.sandbox.Name, d.gateway)
		}
		if d.err != nil {
			return metav1.ConditionFalse, openshellv1alpha1.ProposalsReasonGatewayError, status.Message(d.err)
		}
	}
	for _, o := range st.Decisions {
		switch o.State {
		case openshellv1alpha1.ProposalStateFailed:
			return metav1.ConditionFalse, openshellv1alpha1.ProposalsReasonGatewayError, fmt.Sprintf("proposal %s of sandbox %s: %s", o.Proposal, o.Sandbox, o.Message)
		case openshellv1alpha1.ProposalStateNotFound:
			return metav1.ConditionFalse, openshellv1alpha1.ProposalsReasonUnknownProposal, fmt.Sprintf("decision on proposal %s: %s", o.Proposal, o.Message)
		}
	}
	for _, d := range drafts {
		if d.sandbox.Status.ProposalsEnabled != enabled {
			return metav1.ConditionFalse, openshellv1alpha1.ProposalsReasonWaiting,
				fmt.Sprintf("sandbox %s: %s is not %t at the gateway yet (its events say why)", d.sandbox.Name, "agent_policy_proposals_enabled", enabled)
		}
	}
	for _, o := range st.Decisions {
		if o.State == openshellv1alpha1.ProposalStateWaiting {
			return metav1.ConditionFalse, openshellv1alpha1.ProposalsReasonWaiting, fmt.Sprintf("proposal %s: %s", o.Proposal, o.Message)
		}
	}
	return metav1.ConditionTrue, openshellv1alpha1.ProposalsReasonSynced,
		fmt.Sprintf("%d pending proposal(s); %d decision(s) closed at the gateway", len(st.Proposals)+int(st.Omitted), len(st.Decisions))
}

// reconcileAdvisor observes the drafts, carries out decisions and fills
// status.advisor and ProposalsSynced; it returns when to look again.
func (r *Reconciler) reconcileAdvisor(ctx context.Context, p *openshellv1alpha1.OpenShellPolicy) (time.Duration, error) {
	if p.Spec.Advisor == nil {
		p.Status.Advisor = nil
		meta.RemoveStatusCondition(&p.Status.Conditions, openshellv1alpha1.ConditionProposalsSynced)
		return 0, nil
	}
	users, err := r.advisorUsers(ctx, p)
	if err != nil {
		return 0, err
	}
	ns, _, err := tenancy.ReadNamespace(ctx, r.Client, p.Namespace)
	if err != nil {
		return 0, err
	}
	drafts := r.readDrafts(ctx, p, ns, users)
	plan := planAdvisor(p, drafts)
	closedAny := r.closeProposals(ctx, drafts, plan)
	p.Status.Advisor = plan.status
	s, reason, msg := advisorCondition(drafts, p.Spec.Advisor.Enabled, plan.status)
	status.SetCondition(p, openshellv1alpha1.ConditionProposalsSynced, s, reason, msg)
	if closedAny {
		// A close moved the drafts on: read them again soon, so that
		// status shows where they are now rather than after a poll.
		return closedRecheck, nil
	}
	return advisorPoll, nil
}
