// Package webhook holds the operator's admission webhooks.
package webhook

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/imagepolicy"
)

// +kubebuilder:webhook:path=/validate-openshell-ai-v1alpha1-openshellsandbox,mutating=false,failurePolicy=fail,sideEffects=None,groups=openshell.ai,resources=openshellsandboxes,verbs=create;update,versions=v1alpha1,name=vopenshellsandbox.openshell.ai,admissionReviewVersions=v1,timeoutSeconds=10

// SandboxValidator rejects OpenShellSandboxes whose image the namespace's
// OpenShellImagePolicies do not allow, so that `oc apply` of an unmirrorable
// image fails with the reason instead of hanging in ImagePullBackOff.
type SandboxValidator struct {
	// Reader is the manager's cached client.
	Reader   client.Reader
	Policies *imagepolicy.Cache
}

// SetupWithManager registers the webhook.
func (v *SandboxValidator) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewWebhookManagedBy(mgr, &openshellv1alpha1.OpenShellSandbox{}).WithValidator(v).Complete()
}

// ValidateCreate checks the image of a new sandbox.
func (v *SandboxValidator) ValidateCreate(ctx context.Context, sb *openshellv1alpha1.OpenShellSandbox) (admission.Warnings, error) {
	return v.checkImage(ctx, sb)
}

// ValidateUpdate checks the image only when it changes: other updates
// (labels, finalizers, status) must never be blocked by a policy that
// tightened after the sandbox was admitted; the controller reports those.
func (v *SandboxValidator) ValidateUpdate(ctx context.Context, old, sb *openshellv1alpha1.OpenShellSandbox) (admission.Warnings, error) {
	if old.Spec.Image == sb.Spec.Image || !sb.DeletionTimestamp.IsZero() {
		return nil, nil
	}
	return v.checkImage(ctx, sb)
}

// ValidateDelete allows every deletion.
func (v *SandboxValidator) ValidateDelete(context.Context, *openshellv1alpha1.OpenShellSandbox) (admission.Warnings, error) {
	return nil, nil
}

func (v *SandboxValidator) checkImage(ctx context.Context, sb *openshellv1alpha1.OpenShellSandbox) (admission.Warnings, error) {
	var gw *openshellv1alpha1.OpenShellGateway
	cur := &openshellv1alpha1.OpenShellGateway{}
	switch err := v.Reader.Get(ctx, sb.GatewayKey(), cur); {
	case err == nil:
		gw = cur
	case apierrors.IsNotFound(err):
		// The controller reports a missing gateway; images are still checked
		// with the default enforcement.
	default:
		return nil, apierrors.NewInternalError(fmt.Errorf("read gateway %s: %w", sb.GatewayKey(), err))
	}
	d, enf, err := v.Policies.Check(ctx, v.Reader, sb, gw)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	if d.Allowed {
		return nil, nil
	}
	msg := d.Reason + ": " + d.Message
	if enf.Mode == openshellv1alpha1.ImagePolicyWarn {
		return admission.Warnings{msg + " (admitted: the gateway's image policy mode is Warn)"}, nil
	}
	return nil, &apierrors.StatusError{ErrStatus: metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    403,
		Reason:  metav1.StatusReasonForbidden,
		Message: msg,
		Details: &metav1.StatusDetails{
			Group: openshellv1alpha1.GroupVersion.Group, Kind: "OpenShellSandbox", Name: sb.Name,
			Causes: []metav1.StatusCause{{Type: metav1.CauseType(d.Reason), Message: d.Message, Field: "spec.image"}},
		},
	}}
}
