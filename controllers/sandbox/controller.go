// Package sandbox reconciles OpenShellSandbox objects: observe → validate
// (preflight, gateway, image policy; references as they land) → create and
// follow at the gateway → report status.
package sandbox

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/controllers/internal/enqueue"
	"github.com/openshell/openshell-operator/internal/imagepolicy"
	"github.com/openshell/openshell-operator/internal/preflight"
	"github.com/openshell/openshell-operator/internal/status"
)

// GatewayIndex indexes sandboxes by "namespace/name" of their gateway, so a
// gateway change re-queues only its own sandboxes.
const GatewayIndex = "spec.gatewayRef"

// +kubebuilder:rbac:groups=openshell.ai,resources=openshellsandboxes,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=openshell.ai,resources=openshellsandboxes/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=openshell.ai,resources=openshellsandboxes/finalizers,verbs=update
// +kubebuilder:rbac:groups=openshell.ai,resources=openshellgateways;openshellimagepolicies,verbs=get;list;watch

// Reconciler reconciles OpenShellSandbox.
type Reconciler struct {
	Client    client.Client
	Preflight *preflight.Store
	Policies  *imagepolicy.Cache
	Recorder  events.EventRecorder
}

// observed is what one reconcile read from the cluster.
type observed struct {
	preflight      preflight.Result
	preflightKnown bool
	// gateway is nil when it does not exist.
	gateway *openshellv1alpha1.OpenShellGateway
	image   imagepolicy.Decision
	enforce openshellv1alpha1.ImagePolicyEnforcement
}

// Reconcile validates the sandbox and reports status.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	sb := &openshellv1alpha1.OpenShellSandbox{}
	if err := r.Client.Get(ctx, req.NamespacedName, sb); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if _, known := r.Preflight.Get(); !known {
		// Before the first cluster probe there is nothing new to say; the
		// probe re-queues every sandbox (and a restart writes nothing).
		return ctrl.Result{}, nil
	}
	orig := sb.DeepCopy()
	obs, err := r.observe(ctx, sb)
	if err != nil {
		return ctrl.Result{}, err
	}
	evaluate(sb, obs)
	sb.Status.ObservedGeneration = sb.Generation

	if orig.Status.Phase != sb.Status.Phase {
		r.recordPhase(sb)
	}
	// A blocked or rejected sandbox is not an error: nothing is retried until
	// a watched input (CRD, gateway, image policy, spec) changes.
	return ctrl.Result{}, status.Patch(ctx, r.Client, orig, sb)
}

func (r *Reconciler) observe(ctx context.Context, sb *openshellv1alpha1.OpenShellSandbox) (observed, error) {
	var obs observed
	obs.preflight, obs.preflightKnown = r.Preflight.Get()
	gw := &openshellv1alpha1.OpenShellGateway{}
	switch err := r.Client.Get(ctx, sb.GatewayKey(), gw); {
	case err == nil:
		obs.gateway = gw
	case !apierrors.IsNotFound(err):
		return obs, fmt.Errorf("get gateway %s: %w", sb.GatewayKey(), err)
	}
	d, enf, err := r.Policies.Check(ctx, r.Client, sb, obs.gateway)
	if err != nil {
		return obs, err
	}
	obs.image, obs.enforce = d, enf
	return obs, nil
}

func (r *Reconciler) recordPhase(sb *openshellv1alpha1.OpenShellSandbox) {
	c := meta.FindStatusCondition(sb.Status.Conditions, openshellv1alpha1.ConditionReady)
	typ, reason, note := corev1.EventTypeNormal, "Phase"+string(sb.Status.Phase), "sandbox is "+string(sb.Status.Phase)
	if c != nil {
		note += ": " + c.Message
		if c.Status == "False" && sb.Status.Phase != openshellv1alpha1.SandboxPhasePending {
			typ, reason = corev1.EventTypeWarning, c.Reason
		}
	}
	if sb.Status.Phase == openshellv1alpha1.SandboxPhasePending && c != nil &&
		c.Reason == openshellv1alpha1.SandboxReasonAgentSandboxCRDMissing {
		typ, reason = corev1.EventTypeWarning, c.Reason
	}
	r.Recorder.Eventf(sb, nil, typ, reason, "Reconcile", "%s", note)
}

// SetupWithManager registers the reconciler. Preflight changes re-queue
// every sandbox; a gateway change re-queues its sandboxes (index); an image
// policy change re-queues the sandboxes of its namespace.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &openshellv1alpha1.OpenShellSandbox{}, GatewayIndex,
		func(o client.Object) []string {
			return []string{o.(*openshellv1alpha1.OpenShellSandbox).GatewayKey().String()}
		}); err != nil {
		return fmt.Errorf("index sandboxes by gateway: %w", err)
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&openshellv1alpha1.OpenShellSandbox{}).
		Named("openshellsandbox").
		Watches(&openshellv1alpha1.OpenShellGateway{}, handler.EnqueueRequestsFromMapFunc(r.sandboxesOfGateway)).
		Watches(&openshellv1alpha1.OpenShellImagePolicy{}, handler.EnqueueRequestsFromMapFunc(r.sandboxesInNamespace)).
		WatchesRawSource(source.Channel(r.Preflight.Subscribe(), handler.EnqueueRequestsFromMapFunc(
			enqueue.All(r.Client, func() client.ObjectList { return &openshellv1alpha1.OpenShellSandboxList{} })))).
		Complete(r)
}

func (r *Reconciler) sandboxesOfGateway(ctx context.Context, gw client.Object) []reconcile.Request {
	return enqueue.Requests(ctx, r.Client, &openshellv1alpha1.OpenShellSandboxList{},
		client.MatchingFields{GatewayIndex: client.ObjectKeyFromObject(gw).String()})
}

func (r *Reconciler) sandboxesInNamespace(ctx context.Context, o client.Object) []reconcile.Request {
	return enqueue.Requests(ctx, r.Client, &openshellv1alpha1.OpenShellSandboxList{}, client.InNamespace(o.GetNamespace()))
}
