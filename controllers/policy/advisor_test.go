package policy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/openshellv1"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/sandboxv1"
	"github.com/openshell/openshell-operator/internal/sandboxspec"
	"github.com/openshell/openshell-operator/internal/tenancy"
)

func pypiRule(name string) openshellv1alpha1.NetworkPolicyRule {
	port := int32(443)
	return openshellv1alpha1.NetworkPolicyRule{Name: name, Endpoints: []openshellv1alpha1.NetworkEndpoint{{Host: "pypi.org", Port: &port}}}
}

func pypiChunk(id string) *openshellv1.PolicyChunk {
	return &openshellv1.PolicyChunk{Id: id, Status: "pending", RuleName: "pypi", Rationale: "pip install needs the index",
		ProposedRule: &sandboxv1.NetworkPolicyRule{Name: "pypi", Endpoints: []*sandboxv1.NetworkEndpoint{{Host: "pypi.org", Port: 443}}}}
}

// advisorPolicy is a policy with the advisor on, decisions and (when
// adopt) the pypi rule in spec.networkPolicies.
func advisorPolicy(adopt bool, decisions ...openshellv1alpha1.ProposalDecision) *openshellv1alpha1.OpenShellPolicy {
	p := policy("tools")
	p.Spec.Advisor = &openshellv1alpha1.PolicyAdvisor{Enabled: true, Decisions: decisions}
	if adopt {
		p.Spec.NetworkPolicies = []openshellv1alpha1.NetworkPolicyRule{pypiRule("pypi")}
	}
	return p
}

// running is a sandbox of the policy whose applied policy is p's current
// one (inEffect) or an older one.
func running(name string, p *openshellv1alpha1.OpenShellPolicy, inEffect bool) *openshellv1alpha1.OpenShellSandbox {
	sb := sandbox(ns, name, p.Name)
	sb.Status.ProposalsEnabled = name != "new"
	sb.Status.SandboxID, sb.Status.Gateway, sb.Status.GatewaySandboxName = "id-"+name, "openshell/gw", "gw-"+name
	sb.Status.AppliedPolicyHash = "older"
	if inEffect {
		sb.Status.AppliedPolicyHash = sandboxspec.Hash(sandboxspec.Policy(p.Spec))
		sb.Status.Conditions = []metav1.Condition{{Type: openshellv1alpha1.SandboxConditionPolicyLoaded, Status: metav1.ConditionTrue}}
	}
	return sb
}

func TestPlanAdvisor(t *testing.T) {
	approve := openshellv1alpha1.ProposalDecision{Proposal: "c1", Sandbox: "reviewer", Decision: openshellv1alpha1.ProposalApproved, NetworkPolicy: "pypi"}
	reject := openshellv1alpha1.ProposalDecision{Proposal: "c1", Sandbox: "reviewer", Decision: openshellv1alpha1.ProposalRejected, Reason: "use the mirror"}
	for _, tc := range []struct {
		name string
		p    *openshellv1alpha1.OpenShellPolicy
		// prev is the previous status's outcomes.
		prev     []openshellv1alpha1.ProposalOutcome
		inEffect bool
		// appliedNotLoaded: the gateway took the policy, its supervisor has
		// not loaded it.
		appliedNotLoaded bool
		pending          []*openshellv1.PolicyChunk
		// decided are chunks no longer pending, as the full read found them.
		decided map[string]*openshellv1.PolicyChunk
		// absent: the sandbox is not among those read (being recreated).
		absent  bool
		readErr error
		fullErr error
		// want: the closes' reasons (substring), the outcome state and
		// message (substring), the proposals listed.
		closes    []string
		state     openshellv1alpha1.ProposalState
		message   string
		edited    bool
		proposals int
	}{
		{name: "pending proposals are listed until decided", p: advisorPolicy(false), pending: []*openshellv1.PolicyChunk{pypiChunk("c1"), pypiChunk("c2")}, proposals: 2},
		{name: "a rejection closes the proposal with the Tenant Admin's guidance", p: advisorPolicy(false, reject),
			pending: []*openshellv1.PolicyChunk{pypiChunk("c1")}, closes: []string{"use the mirror"}, state: openshellv1alpha1.ProposalStateWaiting},
		{name: "an approval waits until the rule is in effect in the sandbox", p: advisorPolicy(true, approve),
			pending: []*openshellv1.PolicyChunk{pypiChunk("c1")}, state: openshellv1alpha1.ProposalStateWaiting},
		{name: "an approval in effect closes the proposal as adopted", p: advisorPolicy(true, approve), inEffect: true,
			pending: []*openshellv1.PolicyChunk{pypiChunk("c1")}, closes: []string{"approved: adopted as rule pypi of OpenShellPolicy team-a/tools"},
			state: openshellv1alpha1.ProposalStateWaiting},
		{name: "an adopted rule that differs from the proposal is edited", inEffect: true,
			p: func() *openshellv1alpha1.OpenShellPolicy {
				p := advisorPolicy(true, approve)
				p.Spec.NetworkPolicies[0].Endpoints[0].Access = "read-only"
				return p
			}(),
			pending: []*openshellv1.PolicyChunk{pypiChunk("c1")}, closes: []string{"approved"}, state: openshellv1alpha1.ProposalStateWaiting, edited: true},
		{name: "a decision on a proposal never seen is NotFound", p: advisorPolicy(false, reject), state: openshellv1alpha1.ProposalStateNotFound},
		{name: "a decided proposal no longer pending stays closed", p: advisorPolicy(false, reject),
			prev: []openshellv1alpha1.ProposalOutcome{{Proposal: "c1", Sandbox: "reviewer", State: openshellv1alpha1.ProposalStateClosed}}, state: openshellv1alpha1.ProposalStateClosed},
		{name: "a closed decision stays closed while its sandbox is away", p: advisorPolicy(false, reject), absent: true,
			prev: []openshellv1alpha1.ProposalOutcome{{Proposal: "c1", Sandbox: "reviewer", State: openshellv1alpha1.ProposalStateClosed}}, state: openshellv1alpha1.ProposalStateClosed},
		{name: "a proposal rejected at the gateway by someone else is closed, and says so", p: advisorPolicy(false, reject),
			decided: map[string]*openshellv1.PolicyChunk{"c1": {Id: "c1", Status: "rejected", RejectionReason: "covered by active policy revision 3"}},
			state:   openshellv1alpha1.ProposalStateClosed, message: "closed at the gateway: covered by active policy revision 3"},
		{name: "a rejection of a proposal approved at the gateway takes it back", p: advisorPolicy(false, reject),
			decided: map[string]*openshellv1.PolicyChunk{"c1": {Id: "c1", Status: "approved"}}, closes: []string{"use the mirror"}, state: openshellv1alpha1.ProposalStateWaiting},
		{name: "an approval of a proposal approved at the gateway is not undone", p: advisorPolicy(true, approve), inEffect: true,
			decided: map[string]*openshellv1.PolicyChunk{"c1": {Id: "c1", Status: "approved"}}, state: openshellv1alpha1.ProposalStateClosed, message: "approved at the gateway directly"},
		{name: "a failed full read fails the decision that needed it", p: advisorPolicy(false, reject), fullErr: errors.New("too large"),
			state: openshellv1alpha1.ProposalStateFailed, message: "too large"},
		{name: "a status the operator does not know is final, and said", p: advisorPolicy(false, reject),
			decided: map[string]*openshellv1.PolicyChunk{"c1": {Id: "c1", Status: "superseded"}}, state: openshellv1alpha1.ProposalStateClosed, message: "superseded"},
		{name: "an approval waits until the supervisor has loaded the rule", p: advisorPolicy(true, approve),
			pending: []*openshellv1.PolicyChunk{pypiChunk("c1")}, appliedNotLoaded: true, state: openshellv1alpha1.ProposalStateWaiting, message: "not in force"},
		{name: "an unreadable draft fails the decision, not the others' listing", p: advisorPolicy(false, reject), readErr: errors.New("unavailable"),
			state: openshellv1alpha1.ProposalStateFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sb := running("reviewer", tc.p, tc.inEffect)
			if tc.appliedNotLoaded {
				sb.Status.AppliedPolicyHash = sandboxspec.Hash(sandboxspec.Policy(tc.p.Spec))
			}
			tc.p.Status.Advisor = &openshellv1alpha1.PolicyAdvisorStatus{Decisions: tc.prev}
			drafts := []draft{{sandbox: sb, gateway: sb.Status.Gateway, gatewaySandbox: sb.Status.GatewaySandboxName, pending: tc.pending,
				decided: tc.decided, err: tc.readErr, fullErr: tc.fullErr}}
			if tc.absent {
				drafts = nil
			}
			plan := planAdvisor(tc.p, drafts)
			if len(plan.closes) != len(tc.closes) {
				t.Fatalf("closes %+v, want %d", plan.closes, len(tc.closes))
			}
			for i, want := range tc.closes {
				if !strings.Contains(plan.closes[i].reason, want) || plan.closes[i].chunk != "c1" {
					t.Errorf("close %+v, want chunk c1 with reason containing %q", plan.closes[i], want)
				}
			}
			if len(plan.status.Proposals) != tc.proposals {
				t.Errorf("proposals %+v, want %d", plan.status.Proposals, tc.proposals)
			}
			if tc.state != "" {
				if len(plan.status.Decisions) != 1 || plan.status.Decisions[0].State != tc.state || plan.status.Decisions[0].Edited != tc.edited ||
					!strings.Contains(plan.status.Decisions[0].Message, tc.message) {
					t.Errorf("decisions %+v, want state %s edited %t message %q", plan.status.Decisions, tc.state, tc.edited, tc.message)
				}
			}
		})
	}
}

func TestPlanAdvisorBoundsWhatStatusLists(t *testing.T) {
	p := advisorPolicy(false)
	sb := running("reviewer", p, true)
	var pending []*openshellv1.PolicyChunk
	for i := range maxProposals + 5 {
		c := pypiChunk("c" + string(rune('a'+i%26)) + string(rune('a'+i/26)))
		c.Rationale = strings.Repeat("x", 10*maxText) // agent-written: bounded
		pending = append(pending, c)
	}
	plan := planAdvisor(p, []draft{{sandbox: sb, pending: pending}})
	if len(plan.status.Proposals) != maxProposals || plan.status.Omitted != 5 {
		t.Fatalf("listed %d, omitted %d; want %d and 5", len(plan.status.Proposals), plan.status.Omitted, maxProposals)
	}
	if got := len(plan.status.Proposals[0].Rationale); got > maxText+len("…") {
		t.Errorf("rationale of %d bytes, want at most %d", got, maxText)
	}
	if !strings.Contains(plan.status.Proposals[0].Rule, "host: pypi.org") {
		t.Errorf("rule %q does not show the proposed endpoint as a spec.networkPolicies entry", plan.status.Proposals[0].Rule)
	}
}

func TestAdvisorCondition(t *testing.T) {
	sb := running("reviewer", advisorPolicy(false), true)
	for _, tc := range []struct {
		name   string
		drafts []draft
		st     openshellv1alpha1.PolicyAdvisorStatus
		want   metav1.ConditionStatus
		reason string
	}{
		{"all listed and closed", []draft{{sandbox: sb}}, openshellv1alpha1.PolicyAdvisorStatus{Decisions: []openshellv1alpha1.ProposalOutcome{{State: openshellv1alpha1.ProposalStateClosed}}},
			metav1.ConditionTrue, openshellv1alpha1.ProposalsReasonSynced},
		{"a 0.0.x gateway", []draft{{sandbox: sb, unsupported: true}}, openshellv1alpha1.PolicyAdvisorStatus{}, metav1.ConditionFalse, openshellv1alpha1.ProposalsReasonUnsupported},
		{"an unreadable draft", []draft{{sandbox: sb, err: errors.New("down")}}, openshellv1alpha1.PolicyAdvisorStatus{}, metav1.ConditionFalse, openshellv1alpha1.ProposalsReasonGatewayError},
		{"an unknown proposal", []draft{{sandbox: sb}}, openshellv1alpha1.PolicyAdvisorStatus{Decisions: []openshellv1alpha1.ProposalOutcome{{State: openshellv1alpha1.ProposalStateNotFound}}},
			metav1.ConditionFalse, openshellv1alpha1.ProposalsReasonUnknownProposal},
		{"the setting not in place yet", []draft{{sandbox: running("new", advisorPolicy(false), false)}}, openshellv1alpha1.PolicyAdvisorStatus{},
			metav1.ConditionFalse, openshellv1alpha1.ProposalsReasonWaiting},
		{"a rule not in effect yet", []draft{{sandbox: sb}}, openshellv1alpha1.PolicyAdvisorStatus{Decisions: []openshellv1alpha1.ProposalOutcome{{State: openshellv1alpha1.ProposalStateWaiting}}},
			metav1.ConditionFalse, openshellv1alpha1.ProposalsReasonWaiting},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, reason, _ := advisorCondition(tc.drafts, true, &tc.st)
			if s != tc.want || reason != tc.reason {
				t.Errorf("got %s/%s, want %s/%s", s, reason, tc.want, tc.reason)
			}
		})
	}
}

func TestOneAgentCannotHideAnothersProposals(t *testing.T) {
	p := advisorPolicy(false)
	flood := running("flood", p, true)
	quiet := running("quiet", p, true)
	var pending []*openshellv1.PolicyChunk
	for i := range 3 * maxProposals {
		pending = append(pending, pypiChunk(fmt.Sprintf("f%d", i)))
	}
	plan := planAdvisor(p, []draft{{sandbox: flood, pending: pending}, {sandbox: quiet, pending: []*openshellv1.PolicyChunk{pypiChunk("q1")}}})
	if !slices.ContainsFunc(plan.status.Proposals, func(pr openshellv1alpha1.PolicyProposal) bool { return pr.Sandbox == "quiet" && pr.ID == "q1" }) {
		t.Errorf("the quiet sandbox's proposal is hidden behind the flood: %d listed, %d omitted", len(plan.status.Proposals), plan.status.Omitted)
	}
	if plan.status.Omitted != int32(3*maxProposals+1-maxProposals) {
		t.Errorf("omitted %d", plan.status.Omitted)
	}
}

// A listed proposal reads back from the API as it was written: otherwise
// every poll would write it again.
func TestProposalSurvivesARoundTrip(t *testing.T) {
	c := pypiChunk("c1")
	c.CreatedTime = timestamppb.New(time.Date(2026, 12, 7, 4, 0, 0, 123456789, time.UTC))
	want := proposal("reviewer", c)
	b, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	var got openshellv1alpha1.PolicyProposal
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(got, want) {
		t.Errorf("read back %+v, wrote %+v", got, want)
	}
}

// A decision on a proposal the sandbox never had is not read for again
// until its draft moves.
func TestNotFoundIsNotReadAgainUntilTheDraftMoves(t *testing.T) {
	dec := openshellv1alpha1.ProposalDecision{Proposal: "typo", Sandbox: "reviewer", Decision: openshellv1alpha1.ProposalRejected}
	p := advisorPolicy(false, dec)
	sb := running("reviewer", p, true)
	p.Status.Advisor = &openshellv1alpha1.PolicyAdvisorStatus{
		Drafts:    []openshellv1alpha1.DraftReference{{Sandbox: "reviewer", GatewaySandbox: sb.Status.GatewaySandboxName, DraftVersion: 7}},
		Decisions: []openshellv1alpha1.ProposalOutcome{{Proposal: "typo", Sandbox: "reviewer", State: openshellv1alpha1.ProposalStateNotFound}}}
	d := draft{sandbox: sb, gatewaySandbox: sb.Status.GatewaySandboxName, version: 7}
	if !d.stillNotFound(p.Status.Advisor, dec) {
		t.Error("read again at the same draft version")
	}
	d.version = 8
	if d.stillNotFound(p.Status.Advisor, dec) {
		t.Error("not read again after the draft moved")
	}
}

// The advisor dials a sandbox's gateway only while the policy's namespace
// may use it: never a gateway the operator does not serve (a tenant's own,
// whose endpoint the tenant chooses). A nil resolver proves no dial.
func TestAdvisorDialsOnlyGatewaysTheNamespaceMayUse(t *testing.T) {
	e := newEnv(t,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "platform"}},
		&openshellv1alpha1.OpenShellGateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "own"}},
		&openshellv1alpha1.OpenShellGateway{ObjectMeta: metav1.ObjectMeta{Namespace: "platform", Name: "gw"}})
	r := &Reconciler{Client: e.c, Platform: tenancy.Platform{GatewayNamespaces: []string{"platform"}}}
	tenant, _, err := tenancy.ReadNamespace(context.Background(), e.c, ns)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{ns + "/own", "platform/gw"} {
		if _, err := r.connect(context.Background(), key, tenant); err == nil || !strings.Contains(err.Error(), "gateway "+key) {
			t.Errorf("connect(%s) = %v, want a refusal naming the gateway", key, err)
		}
	}
}

// Only the namespace's one default policy reads the sandboxes that name
// none, as the sandbox controller decides which policy they run under.
func TestAdvisorReadsRefLessSandboxesForTheOneDefaultOnly(t *testing.T) {
	def := advisorPolicy(false)
	def.Spec.Default = true
	sb := running("refless", def, true)
	sb.Spec.PolicyRef = nil
	e := newEnv(t, def, sb)
	r := &Reconciler{Client: e.c}
	users, err := r.advisorUsers(context.Background(), def)
	if err != nil || len(users) != 1 {
		t.Fatalf("the one default reads %d sandboxes (%v), want 1", len(users), err)
	}
	second := policy("other")
	second.Spec.Default = true
	if err := e.c.Create(context.Background(), second); err != nil {
		t.Fatal(err)
	}
	if users, err = r.advisorUsers(context.Background(), def); err != nil || len(users) != 0 {
		t.Errorf("with two defaults %d sandboxes are read (%v), want none: they run under neither", len(users), err)
	}
}
