// Package gateway reconciles OpenShellGateway objects: it reports the
// cluster preflight (Agent Sandbox, cert-manager, Route, Kubernetes version)
// as conditions and summarises them in Available, Progressing, Degraded and
// the phase.
package gateway

import (
	"context"

	corev1 "k8s.io/api/core/v1"
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

// +kubebuilder:rbac:groups=openshell.ai,resources=openshellgateways,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=openshell.ai,resources=openshellgateways/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=openshell.ai,resources=openshellgateways/finalizers,verbs=update

// Reconciler reconciles OpenShellGateway.
type Reconciler struct {
	Client    client.Client
	Preflight *preflight.Store
	Recorder  events.EventRecorder
}

// Reconcile observes the gateway and the cluster, then reports status.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	gw := &openshellv1alpha1.OpenShellGateway{}
	if err := r.Client.Get(ctx, req.NamespacedName, gw); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	orig := gw.DeepCopy()
	pf, known := r.Preflight.Get()

	setStatus(gw, pf, known, workloadState(gw))
	gw.Status.ObservedGeneration = gw.Generation

	if orig.Status.Phase != gw.Status.Phase {
		typ := corev1.EventTypeNormal
		if gw.Status.Phase == openshellv1alpha1.GatewayPhaseDegraded || gw.Status.Phase == openshellv1alpha1.GatewayPhasePending {
			typ = corev1.EventTypeWarning
		}
		r.Recorder.Eventf(gw, nil, typ, "Phase"+string(gw.Status.Phase), "Reconcile", "%s", phaseMessage(gw))
	}
	return ctrl.Result{}, status.Patch(ctx, r.Client, orig, gw)
}

// SetupWithManager registers the reconciler; a preflight change re-queues
// every gateway.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&openshellv1alpha1.OpenShellGateway{}).
		Named("openshellgateway").
		WatchesRawSource(source.Channel(r.Preflight.Subscribe(), handler.EnqueueRequestsFromMapFunc(enqueue.All(r.Client, func() client.ObjectList { return &openshellv1alpha1.OpenShellGatewayList{} })))).
		Complete(r)
}
