package sandbox

import (
	"context"
	"fmt"
	"strings"
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
	"github.com/openshell/openshell-operator/internal/gateway/pb/openshellv1"
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
// releases the object.
func (r *Reconciler) reconcileDelete(ctx context.Context, sb *openshellv1alpha1.OpenShellSandbox) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(sb, Finalizer) {
		return ctrl.Result{}, nil
	}
	orig := sb.DeepCopy()
	if sb.Status.SandboxID != "" && sb.Status.GatewaySandboxName != "" {
		done, err := r.deleteAtGateway(ctx, sb)
		if err != nil || !done {
			sb.Status.Phase = openshellv1alpha1.SandboxPhaseDeleting
			if err != nil {
				status.SetCondition(sb, openshellv1alpha1.ConditionGatewayReachable, metav1.ConditionFalse, ReasonUnavailable,
					"cannot delete the sandbox at the gateway yet: "+err.Error())
			}
			if perr := status.Patch(ctx, r.Client, orig, sb); perr != nil {
				return ctrl.Result{}, perr
			}
			return ctrl.Result{RequeueAfter: deletePoll}, nil
		}
		remaining, err := r.agentSandboxesLeft(ctx, sb.Status.SandboxID)
		if err != nil {
			return ctrl.Result{}, err
		}
		if remaining > 0 {
			return ctrl.Result{RequeueAfter: deletePoll}, nil
		}
	}
	patch := client.MergeFrom(sb.DeepCopy())
	controllerutil.RemoveFinalizer(sb, Finalizer)
	if err := r.Client.Patch(ctx, sb, patch); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	r.mu.Lock()
	delete(r.failures, client.ObjectKeyFromObject(sb))
	r.mu.Unlock()
	r.follow.stop(client.ObjectKeyFromObject(sb))
	return ctrl.Result{}, nil
}

// deleteAtGateway reports true once the gateway no longer has the row.
func (r *Reconciler) deleteAtGateway(ctx context.Context, sb *openshellv1alpha1.OpenShellSandbox) (bool, error) {
	ns, name, _ := strings.Cut(sb.Status.Gateway, "/")
	gw := &openshellv1alpha1.OpenShellGateway{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, gw); err != nil {
		if apierrors.IsNotFound(err) {
			// The gateway and its database are gone; nothing is left to delete there.
			r.Recorder.Eventf(sb, nil, corev1.EventTypeWarning, "GatewayGone", "Delete",
				"OpenShellGateway %s no longer exists; releasing the sandbox without deleting it there", sb.Status.Gateway)
			return true, nil
		}
		return false, err
	}
	conn, err := r.Gateways.Connect(ctx, gw)
	if err != nil {
		return false, err
	}
	req := &openshellv1.GetSandboxRequest{Name: sb.Status.GatewaySandboxName, Workspace: sb.Status.Workspace}
	got, err := conn.GetSandbox(ctx, req)
	if grpcstatus.Code(err) == codes.NotFound {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	if got.Sandbox.Status.GetPhase() != openshellv1.SandboxPhase_SANDBOX_PHASE_DELETING {
		if _, err := conn.DeleteSandbox(ctx, &openshellv1.DeleteSandboxRequest{Name: req.Name, Workspace: req.Workspace}); err != nil && grpcstatus.Code(err) != codes.NotFound {
			return false, fmt.Errorf("delete sandbox: %w", err)
		}
		r.Recorder.Eventf(sb, nil, corev1.EventTypeNormal, "Deleting", "DeleteSandbox", "deleting sandbox %s at the gateway", req.Name)
	}
	return false, nil
}

// agentSandboxesLeft counts agents.x-k8s.io Sandboxes still labelled with
// the gateway sandbox ID (any namespace, any served version).
func (r *Reconciler) agentSandboxesLeft(ctx context.Context, id string) (int, error) {
	pf, _ := r.Preflight.Get()
	if !pf.AgentSandbox.Available {
		return 0, nil
	}
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(schema.GroupVersionKind{Group: "agents.x-k8s.io", Version: pf.AgentSandbox.Preferred, Kind: "SandboxList"})
	if err := r.APIReader.List(ctx, list, client.MatchingLabels{LabelSandboxID: id}); err != nil {
		return 0, fmt.Errorf("list agent sandboxes: %w", err)
	}
	return len(list.Items), nil
}
