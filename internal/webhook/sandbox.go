// Package webhook holds the operator's admission webhooks.
package webhook

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/imagepolicy"
	"github.com/openshell/openshell-operator/internal/index"
	"github.com/openshell/openshell-operator/internal/monitoring"
	"github.com/openshell/openshell-operator/internal/sandboxcontrols"
	"github.com/openshell/openshell-operator/internal/sandboxspec"
	"github.com/openshell/openshell-operator/internal/tenancy"
)

// +kubebuilder:webhook:path=/validate-openshell-ai-v1alpha1-openshellsandbox,mutating=false,failurePolicy=fail,sideEffects=None,groups=openshell.ai,resources=openshellsandboxes,verbs=create;update,versions=v1alpha1,name=vopenshellsandbox.openshell.ai,admissionReviewVersions=v1,timeoutSeconds=10

// SandboxValidator admits an OpenShellSandbox only when its namespace may
// use the gateway it names, its user may read every Secret its env
// references, and its image is allowed by the namespace's
// OpenShellImagePolicies — so that `oc apply` fails with the reason instead
// of the sandbox hanging in ImagePullBackOff or quietly borrowing rights.
type SandboxValidator struct {
	// Reader is the manager's cached client.
	Reader     client.Reader
	Policies   *imagepolicy.Cache
	Platform   tenancy.Platform
	Authorizer Authorizer
}

// SetupWithManager registers the webhook.
func (v *SandboxValidator) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewWebhookManagedBy(mgr, &openshellv1alpha1.OpenShellSandbox{}).WithValidator(v).Complete()
}

// ValidateCreate checks gateway access, Secret references and the image of
// a new sandbox.
func (v *SandboxValidator) ValidateCreate(ctx context.Context, sb *openshellv1alpha1.OpenShellSandbox) (admission.Warnings, error) {
	// A sandbox created with force-release already set would be released
	// on its deletion without the gateway's word: as privileged as
	// removing the finalizer, on create as on update.
	if err := v.Authorizer.FinalizersRemovable(ctx, "openshellsandboxes", &openshellv1alpha1.OpenShellSandbox{}, sb); err != nil {
		return nil, err
	}
	gw, err := v.gateway(ctx, sb)
	if err != nil {
		return nil, err
	}
	if err := v.checkGatewayAccess(ctx, sb, gw); err != nil {
		return nil, err
	}
	if err := v.checkPolicyRequired(ctx, sb, gw); err != nil {
		return nil, err
	}
	// What a template gives the sandbox is judged as its own.
	eff, err := v.withTemplate(ctx, sb)
	if err != nil {
		return nil, err
	}
	if err := v.checkControls(ctx, eff, gw); err != nil {
		return nil, err
	}
	if err := v.checkSecretRefs(ctx, sb, nil); err != nil {
		return nil, err
	}
	return v.checkImage(ctx, eff, gw)
}

// withTemplate is the sandbox as it would be created: with what its
// OpenShellSandboxTemplate gives it (sb itself without one, or while the
// template does not exist yet: the controller waits for it, and judges
// it then).
func (v *SandboxValidator) withTemplate(ctx context.Context, sb *openshellv1alpha1.OpenShellSandbox) (*openshellv1alpha1.OpenShellSandbox, error) {
	if sb.Spec.TemplateRef == nil {
		return sb, nil
	}
	t := &openshellv1alpha1.OpenShellSandboxTemplate{}
	switch err := v.Reader.Get(ctx, client.ObjectKey{Namespace: sb.Namespace, Name: sb.Spec.TemplateRef.Name}, t); {
	case apierrors.IsNotFound(err):
		return sb, nil
	case err != nil:
		return nil, apierrors.NewInternalError(fmt.Errorf("read OpenShellSandboxTemplate %s/%s: %w", sb.Namespace, sb.Spec.TemplateRef.Name, err))
	}
	eff := sb.DeepCopy()
	sandboxcontrols.OverlayTemplate(&eff.Spec, sandboxspec.Applied(t))
	return eff, nil
}

// ValidateUpdate checks what changed: the removal of the operator's
// finalizer, Secret references that are new, a policyRef that would change
// the process identity, resources, GPUs, RuntimeClass and providers against
// the gateway's controls, and the image. Other updates (labels, finalizers, status) must never be
// blocked by a policy that tightened after the sandbox was admitted; the
// controller reports those. spec.gatewayRef is immutable (CEL).
func (v *SandboxValidator) ValidateUpdate(ctx context.Context, old, sb *openshellv1alpha1.OpenShellSandbox) (admission.Warnings, error) {
	if err := v.Authorizer.FinalizersRemovable(ctx, "openshellsandboxes", old, sb); err != nil {
		return nil, err
	}
	if !sb.DeletionTimestamp.IsZero() {
		return nil, nil
	}
	if err := v.checkSecretRefs(ctx, sb, old); err != nil {
		return nil, err
	}
	if err := v.checkProcessIdentity(ctx, old, sb); err != nil {
		return nil, err
	}
	policyDropped := old.Spec.PolicyRef != nil && sb.Spec.PolicyRef == nil
	// A sandbox the gateway does not run yet (pending, or rejected) is
	// checked on every spec change: an edit must not revive one that a
	// control or budget refused.
	controlled := !equality.Semantic.DeepEqual(old.Spec.Resources, sb.Spec.Resources) || !equality.Semantic.DeepEqual(old.Spec.GPU, sb.Spec.GPU) ||
		old.Spec.RuntimeClassName != sb.Spec.RuntimeClassName || !slices.Equal(old.Spec.Providers, sb.Spec.Providers) ||
		!maps.Equal(old.Spec.PodAnnotations, sb.Spec.PodAnnotations) ||
		(sb.Status.SandboxID == "" && !equality.Semantic.DeepEqual(old.Spec, sb.Spec))
	imageChanged := old.Spec.Image != sb.Spec.Image
	if !policyDropped && !controlled && !imageChanged {
		return nil, nil
	}
	gw, err := v.gateway(ctx, sb)
	if err != nil {
		return nil, err
	}
	if policyDropped {
		if err := v.checkPolicyRequired(ctx, sb, gw); err != nil {
			return nil, err
		}
	}
	if controlled {
		if err := v.checkControls(ctx, sb, gw); err != nil {
			return nil, err
		}
	}
	if !imageChanged {
		return nil, nil
	}
	return v.checkImage(ctx, sb, gw)
}

// ValidateDelete allows every deletion.
func (v *SandboxValidator) ValidateDelete(context.Context, *openshellv1alpha1.OpenShellSandbox) (admission.Warnings, error) {
	return nil, nil
}

// gateway reads the referenced gateway; nil when it does not exist (the
// controller reports GatewayNotFound and admits nothing at the gateway).
func (v *SandboxValidator) gateway(ctx context.Context, sb *openshellv1alpha1.OpenShellSandbox) (*openshellv1alpha1.OpenShellGateway, error) {
	gw := &openshellv1alpha1.OpenShellGateway{}
	switch err := v.Reader.Get(ctx, sb.GatewayKey(), gw); {
	case err == nil:
		return gw, nil
	case apierrors.IsNotFound(err):
		return nil, nil
	case strings.Contains(err.Error(), "unknown namespace for the cache"):
		// The operator does not watch that namespace (OwnNamespace or
		// SingleNamespace install): it cannot serve that gateway.
		msg := fmt.Sprintf("%s: OpenShellGateway %s is in a namespace this operator does not watch: use a gateway of a namespace the operator serves",
			openshellv1alpha1.ReasonGatewayNotAllowed, sb.GatewayKey())
		return nil, forbidden("OpenShellSandbox", sb.Name, openshellv1alpha1.ReasonGatewayNotAllowed, msg, "spec.gatewayRef")
	default:
		return nil, apierrors.NewInternalError(fmt.Errorf("read gateway %s: %w", sb.GatewayKey(), err))
	}
}

// checkGatewayAccess refuses a sandbox whose namespace the gateway does not
// admit (spec.tenancy) or whose gateway is not a platform gateway.
func (v *SandboxValidator) checkGatewayAccess(ctx context.Context, sb *openshellv1alpha1.OpenShellSandbox, gw *openshellv1alpha1.OpenShellGateway) error {
	if gw == nil {
		return nil
	}
	ns, _, err := tenancy.ReadNamespace(ctx, v.Reader, sb.Namespace)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	msg, err := v.Platform.Access(ctx, v.Reader, gw, ns)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	if msg == "" {
		return nil
	}
	return forbidden("OpenShellSandbox", sb.Name, openshellv1alpha1.ReasonGatewayNotAllowed,
		openshellv1alpha1.ReasonGatewayNotAllowed+": "+msg, "spec.gatewayRef")
}

// checkSecretRefs makes sure the requesting user may read every Secret the
// sandbox's env takes a value from. On a new sandbox every reference is
// checked; on an update, every reference again whenever the spec changes at
// all: an edit to env, image, command, policy, providers, annotations or
// RuntimeClass changes what runs next to those values (a NODE_OPTIONS or
// LD_PRELOAD beside DB_PASSWORD is code beside the Secret), so only who may
// read the Secrets may make it.
func (v *SandboxValidator) checkSecretRefs(ctx context.Context, sb, old *openshellv1alpha1.OpenShellSandbox) error {
	if old != nil && equality.Semantic.DeepEqual(old.Spec, sb.Spec) {
		return nil
	}
	checked := map[string]bool{}
	for i, e := range sb.Spec.Env {
		if e.ValueFrom == nil {
			continue
		}
		name := e.ValueFrom.SecretKeyRef.Name
		if checked[name] {
			continue
		}
		checked[name] = true
		if len(checked) > sandboxspec.MaxEnvSecrets {
			msg := fmt.Sprintf("%s: env reads more than %d Secrets: put the values in fewer Secrets", ReasonTooManySecrets, sandboxspec.MaxEnvSecrets)
			return forbidden("OpenShellSandbox", sb.Name, ReasonTooManySecrets, msg, fmt.Sprintf("spec.env[%d].valueFrom.secretKeyRef.name", i))
		}
		if err := v.Authorizer.SecretReadable(ctx, "OpenShellSandbox", sb.Name, sb.Namespace, name,
			fmt.Sprintf("spec.env[%d].valueFrom.secretKeyRef.name", i),
			fmt.Sprintf("so env %s cannot reference it (every spec change re-checks it): ask a Tenant Admin to put the credential "+
				"in an OpenShellProvider and attach that instead, or to make the change", e.Name)); err != nil {
			return err
		}
	}
	return nil
}

// checkControls refuses a sandbox over its gateway's spec.sandboxControls
// (resources, GPUs, RuntimeClass, provider types) with the reason the
// controller would report.
func (v *SandboxValidator) checkControls(ctx context.Context, sb *openshellv1alpha1.OpenShellSandbox, gw *openshellv1alpha1.OpenShellGateway) error {
	if gw == nil {
		return nil
	}
	types := map[string]string{}
	if len(gw.Spec.SandboxControls.AllowedProviderTypes) > 0 {
		for _, name := range sb.Spec.Providers {
			p := &openshellv1alpha1.OpenShellProvider{}
			switch err := v.Reader.Get(ctx, client.ObjectKey{Namespace: sb.Namespace, Name: name}, p); {
			case err == nil:
				types[name] = p.Spec.Type
			case !apierrors.IsNotFound(err):
				return apierrors.NewInternalError(fmt.Errorf("read OpenShellProvider %s/%s: %w", sb.Namespace, name, err))
			}
		}
	}
	if viol := sandboxcontrols.Check(gw, sb, types); viol != nil {
		return forbidden("OpenShellSandbox", sb.Name, viol.Reason, viol.Message, viol.Field)
	}
	if gw.Spec.SandboxControls.NamespaceBudget == nil {
		return nil
	}
	peers := &openshellv1alpha1.OpenShellSandboxList{}
	if err := v.Reader.List(ctx, peers, client.InNamespace(sb.Namespace),
		client.MatchingFields{index.SandboxGateway: sb.GatewayKey().String()}); err != nil {
		return apierrors.NewInternalError(fmt.Errorf("list the namespace's sandboxes on gateway %s: %w", sb.GatewayKey(), err))
	}
	// Peers are charged with what they inherited (status), as the
	// controller charges them.
	for i := range peers.Items {
		peers.Items[i] = *sandboxcontrols.Effective(&peers.Items[i])
	}
	if viol := sandboxcontrols.CheckBudget(gw, sb, peers.Items); viol != nil {
		return forbidden("OpenShellSandbox", sb.Name, viol.Reason, viol.Message, viol.Field)
	}
	return nil
}

// ReasonProcessIdentityImmutable is the cause type of a policyRef change
// that would change the identity a running agent runs as.
const ReasonProcessIdentityImmutable = "ProcessIdentityImmutable"

// checkProcessIdentity applies to spec.policyRef the rule an OpenShellPolicy
// has for its own spec.process (CEL): the user and group a running sandbox
// runs as cannot change. Without it, an editor could move a sandbox from
// its policy to another of the namespace that runs as a different user —
// the change the policy's own immutability forbids. No policy, or a policy
// without spec.process, means the gateway's default identity.
func (v *SandboxValidator) checkProcessIdentity(ctx context.Context, old, sb *openshellv1alpha1.OpenShellSandbox) error {
	if refName(old.Spec.PolicyRef) == refName(sb.Spec.PolicyRef) {
		return nil
	}
	before, err := v.processOf(ctx, sb.Namespace, old.Spec.PolicyRef)
	if err != nil {
		return err
	}
	after, err := v.processOf(ctx, sb.Namespace, sb.Spec.PolicyRef)
	if err != nil {
		return err
	}
	if reflect.DeepEqual(before, after) {
		return nil
	}
	msg := fmt.Sprintf("%s: spec.policyRef %s runs the agent as %s, the sandbox now runs as %s (policy %s); "+
		"the process identity of a sandbox cannot change: create a new sandbox with that policy",
		ReasonProcessIdentityImmutable, describeRef(sb.Spec.PolicyRef), describeProcess(after), describeProcess(before), describeRef(old.Spec.PolicyRef))
	return forbidden("OpenShellSandbox", sb.Name, ReasonProcessIdentityImmutable, msg, "spec.policyRef")
}

// checkPolicyRequired refuses a sandbox without spec.policyRef where its
// gateway requires a policy and its namespace has no single default.
func (v *SandboxValidator) checkPolicyRequired(ctx context.Context, sb *openshellv1alpha1.OpenShellSandbox, gw *openshellv1alpha1.OpenShellGateway) error {
	if sb.Spec.PolicyRef != nil || gw == nil {
		return nil
	}
	_, defaults, err := v.namespaceDefault(ctx, sb.Namespace)
	if err != nil {
		return err
	}
	if viol := sandboxcontrols.PolicyViolation(gw, sb, defaults); viol != nil {
		return forbidden("OpenShellSandbox", sb.Name, viol.Reason, viol.Message, viol.Field)
	}
	return nil
}

func (v *SandboxValidator) namespaceDefault(ctx context.Context, ns string) (*openshellv1alpha1.OpenShellPolicy, []string, error) {
	list := &openshellv1alpha1.OpenShellPolicyList{}
	if err := v.Reader.List(ctx, list, client.InNamespace(ns)); err != nil {
		return nil, nil, apierrors.NewInternalError(fmt.Errorf("list OpenShellPolicies of namespace %s: %w", ns, err))
	}
	only, names := sandboxcontrols.NamespaceDefaults(list.Items)
	return only, names, nil
}

// processOf is the process identity of the named policy, or without a name
// of the namespace's default policy; a policy that does not exist has none
// (the controller reports PolicyNotFound).
func (v *SandboxValidator) processOf(ctx context.Context, ns string, ref *openshellv1alpha1.LocalObjectReference) (*openshellv1alpha1.ProcessPolicy, error) {
	var p *openshellv1alpha1.OpenShellPolicy
	if ref == nil {
		def, _, err := v.namespaceDefault(ctx, ns)
		if err != nil {
			return nil, err
		}
		p = def
	} else {
		p = &openshellv1alpha1.OpenShellPolicy{}
		switch err := v.Reader.Get(ctx, client.ObjectKey{Namespace: ns, Name: ref.Name}, p); {
		case apierrors.IsNotFound(err):
			return nil, nil
		case err != nil:
			return nil, apierrors.NewInternalError(fmt.Errorf("read OpenShellPolicy %s/%s: %w", ns, ref.Name, err))
		}
	}
	if p == nil || p.Spec.Process == nil || *p.Spec.Process == (openshellv1alpha1.ProcessPolicy{}) {
		return nil, nil
	}
	return p.Spec.Process, nil
}

func refName(r *openshellv1alpha1.LocalObjectReference) string {
	if r == nil {
		return ""
	}
	return r.Name
}

func describeRef(r *openshellv1alpha1.LocalObjectReference) string {
	if r == nil {
		return "(none: the gateway's default policy)"
	}
	return r.Name
}

func describeProcess(p *openshellv1alpha1.ProcessPolicy) string {
	if p == nil {
		return "the gateway's default user and group"
	}
	return fmt.Sprintf("user %q group %q", p.RunAsUser, p.RunAsGroup)
}

// ReasonSecretAccessDenied is the cause type of an env Secret reference the
// requesting user may not read.
const ReasonSecretAccessDenied = "SecretAccessDenied"

// ReasonTooManySecrets is the cause type of a sandbox whose env reads more
// distinct Secrets than one sandbox may.
const ReasonTooManySecrets = "TooManySecrets"

// checkImage checks the image against the namespace's allowlists under the
// gateway's enforcement (the default enforcement when gw is nil).
func (v *SandboxValidator) checkImage(ctx context.Context, sb *openshellv1alpha1.OpenShellSandbox, gw *openshellv1alpha1.OpenShellGateway) (admission.Warnings, error) {
	d, enf, err := v.Policies.Check(ctx, v.Reader, sb, gw)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	if d.Allowed {
		return nil, nil
	}
	monitoring.ImagePolicyDenied(d.Reason, enf.Mode)
	msg := d.Reason + ": " + d.Message
	if enf.Mode == openshellv1alpha1.ImagePolicyWarn {
		return admission.Warnings{msg + " (admitted: the gateway's image policy mode is Warn)"}, nil
	}
	return nil, forbidden("OpenShellSandbox", sb.Name, d.Reason, msg, "spec.image")
}
