// Package imagepolicy reconciles OpenShellImagePolicy objects: it compiles
// the allowlist and reports entries that cannot be parsed. Sandboxes of the
// namespace are re-evaluated by the sandbox controller, which watches
// image policies too.
package imagepolicy

import (
	"context"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/imagepolicy"
	"github.com/openshell/openshell-operator/internal/status"
)

// maxReported bounds how many invalid entries the condition message lists.
const maxReported = 5

// +kubebuilder:rbac:groups=openshell.ai,resources=openshellimagepolicies,verbs=list;watch,namespace=system
// +kubebuilder:rbac:groups=openshell.ai,resources=openshellimagepolicies/status,verbs=patch,namespace=system

// Reconciler reconciles OpenShellImagePolicy.
type Reconciler struct {
	Client   client.Client
	Policies *imagepolicy.Cache
}

// Reconcile compiles the policy and reports its validity.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	p := &openshellv1alpha1.OpenShellImagePolicy{}
	if err := r.Client.Get(ctx, req.NamespacedName, p); err != nil {
		if client.IgnoreNotFound(err) == nil {
			r.Policies.Forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	orig := p.DeepCopy()
	compiled := r.Policies.Get(p)
	reason, st, msg := readiness(compiled)
	status.SetCondition(p, openshellv1alpha1.ConditionReady, st, reason, msg)
	p.Status.ObservedGeneration = p.Generation
	return ctrl.Result{}, status.Patch(ctx, r.Client, orig, p)
}

// readiness renders the Ready condition of a compiled policy.
func readiness(p *imagepolicy.Policy) (string, metav1.ConditionStatus, string) {
	if len(p.Invalid) == 0 {
		return openshellv1alpha1.ImagePolicyReasonValid, metav1.ConditionTrue, fmt.Sprintf("%d allowed locations", p.Len())
	}
	var parts []string
	for i, e := range p.Invalid {
		if i == maxReported {
			parts = append(parts, fmt.Sprintf("and %d more", len(p.Invalid)-maxReported))
			break
		}
		parts = append(parts, fmt.Sprintf("%s %q: %s", e.Field, e.Value, e.Message))
	}
	return openshellv1alpha1.ImagePolicyReasonInvalidEntry, metav1.ConditionFalse, fmt.Sprintf("%d entries are ignored: %s; %d allowed locations remain in effect",
		len(p.Invalid), strings.Join(parts, "; "), p.Len())
}

// SetupWithManager registers the reconciler.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&openshellv1alpha1.OpenShellImagePolicy{}).
		Named("openshellimagepolicy").
		Complete(status.RetryStale(r))
}
