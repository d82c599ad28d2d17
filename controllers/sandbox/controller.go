// Package sandbox reconciles OpenShellSandbox objects.
package sandbox

import (
	ctrl "sigs.k8s.io/controller-runtime"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/controllers/internal/observe"
)

// +kubebuilder:rbac:groups=openshell.ai,resources=openshellsandboxes,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=openshell.ai,resources=openshellsandboxes/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=openshell.ai,resources=openshellsandboxes/finalizers,verbs=update

// Reconciler reconciles OpenShellSandbox. Until its real flow lands it only records
// status.observedGeneration.
type Reconciler struct {
	observe.Reconciler[*openshellv1alpha1.OpenShellSandbox]
}

// SetupWithManager registers the reconciler with the manager.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.Client = mgr.GetClient()
	r.New = func() *openshellv1alpha1.OpenShellSandbox { return &openshellv1alpha1.OpenShellSandbox{} }
	return ctrl.NewControllerManagedBy(mgr).
		For(&openshellv1alpha1.OpenShellSandbox{}).
		Named("openshellsandbox").
		Complete(r)
}
