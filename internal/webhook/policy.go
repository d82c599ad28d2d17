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
	"github.com/openshell/openshell-operator/internal/tenancy"
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
	if ref := p.Spec.CredentialsSecretRef; ref != nil {
		if err := a.SecretReadable(ctx, "OpenShellProvider", p.Name, p.Namespace, ref.Name, "spec.credentialsSecretRef.name",
			"so this provider cannot hand its keys to sandboxes: reference a Secret you may read, or ask whoever may to create the provider"); err != nil {
			return err
		}
	}
	// Refresh material (a refresh token, a client secret) becomes the
	// gateway's, and what it mints reaches the sandboxes.
	for i, r := range p.Spec.Refresh {
		if err := a.SecretReadable(ctx, "OpenShellProvider", p.Name, p.Namespace, r.MaterialSecretRef.Name,
			fmt.Sprintf("spec.refresh[%d].materialSecretRef.name", i),
			"so this provider cannot hand its refresh material to the gateway: reference a Secret you may read, or ask whoever may"); err != nil {
			return err
		}
	}
	return nil
}

// pullSecretsReadable refuses an image policy naming a pull Secret the
// requesting user may not read, on create and on every spec change: the
// operator copies its credentials where the namespace's sandboxes pull
// with them, so the manage verb alone must not choose any Secret of the
// namespace.
func (a Authorizer) pullSecretsReadable(ctx context.Context, _, p *openshellv1alpha1.OpenShellImagePolicy) error {
	for i, ref := range p.Spec.PullSecrets {
		if err := a.SecretReadable(ctx, "OpenShellImagePolicy", p.Name, p.Namespace, ref.Name, fmt.Sprintf("spec.pullSecrets[%d].name", i),
			"so its credentials cannot be given to the sandboxes: name a Secret you may read, or ask whoever may"); err != nil {
			return err
		}
	}
	return nil
}

// SetupTenantAdminWebhooks registers the Tenant Admin check for image
// policies and providers (policies have PolicyValidator).
func SetupTenantAdminWebhooks(mgr ctrl.Manager, r client.Reader, a Authorizer, platform tenancy.Platform) error {
	if err := ctrl.NewWebhookManagedBy(mgr, &openshellv1alpha1.OpenShellImagePolicy{}).WithValidator(
		tenantAdminCheck[*openshellv1alpha1.OpenShellImagePolicy]{Authorizer: a, Reader: r, Resource: "openshellimagepolicies",
			Spec: func(p *openshellv1alpha1.OpenShellImagePolicy) any { return p.Spec }, Extra: a.pullSecretsReadable}).Complete(); err != nil {
		return fmt.Errorf("OpenShellImagePolicy webhook: %w", err)
	}
	if err := ctrl.NewWebhookManagedBy(mgr, &openshellv1alpha1.OpenShellProvider{}).WithValidator(
		tenantAdminCheck[*openshellv1alpha1.OpenShellProvider]{Authorizer: a, Reader: r, Resource: "openshellproviders",
			Spec: func(p *openshellv1alpha1.OpenShellProvider) any { return p.Spec }, Extra: a.providerSecretReadable}).Complete(); err != nil {
		return fmt.Errorf("OpenShellProvider webhook: %w", err)
	}
	profiles := profileChecks{Authorizer: a, Reader: r, Platform: platform}
	if err := ctrl.NewWebhookManagedBy(mgr, &openshellv1alpha1.OpenShellProviderProfile{}).WithValidator(
		tenantAdminCheck[*openshellv1alpha1.OpenShellProviderProfile]{Authorizer: a, Reader: r, Resource: "openshellproviderprofiles",
			Spec: func(p *openshellv1alpha1.OpenShellProviderProfile) any { return p.Spec }, Extra: profiles.onWrite, OnDelete: profiles.gatewayAdmin}).Complete(); err != nil {
		return fmt.Errorf("OpenShellProviderProfile webhook: %w", err)
	}
	return nil
}

// ReasonGatewayAdminRequired is the cause type of a refused write to a
// profile that a gateway imports into its platform catalog.
const ReasonGatewayAdminRequired = "GatewayAdminRequired"

// profileChecks are what a provider profile's writer must also be allowed:
// a profile decides where the credentials of the namespace's providers of
// its type are sent, and one in a gateway namespace may serve every tenant
// of the gateway.
type profileChecks struct {
	Authorizer Authorizer
	Reader     client.Reader
	Platform   tenancy.Platform
}

// onWrite runs on create and on a spec change.
func (c profileChecks) onWrite(ctx context.Context, _, p *openshellv1alpha1.OpenShellProviderProfile) error {
	if err := c.gatewayAdmin(ctx, p); err != nil {
		return err
	}
	return c.credentialsReadable(ctx, p)
}

// credentialsReadable refuses unless the user may get the credentials and
// refresh material Secrets of every provider in the namespace of the
// profile's type: the
// profile's endpoints and credential placement decide where those values
// go, so without it a Tenant Admin without Secret access (the
// openshell-tenant-admin role holds none) could route a provider's token to
// a host of their choosing.
func (c profileChecks) credentialsReadable(ctx context.Context, p *openshellv1alpha1.OpenShellProviderProfile) error {
	provs := &openshellv1alpha1.OpenShellProviderList{}
	if err := c.Reader.List(ctx, provs, client.InNamespace(p.Namespace), client.MatchingFields{index.ProviderType: p.Name}); err != nil {
		return apierrors.NewInternalError(err)
	}
	for _, prov := range provs.Items {
		// The credentials Secret's values, and what the gateway mints
		// from refresh material, go where the profile says.
		for _, name := range prov.SecretNames() {
			if err := c.Authorizer.SecretReadable(ctx, "OpenShellProviderProfile", p.Name, p.Namespace, name, "spec",
				fmt.Sprintf("which OpenShellProvider %s (type %s) sends, and this profile decides where: ask whoever may read it to write the profile", prov.Name, p.Name)); err != nil {
				return err
			}
		}
	}
	return nil
}

// gatewayAdmin refuses a write (or deletion) of a profile in a namespace
// whose gateways are served, or that a gateway there names in
// spec.providerProfiles, unless the user may update the namespace's
// gateways: such a profile is, or may become with one edit of a gateway,
// its platform catalog, which serves every tenant of the gateway.
func (c profileChecks) gatewayAdmin(ctx context.Context, p *openshellv1alpha1.OpenShellProviderProfile) error {
	platform, why, err := c.platformProfile(ctx, p)
	if err != nil || !platform {
		return err
	}
	ok, user, err := c.Authorizer.Allowed(ctx, authorizationv1.ResourceAttributes{Namespace: p.Namespace, Verb: "update",
		Group: openshellv1alpha1.GroupVersion.Group, Resource: "openshellgateways"})
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	if ok {
		return nil
	}
	msg := fmt.Sprintf("%s: user %q may not write OpenShellProviderProfile %s: %s, whose platform catalog serves every tenant of the "+
		"gateway; only who may update the namespace's OpenShellGateways may change it", ReasonGatewayAdminRequired, user, p.Name, why)
	return forbidden("openshellproviderprofiles", p.Name, ReasonGatewayAdminRequired, msg, "")
}

// platformProfile says whether p is, or may become, a platform profile,
// and why.
func (c profileChecks) platformProfile(ctx context.Context, p *openshellv1alpha1.OpenShellProviderProfile) (bool, string, error) {
	gws := &openshellv1alpha1.OpenShellGatewayList{}
	if err := c.Reader.List(ctx, gws, client.InNamespace(p.Namespace)); err != nil {
		return false, "", apierrors.NewInternalError(err)
	}
	for _, gw := range gws.Items {
		if slices.Contains(gw.Spec.ProviderProfiles, p.Name) {
			return true, fmt.Sprintf("gateway %s imports it into its platform catalog (spec.providerProfiles)", gw.Name), nil
		}
	}
	ns, err := index.GetNamespace(ctx, c.Reader, p.Namespace)
	if err != nil {
		return false, "", apierrors.NewInternalError(err)
	}
	if c.Platform.GatewayServed(tenancy.Namespace{Name: ns.Name, Labels: ns.Labels}) == "" {
		return true, fmt.Sprintf("namespace %s is a gateway namespace, where a gateway may import it into its platform catalog", p.Namespace), nil
	}
	return false, "", nil
}
