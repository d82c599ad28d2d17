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
	"github.com/openshell/openshell-operator/internal/status"
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
	if r.recorded(ctx, paired, outcome, release) {
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

// recorded says whether the paired namespace, read from the API server,
// already holds outcome (and, to release, no longer the pending label):
// the cached copy the caller compared may predate this reconciler's last
// record, which is then neither written nor announced again. Read only
// when the cache says a record is due.
func (r *Reconciler) recorded(ctx context.Context, paired pairedRef, outcome string, release bool) bool {
	live := &corev1.Namespace{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Name: paired.name}, live); err != nil || live.UID != paired.uid {
		return false
	}
	_, pending := live.Labels[render.LabelEgressPending]
	return live.Annotations[render.AnnotationTenantEgress] == outcome && (!release || !pending)
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
	if err := r.writeEgress(ctx, paired, anps); err != nil {
		return notWritten(status.Message(err)), skipped, err
	}
	out := render.TenantEgressApplied
	for _, s := range skipped {
		out += fmt.Sprintf("; %s: %s", cmp.Or(s.Policy, "all policies"), s.Reason)
	}
	return out, skipped, nil
}

// dropEgress deletes the paired namespace's AdminNetworkPolicies, if any.
func (r *Reconciler) dropEgress(ctx context.Context, paired pairedRef, outcome string) (string, []tenantegress.Skipped, error) {
	switch err := r.deleteEgress(ctx, paired); {
	case err == nil, apierrors.IsForbidden(err), meta.IsNoMatchError(err):
		// Never written by this operator, or the grant went: they are
		// collected with their namespace.
		return outcome, nil, nil
	default:
		return paired.outcome, nil, err
	}
}

// writeEgress puts the paired namespace's AdminNetworkPolicies in place
// (want: the default first, then the per-sandbox groups) so that no
// supervisor ever has more than its policies allow, whatever write fails:
// a group only ever loses supervisors to the default (which passes no more
// than any group) before any group gains one. In order: the default;
// groups no longer wanted deleted (a group's name digests its policies'
// content, so a changed policy makes new groups); the others shrunk to the
// sandboxes they keep; then every group written as wanted.
func (r *Reconciler) writeEgress(ctx context.Context, paired pairedRef, want []*anpv1alpha1.AdminNetworkPolicy) error {
	live, err := r.liveEgress(ctx, paired)
	if err != nil {
		return err
	}
	if err := apply.Apply(ctx, r.Client, r.APIReader, want[0]); err != nil {
		return err
	}
	wanted := map[string]*anpv1alpha1.AdminNetworkPolicy{}
	for _, anp := range want {
		wanted[anp.Name] = anp
	}
	for _, cur := range live {
		w := wanted[cur.Name]
		if w == nil {
			if err := r.deleteANP(ctx, cur); err != nil {
				return err
			}
			continue
		}
		switch shrunk, drop := shrink(cur, w); {
		case drop:
			if err := r.deleteANP(ctx, cur); err != nil {
				return err
			}
		case shrunk != nil:
			if err := apply.Apply(ctx, r.Client, nil, shrunk); err != nil {
				return err
			}
		}
	}
	for _, anp := range want[1:] {
		if err := apply.Apply(ctx, r.Client, r.APIReader, anp); err != nil {
			return err
		}
	}
	return nil
}

// shrink is want with only the sandboxes cur also selects, when cur
// selects some that want does not (nil: nothing to take away first; drop:
// none would be left). Pure.
func shrink(cur, want *anpv1alpha1.AdminNetworkPolicy) (shrunk *anpv1alpha1.AdminNetworkPolicy, drop bool) {
	ids := func(a *anpv1alpha1.AdminNetworkPolicy) []string {
		if a.Spec.Subject.Pods == nil {
			return nil
		}
		for _, e := range a.Spec.Subject.Pods.PodSelector.MatchExpressions {
			if e.Key == tenantegress.LabelBoundaryPair && e.Operator == metav1.LabelSelectorOpIn {
				return e.Values
			}
		}
		return nil
	}
	have, keep := ids(cur), ids(want)
	if have == nil || keep == nil {
		return nil, false // the default: written first, as wanted
	}
	var both []string
	for _, id := range have {
		if slices.Contains(keep, id) {
			both = append(both, id)
		}
	}
	switch {
	case len(both) == len(have):
		return nil, false
	case len(both) == 0:
		return nil, true
	}
	shrunk = want.DeepCopy()
	for i, e := range shrunk.Spec.Subject.Pods.PodSelector.MatchExpressions {
		if e.Key == tenantegress.LabelBoundaryPair {
			shrunk.Spec.Subject.Pods.PodSelector.MatchExpressions[i].Values = both
		}
	}
	return shrunk, false
}

// liveEgress are the paired namespace's AdminNetworkPolicies as they are.
func (r *Reconciler) liveEgress(ctx context.Context, paired pairedRef) ([]*anpv1alpha1.AdminNetworkPolicy, error) {
	list := &anpv1alpha1.AdminNetworkPolicyList{}
	if err := r.APIReader.List(ctx, list, client.MatchingLabels{render.LabelComponent: "tenant-egress", render.LabelManagedBy: render.ManagedByValue}); err != nil {
		return nil, fmt.Errorf("list AdminNetworkPolicies: %w", err)
	}
	base := render.TenantEgressPolicyName(paired.name)
	var out []*anpv1alpha1.AdminNetworkPolicy
	for i := range list.Items {
		if anp := &list.Items[i]; anp.Name == base || strings.HasPrefix(anp.Name, base+"-") {
			out = append(out, anp)
		}
	}
	// The default (base) first, then its groups.
	slices.SortFunc(out, func(a, b *anpv1alpha1.AdminNetworkPolicy) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// deleteEgress deletes all the paired namespace's AdminNetworkPolicies.
func (r *Reconciler) deleteEgress(ctx context.Context, paired pairedRef) error {
	live, err := r.liveEgress(ctx, paired)
	if err != nil {
		return err
	}
	// Groups first: the default stays while any group does.
	slices.Reverse(live)
	for _, anp := range live {
		if err := r.deleteANP(ctx, anp); err != nil {
			return err
		}
	}
	return nil
}

func (r *Reconciler) deleteANP(ctx context.Context, anp *anpv1alpha1.AdminNetworkPolicy) error {
	if err := r.Client.Delete(ctx, anp, client.Preconditions{UID: &anp.UID}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete %s: %w", anp.Name, err)
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
