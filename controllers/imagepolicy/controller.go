// Package imagepolicy reconciles OpenShellImagePolicy objects: it compiles
// the allowlist and reports entries that cannot be parsed. Sandboxes of the
// namespace are re-evaluated by the sandbox controller, which watches
// image policies too.
package imagepolicy

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/controllers/internal/traced"
	"github.com/openshell/openshell-operator/internal/imagepolicy"
	"github.com/openshell/openshell-operator/internal/status"
)

// maxReported bounds how many invalid entries the condition message lists.
const maxReported = 5

// +kubebuilder:rbac:groups=openshell.ai,resources=openshellimagepolicies,verbs=list;watch,namespace=system
// +kubebuilder:rbac:groups=openshell.ai,resources=openshellimagepolicies/status,verbs=patch,namespace=system

// Reconciler reconciles OpenShellImagePolicy.
type Reconciler struct {
	Client client.Client
	// APIReader reads the pull Secrets a policy names (tenant Secrets are
	// not cached).
	APIReader client.Reader
	Policies  *imagepolicy.Cache
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
	if err := r.checkPullSecrets(ctx, p); err != nil {
		return ctrl.Result{}, err
	}
	p.Status.ObservedGeneration = p.Generation
	return ctrl.Result{}, status.Patch(ctx, r.Client, orig, p)
}

// checkPullSecrets reports PullSecretsResolved: each Secret named must
// exist and be a Docker config. They are read uncached, one at a time, and
// only the type is looked at (the values are the paired namespaces'
// business: controllers/pairedns).
func (r *Reconciler) checkPullSecrets(ctx context.Context, p *openshellv1alpha1.OpenShellImagePolicy) error {
	if len(p.Spec.PullSecrets) == 0 {
		meta.RemoveStatusCondition(&p.Status.Conditions, openshellv1alpha1.ImagePolicyConditionPullSecretsResolved)
		return nil
	}
	var bad []string
	for _, ref := range p.Spec.PullSecrets {
		s := &corev1.Secret{}
		switch err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: ref.Name}, s); {
		case apierrors.IsNotFound(err):
			bad = append(bad, ref.Name+" (not found)")
		case err != nil:
			return fmt.Errorf("read pull Secret %s: %w", ref.Name, err)
		case s.Type != corev1.SecretTypeDockerConfigJson:
			bad = append(bad, fmt.Sprintf("%s (type %q, not %s)", ref.Name, s.Type, corev1.SecretTypeDockerConfigJson))
		}
	}
	if len(bad) > 0 {
		status.SetCondition(p, openshellv1alpha1.ImagePolicyConditionPullSecretsResolved, metav1.ConditionFalse, openshellv1alpha1.ImagePolicyReasonPullSecretInvalid,
			"left out of the sandboxes' pull credentials: "+strings.Join(bad, ", "))
		return nil
	}
	status.SetCondition(p, openshellv1alpha1.ImagePolicyConditionPullSecretsResolved, metav1.ConditionTrue, openshellv1alpha1.ImagePolicyReasonPullSecretsResolved,
		fmt.Sprintf("%d pull Secrets; the sandboxes of this namespace pull with them on gateways in workspace mode Operator", len(p.Spec.PullSecrets)))
	return nil
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
		Complete(traced.Reconciler("openshellimagepolicy", status.RetryStale(r)))
}
