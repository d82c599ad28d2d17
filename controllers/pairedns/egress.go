package pairedns

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	anpv1alpha1 "sigs.k8s.io/network-policy-api/apis/v1alpha1"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/apply"
	render "github.com/openshell/openshell-operator/internal/render/gateway"
	"github.com/openshell/openshell-operator/internal/render/tenantegress"
	"github.com/openshell/openshell-operator/internal/sandboxspec"
)

// maxTenantPolicies bounds the NetworkPolicies of one tenant namespace the
// operator reads (uncached: a tenant may create any number, and the
// operator's memory must not grow with them). Beyond it nothing is
// written, and the AdminNetworkPolicy in place stays.
const maxTenantPolicies = 100

// maxOutcome bounds the outcome recorded on the paired namespace.
const maxOutcome = 1024

// pairedRef is the paired namespace the egress step works on.
type pairedRef struct {
	name string
	uid  types.UID
	// outcome is its AnnotationTenantEgress as last recorded.
	outcome string
	// pending: it carries LabelEgressPending.
	pending bool
	// tenantUID is its tenant namespace's UID (the tenant labels).
	tenantUID types.UID
}

// egress keeps the paired namespace's AdminNetworkPolicy in line with the
// tenant's egress NetworkPolicies (spec.managed.sandboxes.tenantEgress)
// and records the outcome on the paired namespace, where the gateway
// reads it (TenantEgressEnforced). The outcome is written, and an event
// emitted, only when it changes: a steady state writes nothing.
func (r *Reconciler) egress(ctx context.Context, gw *openshellv1alpha1.OpenShellGateway, tenant string, paired pairedRef) error {
	outcome, skipped, err := r.egressOutcome(ctx, gw, tenant, paired)
	if len(outcome) > maxOutcome {
		outcome = strings.ToValidUTF8(outcome[:maxOutcome], "")
	}
	// In place (or none needed): the namespace may join the allowlist.
	release := paired.pending && (gw.Spec.Managed.Sandboxes.TenantEgress == nil ||
		strings.HasPrefix(outcome, render.TenantEgressApplied) || outcome == render.TenantEgressNone)
	if outcome == paired.outcome && !release {
		return err
	}
	value := []byte("null")
	if outcome != "" {
		value, _ = json.Marshal(outcome) // a string always marshals
	}
	labels := ""
	if release {
		labels = fmt.Sprintf(`,"labels":{%q:null}`, render.LabelEgressPending)
	}
	patch := fmt.Sprintf(`{"metadata":{"uid":%q,"annotations":{%q:%s}%s}}`, paired.uid, render.AnnotationTenantEgress, value, labels)
	if perr := r.Client.Patch(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: paired.name}}, client.RawPatch(types.MergePatchType, []byte(patch))); perr != nil {
		return fmt.Errorf("record the tenant egress of %s: %w", paired.name, perr)
	}
	if r.Recorder != nil && outcome != paired.outcome {
		typ := corev1.EventTypeNormal
		if strings.HasPrefix(outcome, render.TenantEgressNotWritten) {
			typ = corev1.EventTypeWarning
		}
		r.Recorder.Eventf(gw, nil, typ, openshellv1alpha1.GatewayConditionTenantEgressEnforced, "Reconcile", "tenant namespace %s: %s", tenant, outcome)
		for _, s := range skipped {
			if s.Policy == "" {
				continue
			}
			np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: s.Policy, Namespace: tenant}}
			r.Recorder.Eventf(np, nil, corev1.EventTypeWarning, "NotAppliedToAgents", "Reconcile",
				"not applied to the agents of the OpenShell sandboxes of this namespace: %s", s.Reason)
		}
	}
	return err
}

// egressOutcome writes or deletes the AdminNetworkPolicy and says what
// holds. An error is returned where trying again may help (the platform
// admin applies config/tenant-egress, the API comes).
func (r *Reconciler) egressOutcome(ctx context.Context, gw *openshellv1alpha1.OpenShellGateway, tenant string, paired pairedRef) (string, []tenantegress.Skipped, error) {
	if gw.Spec.Managed.Sandboxes.TenantEgress == nil {
		if paired.outcome == "" {
			return "", nil, nil // never written: nothing to take back
		}
		return r.dropEgress(ctx, paired, "")
	}
	if r.Preflight == nil {
		return paired.outcome, nil, nil
	}
	pf, known := r.Preflight.Get()
	if !known {
		return paired.outcome, nil, nil
	}
	if !pf.AdminNetworkPolicy {
		return notWritten("the cluster does not serve policy.networking.k8s.io/v1alpha1 AdminNetworkPolicies"), nil, nil
	}
	list := &networkingv1.NetworkPolicyList{}
	if err := r.APIReader.List(ctx, list, client.InNamespace(tenant), client.Limit(maxTenantPolicies)); err != nil {
		return paired.outcome, nil, fmt.Errorf("list the NetworkPolicies of %s: %w", tenant, err)
	}
	if list.Continue != "" {
		return notWritten(fmt.Sprintf("namespace %s has more than %d NetworkPolicies", tenant, maxTenantPolicies)), nil, nil
	}
	sandboxes, err := r.egressSandboxes(ctx, gw, tenant, paired.tenantUID)
	if err != nil {
		return paired.outcome, nil, err
	}
	anps, skipped := render.TenantEgressPolicies(gw, tenant, paired.name, paired.uid, list.Items, sandboxes)
	if anps == nil {
		return r.dropEgress(ctx, paired, render.TenantEgressNone)
	}
	keep := map[string]bool{}
	for _, anp := range anps {
		if err := apply.Apply(ctx, r.Client, r.APIReader, anp); err != nil {
			return notWritten(sanitize(err)), skipped, err
		}
		keep[anp.Name] = true
	}
	if err := r.deleteEgress(ctx, paired, keep); err != nil {
		return notWritten(sanitize(err)), skipped, err
	}
	out := render.TenantEgressApplied
	for _, s := range skipped {
		out += fmt.Sprintf("; %s: %s", cmp.Or(s.Policy, "all policies"), s.Reason)
	}
	return out, skipped, nil
}

// dropEgress deletes the paired namespace's AdminNetworkPolicies, if any.
func (r *Reconciler) dropEgress(ctx context.Context, paired pairedRef, outcome string) (string, []tenantegress.Skipped, error) {
	switch err := r.deleteEgress(ctx, paired, nil); {
	case err == nil, apierrors.IsForbidden(err), meta.IsNoMatchError(err):
		// Never written by this operator, or the grant went: they are
		// collected with their namespace.
		return outcome, nil, nil
	default:
		return paired.outcome, nil, err
	}
}

// deleteEgress deletes the paired namespace's AdminNetworkPolicies that
// keep does not name (its groups whose sandboxes went).
func (r *Reconciler) deleteEgress(ctx context.Context, paired pairedRef, keep map[string]bool) error {
	list := &anpv1alpha1.AdminNetworkPolicyList{}
	if err := r.APIReader.List(ctx, list, client.MatchingLabels{render.LabelComponent: "tenant-egress", render.LabelManagedBy: render.ManagedByValue}); err != nil {
		return fmt.Errorf("list AdminNetworkPolicies: %w", err)
	}
	base := render.TenantEgressPolicyName(paired.name)
	for i := range list.Items {
		anp := &list.Items[i]
		if keep[anp.Name] || (anp.Name != base && !strings.HasPrefix(anp.Name, base+"-")) {
			continue
		}
		if err := r.Client.Delete(ctx, anp, client.Preconditions{UID: &anp.UID}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete %s: %w", anp.Name, err)
		}
	}
	return nil
}

// egressSandboxes are the tenant's sandboxes on gw as its NetworkPolicies
// select them (deleting ones included: their pods still run).
func (r *Reconciler) egressSandboxes(ctx context.Context, gw *openshellv1alpha1.OpenShellGateway, tenant string, uid types.UID) ([]tenantegress.Sandbox, error) {
	list := &openshellv1alpha1.OpenShellSandboxList{}
	if err := r.Client.List(ctx, list, client.InNamespace(tenant)); err != nil {
		return nil, fmt.Errorf("list the sandboxes of %s: %w", tenant, err)
	}
	var out []tenantegress.Sandbox
	for i := range list.Items {
		sb := &list.Items[i]
		if sb.GatewayKey() == client.ObjectKeyFromObject(gw) {
			out = append(out, tenantegress.Sandbox{ID: sb.Status.SandboxID, Labels: sandboxspec.PodLabels(sb, uid)})
		}
	}
	return out, nil
}

func notWritten(why string) string { return render.TenantEgressNotWritten + ": " + why }

// sanitize drops what changes on every attempt (resource versions), so
// that the recorded outcome only changes when the cause does.
func sanitize(err error) string {
	msg := err.Error()
	if i := strings.Index(msg, ": the object has been modified"); i >= 0 {
		msg = msg[:i] + ": conflict, retrying"
	}
	return msg
}

// keptEgress runs the egress step for the paired namespace kept (not
// released) for a gateway that is no longer usable but still exists.
func (r *Reconciler) keptEgress(ctx context.Context, obs observed, release []*metav1.PartialObjectMetadata) error {
	for _, ns := range obs.paired {
		if slices.Contains(release, ns) || !ns.DeletionTimestamp.IsZero() {
			continue
		}
		gw := obs.gateways[gatewayOf(ns)]
		if gw == nil || !render.OperatorMode(gw) {
			continue
		}
		return r.egress(ctx, gw, obs.tenant, pairedRef{name: ns.Name, uid: ns.UID, tenantUID: obs.uid,
			outcome: ns.Annotations[render.AnnotationTenantEgress], pending: ns.Labels[render.LabelEgressPending] != ""})
	}
	return nil
}

// egressTenants re-queues the tenant namespaces with sandboxes on a
// gateway with tenant egress.
func (r *Reconciler) egressTenants(ctx context.Context, _ client.Object) []reconcile.Request {
	gws := &openshellv1alpha1.OpenShellGatewayList{}
	if err := r.Client.List(ctx, gws); err != nil {
		return nil
	}
	var out []reconcile.Request
	for i := range gws.Items {
		if gw := &gws.Items[i]; gw.Spec.Managed != nil && gw.Spec.Managed.Sandboxes.TenantEgress != nil {
			out = append(out, r.tenantsOf(ctx, gw)...)
		}
	}
	return out
}
