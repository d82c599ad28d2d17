package webhook

import (
	"context"
	"fmt"
	"slices"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/index"
)

// +kubebuilder:webhook:path=/validate-openshell-ai-v1alpha1-openshellpolicy,mutating=false,failurePolicy=fail,sideEffects=None,groups=openshell.ai,resources=openshellpolicies,verbs=create;update;delete,versions=v1alpha1,name=vopenshellpolicy.openshell.ai,admissionReviewVersions=v1,timeoutSeconds=10
// +kubebuilder:webhook:path=/validate-openshell-ai-v1alpha1-openshellimagepolicy,mutating=false,failurePolicy=fail,sideEffects=None,groups=openshell.ai,resources=openshellimagepolicies,verbs=create;update;delete,versions=v1alpha1,name=vopenshellimagepolicy.openshell.ai,admissionReviewVersions=v1,timeoutSeconds=10
// +kubebuilder:webhook:path=/validate-openshell-ai-v1alpha1-openshellproviderprofile,mutating=false,failurePolicy=fail,sideEffects=None,groups=openshell.ai,resources=openshellproviderprofiles,verbs=create;update;delete,versions=v1alpha1,name=vopenshellproviderprofile.openshell.ai,admissionReviewVersions=v1,timeoutSeconds=10
// +kubebuilder:webhook:path=/validate-openshell-ai-v1alpha1-openshellprovider,mutating=false,failurePolicy=fail,sideEffects=None,groups=openshell.ai,resources=openshellproviders,verbs=create;update;delete,versions=v1alpha1,name=vopenshellprovider.openshell.ai,admissionReviewVersions=v1,timeoutSeconds=10

// PolicyValidator lets only Tenant Admins write policies, and refuses to
// delete a policy that sandboxes still use, naming them, so that a running
// sandbox never loses its policy by surprise.
type PolicyValidator struct {
	Reader     client.Reader
	Authorizer Authorizer
}

func (v *PolicyValidator) admins() tenantAdminCheck[*openshellv1alpha1.OpenShellPolicy] {
	return tenantAdminCheck[*openshellv1alpha1.OpenShellPolicy]{Authorizer: v.Authorizer, Reader: v.Reader, Resource: "openshellpolicies",
		Spec: func(p *openshellv1alpha1.OpenShellPolicy) any { return p.Spec }}
}

// SetupWithManager registers the webhook.
func (v *PolicyValidator) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewWebhookManagedBy(mgr, &openshellv1alpha1.OpenShellPolicy{}).WithValidator(v).Complete()
}

// ValidateCreate needs a Tenant Admin (CEL validates the spec).
func (v *PolicyValidator) ValidateCreate(ctx context.Context, p *openshellv1alpha1.OpenShellPolicy) (admission.Warnings, error) {
	return v.admins().ValidateCreate(ctx, p)
}

// ValidateUpdate needs a Tenant Admin (CEL guards immutable parts).
func (v *PolicyValidator) ValidateUpdate(ctx context.Context, old, p *openshellv1alpha1.OpenShellPolicy) (admission.Warnings, error) {
	return v.admins().ValidateUpdate(ctx, old, p)
}

// ValidateDelete needs a Tenant Admin, and refuses while sandboxes
// reference the policy.
func (v *PolicyValidator) ValidateDelete(ctx context.Context, p *openshellv1alpha1.OpenShellPolicy) (admission.Warnings, error) {
	if _, err := v.admins().ValidateDelete(ctx, p); err != nil {
		return nil, err
	}
	users, err := index.PolicyUsers(ctx, v.Reader, p)
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

// providerSecretReadable refuses a provider whose credentials Secret the
// requesting user may not read, on create and on every spec change (it
// runs only then): the provider's keys become env of every agent that
// attaches it, and its type and config decide where they are sent, so
// without the check the manage verb alone would read any Secret of the
// namespace (pull Secrets, service-account tokens, other apps').
func (a Authorizer) providerSecretReadable(ctx context.Context, _, p *openshellv1alpha1.OpenShellProvider) error {
	ref := p.Spec.CredentialsSecretRef
	if ref == nil {
		return nil
	}
	return a.SecretReadable(ctx, "OpenShellProvider", p.Name, p.Namespace, ref.Name, "spec.credentialsSecretRef.name",
		"so this provider cannot hand its keys to sandboxes: reference a Secret you may read, or ask whoever may to create the provider")
}

// SetupTenantAdminWebhooks registers the Tenant Admin check for image
// policies and providers (policies have PolicyValidator).
func SetupTenantAdminWebhooks(mgr ctrl.Manager, r client.Reader, a Authorizer) error {
	if err := ctrl.NewWebhookManagedBy(mgr, &openshellv1alpha1.OpenShellImagePolicy{}).WithValidator(
		tenantAdminCheck[*openshellv1alpha1.OpenShellImagePolicy]{Authorizer: a, Reader: r, Resource: "openshellimagepolicies",
			Spec: func(p *openshellv1alpha1.OpenShellImagePolicy) any { return p.Spec }}).Complete(); err != nil {
		return fmt.Errorf("OpenShellImagePolicy webhook: %w", err)
	}
	if err := ctrl.NewWebhookManagedBy(mgr, &openshellv1alpha1.OpenShellProvider{}).WithValidator(
		tenantAdminCheck[*openshellv1alpha1.OpenShellProvider]{Authorizer: a, Reader: r, Resource: "openshellproviders",
			Spec: func(p *openshellv1alpha1.OpenShellProvider) any { return p.Spec }, Extra: a.providerSecretReadable}).Complete(); err != nil {
		return fmt.Errorf("OpenShellProvider webhook: %w", err)
	}
	if err := ctrl.NewWebhookManagedBy(mgr, &openshellv1alpha1.OpenShellProviderProfile{}).WithValidator(
		tenantAdminCheck[*openshellv1alpha1.OpenShellProviderProfile]{Authorizer: a, Reader: r, Resource: "openshellproviderprofiles",
			Spec: func(p *openshellv1alpha1.OpenShellProviderProfile) any { return p.Spec }, Extra: a.platformProfileEditable(r)}).Complete(); err != nil {
		return fmt.Errorf("OpenShellProviderProfile webhook: %w", err)
	}
	return nil
}

// ReasonGatewayAdminRequired is the cause type of a refused write to a
// profile that a gateway imports into its platform catalog.
const ReasonGatewayAdminRequired = "GatewayAdminRequired"

// platformProfileEditable refuses to create or change a profile that a
// gateway of its namespace names in spec.providerProfiles unless the user
// may also update that gateway: the platform catalog serves every tenant
// of the gateway, so its content is the gateway admin's, not merely the
// namespace's Tenant Admin's.
func (a Authorizer) platformProfileEditable(r client.Reader) func(ctx context.Context, _, p *openshellv1alpha1.OpenShellProviderProfile) error {
	return func(ctx context.Context, _, p *openshellv1alpha1.OpenShellProviderProfile) error {
		gws := &openshellv1alpha1.OpenShellGatewayList{}
		if err := r.List(ctx, gws, client.InNamespace(p.Namespace)); err != nil {
			return apierrors.NewInternalError(err)
		}
		for _, gw := range gws.Items {
			if !slices.Contains(gw.Spec.ProviderProfiles, p.Name) {
				continue
			}
			ok, user, err := a.Allowed(ctx, authorizationv1.ResourceAttributes{Namespace: p.Namespace, Verb: "update",
				Group: openshellv1alpha1.GroupVersion.Group, Resource: "openshellgateways", Name: gw.Name})
			if err != nil {
				return apierrors.NewInternalError(err)
			}
			if !ok {
				msg := fmt.Sprintf("%s: user %q may not write OpenShellProviderProfile %s: gateway %s imports it into its platform catalog "+
					"(spec.providerProfiles), which serves every tenant of the gateway; only who may update that gateway may change it",
					ReasonGatewayAdminRequired, user, p.Name, gw.Name)
				return forbidden("openshellproviderprofiles", p.Name, ReasonGatewayAdminRequired, msg, "")
			}
		}
		return nil
	}
}
