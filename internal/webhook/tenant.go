package webhook

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/index"
)

// VerbManage is the custom RBAC verb that separates a namespace's Tenant
// Admins from its Sandbox Consumers. OLM aggregates write access to every
// owned CRD into the built-in roles: `admin` gets "*" (which includes
// manage) and `edit` gets create/update/patch/delete (which does not). So
// with the plain aggregated roles, only namespace admins may write the
// objects that decide what a sandbox may do — its policy, its credentials
// and its image allowlist — while editors keep creating sandboxes that name
// them. Clusters that grant roles explicitly use the ClusterRoles
// openshell-tenant-admin (which holds manage) and openshell-sandbox-user.
const VerbManage = "manage"

// ReasonTenantAdminRequired is the cause type of a refused write to a
// Tenant Admin kind.
const ReasonTenantAdminRequired = "TenantAdminRequired"

// Authorizer asks the API server whether a user may do something
// (SubjectAccessReview), on behalf of the user who sent an admission request.
type Authorizer struct {
	// Client creates SubjectAccessReviews (never cached).
	Client client.Client
}

// Allowed reports whether the admission request's user may perform attrs.
func (a Authorizer) Allowed(ctx context.Context, attrs authorizationv1.ResourceAttributes) (bool, string, error) {
	req, err := admission.RequestFromContext(ctx)
	if err != nil {
		return false, "", fmt.Errorf("no admission request in context: %w", err)
	}
	u := req.UserInfo
	extra := map[string]authorizationv1.ExtraValue{}
	for k, v := range u.Extra {
		extra[k] = authorizationv1.ExtraValue(v)
	}
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		ResourceAttributes: &attrs, User: u.Username, Groups: u.Groups, UID: u.UID, Extra: extra}}
	if err := a.Client.Create(ctx, sar); err != nil {
		return false, "", fmt.Errorf("SubjectAccessReview: %w", err)
	}
	return sar.Status.Allowed, u.Username, nil
}

// SecretReadable refuses (403, cause ReasonSecretAccessDenied on field)
// unless the admission request's user may get Secret name in namespace ns:
// the operator reads it with its own rights and puts its values next to
// code the requester controls, so the requester must be able to read it
// themselves. what says what follows and what to do.
func (a Authorizer) SecretReadable(ctx context.Context, kind, objName, ns, name, field, what string) error {
	ok, user, err := a.Allowed(ctx, authorizationv1.ResourceAttributes{Namespace: ns, Verb: "get", Resource: "secrets", Name: name})
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	if ok {
		return nil
	}
	msg := fmt.Sprintf("%s: user %q may not get Secret %s in namespace %s, %s", ReasonSecretAccessDenied, user, name, ns, what)
	return forbidden(kind, objName, ReasonSecretAccessDenied, msg, field)
}

// ReasonFinalizerProtected is the cause type of a refused removal of one of
// the operator's finalizers.
const ReasonFinalizerProtected = "FinalizerProtected"

// FinalizersRemovable refuses an update that removes one of the operator's
// finalizers (openshell.ai/...) unless the requesting user may update the
// object's finalizers subresource. The operator's ServiceAccount may (its
// RBAC grants <kind>/finalizers update) and so may a cluster admin; the
// roles OLM aggregates to namespace admins and editors name only the
// resource itself. Without this check, a user could strip a sandbox's or
// provider's cleanup finalizer before deleting it and leave the agent
// running, or the credentials stored, at the gateway with no owner.
//
// Setting the force-release annotation counts as removing the finalizer.
func (a Authorizer) FinalizersRemovable(ctx context.Context, resource string, old, o client.Object) error {
	if v := o.GetAnnotations()[openshellv1alpha1.AnnotationForceRelease]; v != "" && v != old.GetAnnotations()[openshellv1alpha1.AnnotationForceRelease] {
		// Forcing the release is removing the finalizer by other means.
		ok, user, err := a.Allowed(ctx, authorizationv1.ResourceAttributes{Namespace: o.GetNamespace(), Verb: "update",
			Group: openshellv1alpha1.GroupVersion.Group, Resource: resource, Subresource: "finalizers", Name: o.GetName()})
		if err != nil {
			return apierrors.NewInternalError(err)
		}
		if !ok {
			msg := fmt.Sprintf("%s: user %q may not set %s: only who may remove the operator's finalizer (update %s/finalizers) may force its release",
				ReasonFinalizerProtected, user, openshellv1alpha1.AnnotationForceRelease, resource)
			return forbidden(resource, o.GetName(), ReasonFinalizerProtected, msg, "metadata.annotations")
		}
	}
	for _, f := range old.GetFinalizers() {
		if !strings.HasPrefix(f, openshellv1alpha1.GroupVersion.Group+"/") || slices.Contains(o.GetFinalizers(), f) {
			continue
		}
		ok, user, err := a.Allowed(ctx, authorizationv1.ResourceAttributes{Namespace: o.GetNamespace(), Verb: "update",
			Group: openshellv1alpha1.GroupVersion.Group, Resource: resource, Subresource: "finalizers", Name: o.GetName()})
		if err != nil {
			return apierrors.NewInternalError(err)
		}
		if ok {
			return nil
		}
		msg := fmt.Sprintf("%s: user %q may not remove finalizer %s: the operator removes it once it has cleaned up at the gateway; "+
			"delete the object and let the operator finish", ReasonFinalizerProtected, user, f)
		return forbidden(resource, o.GetName(), ReasonFinalizerProtected, msg, "metadata.finalizers")
	}
	return nil
}

// tenantAdminCheck refuses writes to OpenShellPolicy, OpenShellImagePolicy
// and OpenShellProvider by users who lack the manage verb on the kind in
// the namespace. Updates that leave spec, labels and annotations alone
// (finalizers the operator adds) pass without a check; removing one of the
// operator's finalizers needs FinalizersRemovable.
type tenantAdminCheck[T client.Object] struct {
	Authorizer Authorizer
	// Reader reads namespaces (the manager's cached client).
	Reader client.Reader
	// Resource is the plural resource name; Spec returns an object's spec.
	Resource string
	Spec     func(T) any
	// Extra, if set, runs after the manage check on create and on a spec
	// change (old is nil on create).
	Extra func(ctx context.Context, old, o T) error
	// OnDelete, if set, runs after the manage check on a deletion.
	OnDelete func(ctx context.Context, o T) error
}

func (c tenantAdminCheck[T]) ValidateCreate(ctx context.Context, o T) (admission.Warnings, error) {
	if err := c.check(ctx, o, "create"); err != nil {
		return nil, err
	}
	var none T
	return nil, c.extra(ctx, none, o)
}

func (c tenantAdminCheck[T]) extra(ctx context.Context, old, o T) error {
	if c.Extra == nil {
		return nil
	}
	return c.Extra(ctx, old, o)
}

func (c tenantAdminCheck[T]) ValidateUpdate(ctx context.Context, old, o T) (admission.Warnings, error) {
	if err := c.Authorizer.FinalizersRemovable(ctx, c.Resource, old, o); err != nil {
		return nil, err
	}
	specSame := equality.Semantic.DeepEqual(c.Spec(old), c.Spec(o))
	if specSame && maps.Equal(old.GetLabels(), o.GetLabels()) && maps.Equal(old.GetAnnotations(), o.GetAnnotations()) {
		return nil, nil
	}
	if err := c.check(ctx, o, "change"); err != nil {
		return nil, err
	}
	if specSame {
		return nil, nil
	}
	return nil, c.extra(ctx, old, o)
}

// ValidateDelete needs a Tenant Admin — deleting an image allowlist can
// open a namespace to every image — except while the namespace itself is
// being deleted: the namespace controller, which then deletes everything
// in it, holds no manage verb.
func (c tenantAdminCheck[T]) ValidateDelete(ctx context.Context, o T) (admission.Warnings, error) {
	ns, err := index.GetNamespace(ctx, c.Reader, o.GetNamespace())
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, apierrors.NewInternalError(err)
	}
	if ns == nil || !ns.DeletionTimestamp.IsZero() {
		return nil, nil
	}
	if err := c.check(ctx, o, "delete"); err != nil || c.OnDelete == nil {
		return nil, err
	}
	return nil, c.OnDelete(ctx, o)
}

func (c tenantAdminCheck[T]) check(ctx context.Context, o T, action string) error {
	ok, user, err := c.Authorizer.Allowed(ctx, authorizationv1.ResourceAttributes{Namespace: o.GetNamespace(),
		Verb: VerbManage, Group: openshellv1alpha1.GroupVersion.Group, Resource: c.Resource, Name: o.GetName()})
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	if ok {
		return nil
	}
	msg := fmt.Sprintf("%s: user %q may not %s %s in namespace %s: they belong to the namespace's Tenant Admins "+
		"(the %s verb on %s.%s, held by the namespace admin role and by ClusterRole openshell-tenant-admin); "+
		"sandbox users only reference them", ReasonTenantAdminRequired, user, action, c.Resource, o.GetNamespace(),
		VerbManage, c.Resource, openshellv1alpha1.GroupVersion.Group)
	return forbidden(c.Resource, o.GetName(), ReasonTenantAdminRequired, msg, "")
}

// forbidden is a 403 whose cause names the reason (and field, if any).
func forbidden(resource, name, reason, msg, field string) error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    403,
		Reason:  metav1.StatusReasonForbidden,
		Message: msg,
		Details: &metav1.StatusDetails{Group: openshellv1alpha1.GroupVersion.Group, Kind: resource, Name: name,
			Causes: []metav1.StatusCause{{Type: metav1.CauseType(reason), Message: msg, Field: field}}},
	}}
}
