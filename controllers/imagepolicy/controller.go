// Package imagepolicy reconciles OpenShellImagePolicy objects.
package imagepolicy

import (
	ctrl "sigs.k8s.io/controller-runtime"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/controllers/internal/observe"
)

// +kubebuilder:rbac:groups=openshell.ai,resources=openshellimagepolicies,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=openshell.ai,resources=openshellimagepolicies/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=openshell.ai,resources=openshellimagepolicies/finalizers,verbs=update

// Reconciler reconciles OpenShellImagePolicy. Until its real flow lands it only records
// status.observedGeneration.
type Reconciler struct {
	observe.Reconciler[*openshellv1alpha1.OpenShellImagePolicy]
}

// SetupWithManager registers the reconciler with the manager.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.Client = mgr.GetClient()
	r.New = func() *openshellv1alpha1.OpenShellImagePolicy { return &openshellv1alpha1.OpenShellImagePolicy{} }
	return ctrl.NewControllerManagedBy(mgr).
		For(&openshellv1alpha1.OpenShellImagePolicy{}).
		Named("openshellimagepolicy").
		Complete(r)
}
