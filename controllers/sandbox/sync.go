package sandbox

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/controllers/internal/enqueue"
	"github.com/openshell/openshell-operator/internal/gatewayapi"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/openshellv1"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/sandboxv1"
	"github.com/openshell/openshell-operator/internal/gatewayline"
	"github.com/openshell/openshell-operator/internal/gwconn"
	render "github.com/openshell/openshell-operator/internal/render/gateway"
	"github.com/openshell/openshell-operator/internal/sandboxcontrols"
	"github.com/openshell/openshell-operator/internal/sandboxspec"
	"github.com/openshell/openshell-operator/internal/status"
)

// A safety re-check while a sandbox provisions (WatchSandbox streams the
// changes); how soon to look again while a gateway sandbox name is being
// freed.
const (
	provisionPoll = 15 * time.Second
	nameFreePoll  = time.Second
	// busyRetry is how soon a sandbox whose gateway call the bulkhead
	// refused looks again (plus up to as much jitter): about when a busy
	// gateway's calls have ended, without the growing backoff of a failure.
	busyRetry = time.Second
)

var phases = map[openshellv1.SandboxPhase]openshellv1alpha1.SandboxPhase{
	openshellv1.SandboxPhase_SANDBOX_PHASE_PROVISIONING: openshellv1alpha1.SandboxPhaseProvisioning,
	openshellv1.SandboxPhase_SANDBOX_PHASE_UNKNOWN:      openshellv1alpha1.SandboxPhaseProvisioning,
	openshellv1.SandboxPhase_SANDBOX_PHASE_STARTING:     openshellv1alpha1.SandboxPhaseProvisioning,
	openshellv1.SandboxPhase_SANDBOX_PHASE_READY:        openshellv1alpha1.SandboxPhaseReady,
	openshellv1.SandboxPhase_SANDBOX_PHASE_ERROR:        openshellv1alpha1.SandboxPhaseError,
	openshellv1.SandboxPhase_SANDBOX_PHASE_STOPPING:     openshellv1alpha1.SandboxPhaseStopped,
	openshellv1.SandboxPhase_SANDBOX_PHASE_STOPPED:      openshellv1alpha1.SandboxPhaseStopped,
	openshellv1.SandboxPhase_SANDBOX_PHASE_DELETING:     openshellv1alpha1.SandboxPhaseDeleting,
	openshellv1.SandboxPhase_SANDBOX_PHASE_COMPLETED:    openshellv1alpha1.SandboxPhaseCompleted,
}

// gatewaySandbox is the desired gateway sandbox: the style guide's render
// step, computed without I/O from the spec and what was observed.
type gatewaySandbox struct {
	name, workspace string
	// policy is nil when the sandbox names none (the gateway's default applies).
	policy     *sandboxv1.SandboxPolicy
	policyHash string
	// providers are sorted: those of the spec that the operator pushed to
	// the gateway (see attachable).
	providers []string
	// specHash covers what cannot change in place (ImmutableHash).
	specHash string
	spec     *openshellv1.SandboxSpec
	// envVersions are the versions of the Secrets spec's env was read
	// from; secretsChanged names those changed since the running sandbox
	// was created (envSecretDrift), and restartForSecrets says they
	// recreate it (spec.restartOnSecretChange).
	envVersions       map[string]string
	secretsChanged    []string
	restartForSecrets bool
	// proposals is the agent_policy_proposals_enabled setting the policy
	// asks for (spec.advisor.enabled).
	proposals bool
}

// attachable are the spec's providers the gateway may attach, sorted: those
// the operator pushed there. The gateway resolves a provider by name in the
// workspace, so a name not pushed yet — missing here, still only an intent,
// or met by another owner's provider of that name — would attach whatever
// the workspace holds under it. A sandbox not yet created waits for all of
// them (evaluate); a running one gets each when it is pushed.
func attachable(sb *openshellv1alpha1.OpenShellSandbox, obs observed) []string {
	out := slices.DeleteFunc(slices.Clone(sb.Spec.Providers), func(p string) bool {
		return slices.Contains(obs.missingProviders, p) || slices.Contains(obs.unsyncedProviders, p)
	})
	slices.Sort(out)
	return out
}

// desired renders the gateway sandbox for sb in workspace ws. Pure.
func desired(sb *openshellv1alpha1.OpenShellSandbox, obs observed, ws string) (gatewaySandbox, error) {
	d := gatewaySandbox{name: sandboxspec.SandboxName(sb.Namespace, sb.Name), workspace: ws, specHash: sandboxspec.ImmutableHash(sb)}
	if obs.policy != nil {
		d.policy = sandboxspec.Policy(obs.policy.Spec)
		d.policyHash = sandboxspec.Hash(d.policy)
	}
	d.providers = attachable(sb, obs)
	d.proposals = obs.policy != nil && obs.policy.Spec.Advisor != nil && obs.policy.Spec.Advisor.Enabled
	spec, err := sandboxspec.SandboxSpec(sb, sandboxspec.SpecInputs{Policy: d.policy, Env: obs.env, Providers: d.providers, NamespaceUID: obs.namespaceUID,
		RuntimeClass: sandboxcontrols.RuntimeClass(obs.gateway, sb)})
	if err != nil {
		return d, fmt.Errorf("render sandbox spec: %w", err)
	}
	d.spec = spec
	d.envVersions = obs.envVersions
	if sb.Status.SandboxID != "" {
		d.secretsChanged = envSecretDrift(sb.Status.EnvSecretVersions, obs.envVersions)
		d.restartForSecrets = sb.Spec.RestartOnSecretChange && len(d.secretsChanged) > 0
	}
	return d, nil
}

// step is what one reconcile does next at the gateway. Pure.
type step int

const (
	stepRecreate step = iota
	stepCreate
	stepUpdate
)

func nextStep(st openshellv1alpha1.OpenShellSandboxStatus, d gatewaySandbox) step {
	switch {
	case st.SandboxID != "" && (st.AppliedSpecHash != d.specHash || d.restartForSecrets):
		return stepRecreate
	case st.SandboxID == "":
		return stepCreate
	default:
		return stepUpdate
	}
}

// outcome ends a reconcile early when stop is set.
type outcome struct {
	res  ctrl.Result
	stop bool
}

func stopWith(res ctrl.Result) outcome { return outcome{res: res, stop: true} }

// forgetGatewaySandbox clears everything status says about the gateway
// sandbox: it is gone (recreated, or lost by the gateway) and the next
// reconcile creates it anew.
func forgetGatewaySandbox(sb *openshellv1alpha1.OpenShellSandbox) {
	st := &sb.Status
	if st.SandboxID != "" {
		st.ReplacedSandboxID = st.SandboxID
	}
	st.SandboxID, st.AppliedSpecHash, st.AppliedPolicyHash, st.AttachedProviders, st.PolicyVersion = "", "", "", nil, 0
	st.ProposalsEnabled = false
	st.AppliedResources, st.EnvSecretVersions = nil, nil
	st.AgentSandbox, st.ExitCode, st.CompletionTime = nil, nil, nil
}

// setSyncFailure reports a refusal on Synced and Ready with phase Error.
func setSyncFailure(sb *openshellv1alpha1.OpenShellSandbox, reason, msg string) {
	status.SetCondition(sb, openshellv1alpha1.ConditionSynced, metav1.ConditionFalse, reason, msg)
	status.SetCondition(sb, openshellv1alpha1.ConditionReady, metav1.ConditionFalse, reason, msg)
	sb.Status.Phase = openshellv1alpha1.SandboxPhaseError
}

// sync brings the gateway sandbox in line with the spec: connect, ensure
// the namespace's workspace, render, then one step of the state machine.
// held says the status write waits: for a sandbox it just created to
// settle (settleWindow), or for a gateway slot (heldForSlot).
func (r *Reconciler) sync(ctx context.Context, orig, sb *openshellv1alpha1.OpenShellSandbox, obs observed) (_ ctrl.Result, held bool, _ error) {
	gw := obs.gateway
	conn, err := r.Gateways.Connect(ctx, gw)
	if _, call := grpcstatus.FromError(err); gwconn.NotNow(err) || (err != nil && call) {
		// The operator's own state (nothing to report), or a call that
		// asked the gateway its version: judged like any other call.
		return callFailed(orig, sb, err)
	}
	if err != nil {
		status.SetCondition(sb, openshellv1alpha1.ConditionGatewayReachable, metav1.ConditionFalse, openshellv1alpha1.SandboxReasonConnectionFailed, err.Error())
		return ctrl.Result{}, false, fmt.Errorf("connect to gateway %s: %w", gwconn.Key(gw), err)
	}
	ws, err := r.Gateways.EnsureWorkspace(ctx, conn, gwconn.Key(gw), sb.Namespace, obs.namespaceUID)
	if err != nil {
		return callFailed(orig, sb, err)
	}
	d, err := desired(sb, obs, ws)
	if err != nil {
		return ctrl.Result{}, false, err
	}
	// Where the sandbox lives is written with the rest of status. A
	// deletion that comes before that write asks the gateway by the names
	// the operator derives (reconcileDelete), so no separate write is
	// needed before the create.
	sb.Status.Workspace, sb.Status.GatewaySandboxName, sb.Status.Gateway = ws, d.name, gwconn.Key(gw)
	if st := &sb.Status; st.SandboxID != "" && st.AppliedResources == nil && st.AppliedSpecHash == d.specHash {
		// Created before status recorded it (an operator upgrade): its spec,
		// unchanged since (the hash covers resources and GPUs), is what runs.
		st.AppliedResources = sandboxcontrols.Applied(sb)
	}
	step := nextStep(sb.Status, d)
	res, err := r.drive(ctx, conn, sb, obs, d, step)
	if err != nil {
		return callFailed(orig, sb, err)
	}
	status.SetCondition(sb, openshellv1alpha1.ConditionGatewayReachable, metav1.ConditionTrue, openshellv1alpha1.SandboxReasonReachable, "the gateway answered")
	r.reportEnvSecrets(sb, d)
	sb.Status.ObservedGeneration = sb.Generation
	// Where a namespace budget applies, the first report is never held:
	// a restart must find every acceptance in status (budgetLedger).
	if holdable(orig, sb, step == stepCreate) && !budgeted(obs) {
		r.settling.hold(sb)
		return ctrl.Result{RequeueAfter: settleWindow}, true, nil
	}
	return res, false, nil
}

// callFailed reports a failed gateway call (gatewayError) and says whether
// the status write may wait for a gateway slot (heldForSlot).
func callFailed(orig, sb *openshellv1alpha1.OpenShellSandbox, err error) (ctrl.Result, bool, error) {
	res, gerr := gatewayError(sb, err)
	return res, heldForSlot(orig, sb, err, time.Now()), gerr
}

// drive runs the step nextStep chose, then applies mutable changes in
// place and follows the gateway's phase.
func (r *Reconciler) drive(ctx context.Context, conn *gatewayapi.Client, sb *openshellv1alpha1.OpenShellSandbox, obs observed, d gatewaySandbox,
	step step) (ctrl.Result, error) {
	var current *openshellv1.Sandbox
	switch step {
	case stepRecreate:
		return r.recreate(ctx, conn, sb, d)
	case stepCreate:
		if w, err := templateReplaced(ctx, conn, d.workspace, sb.Status.Template); err != nil || w != nil {
			if w != nil {
				status.SetCondition(sb, openshellv1alpha1.ConditionSynced, metav1.ConditionFalse, w.reason, w.message)
				status.SetCondition(sb, openshellv1alpha1.ConditionReady, metav1.ConditionFalse, w.reason, w.message)
				sb.Status.Phase = w.phase
			}
			return ctrl.Result{RequeueAfter: templatePoll}, err
		}
		cur, o, err := r.createOrAdopt(ctx, conn, sb, d)
		if err != nil || o.stop {
			return o.res, err
		}
		current = cur
	}
	for _, apply := range []func(context.Context, *gatewayapi.Client, *openshellv1alpha1.OpenShellSandbox, gatewaySandbox) (bool, outcome, error){
		r.applyPolicy, r.applyProposalsSetting, r.reconcileProviders,
	} {
		changed, o, err := apply(ctx, conn, sb, d)
		if err != nil || o.stop {
			return o.res, err
		}
		if changed {
			current = nil // the create response no longer describes it
		}
	}
	return r.observePhase(ctx, conn, sb, obs, d, current)
}

// preconditionRetry is how soon a create the gateway refused for a
// precondition (FailedPrecondition) is tried again.
const preconditionRetry = 30 * time.Second

// recreate deletes the gateway sandbox after an immutable change; the next
// reconciles wait until the name is free and create it anew.
func (r *Reconciler) recreate(ctx context.Context, conn *gatewayapi.Client, sb *openshellv1alpha1.OpenShellSandbox, d gatewaySandbox) (ctrl.Result, error) {
	if _, err := conn.DeleteSandbox(ctx, &openshellv1.DeleteSandboxRequest{Name: d.name, WorkspaceScope: gatewayapi.Workspace(d.workspace)}); err != nil && grpcstatus.Code(err) != codes.NotFound {
		return ctrl.Result{}, fmt.Errorf("delete sandbox for recreation: %w", err)
	}
	why := "image, command, env, GPU, resources or log level changed: recreating the gateway sandbox"
	if d.restartForSecrets && sb.Status.AppliedSpecHash == d.specHash {
		why = fmt.Sprintf("Secret %s, which env reads, changed (spec.restartOnSecretChange): recreating the gateway sandbox with the new values",
			strings.Join(d.secretsChanged, ", "))
	}
	r.Recorder.Eventf(sb, nil, corev1.EventTypeNormal, openshellv1alpha1.SandboxReasonRecreating, "Recreate", "%s", why)
	forgetGatewaySandbox(sb)
	sb.Status.Phase = openshellv1alpha1.SandboxPhaseProvisioning
	status.SetCondition(sb, openshellv1alpha1.ConditionSynced, metav1.ConditionFalse, openshellv1alpha1.SandboxReasonRecreating, "recreating the gateway sandbox after an immutable change")
	status.SetCondition(sb, openshellv1alpha1.ConditionReady, metav1.ConditionFalse, openshellv1alpha1.SandboxReasonRecreating, "recreating the gateway sandbox")
	return ctrl.Result{RequeueAfter: nameFreePoll}, nil
}

// createOrAdopt creates the gateway sandbox, or adopts the one of its name
// that carries this object's UID (a create whose status write was lost).
func (r *Reconciler) createOrAdopt(ctx context.Context, conn *gatewayapi.Client, sb *openshellv1alpha1.OpenShellSandbox, d gatewaySandbox) (*openshellv1.Sandbox, outcome, error) {
	req := &openshellv1.CreateSandboxRequest{Name: d.name, WorkspaceScope: gatewayapi.Workspace(d.workspace), Spec: d.spec,
		Labels:      map[string]string{sandboxspec.LabelOwnerUID: string(sb.UID)},
		Annotations: map[string]string{sandboxspec.AnnotationNamespace: sb.Namespace, sandboxspec.AnnotationName: sb.Name}}
	if err := sandboxspec.FromTemplate(req, sb.Status.Template); err != nil {
		return nil, outcome{}, err
	}
	// The same create (after a timeout, or a status write lost with the
	// operator) carries the same key, and 0.1 replays its result; another
	// incarnation (ReplacedSandboxID) or another request gets its own. A
	// create the gateway refused outright is asked again without a key:
	// its outcome was certain, and a gateway that replayed refusals would
	// answer the retry with the old one for a day.
	if c := meta.FindStatusCondition(sb.Status.Conditions, openshellv1alpha1.ConditionSynced); c == nil || c.Reason != openshellv1alpha1.SandboxReasonRejectedByGateway {
		req.RequestId = sandboxspec.RequestID(req, string(sb.UID), sb.Status.ReplacedSandboxID)
	}
	resp, err := conn.CreateSandbox(ctx, req)
	var current *openshellv1.Sandbox
	applied, specHash := sandboxcontrols.Applied(sb), d.specHash
	switch code := grpcstatus.Code(err); {
	case err == nil:
		current = resp.Sandbox // no event: status names it (events are API writes, and sandboxes come in bursts)
	case code == codes.AlreadyExists:
		var o outcome
		if current, o, err = r.adopt(ctx, conn, sb, d); err != nil || o.stop {
			return nil, o, err
		}
		// Created from whatever spec the object had then: charged for
		// what the gateway runs, not for the spec now.
		res, gpu := sandboxspec.RenderedResources(current.GetSpec())
		applied = sandboxcontrols.Applied(&openshellv1alpha1.OpenShellSandbox{Spec: openshellv1alpha1.OpenShellSandboxSpec{Resources: res, GPU: gpu}})
		if !sandboxspec.SameRun(d.spec, current.GetSpec()) {
			specHash = "" // an immutable field changed since: the next reconcile recreates it
		}
	case code == codes.InvalidArgument:
		setSyncFailure(sb, openshellv1alpha1.SandboxReasonRejectedByGateway, "the gateway refused the sandbox: "+grpcstatus.Convert(err).Message())
		return nil, stopWith(ctrl.Result{}), nil
	case code == codes.FailedPrecondition:
		// What the gateway lacks now (a provider's profile being imported
		// again, say) may be there soon: asked again, not given up.
		setSyncFailure(sb, openshellv1alpha1.SandboxReasonRejectedByGateway, "the gateway refused the sandbox for now: "+grpcstatus.Convert(err).Message())
		return nil, stopWith(ctrl.Result{RequeueAfter: preconditionRetry}), nil
	case code == codes.NotFound:
		// The gateway lost the workspace (a new database): create it again.
		r.Gateways.ForgetWorkspace(sb.Status.Gateway, d.workspace)
		return nil, outcome{}, fmt.Errorf("create sandbox: %w", err)
	default:
		return nil, outcome{}, fmt.Errorf("create sandbox: %w", err)
	}
	recordCreated(sb, current, d, applied, specHash)
	return current, outcome{}, nil
}

// recordCreated records in status what the gateway sandbox was created
// with (an adopted one: what is known now, the best known).
func recordCreated(sb *openshellv1alpha1.OpenShellSandbox, current *openshellv1.Sandbox, d gatewaySandbox,
	applied *openshellv1alpha1.AppliedResources, specHash string) {
	sb.Status.SandboxID = current.Metadata.Id
	sb.Status.AppliedSpecHash, sb.Status.AppliedPolicyHash = specHash, d.policyHash
	sb.Status.EnvSecretVersions = maps.Clone(d.envVersions)
	sb.Status.AppliedResources = applied
	sb.Status.AttachedProviders = current.Spec.GetProviders()
	if a := sb.Status.Template; a != nil {
		a.ResourceVersion = current.GetCreatedFromWorkloadTemplate().GetResourceVersion()
	}
}

// adopt reads the gateway sandbox of our name after ALREADY_EXISTS: ours
// (by UID) is adopted, another's is a NameConflict, a deleting one is
// waited for.
func (r *Reconciler) adopt(ctx context.Context, conn *gatewayapi.Client, sb *openshellv1alpha1.OpenShellSandbox, d gatewaySandbox) (*openshellv1.Sandbox, outcome, error) {
	got, err := conn.GetSandbox(ctx, &openshellv1.GetSandboxRequest{Name: d.name, WorkspaceScope: gatewayapi.Workspace(d.workspace)})
	switch {
	case grpcstatus.Code(err) == codes.NotFound:
		return nil, stopWith(ctrl.Result{RequeueAfter: nameFreePoll}), nil // the old one just went
	case err != nil:
		return nil, outcome{}, err
	case got.Sandbox.Metadata.Labels[sandboxspec.LabelOwnerUID] != string(sb.UID):
		setSyncFailure(sb, openshellv1alpha1.SandboxReasonNameConflict,
			fmt.Sprintf("gateway sandbox %s in workspace %s exists and does not belong to this OpenShellSandbox (UID %s)", d.name, d.workspace, sb.UID))
		return nil, stopWith(ctrl.Result{}), nil
	case got.Sandbox.Status.GetPhase() == openshellv1.SandboxPhase_SANDBOX_PHASE_DELETING:
		return nil, stopWith(ctrl.Result{RequeueAfter: nameFreePoll}), nil // our previous incarnation is going
	}
	return got.Sandbox, outcome{}, nil
}

// applyPolicy updates the policy in place when it changed.
func (r *Reconciler) applyPolicy(ctx context.Context, conn *gatewayapi.Client, sb *openshellv1alpha1.OpenShellSandbox, d gatewaySandbox) (bool, outcome, error) {
	if d.policy == nil || sb.Status.AppliedPolicyHash == d.policyHash {
		return false, outcome{}, nil
	}
	resp, err := conn.UpdateConfig(ctx, &openshellv1.UpdateConfigRequest{Sandbox: d.name, WorkspaceScope: gatewayapi.Workspace(d.workspace), Policy: d.policy})
	if c := grpcstatus.Code(err); c == codes.InvalidArgument || c == codes.FailedPrecondition {
		status.SetCondition(sb, openshellv1alpha1.ConditionSynced, metav1.ConditionFalse, openshellv1alpha1.SandboxReasonRejectedByGateway,
			"the gateway refused the policy change: "+grpcstatus.Convert(err).Message())
		return false, stopWith(ctrl.Result{}), nil
	} else if err != nil {
		return false, outcome{}, fmt.Errorf("update policy: %w", err)
	}
	sb.Status.AppliedPolicyHash, sb.Status.PolicyVersion = d.policyHash, int64(resp.Version)
	// Loaded is for the supervisor to say again (observePolicyLoad): a
	// reconcile that stops before it must not leave the old version's True
	// beside the new hash (the policy advisor reads them together).
	if meta.FindStatusCondition(sb.Status.Conditions, openshellv1alpha1.SandboxConditionPolicyLoaded) != nil {
		status.SetCondition(sb, openshellv1alpha1.SandboxConditionPolicyLoaded, metav1.ConditionUnknown, openshellv1alpha1.SandboxReasonPolicyLoadPending,
			fmt.Sprintf("policy version %d applied; waiting for the supervisor to load it", resp.Version))
	}
	r.Recorder.Eventf(sb, nil, corev1.EventTypeNormal, "PolicyApplied", "UpdateConfig", "policy version %d applied in place", resp.Version)
	return true, outcome{}, nil
}

// proposalsSetting is the 0.1 sandbox setting that turns on the policy
// advisor (the release's settings registry: a bool, off when unset).
const proposalsSetting = "agent_policy_proposals_enabled"

// applyProposalsSetting gives the sandbox's agent_policy_proposals_enabled
// setting the value its policy asks for, when it differs from the one last
// set. 0.0.x gateways are left alone: their UpdateConfig carries no typed
// setting value (the policy reports ProposalsSynced Unsupported).
func (r *Reconciler) applyProposalsSetting(ctx context.Context, conn *gatewayapi.Client, sb *openshellv1alpha1.OpenShellSandbox, d gatewaySandbox) (bool, outcome, error) {
	if conn.Line != gatewayline.V01 || sb.Status.ProposalsEnabled == d.proposals {
		return false, outcome{}, nil
	}
	_, err := conn.UpdateConfig(ctx, &openshellv1.UpdateConfigRequest{Sandbox: d.name, WorkspaceScope: gatewayapi.Workspace(d.workspace),
		SettingKey: proposalsSetting, SettingValue: &sandboxv1.SettingValue{Value: &sandboxv1.SettingValue_BoolValue{BoolValue: d.proposals}}})
	if err != nil {
		// The advisor is an extra: a failure is said (and shows on the
		// policy as the setting not in place), and the sandbox's own sync
		// goes on; the setting is tried again at its next reconcile.
		r.Recorder.Eventf(sb, nil, corev1.EventTypeWarning, "ProposalsSettingFailed", "UpdateConfig", "setting %s=%t: %s: %s",
			proposalsSetting, d.proposals, grpcstatus.Code(err), status.Clip(grpcstatus.Convert(err).Message(), 512, "…"))
		return false, outcome{}, nil
	}
	sb.Status.ProposalsEnabled = d.proposals
	r.Recorder.Eventf(sb, nil, corev1.EventTypeNormal, "ProposalsSettingApplied", "UpdateConfig", "%s set to %t", proposalsSetting, d.proposals)
	return false, outcome{}, nil
}

// reconcileProviders attaches and detaches providers to match the spec.
func (r *Reconciler) reconcileProviders(ctx context.Context, conn *gatewayapi.Client, sb *openshellv1alpha1.OpenShellSandbox, d gatewaySandbox) (bool, outcome, error) {
	attached := slices.Sorted(slices.Values(sb.Status.AttachedProviders))
	if slices.Equal(attached, d.providers) {
		return false, outcome{}, nil
	}
	for _, p := range d.providers {
		if !slices.Contains(attached, p) {
			if _, err := conn.AttachSandboxProvider(ctx, &openshellv1.AttachSandboxProviderRequest{Sandbox: d.name, Provider: p, WorkspaceScope: gatewayapi.Workspace(d.workspace)}); err != nil {
				return false, outcome{}, fmt.Errorf("attach provider %s: %w", p, err)
			}
		}
	}
	for _, p := range attached {
		if !slices.Contains(d.providers, p) {
			if _, err := conn.DetachSandboxProvider(ctx, &openshellv1.DetachSandboxProviderRequest{Sandbox: d.name, Provider: p, WorkspaceScope: gatewayapi.Workspace(d.workspace)}); err != nil {
				return false, outcome{}, fmt.Errorf("detach provider %s: %w", p, err)
			}
		}
	}
	sb.Status.AttachedProviders = d.providers
	return true, outcome{}, nil
}

// providersDrift says how the providers the gateway holds attached to the
// sandbox differ from those the operator attached (status), "" when they
// do not: a Tenant Admin's gateway token can attach and detach directly.
// 0.1 gateways report the attached providers in the sandbox's spec; 0.0.x
// ones are not compared. Pure.
func providersDrift(line gatewayline.Line, sb *openshellv1alpha1.OpenShellSandbox, current *openshellv1.Sandbox) string {
	if line != gatewayline.V01 || current == nil {
		return ""
	}
	have, want := slices.Sorted(slices.Values(current.GetSpec().GetProviders())), slices.Sorted(slices.Values(sb.Status.AttachedProviders))
	if slices.Equal(have, want) {
		return ""
	}
	return fmt.Sprintf("the gateway's sandbox has providers [%s] attached, not the [%s] the operator attached (changed at the gateway directly): "+
		"attaching and detaching to match spec.providers", strings.Join(have, ", "), strings.Join(want, ", "))
}

// revertDrift makes status forget what a change at the gateway made
// untrue (attached providers, the applied policy), so that the next
// reconcile puts spec.providers and the OpenShellPolicy back, and says so
// with a Warning event. It reports whether it found any.
func (r *Reconciler) revertDrift(line gatewayline.Line, sb *openshellv1alpha1.OpenShellSandbox, current *openshellv1.Sandbox) bool {
	drift := false
	if msg := providersDrift(line, sb, current); msg != "" {
		r.Recorder.Eventf(sb, nil, corev1.EventTypeWarning, openshellv1alpha1.ReasonDriftReverted, "Reconcile", "%s", msg)
		sb.Status.AttachedProviders, drift = current.GetSpec().GetProviders(), true
	}
	if msg := policyDrift(sb, current); msg != "" {
		r.Recorder.Eventf(sb, nil, corev1.EventTypeWarning, openshellv1alpha1.ReasonDriftReverted, "Reconcile", "%s", msg)
		sb.Status.AppliedPolicyHash, drift = "", true
	}
	return drift
}

// policyDrift says why the policy the sandbox's supervisor enforces is not
// the operator's, "" when it is: a version newer than the one the
// operator's last UpdateConfig was given (the policy given at creation is
// version 1) can only have come from someone else's UpdateConfig, a
// Tenant Admin's gateway token. Only sandboxes whose policy the operator
// manages (an OpenShellPolicy, status.appliedPolicyHash) are compared.
// Pure.
func policyDrift(sb *openshellv1alpha1.OpenShellSandbox, current *openshellv1.Sandbox) string {
	ours := max(sb.Status.PolicyVersion, 1)
	if sb.Status.AppliedPolicyHash == "" || current == nil || int64(current.GetStatus().GetCurrentPolicyVersion()) <= ours {
		return ""
	}
	return fmt.Sprintf("the sandbox's supervisor enforces policy version %d, newer than version %d the operator applied (changed at the gateway directly): "+
		"applying the OpenShellPolicy again", current.GetStatus().GetCurrentPolicyVersion(), ours)
}

// currentAtGateway is the gateway sandbox as it is now: the one a call of
// this reconcile returned, else what WatchSandbox streamed, else a read.
// gone says the agents.x-k8s.io Sandbox status names is missing (then the
// stream is not trusted); lost says the gateway no longer has the sandbox,
// which status now forgets so that the next reconcile creates it anew.
func (r *Reconciler) currentAtGateway(ctx context.Context, conn *gatewayapi.Client, sb *openshellv1alpha1.OpenShellSandbox, d gatewaySandbox,
	current *openshellv1.Sandbox) (_ *openshellv1.Sandbox, gone, lost bool, _ error) {
	key, from := client.ObjectKeyFromObject(sb), "answer"
	if current == nil {
		current, from = r.Gateways.Followers().Snapshot(key, sb.Status.SandboxID), "stream" // streamed by WatchSandbox: no call needed
	}
	gone, err := r.upstreamMissing(ctx, sb)
	if err != nil {
		return nil, false, false, err
	}
	if gone && current != nil {
		// What was streamed says running, but what ran is gone: ask.
		r.Gateways.Followers().Stop(key)
		current = nil
	}
	if current != nil {
		ctrl.LoggerFrom(ctx).V(1).Info("gateway sandbox observed", "from", from, "sandboxID", current.GetMetadata().GetId(),
			"phase", current.GetStatus().GetPhase().String(), "upstreamGone", gone)
		return current, gone, false, nil
	}
	ctrl.LoggerFrom(ctx).V(1).Info("asking the gateway for its sandbox", "sandboxID", sb.Status.SandboxID, "upstreamGone", gone)
	resp, err := conn.GetSandbox(ctx, &openshellv1.GetSandboxRequest{Name: d.name, WorkspaceScope: gatewayapi.Workspace(d.workspace)})
	if grpcstatus.Code(err) == codes.NotFound {
		r.forgetLost(sb, "the gateway no longer has sandbox %s; recreating it", d.name)
		return nil, gone, true, nil
	}
	if err != nil {
		return nil, false, false, fmt.Errorf("get sandbox: %w", err)
	}
	if id, got := sb.Status.SandboxID, resp.Sandbox.GetMetadata().GetId(); id != "" && got != id {
		// The name belongs to another incarnation now: the one status names
		// is gone. Its report would be read as this one's; instead the next
		// create meets the other and adopts it if it is this object's (by
		// owner UID), or says whose it is.
		r.forgetLost(sb, "the gateway's sandbox %s is no longer %s (now %s); taking it up again", d.name, id, got)
		r.Gateways.Followers().Stop(key)
		return nil, gone, true, nil
	}
	return resp.Sandbox, gone, false, nil
}

// forgetLost says why the gateway sandbox status names is gone (event
// SandboxMissing) and forgets it, so that the next reconcile creates it
// anew, or adopts the one now under its name.
func (r *Reconciler) forgetLost(sb *openshellv1alpha1.OpenShellSandbox, format string, args ...any) {
	r.Recorder.Eventf(sb, nil, corev1.EventTypeWarning, "SandboxMissing", "GetSandbox", format, args...)
	forgetGatewaySandbox(sb)
	r.settling.forget(client.ObjectKeyFromObject(sb)) // a held create's answer names the lost sandbox: never restore it
}

// observePhase follows the gateway's phase: while it moves, from the
// WatchSandbox stream when one is running. A Ready sandbox is read once per
// reconcile, which in steady state means once per cache resync: that read
// is what notices a gateway that lost the sandbox (a new database) and
// recreates it.
func (r *Reconciler) observePhase(ctx context.Context, conn *gatewayapi.Client, sb *openshellv1alpha1.OpenShellSandbox, obs observed, d gatewaySandbox,
	current *openshellv1.Sandbox) (ctrl.Result, error) {
	key := client.ObjectKeyFromObject(sb)
	current, gone, lost, err := r.currentAtGateway(ctx, conn, sb, d, current)
	if err != nil || lost {
		return ctrl.Result{RequeueAfter: nameFreePoll}, err
	}
	if r.revertDrift(conn.Line, sb, current) {
		return ctrl.Result{RequeueAfter: time.Millisecond}, nil
	}
	switch runAction(sb.Spec.Suspend, current.GetStatus().GetPhase(), suspendedByUs(sb), obs.image.Allowed || obs.enforce.Mode != openshellv1alpha1.ImagePolicyEnforce) {
	case actionStop:
		// Blocks until the gateway's driver confirms (a retry from STOPPING
		// is allowed if this call times out).
		resp, err := conn.StopSandbox(ctx, &openshellv1.StopSandboxRequest{Name: d.name, WorkspaceScope: gatewayapi.Workspace(d.workspace)})
		if err != nil {
			return ctrl.Result{}, fmt.Errorf("stop sandbox: %w", err)
		}
		current = resp.Sandbox
		r.Gateways.Followers().Record(key, current)
		r.Recorder.Eventf(sb, nil, corev1.EventTypeNormal, "Suspended", "StopSandbox", "the runtime of %s is stopped; its workspace is kept", d.name)
	case actionStart:
		resp, err := conn.StartSandbox(ctx, &openshellv1.StartSandboxRequest{Name: d.name, WorkspaceScope: gatewayapi.Workspace(d.workspace)})
		if err != nil {
			return ctrl.Result{}, fmt.Errorf("start sandbox: %w", err)
		}
		current = resp.Sandbox
		r.Gateways.Followers().Record(key, current)
		r.Recorder.Eventf(sb, nil, corev1.EventTypeNormal, "Resumed", "StartSandbox", "a new runtime of %s is starting on its workspace", d.name)
	}
	res := r.report(sb, obs, current)
	if err := r.locateUpstream(ctx, sb, obs.preflight.AgentSandbox.Preferred, managedSandboxNamespace(obs.gateway, sb)); err != nil {
		return ctrl.Result{}, err
	}
	if res = reportUpstream(sb, current, gone, res); gone {
		return res, nil
	}
	if requeue, err := r.observePolicyLoad(ctx, conn, sb, d, current); err != nil {
		return ctrl.Result{}, err
	} else if requeue {
		res.RequeueAfter = enqueue.Sooner(res.RequeueAfter, provisionPoll)
	}
	if mayFinish := sb.Status.Phase == openshellv1alpha1.SandboxPhaseReady && len(sb.Spec.Command) > 0; res.RequeueAfter > 0 || mayFinish {
		// Still moving, or running a command that will end: follow the
		// gateway's stream so the next change is reported as it happens;
		// the requeue is only a safety net. (Streams past Ready are bounded
		// per gateway: past the bound an exit is seen at the next reconcile.)
		r.Gateways.Followers().Ensure(key, sb.Status.Gateway, conn, gwconn.Watched{ID: sb.Status.SandboxID, Name: d.name, Workspace: d.workspace,
			PastReady: res.RequeueAfter == 0})
	}
	return res, nil
}

// observePolicyLoad reports PolicyLoaded for a running sandbox with a
// policy: True once the supervisor's current_policy_version reaches the
// version the gateway accepted (status.policyVersion; the policy given at
// creation is version 1), else from the revision's status — pending (look
// again) or failed (its load error). The revision is read only while the
// streamed version lags, so a settled sandbox costs no call.
func (r *Reconciler) observePolicyLoad(ctx context.Context, conn *gatewayapi.Client, sb *openshellv1alpha1.OpenShellSandbox,
	d gatewaySandbox, current *openshellv1.Sandbox) (requeue bool, err error) {
	want := uint32(max(sb.Status.PolicyVersion, 1))
	switch {
	case d.policy == nil:
		meta.RemoveStatusCondition(&sb.Status.Conditions, openshellv1alpha1.SandboxConditionPolicyLoaded)
		return false, nil
	case current.GetStatus().GetPhase() != openshellv1.SandboxPhase_SANDBOX_PHASE_READY:
		// Not running (provisioning, suspended, recreating): nothing
		// enforces a policy now, so an earlier True would be stale.
		if c := meta.FindStatusCondition(sb.Status.Conditions, openshellv1alpha1.SandboxConditionPolicyLoaded); c != nil {
			status.SetCondition(sb, openshellv1alpha1.SandboxConditionPolicyLoaded, metav1.ConditionUnknown, openshellv1alpha1.SandboxReasonPolicyLoadPending,
				fmt.Sprintf("the sandbox is not running; policy version %d is loaded when it is", want))
		}
		return false, nil
	}
	loaded := func(v uint32) {
		status.SetCondition(sb, openshellv1alpha1.SandboxConditionPolicyLoaded, metav1.ConditionTrue, openshellv1alpha1.SandboxReasonPolicyLoaded,
			fmt.Sprintf("the supervisor enforces policy version %d", v))
	}
	if active := current.GetStatus().GetCurrentPolicyVersion(); active >= want {
		loaded(active)
		return false, nil
	}
	resp, err := conn.GetSandboxPolicyStatus(ctx, &openshellv1.GetSandboxPolicyStatusRequest{Sandbox: d.name, WorkspaceScope: gatewayapi.Workspace(d.workspace), Version: want})
	if grpcstatus.Code(err) == codes.Unimplemented {
		// An older gateway: it cannot say; not an error to retry.
		status.SetCondition(sb, openshellv1alpha1.SandboxConditionPolicyLoaded, metav1.ConditionUnknown, openshellv1alpha1.SandboxReasonPolicyLoadPending,
			"the gateway does not report policy revisions (GetSandboxPolicyStatus is not implemented): whether the supervisor loaded it is unknown")
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("get policy status: %w", err)
	}
	rev := resp.GetRevision()
	switch {
	case resp.GetActiveVersion() >= want || rev.GetStatus() == openshellv1.PolicyStatus_POLICY_STATUS_LOADED:
		loaded(max(resp.GetActiveVersion(), want))
		// The streamed snapshot ended before the supervisor reported: keep
		// what this call learnt, so the next reconcile needs no call.
		if snap := proto.Clone(current).(*openshellv1.Sandbox); snap.GetStatus() != nil {
			snap.Status.CurrentPolicyVersion = max(resp.GetActiveVersion(), want)
			r.Gateways.Followers().Record(client.ObjectKeyFromObject(sb), snap)
		}
		return false, nil
	case rev.GetStatus() == openshellv1.PolicyStatus_POLICY_STATUS_FAILED:
		status.SetCondition(sb, openshellv1alpha1.SandboxConditionPolicyLoaded, metav1.ConditionFalse, openshellv1alpha1.SandboxReasonPolicyLoadFailed,
			fmt.Sprintf("the supervisor rejected policy version %d: %s; version %d stays in force or egress is quarantined, as the gateway is configured: fix the OpenShellPolicy",
				want, rev.GetLoadError(), resp.GetActiveVersion()))
		return false, nil
	default:
		status.SetCondition(sb, openshellv1alpha1.SandboxConditionPolicyLoaded, metav1.ConditionFalse, openshellv1alpha1.SandboxReasonPolicyLoadPending,
			fmt.Sprintf("waiting for the supervisor to load policy version %d (it enforces version %d)", want, resp.GetActiveVersion()))
		return true, nil
	}
}

// action is what spec.suspend asks of the gateway sandbox next.
type action int

const (
	actionNone action = iota
	actionStop
	actionStart
)

// runAction decides between stopping, starting and waiting. Pure. A stop
// needs READY (the gateway's precondition); while STOPPING the gateway is
// already at it and is followed, not asked again. A start needs STOPPED,
// a sandbox the operator suspended (one the gateway or its CLI stopped is
// left to them), and an image the namespace still allows under Enforce
// (resuming starts a new pod with it).
func runAction(suspend bool, phase openshellv1.SandboxPhase, suspendedByUs, imageAllowed bool) action {
	switch {
	case suspend && phase == openshellv1.SandboxPhase_SANDBOX_PHASE_READY:
		return actionStop
	case !suspend && phase == openshellv1.SandboxPhase_SANDBOX_PHASE_STOPPED && suspendedByUs && imageAllowed:
		return actionStart
	}
	return actionNone
}

// suspendedByUs reports whether the operator suspended the sandbox (its
// Suspended condition exists only on sandboxes that asked).
func suspendedByUs(sb *openshellv1alpha1.OpenShellSandbox) bool {
	return meta.FindStatusCondition(sb.Status.Conditions, openshellv1alpha1.SandboxConditionSuspended) != nil
}

// reportSuspension sets phase Suspended and the Suspended condition: only
// for sandboxes that ask, or asked, to be suspended, so that others gain no
// condition (and no write).
func reportSuspension(sb *openshellv1alpha1.OpenShellSandbox, gatewayPhase openshellv1.SandboxPhase) {
	if !sb.Spec.Suspend && !suspendedByUs(sb) {
		return
	}
	switch {
	case sb.Spec.Suspend && gatewayPhase == openshellv1.SandboxPhase_SANDBOX_PHASE_STOPPED:
		sb.Status.Phase = openshellv1alpha1.SandboxPhaseSuspended
		status.SetCondition(sb, openshellv1alpha1.SandboxConditionSuspended, metav1.ConditionTrue, openshellv1alpha1.SandboxReasonSuspended,
			"the runtime is stopped and the workspace volume kept; set spec.suspend to false to start it again")
	case sb.Spec.Suspend:
		if gatewayPhase == openshellv1.SandboxPhase_SANDBOX_PHASE_STOPPING {
			sb.Status.Phase = openshellv1alpha1.SandboxPhaseSuspended
		}
		status.SetCondition(sb, openshellv1alpha1.SandboxConditionSuspended, metav1.ConditionFalse, openshellv1alpha1.SandboxReasonSuspending,
			"the gateway is stopping the runtime (gateway phase "+gatewayPhase.String()+")")
	case gatewayPhase == openshellv1.SandboxPhase_SANDBOX_PHASE_READY:
		status.SetCondition(sb, openshellv1alpha1.SandboxConditionSuspended, metav1.ConditionFalse, openshellv1alpha1.SandboxReasonRunning,
			"not suspended: the runtime runs")
	default:
		status.SetCondition(sb, openshellv1alpha1.SandboxConditionSuspended, metav1.ConditionFalse, openshellv1alpha1.SandboxReasonResuming,
			"a new runtime is starting on the kept workspace (gateway phase "+gatewayPhase.String()+")")
	}
}

// reportUpstream says, while the gateway reports a running sandbox whose
// agents.x-k8s.io Sandbox is gone, that it does not run: Ready is not
// running otherwise. The gateway drops its row once it notices (0.0.111:
// after its sweep's grace), and the next reconcile creates the sandbox
// anew; until then the sandbox is looked at again shortly. Pure.
func reportUpstream(sb *openshellv1alpha1.OpenShellSandbox, current *openshellv1.Sandbox, gone bool, res ctrl.Result) ctrl.Result {
	if !gone || current.GetStatus().GetPhase() != openshellv1.SandboxPhase_SANDBOX_PHASE_READY {
		meta.RemoveStatusCondition(&sb.Status.Conditions, openshellv1alpha1.SandboxConditionUpstreamSandboxReady)
		return res
	}
	ref := sb.Status.AgentSandbox
	msg := fmt.Sprintf("the gateway reports the sandbox running, but its %s Sandbox %s/%s is gone (deleted, or lost with its CRD): "+
		"it is re-created once the gateway notices", ref.APIVersion, ref.Namespace, ref.Name)
	status.SetCondition(sb, openshellv1alpha1.SandboxConditionUpstreamSandboxReady, metav1.ConditionFalse, openshellv1alpha1.SandboxReasonUpstreamSandboxMissing, msg)
	status.SetCondition(sb, openshellv1alpha1.ConditionReady, metav1.ConditionFalse, openshellv1alpha1.SandboxReasonUpstreamSandboxMissing, msg)
	sb.Status.Phase = openshellv1alpha1.SandboxPhaseError
	since := time.Duration(0)
	if c := meta.FindStatusCondition(sb.Status.Conditions, openshellv1alpha1.SandboxConditionUpstreamSandboxReady); c != nil && !c.LastTransitionTime.IsZero() {
		since = time.Since(c.LastTransitionTime.Time)
	}
	return ctrl.Result{RequeueAfter: upstreamRecheck(since)}
}

// upstreamRecheck is how soon to ask the gateway again about a sandbox
// whose agents.x-k8s.io Sandbox went while the gateway still reports it
// running: soon at first, since the operator's watch often hears of the
// deletion a moment before the gateway's does (waiting a whole
// provisionPoll then kept the sandbox down 15 s longer than needed), then
// less often, up to provisionPoll, for a gateway slow to notice. Pure.
func upstreamRecheck(since time.Duration) time.Duration {
	return min(max(since/2, time.Second), provisionPoll)
}

// report maps the gateway sandbox onto status and says when to look again.
func (r *Reconciler) report(sb *openshellv1alpha1.OpenShellSandbox, obs observed, current *openshellv1.Sandbox) ctrl.Result {
	status.SetCondition(sb, openshellv1alpha1.ConditionSynced, metav1.ConditionTrue, openshellv1alpha1.SandboxReasonInSync, "the gateway holds the current spec, policy and providers")
	if current == nil {
		return ctrl.Result{}
	}
	phase := phases[current.Status.GetPhase()]
	if phase == "" {
		phase = openshellv1alpha1.SandboxPhaseProvisioning
	}
	sb.Status.Phase = phase
	recordExit(sb, current, metav1.Now())
	msg := "gateway phase " + current.Status.GetPhase().String()
	for _, c := range current.Status.GetConditions() {
		if c.Type == "Ready" && c.Message != "" {
			msg += ": " + c.Message
		}
	}
	reportSuspension(sb, current.Status.GetPhase())
	// STOPPING is still moving whatever spec.suspend says: follow it.
	stopping := current.Status.GetPhase() == openshellv1.SandboxPhase_SANDBOX_PHASE_STOPPING
	if sb.Status.Phase == openshellv1alpha1.SandboxPhaseSuspended {
		status.SetCondition(sb, openshellv1alpha1.ConditionReady, metav1.ConditionFalse, openshellv1alpha1.SandboxReasonSuspended, msg)
		if stopping {
			return ctrl.Result{RequeueAfter: provisionPoll}
		}
		return ctrl.Result{}
	}
	if stopping {
		status.SetCondition(sb, openshellv1alpha1.ConditionReady, metav1.ConditionFalse, openshellv1alpha1.SandboxReasonStopped, msg)
		return ctrl.Result{RequeueAfter: provisionPoll}
	}
	switch phase {
	case openshellv1alpha1.SandboxPhaseReady:
		status.SetCondition(sb, openshellv1alpha1.ConditionReady, metav1.ConditionTrue, openshellv1alpha1.SandboxReasonReady, "the agent runs under its policy")
		return ctrl.Result{}
	case openshellv1alpha1.SandboxPhaseCompleted:
		status.SetCondition(sb, openshellv1alpha1.ConditionReady, metav1.ConditionFalse, openshellv1alpha1.SandboxReasonCompleted,
			fmt.Sprintf("the agent exited with code %d", ptr.Deref(sb.Status.ExitCode, 0)))
		return ctrl.Result{}
	case openshellv1alpha1.SandboxPhaseError:
		if code := sb.Status.ExitCode; code != nil {
			status.SetCondition(sb, openshellv1alpha1.ConditionReady, metav1.ConditionFalse, openshellv1alpha1.SandboxReasonExited,
				fmt.Sprintf("the agent exited with code %d: %s", *code, msg))
			return ctrl.Result{}
		}
		status.SetCondition(sb, openshellv1alpha1.ConditionReady, metav1.ConditionFalse, openshellv1alpha1.SandboxReasonError, msg)
		return ctrl.Result{}
	case openshellv1alpha1.SandboxPhaseStopped:
		status.SetCondition(sb, openshellv1alpha1.ConditionReady, metav1.ConditionFalse, openshellv1alpha1.SandboxReasonStopped, msg)
		return ctrl.Result{}
	default:
		status.SetCondition(sb, openshellv1alpha1.ConditionReady, metav1.ConditionFalse, provisioningReason(msg), msg)
		return ctrl.Result{RequeueAfter: provisionPoll}
	}
}

// provisioningReason tells a sandbox whose pod a ResourceQuota refused
// (the API server's "exceeded quota" admission error, which the gateway
// passes on) from one still starting: the quota's message is what the
// tenant needs to read.
func provisioningReason(msg string) string {
	if quotaExceeded(msg) {
		return openshellv1alpha1.SandboxReasonQuotaExceeded
	}
	return openshellv1alpha1.SandboxReasonProvisioning
}

// quotaExceeded says whether an error message is the API server's
// ResourceQuota refusal ("exceeded quota: <name>, requested: …").
func quotaExceeded(msg string) bool { return strings.Contains(msg, "exceeded quota") }

// managedSandboxNamespace is where a Managed gateway runs its sandboxes
// ("" for an External gateway: the operator does not know).
func managedSandboxNamespace(gw *openshellv1alpha1.OpenShellGateway, sb *openshellv1alpha1.OpenShellSandbox) string {
	switch {
	case gw == nil || gw.Spec.Mode == openshellv1alpha1.GatewayModeExternal:
		return ""
	case render.OperatorMode(gw):
		// The paired namespace is named after the workspace.
		return sb.Status.Workspace
	}
	return render.NamesFor(gw).SandboxNamespace
}

// recordExit keeps what the gateway reports of an agent that exited: its
// exit code, and when the operator first saw it finished (phase Completed,
// or Error with an exit code), which spec.ttlSecondsAfterFinished counts
// from. Written once: steady state makes no write.
func recordExit(sb *openshellv1alpha1.OpenShellSandbox, current *openshellv1.Sandbox, now metav1.Time) {
	st := &sb.Status
	if gs := current.GetStatus(); gs != nil && gs.ExitCode != nil && (st.ExitCode == nil || *st.ExitCode != *gs.ExitCode) {
		st.ExitCode = ptr.To(*gs.ExitCode)
	}
	finished := st.Phase == openshellv1alpha1.SandboxPhaseCompleted || (st.Phase == openshellv1alpha1.SandboxPhaseError && st.ExitCode != nil)
	switch {
	case finished && st.CompletionTime == nil:
		st.CompletionTime = &now
	case st.Phase == openshellv1alpha1.SandboxPhaseReady:
		// Running again (the gateway restarted the agent): the last exit
		// no longer counts, and no TTL may delete a running sandbox. Other
		// phases (a transient UNKNOWN, DELETING) keep the record.
		st.ExitCode, st.CompletionTime = nil, nil
	}
}

// gatewayError reports a failed call without flapping the phase:
// GatewayReachable (or Synced) says why, and the error goes back to the
// workqueue, which retries with per-sandbox exponential backoff (see
// SetupWithManager) and counts it in controller_runtime_reconcile_errors_total
// and the log. A conflict is a decision, not a failure: not retried.
func gatewayError(sb *openshellv1alpha1.OpenShellSandbox, err error) (ctrl.Result, error) {
	if gwconn.NotNow(err) {
		// The gateway answers but has all the calls it may have in flight,
		// or the operator cannot sign a token yet: nothing to report (at
		// 10,000 sandboxes, flipping GatewayReachable here wrote two status
		// patches per refusal) and no backoff to build up: look again
		// shortly.
		return ctrl.Result{RequeueAfter: busyRetry + rand.N(busyRetry)}, nil
	}
	if conflict := (*gwconn.ConflictError)(nil); errors.As(err, &conflict) {
		// It needs a gateway admin (or a new namespace); the next spec or
		// gateway change re-queues the sandbox.
		status.SetCondition(sb, openshellv1alpha1.ConditionSynced, metav1.ConditionFalse, openshellv1alpha1.ReasonWorkspaceConflict, conflict.Error())
		status.SetCondition(sb, openshellv1alpha1.ConditionReady, metav1.ConditionFalse, openshellv1alpha1.ReasonWorkspaceConflict, conflict.Error())
		if sb.Status.SandboxID == "" {
			sb.Status.Phase = openshellv1alpha1.SandboxPhaseError
		}
		sb.Status.ObservedGeneration = sb.Generation // decided: it needs a gateway admin
		return ctrl.Result{}, nil
	}
	reason := openshellv1alpha1.SandboxReasonGatewayError
	switch grpcstatus.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled, codes.ResourceExhausted:
		// (ResourceExhausted from the gateway itself: it is overloaded.)
		reason = openshellv1alpha1.SandboxReasonUnavailable
	case codes.Unauthenticated, codes.PermissionDenied:
		reason = openshellv1alpha1.SandboxReasonUnauthorized
	}
	reachable := metav1.ConditionFalse
	if msg := grpcstatus.Convert(err).Message(); reason == openshellv1alpha1.SandboxReasonGatewayError && quotaExceeded(msg) {
		// The gateway could not create the sandbox's pods: the namespace's
		// quota (workspace mode Operator mirrors it) is used up.
		reachable, reason = metav1.ConditionTrue, openshellv1alpha1.SandboxReasonQuotaExceeded
		status.SetCondition(sb, openshellv1alpha1.ConditionSynced, metav1.ConditionFalse, reason, msg)
		status.SetCondition(sb, openshellv1alpha1.ConditionReady, metav1.ConditionFalse, reason, msg)
	} else if reason == openshellv1alpha1.SandboxReasonGatewayError {
		reachable = metav1.ConditionTrue
		status.SetCondition(sb, openshellv1alpha1.ConditionSynced, metav1.ConditionFalse, reason, msg)
	}
	status.SetCondition(sb, openshellv1alpha1.ConditionGatewayReachable, reachable, reason, grpcstatus.Convert(err).Message())
	return ctrl.Result{}, fmt.Errorf("gateway %s: %w", sb.Status.Gateway, err)
}
