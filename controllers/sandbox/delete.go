package sandbox

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/openshellv1"
	"github.com/openshell/openshell-operator/internal/index"
	"github.com/openshell/openshell-operator/internal/sandboxspec"
	"github.com/openshell/openshell-operator/internal/status"
)

// deletePoll is how often deletion progress is checked; waiting never
// blocks a worker.
const deletePoll = time.Second

// LabelSandboxID is the label the gateway's driver puts on the
// agents.x-k8s.io Sandbox it creates.
const LabelSandboxID = "openshell.ai/sandbox-id"

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
	// A sandbox refused before anything was recorded was never created at
	// a gateway: release at once, even if the gateway is unreachable.
	recorded := sb.Status.SandboxID != "" || sb.Status.Workspace != ""
	if !recorded && refusedBeforeCreate(sb.Status.Phase) {
		return r.release(ctx, sb)
	}
	done, id, err := r.deleteAtGateway(ctx, sb)
	if err != nil && !recorded {
		// Nothing recorded and the gateway cannot say: the sandbox was
		// most likely never created (the create's status write waits at
		// most settleWindow, and the operator keeps what it created in
		// memory until then). Release rather than hold the object hostage
		// to a gateway it may never have reached.
		r.Recorder.Eventf(sb, nil, corev1.EventTypeWarning, openshellv1alpha1.SandboxReasonForceReleased, "Delete",
			"released without asking gateway %s, which did not answer (%v): status recorded no sandbox there", sb.GatewayKey(), err)
		return r.release(ctx, sb)
	}
	if err != nil && sb.Annotations[openshellv1alpha1.AnnotationForceRelease] == "true" {
		// The escape hatch for a gateway that will not come back; the
		// admission webhook let only who may remove the finalizer set it.
		r.Recorder.Eventf(sb, nil, corev1.EventTypeWarning, openshellv1alpha1.SandboxReasonForceReleased, "Delete",
			"released by %s without deleting sandbox %s in workspace %s at gateway %s (%v): it may still run there",
			openshellv1alpha1.AnnotationForceRelease, sb.Status.GatewaySandboxName, sb.Status.Workspace, sb.Status.Gateway, err)
		return r.release(ctx, sb)
	}
	if err != nil || !done {
		sb.Status.Phase = openshellv1alpha1.SandboxPhaseDeleting
		if err != nil {
			status.SetCondition(sb, openshellv1alpha1.ConditionGatewayReachable, metav1.ConditionFalse, openshellv1alpha1.SandboxReasonUnavailable,
				fmt.Sprintf("cannot delete the sandbox at the gateway yet (%v); if the gateway is gone for good, whoever may remove "+
					"the finalizer can set the annotation %s=true", err, openshellv1alpha1.AnnotationForceRelease))
		}
		if perr := status.Patch(ctx, r.Client, orig, sb); perr != nil {
			return ctrl.Result{}, perr
		}
		if err != nil {
			// Back off (and count the error) rather than poll a dead gateway.
			return ctrl.Result{}, fmt.Errorf("delete sandbox at gateway %s: %w", sb.GatewayKey(), err)
		}
		return ctrl.Result{RequeueAfter: deletePoll}, nil
	}
	if id != "" {
		remaining, err := r.agentSandboxesLeft(ctx, sb, id)
		if err != nil {
			return ctrl.Result{}, err
		}
		if remaining > 0 {
			return ctrl.Result{RequeueAfter: deletePoll}, nil
		}
	}
	return r.release(ctx, sb)
}

// release removes the finalizer and forgets the sandbox's in-memory state.
func (r *Reconciler) release(ctx context.Context, sb *openshellv1alpha1.OpenShellSandbox) (ctrl.Result, error) {
	if err := status.RemoveFinalizer(ctx, r.Client, sb, Finalizer); err != nil {
		return ctrl.Result{}, err
	}
	r.Gateways.Followers().Stop(client.ObjectKeyFromObject(sb))
	r.settling.forget(client.ObjectKeyFromObject(sb))
	return ctrl.Result{}, nil
}

// refusedBeforeCreate says whether a sandbox in this phase, with no gateway
// sandbox recorded, was stopped before any call that could create one.
func refusedBeforeCreate(p openshellv1alpha1.SandboxPhase) bool {
	return p == openshellv1alpha1.SandboxPhaseRejected || p == openshellv1alpha1.SandboxPhasePending
}

// deleteAtGateway reports done once the gateway has no sandbox of this
// object, and the gateway sandbox ID whose agents.x-k8s.io Sandbox must be
// waited for ("" when there is none to wait for).
func (r *Reconciler) deleteAtGateway(ctx context.Context, sb *openshellv1alpha1.OpenShellSandbox) (bool, string, error) {
	gw := &openshellv1alpha1.OpenShellGateway{}
	if err := r.Client.Get(ctx, sb.GatewayKey(), gw); err != nil {
		if apierrors.IsNotFound(err) {
			// The gateway and its database are gone; nothing is left to delete there.
			r.Recorder.Eventf(sb, nil, corev1.EventTypeWarning, "GatewayGone", "Delete",
				"OpenShellGateway %s no longer exists; releasing the sandbox without deleting it there", sb.GatewayKey())
			return true, sb.Status.SandboxID, nil
		}
		return false, "", err
	}
	ns, err := index.GetNamespace(ctx, r.Client, sb.Namespace)
	if err != nil {
		return false, "", err
	}
	conn, err := r.Gateways.Connect(ctx, gw)
	if err != nil {
		return false, "", err
	}
	req := &openshellv1.GetSandboxRequest{Name: sandboxspec.SandboxName(sb.Namespace, sb.Name), Workspace: sandboxspec.WorkspaceName(sb.Namespace, ns.UID)}
	got, err := conn.GetSandbox(ctx, req)
	if grpcstatus.Code(err) == codes.NotFound {
		return true, sb.Status.SandboxID, nil
	}
	if err != nil {
		return false, "", err
	}
	if got.Sandbox.GetMetadata().GetLabels()[sandboxspec.LabelOwnerUID] != string(sb.UID) {
		// Not ours (never created, or another object's): nothing to delete.
		return true, sb.Status.SandboxID, nil
	}
	if got.Sandbox.Status.GetPhase() != openshellv1.SandboxPhase_SANDBOX_PHASE_DELETING {
		if _, err := conn.DeleteSandbox(ctx, &openshellv1.DeleteSandboxRequest{Name: req.Name, Workspace: req.Workspace}); err != nil && grpcstatus.Code(err) != codes.NotFound {
			return false, "", fmt.Errorf("delete sandbox: %w", err)
		}
		r.Recorder.Eventf(sb, nil, corev1.EventTypeNormal, "Deleting", "DeleteSandbox", "deleting sandbox %s at the gateway", req.Name)
	}
	return false, got.Sandbox.GetMetadata().GetId(), nil
}

// agentSandboxesLeft counts agents.x-k8s.io Sandboxes still labelled with
// the gateway sandbox ID (any namespace, any served version).
func (r *Reconciler) agentSandboxesLeft(ctx context.Context, sb *openshellv1alpha1.OpenShellSandbox, id string) (int, error) {
	pf, _ := r.Preflight.Get()
	if !pf.AgentSandbox.Available {
		return 0, nil
	}
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(schema.GroupVersionKind{Group: "agents.x-k8s.io", Version: pf.AgentSandbox.Preferred, Kind: "SandboxList"})
	opts := []client.ListOption{client.MatchingLabels{LabelSandboxID: id}}
	if ref := sb.Status.AgentSandbox; ref != nil && ref.Namespace != "" {
		opts = append(opts, client.InNamespace(ref.Namespace))
	}
	if err := r.APIReader.List(ctx, list, opts...); err != nil {
		if apierrors.IsForbidden(err) {
			// The install mode does not reach the gateway's sandbox
			// namespace (an External gateway's may be anywhere): the
			// gateway's word that the sandbox is gone is all there is.
			return 0, nil
		}
		return 0, fmt.Errorf("list agent sandboxes: %w", err)
	}
	return len(list.Items), nil
}
