// Package provider reconciles OpenShellProvider objects.
package provider

import (
	ctrl "sigs.k8s.io/controller-runtime"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/controllers/internal/observe"
)

// +kubebuilder:rbac:groups=openshell.ai,resources=openshellproviders,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=openshell.ai,resources=openshellproviders/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=openshell.ai,resources=openshellproviders/finalizers,verbs=update

// Reconciler reconciles OpenShellProvider. Until its real flow lands it only records
// status.observedGeneration.
type Reconciler struct {
	observe.Reconciler[*openshellv1alpha1.OpenShellProvider]
}

// SetupWithManager registers the reconciler with the manager.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.Client = mgr.GetClient()
	r.New = func() *openshellv1alpha1.OpenShellProvider { return &openshellv1alpha1.OpenShellProvider{} }
	return ctrl.NewControllerManagedBy(mgr).
		For(&openshellv1alpha1.OpenShellProvider{}).
		Named("openshellprovider").
		Complete(r)
}
