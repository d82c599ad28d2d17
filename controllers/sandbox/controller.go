// Package sandbox reconciles OpenShellSandbox objects: observe → validate
// (preflight, then image policy, references and gateway as they land) →
// create and follow at the gateway → report status.
package sandbox

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/source"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/controllers/internal/enqueue"
	"github.com/openshell/openshell-operator/internal/preflight"
	"github.com/openshell/openshell-operator/internal/status"
)

// +kubebuilder:rbac:groups=openshell.ai,resources=openshellsandboxes,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=openshell.ai,resources=openshellsandboxes/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=openshell.ai,resources=openshellsandboxes/finalizers,verbs=update

// Reconciler reconciles OpenShellSandbox.
type Reconciler struct {
	Client    client.Client
	Preflight *preflight.Store
	Recorder  events.EventRecorder
}

// Reconcile validates the sandbox and reports status.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	sb := &openshellv1alpha1.OpenShellSandbox{}
	if err := r.Client.Get(ctx, req.NamespacedName, sb); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	orig := sb.DeepCopy()
	pf, known := r.Preflight.Get()

	evaluate(sb, pf, known)
	sb.Status.ObservedGeneration = sb.Generation

	if orig.Status.Phase != sb.Status.Phase {
		r.recordPhase(sb)
	}
	// A blocked sandbox is not an error: nothing is retried until the
	// preflight store reports a change and re-queues it.
	return ctrl.Result{}, status.Patch(ctx, r.Client, orig, sb)
}

// evaluate runs the checks that need no gateway and sets conditions and
// phase. Pure.
func evaluate(sb *openshellv1alpha1.OpenShellSandbox, pf preflight.Result, known bool) {
	set := func(typ string, s metav1.ConditionStatus, reason, msg string) {
		status.SetCondition(sb, typ, s, reason, msg)
	}
	if blocked, msg := preflight.Blocking(pf, known); blocked {
		reason := openshellv1alpha1.SandboxReasonAgentSandboxCRDMissing
		if !known {
			reason = openshellv1alpha1.SandboxReasonPreflightPending
		}
		set(openshellv1alpha1.ConditionAccepted, metav1.ConditionFalse, reason, msg)
		set(openshellv1alpha1.ConditionReady, metav1.ConditionFalse, reason, msg)
		sb.Status.Phase = openshellv1alpha1.SandboxPhasePending
		return
	}
	set(openshellv1alpha1.ConditionAccepted, metav1.ConditionTrue, openshellv1alpha1.SandboxReasonAccepted,
		"prerequisites are met; Agent Sandbox "+pf.AgentSandbox.Preferred+" will be used")
	set(openshellv1alpha1.ConditionReady, metav1.ConditionFalse, openshellv1alpha1.SandboxReasonWaitingForGateway,
		"waiting for the sandbox to be created at the gateway")
	sb.Status.Phase = openshellv1alpha1.SandboxPhasePending
}

func (r *Reconciler) recordPhase(sb *openshellv1alpha1.OpenShellSandbox) {
	c := meta.FindStatusCondition(sb.Status.Conditions, openshellv1alpha1.ConditionReady)
	typ, reason, note := corev1.EventTypeNormal, "Phase"+string(sb.Status.Phase), "sandbox is "+string(sb.Status.Phase)
	if c != nil {
		note += ": " + c.Message
		if c.Reason == openshellv1alpha1.SandboxReasonAgentSandboxCRDMissing {
			typ, reason = corev1.EventTypeWarning, c.Reason
		}
	}
	r.Recorder.Eventf(sb, nil, typ, reason, "Reconcile", "%s", note)
}

// SetupWithManager registers the reconciler; a preflight change re-queues
// every sandbox.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&openshellv1alpha1.OpenShellSandbox{}).
		Named("openshellsandbox").
		WatchesRawSource(source.Channel(r.Preflight.Subscribe(), handler.EnqueueRequestsFromMapFunc(enqueue.All(r.Client, func() client.ObjectList { return &openshellv1alpha1.OpenShellSandboxList{} })))).
		Complete(r)
}
