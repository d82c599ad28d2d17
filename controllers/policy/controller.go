// Package policy reconciles OpenShellPolicy objects.
package policy

import (
	ctrl "sigs.k8s.io/controller-runtime"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/controllers/internal/observe"
)

// +kubebuilder:rbac:groups=openshell.ai,resources=openshellpolicies,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=openshell.ai,resources=openshellpolicies/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=openshell.ai,resources=openshellpolicies/finalizers,verbs=update

// Reconciler reconciles OpenShellPolicy. Until its real flow lands it only records
// status.observedGeneration.
type Reconciler struct {
	observe.Reconciler[*openshellv1alpha1.OpenShellPolicy]
}

// SetupWithManager registers the reconciler with the manager.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.Client = mgr.GetClient()
	r.New = func() *openshellv1alpha1.OpenShellPolicy { return &openshellv1alpha1.OpenShellPolicy{} }
	return ctrl.NewControllerManagedBy(mgr).
		For(&openshellv1alpha1.OpenShellPolicy{}).
		Named("openshellpolicy").
		Complete(r)
}
