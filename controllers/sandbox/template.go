package sandbox

import (
	"context"
	"fmt"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	kerrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/gatewayapi"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/openshellv1"
	"github.com/openshell/openshell-operator/internal/sandboxcontrols"
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
	if e := syncedAt(t, sb.GatewayKey().String()); e != nil {
		a.GatewayName, a.GatewayID = e.Name, e.ID
	}
	sb.Status.Template = a
	sandboxcontrols.OverlayTemplate(raw, a)
	sandboxcontrols.OverlayTemplate(&sb.Spec, a)
	if a.GatewayName != "" {
		return nil, nil
	}
	return templatePending(t, sb.GatewayKey().String()), nil
}

// syncedAt is the template's current spec at gateway, nil until the
// template controller has created it there. Pure.
func syncedAt(t *openshellv1alpha1.OpenShellSandboxTemplate, gateway string) *openshellv1alpha1.SandboxTemplateGatewayStatus {
	name := sandboxspec.GatewayTemplateName(t)
	i := slices.IndexFunc(t.Status.Gateways, func(e openshellv1alpha1.SandboxTemplateGatewayStatus) bool {
		return e.Gateway == gateway && e.Name == name && e.ObservedGeneration == t.Generation
	})
	if i < 0 {
		return nil
	}
	return &t.Status.Gateways[i]
}

// templatePoll is how soon a sandbox whose gateway template is missing or
// replaced looks again (the template controller repairs the first within
// its drift period; the second needs a gateway admin).
const templatePoll = time.Minute

// templateReplaced says why the gateway's template a names is not the one
// the operator created, nil when it is: read just before the create, so
// that a template deleted and made again at the gateway directly (with
// another workload under the operator's name) is never used.
func templateReplaced(ctx context.Context, conn *gatewayapi.Client, workspace string, a *openshellv1alpha1.AppliedTemplate) (*refusal, error) {
	if a == nil {
		return nil, nil
	}
	got, err := conn.GetSandboxTemplate(ctx, &openshellv1.GetSandboxTemplateRequest{Name: a.GatewayName, WorkspaceScope: gatewayapi.Workspace(workspace)})
	switch {
	case grpcstatus.Code(err) == codes.NotFound:
		return &refusal{phase: openshellv1alpha1.SandboxPhasePending, reason: openshellv1alpha1.SandboxReasonTemplatePending,
			message: fmt.Sprintf("template %s is not at the gateway (deleted there directly?): waiting for the operator to create it again", a.GatewayName)}, nil
	case err != nil:
		return nil, fmt.Errorf("read template %s: %w", a.GatewayName, err)
	case a.GatewayID == "" || got.GetTemplate().GetMetadata().GetId() != a.GatewayID:
		return &refusal{phase: openshellv1alpha1.SandboxPhasePending, reason: openshellv1alpha1.SandboxReasonTemplateReplaced,
			message: fmt.Sprintf("template %s at the gateway is not the one the operator created (made again there directly): nothing is created from it; "+
				"a gateway admin must delete it, then the operator creates its own again", a.GatewayName)}, nil
	}
	return nil, nil
}

// templatePending says why a template is not at a gateway yet, from its
// Ready condition. Pure.
func templatePending(t *openshellv1alpha1.OpenShellSandboxTemplate, gateway string) *refusal {
	reason, why := openshellv1alpha1.SandboxReasonTemplatePending, "the operator has not created it there yet"
	if c := meta.FindStatusCondition(t.Status.Conditions, openshellv1alpha1.ConditionReady); c != nil && c.Message != "" &&
		c.ObservedGeneration == t.Generation && c.Status != "True" {
		why = c.Reason + ": " + c.Message
		switch c.Reason {
		case openshellv1alpha1.TemplateReasonUnsupported:
			reason = openshellv1alpha1.SandboxReasonTemplateUnsupported
		case openshellv1alpha1.TemplateReasonGatewayError:
			// Its message changes with every retry: not copied into
			// every waiting sandbox's status.
			why = c.Reason + " (see the template's status)"
		}
	}
	return &refusal{phase: openshellv1alpha1.SandboxPhasePending, reason: reason,
		message: fmt.Sprintf("OpenShellSandboxTemplate %s (generation %d) is not at gateway %s yet: %s", t.Name, t.Generation, gateway, why)}
}

// templateGate holds a sandbox whose template is missing or not at its
// gateway yet.
func templateGate(_ *openshellv1alpha1.OpenShellSandbox, obs observed) *refusal { return obs.template }
