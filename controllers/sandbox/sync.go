package sandbox

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/gateway"
	"github.com/openshell/openshell-operator/internal/gateway/pb/openshellv1"
	"github.com/openshell/openshell-operator/internal/gwconn"
	render "github.com/openshell/openshell-operator/internal/render/gateway"
	"github.com/openshell/openshell-operator/internal/status"
)

// Reasons of GatewayReachable and Synced.
const (
	ReasonReachable    = "Reachable"
	ReasonUnavailable  = "Unavailable"
	ReasonUnauthorized = "Unauthorized"
	ReasonConnection   = "ConnectionFailed"
	ReasonInSync       = "InSync"
	ReasonRecreating   = "Recreating"
	ReasonNameConflict = "NameConflict"
	ReasonGatewayError = "GatewayError"
	ReasonRejected     = "RejectedByGateway"
)

// A safety re-check while a sandbox provisions (WatchSandbox streams the
// changes); capped backoff while the gateway is unreachable.
const (
	provisionPoll = 15 * time.Second
	maxBackoff    = 10 * time.Second
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
}

// sync brings the gateway sandbox in line with the spec.
func (r *Reconciler) sync(ctx context.Context, sb *openshellv1alpha1.OpenShellSandbox, obs observed) (ctrl.Result, error) {
	key := client.ObjectKeyFromObject(sb)
	gw := obs.gateway
	conn, err := r.Gateways.Connect(ctx, gw)
	if err != nil {
		status.SetCondition(sb, openshellv1alpha1.ConditionGatewayReachable, metav1.ConditionFalse, ReasonConnection, err.Error())
		return ctrl.Result{RequeueAfter: r.backoff(key)}, nil
	}
	ws, err := r.Gateways.EnsureWorkspace(ctx, conn, gwconn.Key(gw), sb.Namespace, obs.namespaceUID)
	if err != nil {
		return r.gatewayError(sb, key, err)
	}
	name := gateway.SandboxName(sb.Namespace, sb.Name)
	sb.Status.Workspace, sb.Status.GatewaySandboxName, sb.Status.Gateway = ws, name, gwconn.Key(gw)

	res, err := r.drive(ctx, conn, sb, obs, ws, name)
	if err != nil {
		return r.gatewayError(sb, key, err)
	}
	r.mu.Lock()
	delete(r.failures, key)
	r.mu.Unlock()
	status.SetCondition(sb, openshellv1alpha1.ConditionGatewayReachable, metav1.ConditionTrue, ReasonReachable, "the gateway answered")
	return res, nil
}

func (r *Reconciler) drive(ctx context.Context, conn *gateway.Client, sb *openshellv1alpha1.OpenShellSandbox, obs observed, ws, name string) (ctrl.Result, error) {
	policy := gateway.Policy(openshellv1alpha1.OpenShellPolicySpec{})
	if obs.policy != nil {
		policy = gateway.Policy(obs.policy.Spec)
	}
	if sb.Spec.PolicyRef == nil {
		policy = nil
	}
	policyHash := ""
	if policy != nil {
		policyHash = gateway.Hash(policy)
	}
	providers := append([]string{}, sb.Spec.Providers...)
	slices.Sort(providers)
	specHash := gateway.ImmutableHash(sb)

	// An immutable change recreates the gateway sandbox: delete, wait until
	// the name is free, create anew.
	if sb.Status.SandboxID != "" && sb.Status.AppliedSpecHash != specHash {
		if _, err := conn.DeleteSandbox(ctx, &openshellv1.DeleteSandboxRequest{Name: name, Workspace: ws}); err != nil && grpcstatus.Code(err) != codes.NotFound {
			return ctrl.Result{}, fmt.Errorf("delete sandbox for recreation: %w", err)
		}
		r.Recorder.Eventf(sb, nil, corev1.EventTypeNormal, ReasonRecreating, "Recreate",
			"image, command, env, GPU, resources or log level changed: recreating the gateway sandbox")
		sb.Status.SandboxID, sb.Status.AppliedSpecHash, sb.Status.AppliedPolicyHash, sb.Status.AttachedProviders, sb.Status.PolicyVersion = "", "", "", nil, 0
		sb.Status.AgentSandbox = nil
		sb.Status.Phase = openshellv1alpha1.SandboxPhaseProvisioning
		status.SetCondition(sb, openshellv1alpha1.ConditionSynced, metav1.ConditionFalse, ReasonRecreating, "recreating the gateway sandbox after an immutable change")
		status.SetCondition(sb, openshellv1alpha1.ConditionReady, metav1.ConditionFalse, ReasonRecreating, "recreating the gateway sandbox")
		return ctrl.Result{RequeueAfter: time.Second}, nil
	}

	var current *openshellv1.Sandbox
	if sb.Status.SandboxID == "" {
		spec, err := gateway.SandboxSpec(sb, gateway.SpecInputs{Policy: policy, Env: obs.env, Providers: providers})
		if err != nil {
			return ctrl.Result{}, err
		}
		resp, err := conn.CreateSandbox(ctx, &openshellv1.CreateSandboxRequest{Name: name, Workspace: ws, Spec: spec,
			Labels:      map[string]string{gateway.LabelOwnerUID: string(sb.UID)},
			Annotations: map[string]string{gateway.AnnotationNamespace: sb.Namespace, gateway.AnnotationName: sb.Name}})
		switch {
		case err == nil:
			current = resp.Sandbox
			r.Recorder.Eventf(sb, nil, corev1.EventTypeNormal, "Created", "CreateSandbox", "created sandbox %s in workspace %s (id %s)", name, ws, current.Metadata.Id)
		case grpcstatus.Code(err) == codes.AlreadyExists:
			got, gerr := conn.GetSandbox(ctx, &openshellv1.GetSandboxRequest{Name: name, Workspace: ws})
			if gerr != nil {
				if grpcstatus.Code(gerr) == codes.NotFound {
					return ctrl.Result{RequeueAfter: time.Second}, nil // the old one just went
				}
				return ctrl.Result{}, gerr
			}
			if got.Sandbox.Metadata.Labels[gateway.LabelOwnerUID] != string(sb.UID) {
				msg := fmt.Sprintf("gateway sandbox %s in workspace %s exists and does not belong to this OpenShellSandbox (UID %s)", name, ws, sb.UID)
				status.SetCondition(sb, openshellv1alpha1.ConditionSynced, metav1.ConditionFalse, ReasonNameConflict, msg)
				status.SetCondition(sb, openshellv1alpha1.ConditionReady, metav1.ConditionFalse, ReasonNameConflict, msg)
				sb.Status.Phase = openshellv1alpha1.SandboxPhaseError
				return ctrl.Result{}, nil
			}
			if got.Sandbox.Status.GetPhase() == openshellv1.SandboxPhase_SANDBOX_PHASE_DELETING {
				return ctrl.Result{RequeueAfter: time.Second}, nil // our previous incarnation is going
			}
			current = got.Sandbox // adopt our own sandbox (e.g. after a lost status write)
		case grpcstatus.Code(err) == codes.InvalidArgument || grpcstatus.Code(err) == codes.FailedPrecondition:
			msg := "the gateway refused the sandbox: " + grpcstatus.Convert(err).Message()
			status.SetCondition(sb, openshellv1alpha1.ConditionSynced, metav1.ConditionFalse, ReasonRejected, msg)
			status.SetCondition(sb, openshellv1alpha1.ConditionReady, metav1.ConditionFalse, ReasonRejected, msg)
			sb.Status.Phase = openshellv1alpha1.SandboxPhaseError
			return ctrl.Result{}, nil
		case grpcstatus.Code(err) == codes.NotFound:
			// The gateway lost the workspace (a new database): create it again.
			r.Gateways.ForgetWorkspace(sb.Status.Gateway, ws)
			return ctrl.Result{}, fmt.Errorf("create sandbox: %w", err)
		default:
			return ctrl.Result{}, fmt.Errorf("create sandbox: %w", err)
		}
		sb.Status.SandboxID = current.Metadata.Id
		sb.Status.AppliedSpecHash = specHash
		sb.Status.AppliedPolicyHash = policyHash
		sb.Status.AttachedProviders = current.Spec.GetProviders()
	}

	// Mutable changes apply in place.
	if sb.Status.AppliedPolicyHash != policyHash && policy != nil {
		resp, err := conn.UpdateConfig(ctx, &openshellv1.UpdateConfigRequest{Name: name, Workspace: ws, Policy: policy})
		if err != nil {
			if c := grpcstatus.Code(err); c == codes.InvalidArgument || c == codes.FailedPrecondition {
				msg := "the gateway refused the policy change: " + grpcstatus.Convert(err).Message()
				status.SetCondition(sb, openshellv1alpha1.ConditionSynced, metav1.ConditionFalse, ReasonRejected, msg)
				return ctrl.Result{}, nil
			}
			return ctrl.Result{}, fmt.Errorf("update policy: %w", err)
		}
		sb.Status.AppliedPolicyHash, sb.Status.PolicyVersion = policyHash, int64(resp.Version)
		r.Recorder.Eventf(sb, nil, corev1.EventTypeNormal, "PolicyApplied", "UpdateConfig", "policy version %d applied in place", resp.Version)
		current = nil
	}
	attached := append([]string{}, sb.Status.AttachedProviders...)
	slices.Sort(attached)
	if !slices.Equal(attached, providers) {
		for _, p := range providers {
			if !slices.Contains(attached, p) {
				if _, err := conn.AttachSandboxProvider(ctx, &openshellv1.AttachSandboxProviderRequest{SandboxName: name, ProviderName: p, Workspace: ws}); err != nil {
					return ctrl.Result{}, fmt.Errorf("attach provider %s: %w", p, err)
				}
			}
		}
		for _, p := range attached {
			if !slices.Contains(providers, p) {
				if _, err := conn.DetachSandboxProvider(ctx, &openshellv1.DetachSandboxProviderRequest{SandboxName: name, ProviderName: p, Workspace: ws}); err != nil {
					return ctrl.Result{}, fmt.Errorf("detach provider %s: %w", p, err)
				}
			}
		}
		sb.Status.AttachedProviders = providers
		current = nil
	}

	// Follow the phase: while it moves, from the WatchSandbox stream when
	// one is running. A Ready sandbox is read once per reconcile, which in
	// steady state means once per cache resync: that read is what notices a
	// gateway that lost the sandbox (a new database) and recreates it.
	key := client.ObjectKeyFromObject(sb)
	if current == nil || sb.Status.Phase != openshellv1alpha1.SandboxPhaseReady {
		if snap := r.follow.snapshot(key, sb.Status.SandboxID); snap != nil && current == nil {
			current = snap // streamed by WatchSandbox: no call needed
		} else if current == nil {
			resp, err := conn.GetSandbox(ctx, &openshellv1.GetSandboxRequest{Name: name, Workspace: ws})
			if grpcstatus.Code(err) == codes.NotFound {
				// The gateway lost it: create it again.
				r.Recorder.Eventf(sb, nil, corev1.EventTypeWarning, "SandboxMissing", "GetSandbox", "the gateway no longer has sandbox %s; recreating it", name)
				sb.Status.SandboxID, sb.Status.AppliedSpecHash, sb.Status.AppliedPolicyHash, sb.Status.AttachedProviders = "", "", "", nil
				return ctrl.Result{RequeueAfter: time.Second}, nil
			}
			if err != nil {
				return ctrl.Result{}, fmt.Errorf("get sandbox: %w", err)
			}
			current = resp.Sandbox
		}
	}
	res := r.report(sb, obs, current)
	if res.RequeueAfter > 0 {
		// Still moving: follow the gateway's stream so the next change is
		// reported as it happens; the requeue is only a safety net.
		r.follow.ensure(key, conn, sb.Status.SandboxID)
	}
	return res, nil
}

// report maps the gateway sandbox onto status and says when to look again.
func (r *Reconciler) report(sb *openshellv1alpha1.OpenShellSandbox, obs observed, current *openshellv1.Sandbox) ctrl.Result {
	status.SetCondition(sb, openshellv1alpha1.ConditionSynced, metav1.ConditionTrue, ReasonInSync, "the gateway holds the current spec, policy and providers")
	if current == nil {
		return ctrl.Result{}
	}
	phase := phases[current.Status.GetPhase()]
	if phase == "" {
		phase = openshellv1alpha1.SandboxPhaseProvisioning
	}
	sb.Status.Phase = phase
	if n := current.Status.GetSandboxName(); n != "" {
		ns := ""
		if obs.gateway != nil && obs.gateway.Spec.Mode != openshellv1alpha1.GatewayModeExternal {
			ns = render.NamesFor(obs.gateway).SandboxNamespace
		}
		sb.Status.AgentSandbox = &openshellv1alpha1.AgentSandboxReference{
			APIVersion: "agents.x-k8s.io/" + obs.preflight.AgentSandbox.Preferred, Namespace: ns, Name: n}
	}
	msg := "gateway phase " + current.Status.GetPhase().String()
	for _, c := range current.Status.GetConditions() {
		if c.Type == "Ready" && c.Message != "" {
			msg += ": " + c.Message
		}
	}
	switch phase {
	case openshellv1alpha1.SandboxPhaseReady:
		status.SetCondition(sb, openshellv1alpha1.ConditionReady, metav1.ConditionTrue, "SandboxReady", "the agent runs under its policy")
		return ctrl.Result{}
	case openshellv1alpha1.SandboxPhaseError:
		status.SetCondition(sb, openshellv1alpha1.ConditionReady, metav1.ConditionFalse, "SandboxError", msg)
		return ctrl.Result{}
	case openshellv1alpha1.SandboxPhaseStopped:
		status.SetCondition(sb, openshellv1alpha1.ConditionReady, metav1.ConditionFalse, "SandboxStopped", msg)
		return ctrl.Result{}
	default:
		status.SetCondition(sb, openshellv1alpha1.ConditionReady, metav1.ConditionFalse, "Provisioning", msg)
		return ctrl.Result{RequeueAfter: provisionPoll}
	}
}

// gatewayError reports a failed call without flapping: the phase stays,
// GatewayReachable says why, and the retry backs off up to maxBackoff.
func (r *Reconciler) gatewayError(sb *openshellv1alpha1.OpenShellSandbox, key types.NamespacedName, err error) (ctrl.Result, error) {
	if conflict := (*gwconn.ConflictError)(nil); errors.As(err, &conflict) {
		// Not retried: it needs a gateway admin (or a new namespace), and the
		// next spec or gateway change re-queues the sandbox.
		status.SetCondition(sb, openshellv1alpha1.ConditionSynced, metav1.ConditionFalse, openshellv1alpha1.ReasonWorkspaceConflict, conflict.Error())
		status.SetCondition(sb, openshellv1alpha1.ConditionReady, metav1.ConditionFalse, openshellv1alpha1.ReasonWorkspaceConflict, conflict.Error())
		if sb.Status.SandboxID == "" {
			sb.Status.Phase = openshellv1alpha1.SandboxPhaseError
		}
		return ctrl.Result{}, nil
	}
	reason := ReasonGatewayError
	switch grpcstatus.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		reason = ReasonUnavailable
	case codes.Unauthenticated, codes.PermissionDenied:
		reason = ReasonUnauthorized
	}
	reachable := metav1.ConditionFalse
	if reason == ReasonGatewayError {
		reachable = metav1.ConditionTrue
		status.SetCondition(sb, openshellv1alpha1.ConditionSynced, metav1.ConditionFalse, reason, grpcstatus.Convert(err).Message())
	}
	status.SetCondition(sb, openshellv1alpha1.ConditionGatewayReachable, reachable, reason, grpcstatus.Convert(err).Message())
	return ctrl.Result{RequeueAfter: r.backoff(key)}, nil
}

func (r *Reconciler) backoff(key types.NamespacedName) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.failures[key]
	r.failures[key] = n + 1
	d := time.Second << min(n, 5)
	return min(d, maxBackoff)
}
