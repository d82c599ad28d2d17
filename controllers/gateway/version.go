package gateway

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/gatewayline"
	"github.com/openshell/openshell-operator/internal/gwconn"
	"github.com/openshell/openshell-operator/internal/index"
	"github.com/openshell/openshell-operator/internal/operatorenv"
	"github.com/openshell/openshell-operator/internal/preflight"
	render "github.com/openshell/openshell-operator/internal/render/gateway"
	"github.com/openshell/openshell-operator/internal/status"
	"github.com/openshell/openshell-operator/internal/tenancy"
)

// versionPlan is which OpenShell release a Managed gateway's objects are
// rendered for, and what holds it back from the release its spec asks for.
type versionPlan struct {
	// Running is the release every gateway pod runs (status.version, else
	// read from the workload); empty before the first install.
	Running string
	// Target is the release the spec asks for (spec.managed.version, else
	// the operator's default).
	Target string
	// Render is the release to render; empty renders nothing.
	Render string
	// Blocked says why Render is not Target (nil when it is).
	Blocked *issue
	// Available is the operator's default release when upgradePolicy
	// Manual keeps an unpinned gateway on the release it runs (then Target
	// is that release).
	Available string
}

// Line is the release line of what is rendered.
func (p versionPlan) Line() gatewayline.Line {
	l, _ := gatewayline.Of(p.Render)
	return l
}

// Upgrading reports that the pods are moving from Running to Render.
func (p versionPlan) Upgrading() bool {
	return p.Running != "" && p.Render != "" && p.Running != p.Render
}

// planVersion decides the release to render. Pure: a gateway moves to the
// target unless that would move a 0.1 gateway back to 0.0 (its database has
// migrated), or put a 0.1 gateway where NetworkPolicy enforcement is not
// established (its sandbox fence would not hold); then it keeps running
// what it runs, and a gateway not installed yet is not installed.
//
// manual says the gateway follows no default by itself (unpinned, with
// upgradePolicy Manual): an installed one then targets what it runs, and
// the default it would move to is only reported as available.
func planVersion(running, target string, enforced metav1.ConditionStatus, manual bool) versionPlan {
	if manual && running != "" && running != target {
		return versionPlan{Running: running, Target: running, Render: running, Available: target}
	}
	p := versionPlan{Running: running, Target: target, Render: target}
	targetLine, err := gatewayline.Of(target)
	if err != nil {
		return p.hold(openshellv1alpha1.GatewayReasonVersionNotSupported, "spec.managed.version: "+err.Error())
	}
	runningLine, _ := gatewayline.Of(running)
	switch {
	case running != "" && runningLine == gatewayline.V01 && targetLine == gatewayline.Legacy:
		return p.hold(openshellv1alpha1.GatewayReasonDowngradeRefused, fmt.Sprintf(
			"the gateway runs %s and will not be moved back to %s: 0.1 migrated its database. Set spec.managed.version to a 0.1 release; to go back, see docs/upgrading-gateways.md (Rollback)",
			running, target))
	case targetLine == gatewayline.V01 && enforced != metav1.ConditionTrue && runningLine != gatewayline.V01:
		what := "installed"
		if running != "" {
			what = "upgraded from " + running
		}
		return p.hold(openshellv1alpha1.GatewayReasonNetworkPolicyNotEnforced, fmt.Sprintf(
			"OpenShell %s is not %s until NetworkPolicyEnforced is True: its sandboxes are fenced only by NetworkPolicies, which this cluster may not enforce (see the NetworkPolicyEnforced condition for what to do)",
			target, what))
	}
	return p
}

// hold keeps the gateway on what it runs (nothing, before its first
// install), for reason.
func (p versionPlan) hold(reason, msg string) versionPlan {
	p.Render = p.Running
	p.Blocked = &issue{Reason: reason, Message: msg}
	return p
}

// withImages holds the plan when the operator has no images for the
// release it would render: a release it does not ship needs
// spec.managed.images.
func (p versionPlan) withImages(gw *openshellv1alpha1.OpenShellGateway, releases operatorenv.Releases) versionPlan {
	if p.Blocked != nil || p.Render == "" {
		return p
	}
	missing := render.MissingImages(render.ResolveImages(gw, releases, p.Render), p.Line())
	if len(missing) == 0 {
		return p
	}
	if p.Available != "" {
		return p.hold(openshellv1alpha1.GatewayReasonVersionNotShipped, fmt.Sprintf(
			"the gateway runs OpenShell %s, for which this operator ships no images, and spec.managed.upgradePolicy Manual keeps it there: "+
				"its objects are left as they are until spec.managed.version names %s, this operator's default (or upgradePolicy is Automatic), "+
				"or spec.managed.images gives %s's images", p.Render, p.Available, p.Render))
	}
	if p.Render == gatewayline.DefaultManaged || p.Render == gatewayline.LegacyManaged {
		return p.hold(openshellv1alpha1.GatewayReasonRelatedImagesMissing, fmt.Sprintf(
			"the operator has no %s image for OpenShell %s: set its RELATED_IMAGE_* variables (docs/releasing.md), or spec.managed.images", strings.Join(missing, ", "), p.Render))
	}
	return p.hold(openshellv1alpha1.GatewayReasonVersionNotShipped, fmt.Sprintf(
		"the operator ships images for OpenShell %s and %s only: to run %s, set spec.managed.images (%s), digest-pinned and mirrored, which the platform must allow (%s=true)",
		gatewayline.DefaultManaged, gatewayline.LegacyManaged, p.Render, strings.Join(missing, ", "), operatorenv.EnvAllowImageOverrides))
}

// versionCondition says whether the gateway runs the release its spec asks
// for, is moving to it, or what holds it back.
func versionCondition(p versionPlan) (metav1.ConditionStatus, string, string) {
	switch {
	case p.Blocked != nil:
		return metav1.ConditionFalse, p.Blocked.Reason, p.Blocked.Message
	case p.Upgrading():
		return metav1.ConditionFalse, openshellv1alpha1.GatewayReasonUpgrading, fmt.Sprintf("moving from OpenShell %s to %s", p.Running, p.Render)
	case p.Running == "":
		return metav1.ConditionFalse, openshellv1alpha1.GatewayReasonInstalling, "installing OpenShell " + p.Render
	case p.Available != "":
		return metav1.ConditionTrue, openshellv1alpha1.GatewayReasonUpgradeAvailable, fmt.Sprintf(
			"runs OpenShell %s; %s, this operator's default, is available: set spec.managed.version to %s (or spec.managed.upgradePolicy to Automatic) "+
				"to move the gateway, which restarts its pods (docs/upgrading-gateways.md)", p.Render, p.Available, p.Available)
	}
	return metav1.ConditionTrue, openshellv1alpha1.GatewayReasonAtTarget, "runs OpenShell " + p.Render + ", the release its spec asks for"
}

// runningVersion is the release every pod of the gateway runs: its status,
// else the version its workload's template records (a template without one
// was rendered by an operator that installed only 0.0.111), else "" (not
// installed).
func (r *Reconciler) runningVersion(ctx context.Context, gw *openshellv1alpha1.OpenShellGateway) (string, error) {
	if gw.Status.Version != "" {
		return gw.Status.Version, nil
	}
	key := client.ObjectKey{Namespace: gw.Namespace, Name: render.NamesFor(gw).Fullname}
	var annotations map[string]string
	sts, dep := &appsv1.StatefulSet{}, &appsv1.Deployment{}
	switch err := r.Client.Get(ctx, key, sts); {
	case err == nil:
		annotations = sts.Spec.Template.Annotations
	case client.IgnoreNotFound(err) != nil:
		return "", fmt.Errorf("read the gateway StatefulSet: %w", err)
	default:
		switch err := r.Client.Get(ctx, key, dep); {
		case err == nil:
			annotations = dep.Spec.Template.Annotations
		case client.IgnoreNotFound(err) != nil:
			return "", fmt.Errorf("read the gateway Deployment: %w", err)
		default:
			return "", nil
		}
	}
	return render.TemplateVersion(annotations), nil
}

// planManaged observes what a Managed gateway runs and plans its release.
func (r *Reconciler) planManaged(ctx context.Context, gw *openshellv1alpha1.OpenShellGateway, pf preflight.Result) (versionPlan, error) {
	running, err := r.runningVersion(ctx, gw)
	if err != nil {
		return versionPlan{}, err
	}
	enforced, _, _ := networkPolicyEnforced(gw, pf)
	p := planVersion(running, render.DesiredVersion(gw), enforced, followsNoDefault(gw))
	if p.crossesToV01() && !pinned(gw) {
		missing, err := r.undeclaredProfiles(ctx, gw)
		if err != nil {
			return versionPlan{}, err
		}
		p = p.holdForProviders(missing)
	}
	return p.withImages(gw, r.Images), nil
}

// replaces is the release the pods run while they move to Render (empty
// when they run it, or before the first install).
func (p versionPlan) replaces() string {
	if p.Running == p.Render {
		return ""
	}
	return p.Running
}

// followsNoDefault: an unpinned gateway whose upgradePolicy is Manual (the
// default, also for objects stored before the field existed, and for a
// Managed gateway stored without spec.managed, which the CRD allows).
func followsNoDefault(gw *openshellv1alpha1.OpenShellGateway) bool {
	m := gw.Spec.Managed
	return m == nil || (m.Version == "" && m.UpgradePolicy != openshellv1alpha1.UpgradePolicyAutomatic)
}

// pinned: spec.managed.version names the release.
func pinned(gw *openshellv1alpha1.OpenShellGateway) bool {
	return gw.Spec.Managed != nil && gw.Spec.Managed.Version != ""
}

// crossesToV01 reports that the plan moves a running 0.0.x gateway to 0.1.
func (p versionPlan) crossesToV01() bool {
	running, _ := gatewayline.Of(p.Running)
	return p.Blocked == nil && running == gatewayline.Legacy && p.Line() == gatewayline.V01
}

// holdForProviders keeps a 0.0.x gateway there, when only the operator's
// default would move it, while sandboxes on it attach providers whose
// profile nobody declared: a 0.1 gateway starts with an empty
// provider-profile catalog and refuses to attach a provider whose profile
// it lacks, so the roll would break those sandboxes. Each entry of missing
// is "namespace/provider (type)". Once every type is declared (an
// OpenShellProviderProfile in the provider's namespace, or one this
// gateway names in spec.providerProfiles), the gateway rolls and the
// profiles are imported into it before its providers are given again. An
// admin who sets spec.managed.version moves it regardless: tenants who may
// create providers must not be able to hold the platform's upgrade.
func (p versionPlan) holdForProviders(missing []string) versionPlan {
	if len(missing) == 0 {
		return p
	}
	return p.hold(openshellv1alpha1.GatewayReasonProviderProfilesRequired, fmt.Sprintf(
		"moving to OpenShell %s needs a provider profile for every provider its sandboxes attach (0.1 has no built-in profiles), and %d have none, "+
			"for example %s: create an OpenShellProviderProfile named after the provider's type in its namespace, or list one of this namespace in "+
			"spec.providerProfiles (docs/upgrading-gateways.md); the gateway stays on %s until then, or until spec.managed.version names the "+
			"release (those providers then fail until their profiles are declared)", p.Target, len(missing), missing[0], p.Running))
}

// undeclaredProfiles names the providers attached by sandboxes on gw
// whose type has no declared profile for gw, as "namespace/name (type)". A
// type the gateway takes from the operator's shipped profiles is declared.
func (r *Reconciler) undeclaredProfiles(ctx context.Context, gw *openshellv1alpha1.OpenShellGateway) ([]string, error) {
	list := &openshellv1alpha1.OpenShellSandboxList{}
	if err := r.Client.List(ctx, list, client.MatchingFields{index.SandboxGateway: gwconn.Key(gw)}); err != nil {
		return nil, fmt.Errorf("list sandboxes of the gateway: %w", err)
	}
	var shipped []string
	if r.Catalog != nil {
		shipped = r.Catalog.Wanted(gw)
	}
	var out []string
	for _, sb := range list.Items {
		if !sb.DeletionTimestamp.IsZero() {
			continue
		}
		// Only namespaces the gateway admits count: anyone else's sandbox
		// never reaches it.
		ns, _, err := tenancy.ReadNamespace(ctx, r.Client, sb.Namespace)
		if err != nil {
			return nil, err
		}
		if msg, err := r.Platform.Access(ctx, r.Client, gw, ns); err != nil {
			return nil, err
		} else if msg != "" {
			continue
		}
		for _, name := range sb.Spec.Providers {
			prov := &openshellv1alpha1.OpenShellProvider{}
			if err := r.Client.Get(ctx, client.ObjectKey{Namespace: sb.Namespace, Name: name}, prov); apierrors.IsNotFound(err) {
				continue // the sandbox waits for it on any release
			} else if err != nil {
				return nil, err
			}
			if slices.Contains(shipped, prov.Spec.Type) {
				continue // the operator imports its shipped profile (controllers/profilecatalog)
			}
			profileNS := prov.Namespace
			if slices.Contains(gw.Spec.ProviderProfiles, prov.Spec.Type) {
				profileNS = gw.Namespace
			}
			prof := &openshellv1alpha1.OpenShellProviderProfile{}
			err := r.Client.Get(ctx, client.ObjectKey{Namespace: profileNS, Name: prov.Spec.Type}, prof)
			if apierrors.IsNotFound(err) || (err == nil && !prof.DeletionTimestamp.IsZero()) {
				if e := fmt.Sprintf("%s/%s (%s)", prov.Namespace, prov.Name, prov.Spec.Type); !slices.Contains(out, e) {
					out = append(out, e)
				}
			} else if err != nil {
				return nil, err
			}
		}
	}
	sort.Strings(out)
	return out, nil
}

// reportVersion sets VersionCurrent from the plan.
func reportVersion(gw *openshellv1alpha1.OpenShellGateway, p versionPlan) {
	st, reason, msg := versionCondition(p)
	status.SetCondition(gw, openshellv1alpha1.GatewayConditionVersionCurrent, st, reason, msg)
}

// notInstalled is the health of a gateway with nothing to install yet:
// what it waits for is a prerequisite.
func notInstalled(p versionPlan) health {
	b := *p.Blocked
	b.Phase = openshellv1alpha1.GatewayPhasePending
	return health{degraded: []issue{b}}
}

// followVersion records, once every pod is ready, which pods serve
// (status.instance) and, when they all run the rendered release, that
// release (then the operator's clients speak its line:
// gwconn.Resolver.Line); an upgrade under way is reported as progress.
func followVersion(gw *openshellv1alpha1.OpenShellGateway, p versionPlan, w workload) health {
	var h health
	if w.Ready {
		gw.Status.Instance = w.Instance
	}
	if w.Ready && w.Version == p.Render && gw.Status.Version != p.Render {
		gw.Status.Version = p.Render
		p.Running = p.Render
		reportVersion(gw, p)
	}
	if p.Upgrading() {
		h.waiting = append(h.waiting, issue{Reason: openshellv1alpha1.GatewayReasonUpgrading,
			Message: fmt.Sprintf("moving from OpenShell %s to %s: %s", p.Running, p.Render, w.Message)})
	}
	return h
}

// gatewaysHeldForProfiles lists the gateways whose move to 0.1 waits for
// provider profiles to be declared.
func (r *Reconciler) gatewaysHeldForProfiles(ctx context.Context, _ client.Object) []reconcile.Request {
	list := &openshellv1alpha1.OpenShellGatewayList{}
	if err := r.Client.List(ctx, list); err != nil {
		return nil
	}
	var out []reconcile.Request
	for i := range list.Items {
		c := meta.FindStatusCondition(list.Items[i].Status.Conditions, openshellv1alpha1.GatewayConditionVersionCurrent)
		if c != nil && c.Reason == openshellv1alpha1.GatewayReasonProviderProfilesRequired {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
	}
	return out
}
