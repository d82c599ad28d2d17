package policy

import (
	"fmt"
	"testing"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
)

// BenchmarkPlanAdvisor64 is the operator's side of one advisor poll of a
// policy at its bounds: 64 sandboxes with 8 pending proposals each (512,
// of which 32 are listed) and 64 decisions, half approvals in force. The
// gateway's side is one GetDraftPolicy per sandbox.
func BenchmarkPlanAdvisor64(b *testing.B) {
	var decisions []openshellv1alpha1.ProposalDecision
	for i := range 64 {
		d := openshellv1alpha1.ProposalDecision{Proposal: fmt.Sprintf("s%d-c0", i), Sandbox: fmt.Sprintf("sb-%d", i),
			Decision: openshellv1alpha1.ProposalRejected, Reason: "use the mirror"}
		if i%2 == 0 {
			d.Decision, d.NetworkPolicy, d.Reason = openshellv1alpha1.ProposalApproved, "pypi", ""
		}
		decisions = append(decisions, d)
	}
	p := advisorPolicy(true, decisions...)
	var drafts []draft
	for i := range 64 {
		d := draft{sandbox: running(fmt.Sprintf("sb-%d", i), p, true), version: 3}
		for j := range 8 {
			d.pending = append(d.pending, pypiChunk(fmt.Sprintf("s%d-c%d", i, j)))
		}
		drafts = append(drafts, d)
	}
	var plan advisorPlan
	b.ReportAllocs()
	for b.Loop() {
		plan = planAdvisor(p, drafts)
	}
	if len(plan.closes) != 64 || len(plan.status.Proposals) != maxProposals {
		b.Fatalf("%d closes, %d listed", len(plan.closes), len(plan.status.Proposals))
	}
}
