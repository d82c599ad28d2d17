package e2e

import (
	"context"
	"encoding/json"
	"io"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	accessv1alpha1 "github.com/openshell/openshell-operator/api/access/v1alpha1"
	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	legacyopenshellv1 "github.com/openshell/openshell-operator/internal/gatewayapi/pb/openshellv1"
	v01 "github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/openshellv1"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/sandboxv1"
	"github.com/openshell/openshell-operator/internal/sandboxspec"
	"github.com/openshell/openshell-operator/test/testgateway"
)

// TestPolicyProposals plays the policy advisor's loop on a 0.1.5 gateway
// with each persona holding exactly its RBAC. A Tenant Admin turns the
// advisor on in an OpenShellPolicy; the operator sets the sandbox's
// setting at the gateway; the agent's proposal appears on the policy's
// status. The Sandbox Consumer whose sandbox proposed it, and a namespace
// editor, cannot approve it; nor can anyone forge the status. The Tenant
// Admin's approval lands in the policy's spec, reaches the sandbox as its
// policy, and only then closes the proposal at the gateway with a reason
// that says it was adopted; a rejection closes another with the Tenant
// Admin's guidance and grants nothing. The real openshell SDK reads the
// gateway's draft and history, which status links rather than copies.
func TestPolicyProposals(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := cluster.Client
	st, tenant := startPersonaStack(ctx, t, g, "adv")
	admin, editor, consumer := as(t, "tina"), as(t, "eddie"), as(t, "dave")

	// The Tenant Admin turns the advisor on; the consumer's sandbox uses
	// the policy.
	pol := &openshellv1alpha1.OpenShellPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: "tools"},
		Spec: openshellv1alpha1.OpenShellPolicySpec{Advisor: &openshellv1alpha1.PolicyAdvisor{Enabled: true}}}
	g.Eventually(func() error { return admin.Create(ctx, pol.DeepCopy()) }).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
	sb := sandboxOn(tenant, "reviewer", st.GatewayObj)
	sb.Spec.PolicyRef = &openshellv1alpha1.LocalObjectReference{Name: "tools"}
	g.Expect(consumer.Create(ctx, sb)).To(Succeed())
	key := client.ObjectKeyFromObject(sb)
	waitPhase(ctx, g, key, openshellv1alpha1.SandboxPhaseReady)
	ws, name := sandboxWorkspace(ctx, g, tenant), sandboxspec.SandboxName(tenant, "reviewer")
	g.Eventually(func() bool { return st.Gateway.Setting(ws, name, testgateway.ProposalsSetting).GetBoolValue() }).
		WithContext(ctx).WithTimeout(30*time.Second).Should(BeTrue(), "the operator did not enable the advisor on the gateway sandbox")

	// The agent proposes two rules (through policy.local, which the gateway
	// refuses unless the setting is on).
	propose := func(rule, host string) string {
		id, err := st.Gateway.Propose(ws, name, &v01.PolicyChunk{RuleName: rule, Rationale: "the task needs " + host, Binary: "/usr/bin/pip",
			ProposedRule: &sandboxv1.NetworkPolicyRule{Name: rule, Endpoints: []*sandboxv1.NetworkEndpoint{{Host: host, Port: 443}},
				Binaries: []*sandboxv1.NetworkBinary{{Path: "/usr/bin/pip"}}}})
		g.Expect(err).NotTo(HaveOccurred())
		return id
	}
	pypi, evil := propose("pypi", "pypi.org"), propose("paste", "paste.example.com")
	var listed openshellv1alpha1.PolicyProposal
	g.Eventually(func(g Gomega) {
		cur := &openshellv1alpha1.OpenShellPolicy{}
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(pol), cur)).To(Succeed())
		g.Expect(cur.Status.Advisor).NotTo(BeNil())
		g.Expect(cur.Status.Advisor.Proposals).To(HaveLen(2))
		listed = cur.Status.Advisor.Proposals[0]
		g.Expect(cur.Status.Advisor.Drafts).To(ConsistOf(HaveField("GatewaySandbox", name)))
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
	g.Expect(listed.ID).To(Equal(pypi))
	g.Expect(listed.Sandbox).To(Equal("reviewer"))
	g.Expect(listed.Rule).To(And(ContainSubstring("host: pypi.org"), ContainSubstring("/usr/bin/pip")))

	// Neither the consumer whose agent asked nor an editor may decide.
	approve := func(p *openshellv1alpha1.OpenShellPolicy) {
		p.Spec.NetworkPolicies = append(p.Spec.NetworkPolicies, openshellv1alpha1.NetworkPolicyRule{Name: "pypi",
			Endpoints: []openshellv1alpha1.NetworkEndpoint{{Host: "pypi.org", Port: ptrTo(int32(443))}},
			Binaries:  []openshellv1alpha1.NetworkBinary{{Path: "/usr/bin/pip"}}})
		p.Spec.Advisor.Decisions = append(p.Spec.Advisor.Decisions, openshellv1alpha1.ProposalDecision{Proposal: pypi, Sandbox: "reviewer",
			Decision: openshellv1alpha1.ProposalApproved, NetworkPolicy: "pypi"})
	}
	cur := &openshellv1alpha1.OpenShellPolicy{}
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(pol), cur)).To(Succeed())
	approve(cur)
	g.Expect(apierrors.IsForbidden(consumer.Update(ctx, cur.DeepCopy()))).To(BeTrue(), "a consumer approved their own sandbox's proposal")
	expectForbidden(g, editor.Update(ctx, cur.DeepCopy()), "TenantAdminRequired", "openshellpolicies")
	forged := cur.DeepCopy()
	forged.Status.Advisor.Proposals = nil
	g.Expect(apierrors.IsForbidden(editor.Status().Update(ctx, forged))).To(BeTrue(), "an editor rewrote the advisor's status")
	g.Expect(apierrors.IsForbidden(consumer.Status().Update(ctx, forged))).To(BeTrue(), "a consumer rewrote the advisor's status")

	// The Tenant Admin approves one and rejects the other with guidance.
	// The approval is not closed at the gateway before the rule is in
	// effect in the sandbox: while the operator has no answer to its
	// policy update, the proposal stays pending and the decision Waiting.
	cur.Spec.Advisor.Decisions = append(cur.Spec.Advisor.Decisions, openshellv1alpha1.ProposalDecision{Proposal: evil, Sandbox: "reviewer",
		Decision: openshellv1alpha1.ProposalRejected, Reason: "no paste sites: write results to the workspace"})
	reached, release := st.Gateway.HoldNext("UpdateConfig")
	defer release()
	g.Expect(admin.Update(ctx, cur)).To(Succeed())
	select {
	case <-reached:
	case <-ctx.Done():
		t.Fatal("the operator did not update the sandbox's policy")
	}
	g.Eventually(func(g Gomega) {
		now := &openshellv1alpha1.OpenShellPolicy{}
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(pol), now)).To(Succeed())
		g.Expect(now.Status.Advisor.Decisions).To(ContainElement(And(HaveField("Proposal", pypi),
			HaveField("State", openshellv1alpha1.ProposalStateWaiting), HaveField("Message", ContainSubstring("not in force")))))
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
	g.Expect(st.Gateway.Chunk(ws, name, pypi).GetStatus()).To(Equal("pending"))
	release()
	g.Eventually(func(g Gomega) {
		now := &openshellv1alpha1.OpenShellPolicy{}
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(pol), now)).To(Succeed())
		g.Expect(now.Status.Advisor.Decisions).To(ConsistOf(
			And(HaveField("Proposal", pypi), HaveField("State", openshellv1alpha1.ProposalStateClosed), HaveField("Edited", false)),
			And(HaveField("Proposal", evil), HaveField("State", openshellv1alpha1.ProposalStateClosed))))
		g.Expect(now.Status.Advisor.Proposals).To(BeEmpty())
		cond := meta.FindStatusCondition(now.Status.Conditions, openshellv1alpha1.ConditionProposalsSynced)
		g.Expect(cond).NotTo(BeNil())
		g.Expect(cond.Status).To(Equal(metav1.ConditionTrue), cond.Message)
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())

	// The approved rule is the sandbox's policy at the gateway, from the
	// CR; the rejected one is not.
	got, err := st.Gateway.GetSandbox(ctx, &legacyopenshellv1.GetSandboxRequest{Name: name, Workspace: ws})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.GetSandbox().GetSpec().GetPolicy().GetNetworkPolicies()).To(And(HaveKey("pypi"), Not(HaveKey("paste"))))
	g.Expect(sandboxStatus(ctx, g, key).Status.AppliedPolicyHash).To(Equal(sandboxspec.Hash(sandboxspec.Policy(cur.Spec))))

	// What the gateway keeps, read by the real SDK as the Tenant Admin's
	// workspace member: both closed, with the reasons the agent reads, and
	// the history.
	r, err := st.StartRelay(ctx, cluster.Config, st.GatewayObj.Namespace, zap.New(zap.WriteTo(io.Discard)))
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { g.Expect(r.Stop(context.Background(), c)).To(Succeed()) })
	var tok *accessv1alpha1.SandboxToken
	g.Eventually(func() (err error) {
		tok, err = exchangeAs(ctx, userConfig("tina"), tenant, "reviewer")
		return err
	}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
	var seen struct {
		Drafts map[string]struct {
			Status string `json:"status"`
			Reason string `json:"reason"`
		} `json:"drafts"`
		History [][2]string `json:"history"`
	}
	out := runPythonClient(ctx, t, st, tok.Token, ws, name)
	draftReads := st.Gateway.LineCalls()["0.1 GetDraftPolicy"]
	g.Expect(json.Unmarshal(out, &seen)).To(Succeed(), string(out))
	g.Expect(seen.Drafts).To(HaveKeyWithValue(pypi, And(HaveField("Status", "rejected"),
		HaveField("Reason", ContainSubstring("approved: adopted as rule pypi of OpenShellPolicy "+tenant+"/tools")))))
	g.Expect(seen.Drafts).To(HaveKeyWithValue(evil, And(HaveField("Status", "rejected"), HaveField("Reason", "no paste sites: write results to the workspace"))))
	g.Expect(seen.History).To(ContainElements([2]string{pypi, "proposed"}, [2]string{pypi, "rejected"}, [2]string{evil, "rejected"}))

	// Steady state: once status shows the gateway's latest draft, a
	// restarted operator reads the drafts again and writes nothing to the
	// policy.
	g.Eventually(func(g Gomega) {
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(pol), cur)).To(Succeed())
		g.Expect(cur.Status.Advisor.Drafts).To(ConsistOf(HaveField("DraftVersion", BeEquivalentTo(st.Gateway.DraftVersion(ws, name)))))
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
	recsBefore, err := st.Reconciles()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.RestartManagerWith(nil)).To(Succeed())
	g.Eventually(func(g Gomega) {
		recs, err := st.Reconciles()
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(recs["openshellpolicy"].Count).To(BeNumerically(">", recsBefore["openshellpolicy"].Count))
		g.Expect(st.Gateway.LineCalls()["0.1 GetDraftPolicy"]).To(BeNumerically(">", draftReads))
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
	after := &openshellv1alpha1.OpenShellPolicy{}
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(pol), after)).To(Succeed())
	g.Expect(after.ResourceVersion).To(Equal(cur.ResourceVersion), "the policy was written in steady state: %+v", after.Status.Advisor)

	// Turning the advisor off turns the setting off at the gateway.
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(pol), cur)).To(Succeed())
	cur.Spec.Advisor.Enabled = false
	g.Expect(admin.Update(ctx, cur)).To(Succeed())
	g.Eventually(func() bool { return st.Gateway.Setting(ws, name, testgateway.ProposalsSetting).GetBoolValue() }).
		WithContext(ctx).WithTimeout(30 * time.Second).Should(BeFalse())
	_, err = st.Gateway.Propose(ws, name, &v01.PolicyChunk{RuleName: "late"})
	g.Expect(err).To(MatchError(ContainSubstring("not enabled")))
}

func ptrTo[T any](v T) *T { return &v }
