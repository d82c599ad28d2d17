package sandbox

import (
	"context"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/api/meta"
	kerrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/sandboxspec"
)

// takeTemplate records, for a sandbox not yet created at the gateway, what
// it takes from its OpenShellSandboxTemplate (status.template: the
// template's current generation, and its name at the sandbox's gateway
// once synced there), and makes it the working copy's and raw's (so that
// namespace defaults fill only what the template leaves). A created
// sandbox keeps what it took. It returns why the sandbox must wait for
// the template (nil: it need not).
func (r *Reconciler) takeTemplate(ctx context.Context, sb *openshellv1alpha1.OpenShellSandbox, raw *openshellv1alpha1.OpenShellSandboxSpec) (*refusal, error) {
	ref := sb.Spec.TemplateRef
	if ref == nil || sb.Status.SandboxID != "" {
		return nil, nil
	}
	t := &openshellv1alpha1.OpenShellSandboxTemplate{}
	switch err := r.Client.Get(ctx, client.ObjectKey{Namespace: sb.Namespace, Name: ref.Name}, t); {
	case kerrors.IsNotFound(err):
		sb.Status.Template = nil
		return &refusal{phase: openshellv1alpha1.SandboxPhasePending, reason: openshellv1alpha1.SandboxReasonTemplateNotFound,
			message: fmt.Sprintf("OpenShellSandboxTemplate %s not found in namespace %s", ref.Name, sb.Namespace)}, nil
	case err != nil:
		return nil, fmt.Errorf("get template %s: %w", ref.Name, err)
	}
	a := sandboxspec.Applied(t)
	a.GatewayName = syncedAt(t, sb.GatewayKey().String())
	sb.Status.Template = a
	sandboxspec.OverlayTemplate(raw, a)
	sandboxspec.OverlayTemplate(&sb.Spec, a)
	if a.GatewayName != "" {
		return nil, nil
	}
	return templatePending(t, sb.GatewayKey().String()), nil
}

// syncedAt is the name, at gateway, of the template's current spec, ""
// until the template controller has created it there. Pure.
func syncedAt(t *openshellv1alpha1.OpenShellSandboxTemplate, gateway string) string {
	name := sandboxspec.GatewayTemplateName(t)
	if slices.ContainsFunc(t.Status.Gateways, func(e openshellv1alpha1.SandboxTemplateGatewayStatus) bool {
		return e.Gateway == gateway && e.Name == name && e.ObservedGeneration == t.Generation
	}) {
		return name
	}
	return ""
}

// templatePending says why a template is not at a gateway yet, from its
// Ready condition. Pure.
func templatePending(t *openshellv1alpha1.OpenShellSandboxTemplate, gateway string) *refusal {
	reason, why := openshellv1alpha1.SandboxReasonTemplatePending, "the operator has not created it there yet"
	if c := meta.FindStatusCondition(t.Status.Conditions, openshellv1alpha1.ConditionReady); c != nil && c.Message != "" &&
		c.ObservedGeneration == t.Generation && c.Status != "True" {
		why = c.Reason + ": " + c.Message
		if c.Reason == openshellv1alpha1.TemplateReasonUnsupported {
			reason = openshellv1alpha1.SandboxReasonTemplateUnsupported
		}
	}
	return &refusal{phase: openshellv1alpha1.SandboxPhasePending, reason: reason,
		message: fmt.Sprintf("OpenShellSandboxTemplate %s (generation %d) is not at gateway %s yet: %s", t.Name, t.Generation, gateway, why)}
}

// templateGate holds a sandbox whose template is missing or not at its
// gateway yet.
func templateGate(_ *openshellv1alpha1.OpenShellSandbox, obs observed) *refusal { return obs.template }
