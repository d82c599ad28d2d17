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
	"github.com/openshell/openshell-operator/internal/imagepolicy"
	"github.com/openshell/openshell-operator/internal/index"
)

// +kubebuilder:webhook:path=/validate-openshell-ai-v1alpha1-openshellsandboxtemplate,mutating=false,failurePolicy=fail,sideEffects=None,groups=openshell.ai,resources=openshellsandboxtemplates,verbs=create;update;delete,versions=v1alpha1,name=vopenshellsandboxtemplate.openshell.ai,admissionReviewVersions=v1,timeoutSeconds=10

// Cause types of refused template writes.
const (
	// ReasonTemplateInUse: a template sandboxes name cannot be deleted.
	ReasonTemplateInUse = "TemplateInUse"
)

// TemplateValidator lets only Tenant Admins write sandbox templates (a
// template decides the image and resources of every sandbox that names
// it), refuses an image the namespace's OpenShellImagePolicies do not
// allow, and refuses to delete a template that sandboxes name.
type TemplateValidator struct {
	Reader     client.Reader
	Authorizer Authorizer
	Policies   *imagepolicy.Cache
}

func (v *TemplateValidator) admins() tenantAdminCheck[*openshellv1alpha1.OpenShellSandboxTemplate] {
	return tenantAdminCheck[*openshellv1alpha1.OpenShellSandboxTemplate]{Authorizer: v.Authorizer, Reader: v.Reader, Resource: "openshellsandboxtemplates",
		Spec: func(t *openshellv1alpha1.OpenShellSandboxTemplate) any { return t.Spec }, Extra: v.onWrite, OnDelete: v.notInUse}
}

// SetupWithManager registers the webhook.
func (v *TemplateValidator) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewWebhookManagedBy(mgr, &openshellv1alpha1.OpenShellSandboxTemplate{}).WithValidator(v).Complete()
}

// ValidateCreate needs a Tenant Admin and an allowed image.
func (v *TemplateValidator) ValidateCreate(ctx context.Context, t *openshellv1alpha1.OpenShellSandboxTemplate) (admission.Warnings, error) {
	return v.admins().ValidateCreate(ctx, t)
}

// ValidateUpdate needs a Tenant Admin, and an allowed image on a spec change.
func (v *TemplateValidator) ValidateUpdate(ctx context.Context, old, t *openshellv1alpha1.OpenShellSandboxTemplate) (admission.Warnings, error) {
	return v.admins().ValidateUpdate(ctx, old, t)
}

// ValidateDelete needs a Tenant Admin, and refuses while sandboxes name
// the template.
func (v *TemplateValidator) ValidateDelete(ctx context.Context, t *openshellv1alpha1.OpenShellSandboxTemplate) (admission.Warnings, error) {
	return v.admins().ValidateDelete(ctx, t)
}

// onWrite runs on create and on a spec change.
func (v *TemplateValidator) onWrite(ctx context.Context, old, t *openshellv1alpha1.OpenShellSandboxTemplate) error {
	if err := v.imageAllowed(ctx, old, t); err != nil {
		return err
	}
	return v.usersSecretsReadable(ctx, t)
}

// usersSecretsReadable refuses a template write by a user who may not
// read every Secret the env of the sandboxes naming it reads: a sandbox
// not yet created (or recreated) takes the template as it is then, so the
// template's writer chooses the image that runs beside those values, as
// if they had written the sandbox (row 9 of docs/security.md).
func (v *TemplateValidator) usersSecretsReadable(ctx context.Context, t *openshellv1alpha1.OpenShellSandboxTemplate) error {
	users, err := index.TemplateUsers(ctx, v.Reader, t)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	seen := map[string]bool{}
	for _, sb := range users {
		for _, e := range sb.Spec.Env {
			if e.ValueFrom == nil || seen[e.ValueFrom.SecretKeyRef.Name] {
				continue
			}
			name := e.ValueFrom.SecretKeyRef.Name
			seen[name] = true
			if err := v.Authorizer.SecretReadable(ctx, "OpenShellSandboxTemplate", t.Name, t.Namespace, name, "spec",
				fmt.Sprintf("which the env of OpenShellSandbox %s (created from this template) reads: the template decides what runs beside it; "+
					"ask whoever may read it to make the change", sb.Name)); err != nil {
				return err
			}
		}
	}
	return nil
}

// imageAllowed refuses an image that the namespace's own
// OpenShellImagePolicies do not allow. Which gateway enforces them, and
// how, is known only for a sandbox: the controller judges the template
// again at each gateway, and the sandbox at its creation.
func (v *TemplateValidator) imageAllowed(ctx context.Context, _, t *openshellv1alpha1.OpenShellSandboxTemplate) error {
	policies, err := v.Policies.PoliciesIn(ctx, v.Reader, t.Namespace)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	if len(policies) == 0 {
		return nil
	}
	d := imagepolicy.Evaluate(t.Spec.Image, policies, imagepolicy.Options{Namespace: t.Namespace})
	if d.Allowed {
		return nil
	}
	return forbidden("OpenShellSandboxTemplate", t.Name, d.Reason, d.Reason+": "+d.Message, "spec.image")
}

// notInUse refuses to delete a template that sandboxes name, naming them.
func (v *TemplateValidator) notInUse(ctx context.Context, t *openshellv1alpha1.OpenShellSandboxTemplate) error {
	users, err := index.TemplateUsers(ctx, v.Reader, t)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	if len(users) == 0 {
		return nil
	}
	names := make([]string, 0, len(users))
	for _, u := range users {
		names = append(names, u.Name)
	}
	return apierrors.NewForbidden(schema.GroupResource{Group: openshellv1alpha1.GroupVersion.Group, Resource: "openshellsandboxtemplates"}, t.Name,
		fmt.Errorf("%s: OpenShellSandboxTemplate %s is used by OpenShellSandbox %s; delete those sandboxes first", ReasonTemplateInUse, t.Name, strings.Join(names, ", ")))
}
