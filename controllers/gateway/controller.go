// Package gateway reconciles OpenShellGateway objects.
package gateway

import (
	ctrl "sigs.k8s.io/controller-runtime"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/controllers/internal/observe"
)

// +kubebuilder:rbac:groups=openshell.ai,resources=openshellgateways,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=openshell.ai,resources=openshellgateways/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=openshell.ai,resources=openshellgateways/finalizers,verbs=update

// Reconciler reconciles OpenShellGateway. Until its real flow lands it only records
// status.observedGeneration.
type Reconciler struct {
	observe.Reconciler[*openshellv1alpha1.OpenShellGateway]
}

// SetupWithManager registers the reconciler with the manager.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.Client = mgr.GetClient()
	r.New = func() *openshellv1alpha1.OpenShellGateway { return &openshellv1alpha1.OpenShellGateway{} }
	return ctrl.NewControllerManagedBy(mgr).
		For(&openshellv1alpha1.OpenShellGateway{}).
		Named("openshellgateway").
		Complete(r)
}
