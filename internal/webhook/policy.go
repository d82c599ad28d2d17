package webhook

import (
	"context"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/controllers/policy"
)

// +kubebuilder:webhook:path=/validate-openshell-ai-v1alpha1-openshellpolicy,mutating=false,failurePolicy=fail,sideEffects=None,groups=openshell.ai,resources=openshellpolicies,verbs=delete,versions=v1alpha1,name=vopenshellpolicy.openshell.ai,admissionReviewVersions=v1,timeoutSeconds=10

// PolicyValidator refuses to delete a policy that sandboxes still use,
// naming them, so that a running sandbox never loses its policy by surprise.
type PolicyValidator struct {
	Reader client.Reader
}

// SetupWithManager registers the webhook.
func (v *PolicyValidator) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewWebhookManagedBy(mgr, &openshellv1alpha1.OpenShellPolicy{}).WithValidator(v).Complete()
}

// ValidateCreate allows every creation (CEL validates the spec).
func (v *PolicyValidator) ValidateCreate(context.Context, *openshellv1alpha1.OpenShellPolicy) (admission.Warnings, error) {
	return nil, nil
}

// ValidateUpdate allows every update (CEL guards immutable parts).
func (v *PolicyValidator) ValidateUpdate(context.Context, *openshellv1alpha1.OpenShellPolicy, *openshellv1alpha1.OpenShellPolicy) (admission.Warnings, error) {
	return nil, nil
}

// ValidateDelete refuses while sandboxes reference the policy.
func (v *PolicyValidator) ValidateDelete(ctx context.Context, p *openshellv1alpha1.OpenShellPolicy) (admission.Warnings, error) {
	users, err := policy.Users(ctx, v.Reader, p)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	if len(users) == 0 {
		return nil, nil
	}
	return nil, apierrors.NewForbidden(schema.GroupResource{Group: openshellv1alpha1.GroupVersion.Group, Resource: "openshellpolicies"}, p.Name,
		fmt.Errorf("PolicyInUse: OpenShellPolicy %s is used by OpenShellSandbox %s; delete those sandboxes or point them at another policy first",
			p.Name, strings.Join(users, ", ")))
}
