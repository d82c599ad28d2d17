package sandbox

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/gatewayapi"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/openshellv1"
	"github.com/openshell/openshell-operator/internal/gwconn"
	"github.com/openshell/openshell-operator/internal/index"
	"github.com/openshell/openshell-operator/internal/monitoring"
	"github.com/openshell/openshell-operator/internal/sandboxspec"
	"github.com/openshell/openshell-operator/internal/status"
)

// deletePoll is how often deletion progress is checked; waiting never
// blocks a worker.
const deletePoll = time.Second

// DefaultForceReleaseAfter is how long the gateway must have been
// unreachable for a sandbox before its force-release annotation is
// honoured: longer than a gateway rollout or a burst of timeouts under
// load, so that the escape hatch is never a way to orphan an agent at a
// gateway that answers again a moment later.
const DefaultForceReleaseAfter = 5 * time.Minute

// LabelSandboxID is the label the gateway's driver puts on the
// agents.x-k8s.io Sandbox it creates.
const LabelSandboxID = "openshell.ai/sandbox-id"

// lookup is what one look at the gateway during deletion found.
type lookup struct {
	// gone: the gateway holds no sandbox of this object (or the gateway
	// object itself is gone, or it is one the operator never talks to).
	gone bool
	// id is the gateway sandbox ID whose agents.x-k8s.io Sandbox must be
	// waited for ("" when there is none to wait for).
	id  string
	err error
	// rollingOut: the call failed while the operator rolls out the
	// Managed gateway's pods; a failure then says nothing of an outage.
	rollingOut bool
}

// deletion is what reconcileDelete does next. Decided by decideDeletion.
type deletion int

const (
	// deletionWait: the gateway is deleting the sandbox; look again.
	deletionWait deletion = iota
	// deletionFinish: nothing is left at the gateway; wait for the
	// agents.x-k8s.io Sandbox, then release.
	deletionFinish
	// deletionBusy: the gateway's bulkhead refused the call; look again
	// shortly, writing nothing. The gateway answers: never a release.
	deletionBusy
	// deletionRetry: the gateway did not answer; report it and back off.
	deletionRetry
	// deletionForce: force-release was asked for and the gateway has been
	// unreachable for the sandbox for long enough.
	deletionForce
)

// decideDeletion is the deletion state machine's decision. Pure. A sandbox
// is released only once the gateway said it holds nothing of it (asked by
// the names the operator derives, whatever status recorded: a create may
// have been sent by an earlier reconcile or an earlier process without its
// status write landing), or by an authorised force-release after the
// gateway stayed unreachable for forceAfter and a call made now finds it
// so. A busy gateway, a rollout of its pods, a gateway that answers with a
// refusal (PermissionDenied, FailedPrecondition, …), an error of the
// Kubernetes API or an open circuit breaker (no call made) never releases.
func decideDeletion(sb *openshellv1alpha1.OpenShellSandbox, l lookup, now time.Time, forceAfter time.Duration) deletion {
	switch {
	case l.err == nil && l.gone:
		return deletionFinish
	case l.err == nil:
		return deletionWait
	case gwconn.NotNow(l.err), l.rollingOut:
		return deletionBusy
	case forceDue(sb, now, forceAfter) && unreachableNow(l.err):
		return deletionForce
	default:
		return deletionRetry
	}
}

// forceDue says whether force-release is asked for and its grace has
// passed.
func forceDue(sb *openshellv1alpha1.OpenShellSandbox, now time.Time, forceAfter time.Duration) bool {
	return sb.Annotations[openshellv1alpha1.AnnotationForceRelease] == "true" && unreachableFor(sb, now) >= forceAfter
}

// unreachableNow says whether a call made for this deletion found the
// gateway unreachable (no answer, or no answer in time); the breaker's
// memory of other calls' failures is not such a call.
func unreachableNow(err error) bool {
	switch grpcstatus.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded:
		return !gatewayapi.BreakerOpen(err)
	}
	return false
}

// rollingOut says whether the operator is rolling out a Managed gateway's
// pods (its Progressing condition is True).
func rollingOut(gw *openshellv1alpha1.OpenShellGateway) bool {
	return gw.Spec.Managed != nil && meta.IsStatusConditionTrue(gw.Status.Conditions, openshellv1alpha1.ConditionProgressing)
}

// unreachableFor is how long the sandbox's GatewayReachable condition has
// said the gateway cannot be reached (0 when it does not say so).
func unreachableFor(sb *openshellv1alpha1.OpenShellSandbox, now time.Time) time.Duration {
	c := meta.FindStatusCondition(sb.Status.Conditions, openshellv1alpha1.ConditionGatewayReachable)
	if c == nil || c.Status != metav1.ConditionFalse {
		return 0
	}
	return now.Sub(c.LastTransitionTime.Time)
}

// reconcileDelete deletes the sandbox at the gateway, waits (by requeue)
// until the gateway row and the agents.x-k8s.io Sandbox are gone, then
// releases the object. The gateway sandbox is looked up by the names the
// operator derives (never by names in status, which a lost status write can
// leave empty), and deleted only when it carries this object's UID.
func (r *Reconciler) reconcileDelete(ctx context.Context, sb *openshellv1alpha1.OpenShellSandbox) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(sb, Finalizer) {
		return ctrl.Result{}, nil
	}
	orig := sb.DeepCopy()
	r.settling.restore(sb)
	l := r.deleteAtGateway(ctx, sb)
	switch decideDeletion(sb, l, time.Now(), r.forceReleaseAfter()) {
	case deletionBusy:
		return ctrl.Result{RequeueAfter: busyRetry + rand.N(busyRetry)}, nil
	case deletionForce:
		r.forceRelease(sb, l.err)
		return r.release(ctx, sb)
	case deletionRetry:
		sb.Status.Phase = openshellv1alpha1.SandboxPhaseDeleting
		reason := openshellv1alpha1.SandboxReasonUnavailable
		if c := grpcstatus.Code(l.err); c == codes.Unauthenticated || c == codes.PermissionDenied {
			reason = openshellv1alpha1.SandboxReasonUnauthorized
		}
		status.SetCondition(sb, openshellv1alpha1.ConditionGatewayReachable, metav1.ConditionFalse, reason,
			fmt.Sprintf("cannot delete the sandbox at the gateway yet (%v); if the gateway is gone for good, whoever may remove "+
				"the finalizer can set the annotation %s=true, honoured once the gateway has been unreachable for %s",
				l.err, openshellv1alpha1.AnnotationForceRelease, r.forceReleaseAfter()))
		if perr := status.Patch(ctx, r.Client, orig, sb); perr != nil {
			return ctrl.Result{}, perr
		}
		if sb.Annotations[openshellv1alpha1.AnnotationForceRelease] == "true" {
			// Asked for: look again when the grace ends, not when the
			// backoff of a long outage would.
			ctrl.LoggerFrom(ctx).Info("force-release waits for the gateway's grace", "gateway", sb.GatewayKey(), "error", l.err.Error())
			return ctrl.Result{RequeueAfter: max(r.forceReleaseAfter()-unreachableFor(sb, time.Now()), deletePoll)}, nil
		}
		// Back off (and count the error) rather than poll a dead gateway.
		return ctrl.Result{}, fmt.Errorf("delete sandbox at gateway %s: %w", sb.GatewayKey(), l.err)
	case deletionWait:
		sb.Status.Phase = openshellv1alpha1.SandboxPhaseDeleting
		// The gateway answered: an outage recorded earlier is over, and
		// must not count towards a force-release's grace any more.
		status.SetCondition(sb, openshellv1alpha1.ConditionGatewayReachable, metav1.ConditionTrue, openshellv1alpha1.SandboxReasonReachable, "the gateway answered")
		if perr := status.Patch(ctx, r.Client, orig, sb); perr != nil {
			return ctrl.Result{}, perr
		}
		return ctrl.Result{RequeueAfter: deletePoll}, nil
	}
	if l.id != "" {
		remaining, err := r.agentSandboxesLeft(ctx, sb, l.id)
		if err != nil {
			return ctrl.Result{}, err
		}
		if remaining > 0 {
			return ctrl.Result{RequeueAfter: deletePoll}, nil
		}
	}
	return r.release(ctx, sb)
}

// forceRelease records a release the gateway did not confirm: an event on
// the object, a metric, and a sweep of the gateway once it answers again
// (what the release leaves there is deleted then, by owner UID).
func (r *Reconciler) forceRelease(sb *openshellv1alpha1.OpenShellSandbox, err error) {
	r.Recorder.Eventf(sb, nil, corev1.EventTypeWarning, openshellv1alpha1.SandboxReasonForceReleased, "Delete",
		"released by %s without deleting sandbox %s in workspace %s at gateway %s, unreachable for %s (%v): the operator deletes "+
			"it there once the gateway answers again", openshellv1alpha1.AnnotationForceRelease,
		sandboxspec.SandboxName(sb.Namespace, sb.Name), sb.Status.Workspace, sb.GatewayKey(), unreachableFor(sb, time.Now()).Round(time.Second), err)
	monitoring.SandboxForceReleased(sb.GatewayKey().String())
	if r.Sweeper != nil {
		r.Sweeper.Mark(sb.GatewayKey())
	}
}

// releasedUnconfirmed says that a sandbox is released without the gateway
// confirming its deletion there: a Warning event and the force-release
// metric, every time (a create may have been sent even when status
// recorded none).
func (r *Reconciler) releasedUnconfirmed(sb *openshellv1alpha1.OpenShellSandbox, reason, msg string) {
	r.Recorder.Eventf(sb, nil, corev1.EventTypeWarning, reason, "Delete", "%s", msg)
	monitoring.SandboxForceReleased(sb.GatewayKey().String())
}

// forceReleaseAfter is ForceReleaseAfter, or its default.
func (r *Reconciler) forceReleaseAfter() time.Duration {
	if r.ForceReleaseAfter > 0 {
		return r.ForceReleaseAfter
	}
	return DefaultForceReleaseAfter
}

// release removes the finalizer and forgets the sandbox's in-memory state.
func (r *Reconciler) release(ctx context.Context, sb *openshellv1alpha1.OpenShellSandbox) (ctrl.Result, error) {
	if err := status.RemoveFinalizer(ctx, r.Client, sb, Finalizer); err != nil {
		return ctrl.Result{}, err
	}
	r.Gateways.Followers().Stop(client.ObjectKeyFromObject(sb))
	r.settling.forget(client.ObjectKeyFromObject(sb))
	r.budget.forget(client.ObjectKeyFromObject(sb))
	return ctrl.Result{}, nil
}

// connectForDeletion connects to the gateway. A connection the operator
// cannot prepare (the gateway's CA or credentials Secret unreadable, no
// issuer configured for it) leaves the gateway as unreachable for this
// sandbox as a call that goes unanswered: it is UNAVAILABLE, and counts
// towards a force-release once it has lasted the whole grace (a gateway
// that was never installed, or whose Secret is gone for good, must not
// hold its sandboxes forever). The operator's own not-now (its issuer not
// signing yet) stays busy and never counts.
func (r *Reconciler) connectForDeletion(ctx context.Context, gw *openshellv1alpha1.OpenShellGateway) (*gatewayapi.Client, error) {
	conn, err := r.Gateways.Connect(ctx, gw)
	if err != nil && !gwconn.NotNow(err) {
		return nil, grpcstatus.Error(codes.Unavailable, fmt.Sprintf("connect to gateway %s: %v", gwconn.Key(gw), err))
	}
	return conn, err
}

// gatewayForDeletion is the served gateway a deletion asks, or the lookup
// that ends the deletion without asking any (the gateway is gone, or no
// longer served).
func (r *Reconciler) gatewayForDeletion(ctx context.Context, sb *openshellv1alpha1.OpenShellSandbox) (*openshellv1alpha1.OpenShellGateway, *lookup) {
	gw := &openshellv1alpha1.OpenShellGateway{}
	if err := r.Client.Get(ctx, sb.GatewayKey(), gw); err != nil {
		if apierrors.IsNotFound(err) {
			// The gateway and its database are gone; nothing is left to delete there.
			r.releasedUnconfirmed(sb, openshellv1alpha1.SandboxReasonGatewayGone, fmt.Sprintf("OpenShellGateway %s no longer exists; releasing the sandbox without deleting it there", sb.GatewayKey()))
			return nil, &lookup{gone: true, id: sb.Status.SandboxID}
		}
		return nil, &lookup{err: err}
	}
	if why, err := r.Platform.Served(ctx, r.Client, gw); err != nil {
		return nil, &lookup{err: err}
	} else if why != "" {
		// The operator never connects to a gateway it does not serve (a
		// tenant's own OpenShellGateway), and dialling an endpoint a tenant
		// chose is not something a deletion may make it do. What it created
		// there while the gateway was served (its namespace since unlisted
		// or unlabelled) is left, and said so: never silently.
		if sb.Status.SandboxID != "" || sb.Status.Gateway != "" {
			r.releasedUnconfirmed(sb, openshellv1alpha1.SandboxReasonForceReleased, fmt.Sprintf(
				"released without deleting sandbox %s (ID %q) at gateway %s, which the operator no longer serves (%s): delete it there by hand",
				sandboxspec.SandboxName(sb.Namespace, sb.Name), sb.Status.SandboxID, sb.GatewayKey(), why))
		} else {
			// Nothing recorded: most likely never sent (a gateway refused
			// from the start), but a status write may have been lost. Said,
			// but not counted: the metric would page for every rejected
			// sandbox of a tenant's own gateway.
			r.Recorder.Eventf(sb, nil, corev1.EventTypeWarning, openshellv1alpha1.SandboxReasonForceReleased, "Delete",
				"released without asking gateway %s, which the operator does not serve (%s); if a sandbox %s was created there while "+
					"it was served, delete it there by hand", sb.GatewayKey(), why, sandboxspec.SandboxName(sb.Namespace, sb.Name))
		}
		return nil, &lookup{gone: true}
	}
	return gw, nil
}

// deleteAtGateway asks the gateway for the sandbox of this object by the
// names the operator derives and deletes it when it carries this object's
// UID.
func (r *Reconciler) deleteAtGateway(ctx context.Context, sb *openshellv1alpha1.OpenShellSandbox) lookup {
	gw, done := r.gatewayForDeletion(ctx, sb)
	if done != nil {
		return *done
	}
	if forceDue(sb, time.Now(), r.forceReleaseAfter()) {
		// Only a call made now may release (decideDeletion): past the
		// grace, the breaker's memory of other calls must not stand in
		// for one.
		ctx = gatewayapi.DespiteBreaker(ctx)
	}
	l := r.deleteAt(ctx, gw, sb)
	l.rollingOut = l.err != nil && rollingOut(gw)
	return l
}

// deleteAt is deleteAtGateway at a served gateway.
func (r *Reconciler) deleteAt(ctx context.Context, gw *openshellv1alpha1.OpenShellGateway, sb *openshellv1alpha1.OpenShellSandbox) lookup {
	ns, err := index.GetNamespace(ctx, r.Client, sb.Namespace)
	if err != nil {
		return lookup{err: err}
	}
	conn, err := r.connectForDeletion(ctx, gw)
	if err != nil {
		return lookup{err: err}
	}
	req := &openshellv1.GetSandboxRequest{Name: sandboxspec.SandboxName(sb.Namespace, sb.Name), WorkspaceScope: gatewayapi.Workspace(sandboxspec.WorkspaceName(sb.Namespace, ns.UID))}
	got, err := conn.GetSandbox(ctx, req)
	if grpcstatus.Code(err) == codes.NotFound {
		return lookup{gone: true, id: sb.Status.SandboxID}
	}
	if err != nil {
		return lookup{err: err}
	}
	if got.Sandbox.GetMetadata().GetLabels()[sandboxspec.LabelOwnerUID] != string(sb.UID) {
		// Not ours (never created, or another object's): nothing to delete.
		return lookup{gone: true, id: sb.Status.SandboxID}
	}
	id := got.Sandbox.GetMetadata().GetId()
	if got.Sandbox.Status.GetPhase() != openshellv1.SandboxPhase_SANDBOX_PHASE_DELETING {
		if inFlight, err := r.createInFlight(ctx, gw, sb, got.Sandbox, time.Now()); err != nil {
			return lookup{err: err}
		} else if inFlight {
			// The gateway stores its row before its driver creates the
			// agents.x-k8s.io Sandbox; a delete in between finds no CR,
			// drops the row, and the CR the create then makes has no
			// owner anywhere. Wait for the create to finish.
			return lookup{id: id}
		}
		if _, err := conn.DeleteSandbox(ctx, &openshellv1.DeleteSandboxRequest{Name: req.Name, WorkspaceScope: req.WorkspaceScope, AllowMissing: true}); err != nil && grpcstatus.Code(err) != codes.NotFound {
			return lookup{err: fmt.Errorf("delete sandbox: %w", err)}
		}
		r.Recorder.Eventf(sb, nil, corev1.EventTypeNormal, "Deleting", "DeleteSandbox", "deleting sandbox %s at the gateway", req.Name)
	}
	return lookup{id: id}
}

// createInFlightGrace bounds how long a deletion waits for a gateway
// create to make its agents.x-k8s.io Sandbox: the gateway makes it within
// its CreateSandbox call, so past this the CR was removed by someone else
// (the gateway's own sweep then drops the row) and deleting is safe.
const createInFlightGrace = 30 * time.Second

// createInFlight says whether the gateway may still be creating the
// sandbox's agents.x-k8s.io Sandbox: the row is provisioning, young, and no
// CR with its ID exists yet. Where the install mode does not let the
// operator see the CRs it cannot tell, and a young provisioning row is
// waited for all the same: a deletion there may take up to
// createInFlightGrace longer, never leave a CR without an owner.
func (r *Reconciler) createInFlight(ctx context.Context, gw *openshellv1alpha1.OpenShellGateway, sb *openshellv1alpha1.OpenShellSandbox,
	got *openshellv1.Sandbox, now time.Time) (bool, error) {
	switch got.GetStatus().GetPhase() {
	case openshellv1.SandboxPhase_SANDBOX_PHASE_PROVISIONING, openshellv1.SandboxPhase_SANDBOX_PHASE_UNKNOWN:
	default:
		return false, nil
	}
	if now.Sub(got.GetMetadata().GetCreatedTime().AsTime()) > createInFlightGrace {
		return false, nil
	}
	n, known, err := r.agentSandboxes(ctx, sb, managedSandboxNamespace(gw, sb), got.GetMetadata().GetId())
	if err != nil {
		return false, err
	}
	return !known || n == 0, nil
}

// agentSandboxesLeft counts agents.x-k8s.io Sandboxes still labelled with
// the gateway sandbox ID (any served version; where the install mode hides
// them, none).
func (r *Reconciler) agentSandboxesLeft(ctx context.Context, sb *openshellv1alpha1.OpenShellSandbox, id string) (int, error) {
	n, _, err := r.agentSandboxes(ctx, sb, "", id)
	return n, err
}

// agentSandboxes counts agents.x-k8s.io Sandboxes labelled with the gateway
// sandbox ID, in the namespace status names (else ns, else every
// namespace), and says whether the operator could look.
func (r *Reconciler) agentSandboxes(ctx context.Context, sb *openshellv1alpha1.OpenShellSandbox, ns, id string) (int, bool, error) {
	pf, _ := r.Preflight.Get()
	if !pf.AgentSandbox.Available {
		return 0, false, nil
	}
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(schema.GroupVersionKind{Group: "agents.x-k8s.io", Version: pf.AgentSandbox.Preferred, Kind: "SandboxList"})
	if ref := sb.Status.AgentSandbox; ref != nil && ref.Namespace != "" {
		ns = ref.Namespace
	}
	opts := []client.ListOption{client.MatchingLabels{LabelSandboxID: id}}
	if ns != "" {
		opts = append(opts, client.InNamespace(ns))
	}
	if err := r.APIReader.List(ctx, list, opts...); err != nil {
		if apierrors.IsForbidden(err) {
			// The install mode does not reach the gateway's sandbox
			// namespace (an External gateway's may be anywhere): the
			// gateway's word is all there is.
			return 0, false, nil
		}
		return 0, false, fmt.Errorf("list agent sandboxes: %w", err)
	}
	return len(list.Items), true, nil
}
