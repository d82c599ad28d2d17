// Package providerprofile reconciles OpenShellProviderProfile objects: it
// imports each profile into the catalog of the OpenShell 0.1 gateways that
// need it — the workspace catalog of its namespace where that namespace's
// providers of its type are used, the platform catalog of the gateways in
// its namespace that name it in spec.providerProfiles — updates it there
// when it changes, gives it again to a gateway whose pods were replaced,
// and deletes it there when it goes. A profile of the same id at the
// gateway that this object did not import is never overwritten or deleted.
//
// 0.1 gateways have no built-in profiles (a provider of a type whose
// profile is missing cannot be attached); 0.0.x gateways build theirs in
// and are left alone. The provider controller waits for the import before
// it pushes a provider (ProviderReasonProfilePending).
package providerprofile

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/controllers/internal/driftcheck"
	"github.com/openshell/openshell-operator/controllers/internal/enqueue"
	"github.com/openshell/openshell-operator/controllers/internal/traced"
	"github.com/openshell/openshell-operator/internal/gatewayapi"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/datamodelv1"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/openshellv1"
	"github.com/openshell/openshell-operator/internal/gatewayline"
	"github.com/openshell/openshell-operator/internal/gwconn"
	"github.com/openshell/openshell-operator/internal/index"
	"github.com/openshell/openshell-operator/internal/sandboxspec"
	"github.com/openshell/openshell-operator/internal/status"
	"github.com/openshell/openshell-operator/internal/tenancy"
)

// Finalizer deletes the profile at its gateways first.
const Finalizer = "openshell.ai/profile-cleanup"

// +kubebuilder:rbac:groups=openshell.ai,resources=openshellproviderprofiles,verbs=list;watch;patch,namespace=system
// +kubebuilder:rbac:groups=openshell.ai,resources=openshellproviderprofiles/status,verbs=patch,namespace=system
// +kubebuilder:rbac:groups=openshell.ai,resources=openshellproviderprofiles/finalizers,verbs=update,namespace=system

// Reconciler reconciles OpenShellProviderProfile.
type Reconciler struct {
	Client   client.Client
	Gateways *gwconn.Resolver
	Recorder events.EventRecorder
	// Platform decides which gateways a namespace may use.
	Platform tenancy.Platform
	// DriftPeriod is how often, at most, an imported profile is read back
	// from each catalog and compared (0: driftcheck.DefaultPeriod).
	DriftPeriod time.Duration

	// compared remembers when each profile was last compared with, or
	// imported into, each catalog (driftKey → time.Time): only this
	// reconciler reads and writes it.
	compared driftcheck.Schedule
	// written holds off a reconcile whose cached copy predates this
	// reconciler's last write.
	written status.OwnWrites
}

// retry is how soon a failed import or deletion is tried again.
const retry = 5 * time.Second

// target is one gateway catalog the profile belongs in.
type target struct {
	gw    *openshellv1alpha1.OpenShellGateway
	scope openshellv1alpha1.ProfileScope
}

// needs says what the profile's gateways need: the catalogs it belongs
// in, the gateways whose line could not be learnt (left as they are), and
// the gateways whose platform profile of this id shadows it.
type needs struct {
	targets  []target
	unknown  []string // gateway keys
	shadowed []string // gateway keys
}

func (n needs) has(gateway string, scope openshellv1alpha1.ProfileScope) bool {
	return slices.Contains(n.unknown, gateway) || slices.ContainsFunc(n.targets, func(t target) bool {
		return gwconn.Key(t.gw) == gateway && t.scope == scope
	})
}

// Reconcile imports the profile where it is needed.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	p := &openshellv1alpha1.OpenShellProviderProfile{}
	if err := r.Client.Get(ctx, req.NamespacedName, p); err != nil {
		if apierrors.IsNotFound(err) {
			r.written.Forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	ctx, behind, done := r.written.Begin(ctx, req.NamespacedName, p.ResourceVersion)
	if behind {
		// The cache predates this reconciler's last write: it would push
		// again what it pushed (status.OwnWrites). The write's arrival
		// re-queues it.
		return ctrl.Result{RequeueAfter: status.StaleRetry}, nil
	}
	defer func() { done(p.ResourceVersion) }()
	if !p.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, p)
	}
	orig := p.DeepCopy()
	ns, nsUID, err := tenancy.ReadNamespace(ctx, r.Client, p.Namespace)
	if err != nil {
		return ctrl.Result{}, err
	}
	n, err := r.need(ctx, p, ns)
	if err != nil {
		return ctrl.Result{}, err
	}
	if len(n.targets) > 0 {
		if _, err := status.AddFinalizer(ctx, r.Client, orig, p, Finalizer); err != nil {
			return ctrl.Result{}, err
		}
	}
	pending, err := r.withdrawStale(ctx, p, n, nsUID)
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := r.recordTargets(ctx, orig, p, n.targets, nsUID); err != nil {
		return ctrl.Result{}, err
	}
	res, acted := r.importAll(ctx, p, nsUID, n)
	if pending && res.RequeueAfter == 0 {
		res.RequeueAfter = retry
	}
	if acted {
		p.Status.ObservedGeneration = p.Generation
	}
	return res, status.Patch(ctx, r.Client, orig, p)
}

// need finds the gateway catalogs the profile belongs in: the platform
// catalogs that name it, and its namespace's workspace catalogs where its
// type is used (see the two candidate lists). Only 0.1 gateways import
// profiles, and one whose line cannot be learnt keeps what it has.
func (r *Reconciler) need(ctx context.Context, p *openshellv1alpha1.OpenShellProviderProfile, ns tenancy.Namespace) (needs, error) {
	var n needs
	platform, err := r.platformCandidates(ctx, p)
	if err != nil {
		return n, err
	}
	workspace, shadowed, err := r.workspaceCandidates(ctx, p, ns)
	if err != nil {
		return n, err
	}
	n.shadowed = shadowed
	for _, t := range append(platform, workspace...) {
		line, err := r.Gateways.Line(ctx, t.gw)
		switch {
		case err != nil:
			n.unknown = append(n.unknown, gwconn.Key(t.gw))
		case gatewayline.ImportsProfiles(line):
			n.targets = append(n.targets, t)
		}
	}
	sort.Slice(n.targets, func(i, j int) bool {
		return gwconn.Key(n.targets[i].gw)+string(n.targets[i].scope) < gwconn.Key(n.targets[j].gw)+string(n.targets[j].scope)
	})
	return n, nil
}

// platformCandidates are the platform catalogs of the served gateways in
// the profile's namespace that name it in spec.providerProfiles.
func (r *Reconciler) platformCandidates(ctx context.Context, p *openshellv1alpha1.OpenShellProviderProfile) ([]target, error) {
	gws := &openshellv1alpha1.OpenShellGatewayList{}
	if err := r.Client.List(ctx, gws, client.InNamespace(p.Namespace)); err != nil {
		return nil, fmt.Errorf("list gateways: %w", err)
	}
	var out []target
	for i := range gws.Items {
		gw := &gws.Items[i]
		if !gw.DeletionTimestamp.IsZero() || !slices.Contains(gw.Spec.ProviderProfiles, p.Name) {
			continue
		}
		// A gateway the operator does not serve (one a tenant created in its
		// own namespace, say) is never called: it could point anywhere.
		if msg, err := r.Platform.Served(ctx, r.Client, gw); err != nil {
			return nil, err
		} else if msg != "" {
			continue
		}
		out = append(out, target{gw: gw, scope: openshellv1alpha1.ProfileScopePlatform})
	}
	return out, nil
}

// workspaceCandidates are the namespace's workspace catalogs at each
// gateway (that the namespace may use) where a sandbox attaches a provider
// of the profile's type, except at gateways whose platform defines the id
// (shadowed, by gateway key).
func (r *Reconciler) workspaceCandidates(ctx context.Context, p *openshellv1alpha1.OpenShellProviderProfile, ns tenancy.Namespace) (
	out []target, shadowed []string, err error) {
	keys, err := r.gatewaysUsingType(ctx, p.Namespace, p.Name)
	if err != nil {
		return nil, nil, err
	}
	for _, key := range keys {
		gw := &openshellv1alpha1.OpenShellGateway{}
		if err := r.Client.Get(ctx, key, gw); apierrors.IsNotFound(err) {
			continue
		} else if err != nil {
			return nil, nil, err
		}
		if !gw.DeletionTimestamp.IsZero() {
			continue
		}
		// A gateway the namespace may not use gets nothing of it (its
		// providers and sandboxes report why).
		if msg, err := r.Platform.Access(ctx, r.Client, gw, ns); err != nil {
			return nil, nil, err
		} else if msg != "" {
			continue
		}
		if slices.Contains(gw.Spec.ProviderProfiles, p.Name) {
			shadowed = append(shadowed, gwconn.Key(gw))
			continue
		}
		out = append(out, target{gw: gw, scope: openshellv1alpha1.ProfileScopeWorkspace})
	}
	return out, shadowed, nil
}

// gatewaysUsingType lists the gateways of the sandboxes in namespace that
// attach a provider of type id.
func (r *Reconciler) gatewaysUsingType(ctx context.Context, namespace, id string) ([]types.NamespacedName, error) {
	provs := &openshellv1alpha1.OpenShellProviderList{}
	if err := r.Client.List(ctx, provs, client.InNamespace(namespace), client.MatchingFields{index.ProviderType: id}); err != nil {
		return nil, fmt.Errorf("list providers of type %s: %w", id, err)
	}
	var keys []types.NamespacedName
	for _, prov := range provs.Items {
		sbs := &openshellv1alpha1.OpenShellSandboxList{}
		if err := r.Client.List(ctx, sbs, client.InNamespace(namespace), client.MatchingFields{index.SandboxProviders: prov.Name}); err != nil {
			return nil, fmt.Errorf("list sandboxes using provider %s: %w", prov.Name, err)
		}
		for i := range sbs.Items {
			if k := sbs.Items[i].GatewayKey(); !slices.Contains(keys, k) {
				keys = append(keys, k)
			}
		}
	}
	return keys, nil
}

// recordTargets persists, before the first import to a catalog, that the
// profile may be there (an entry of generation 0): a deletion that follows
// withdraws it there, after checking the gateway's profile is this one's.
func (r *Reconciler) recordTargets(ctx context.Context, orig, p *openshellv1alpha1.OpenShellProviderProfile, targets []target, nsUID types.UID) error {
	return status.Record(ctx, r.Client, orig, p, func(x *openshellv1alpha1.OpenShellProviderProfile) {
		for _, t := range targets {
			if entryIndex(x, gwconn.Key(t.gw), t.scope) < 0 {
				e := openshellv1alpha1.ProviderProfileGatewayStatus{Gateway: gwconn.Key(t.gw), Scope: t.scope}
				if t.scope == openshellv1alpha1.ProfileScopeWorkspace {
					e.Workspace = sandboxspec.WorkspaceName(x.Namespace, nsUID)
				}
				x.Status.Gateways = append(x.Status.Gateways, e)
			}
		}
	})
}

func entryIndex(p *openshellv1alpha1.OpenShellProviderProfile, gateway string, scope openshellv1alpha1.ProfileScope) int {
	return slices.IndexFunc(p.Status.Gateways, func(e openshellv1alpha1.ProviderProfileGatewayStatus) bool {
		return e.Gateway == gateway && e.Scope == scope
	})
}

// importAll brings every catalog up to date and sets Ready; it reports
// whether this generation was fully acted on (what failed needs a human,
// not a retry).
func (r *Reconciler) importAll(ctx context.Context, p *openshellv1alpha1.OpenShellProviderProfile, nsUID types.UID, n needs) (ctrl.Result, bool) {
	reason, failed := r.importEach(ctx, p, nsUID, n.targets)
	switch {
	case reason != "":
		status.SetCondition(p, openshellv1alpha1.ConditionReady, metav1.ConditionFalse, reason, strings.Join(failed, "; "))
		return ctrl.Result{}, true
	case len(failed) > 0:
		status.SetCondition(p, openshellv1alpha1.ConditionReady, metav1.ConditionFalse, openshellv1alpha1.ProfileReasonGatewayError, strings.Join(failed, "; "))
		return ctrl.Result{RequeueAfter: retry}, false
	case len(n.shadowed) > 0:
		status.SetCondition(p, openshellv1alpha1.ConditionReady, metav1.ConditionFalse, openshellv1alpha1.ProfileReasonShadowed, fmt.Sprintf(
			"gateway %s defines a platform profile %s (spec.providerProfiles), which this namespace's providers use there instead of this one",
			strings.Join(n.shadowed, ", "), p.Name))
		return ctrl.Result{}, true
	case len(n.unknown) > 0:
		status.SetCondition(p, openshellv1alpha1.ConditionReady, metav1.ConditionFalse, openshellv1alpha1.ProfileReasonGatewayError,
			"cannot learn the release of gateway "+strings.Join(n.unknown, ", "))
		return ctrl.Result{RequeueAfter: retry}, false
	case len(n.targets) == 0:
		status.SetCondition(p, openshellv1alpha1.ConditionReady, metav1.ConditionTrue, openshellv1alpha1.ProfileReasonUnused,
			"no OpenShell 0.1 gateway needs this profile yet")
		return ctrl.Result{}, true
	}
	status.SetCondition(p, openshellv1alpha1.ConditionReady, metav1.ConditionTrue, openshellv1alpha1.ProfileReasonImported,
		fmt.Sprintf("imported into %d gateway catalog(s)", len(n.targets)))
	// The next comparison with what the catalogs hold.
	return ctrl.Result{RequeueAfter: driftcheck.Period(r.DriftPeriod)}, true
}

// importEach imports the profile into each target catalog that lacks
// its generation, or that changed since (compare), and records each
// import in status; it returns a conflict's or rejection's reason and
// what failed.
func (r *Reconciler) importEach(ctx context.Context, p *openshellv1alpha1.OpenShellProviderProfile, nsUID types.UID, targets []target) (
	reason string, failed []string) {
	for _, t := range targets {
		i := entryIndex(p, gwconn.Key(t.gw), t.scope)
		if e := &p.Status.Gateways[i]; e.ObservedGeneration == p.Generation && e.GatewayInstance == t.gw.Status.Instance {
			again, err := r.compare(ctx, t.gw, p, e)
			if err != nil {
				failed = append(failed, fmt.Sprintf("%s: %s", gwconn.Key(t.gw), grpcstatus.Convert(err).Message()))
			}
			if !again {
				continue
			}
		}
		ws, rv, err := r.importTo(ctx, t, p, nsUID)
		var rej *rejectedError
		var conflict *gwconn.ConflictError
		switch {
		case errors.As(err, &rej):
			reason = openshellv1alpha1.ProfileReasonRejected
			failed = append(failed, rej.Error())
		case errors.As(err, &conflict):
			reason = openshellv1alpha1.ProfileReasonConflict
			failed = append(failed, conflict.Error())
		case err != nil:
			failed = append(failed, fmt.Sprintf("%s: %s", gwconn.Key(t.gw), grpcstatus.Convert(err).Message()))
		default:
			p.Status.Gateways[i].ObservedGeneration, p.Status.Gateways[i].GatewayInstance, p.Status.Gateways[i].Workspace =
				p.Generation, t.gw.Status.Instance, ws
			p.Status.Gateways[i].GatewayResourceVersion = rv
			r.compared.Done(driftKey(p, gwconn.Key(t.gw), t.scope))
			r.Recorder.Eventf(p, nil, corev1.EventTypeNormal, "ProfileImported", "Import",
				"profile %s imported into the %s catalog of gateway %s", p.Name, strings.ToLower(string(t.scope)), gwconn.Key(t.gw))
		}
	}
	return reason, failed
}

// rejectedError carries the diagnostics of a gateway that refused the profile.
type rejectedError struct {
	gateway string
	diags   []*openshellv1.ProviderProfileDiagnostic
}

func (e *rejectedError) Error() string {
	msgs := make([]string, 0, len(e.diags))
	for _, d := range e.diags {
		m := d.GetMessage()
		if d.GetField() != "" {
			m = d.GetField() + ": " + m
		}
		msgs = append(msgs, m)
	}
	if len(msgs) == 0 {
		msgs = append(msgs, "no diagnostics given")
	}
	return fmt.Sprintf("gateway %s refused the profile: %s", e.gateway, strings.Join(msgs, "; "))
}

// errorsIn keeps the diagnostics of error severity.
func errorsIn(diags []*openshellv1.ProviderProfileDiagnostic) []*openshellv1.ProviderProfileDiagnostic {
	var out []*openshellv1.ProviderProfileDiagnostic
	for _, d := range diags {
		if strings.EqualFold(d.GetSeverity(), "error") {
			out = append(out, d)
		}
	}
	return out
}

// selector is the workspace_scope of a catalog: none for the platform's.
func selector(ws string) *datamodelv1.WorkspaceSelector {
	if ws == "" {
		return nil
	}
	return gatewayapi.Workspace(ws)
}

// importTo puts the profile into one catalog: imported if the gateway has
// no profile of the id there, updated (compare-and-swap on the gateway's
// resource version) if it has this object's, refused if another's. It
// returns the workspace of a workspace catalog and the profile's resource
// version there.
func (r *Reconciler) importTo(ctx context.Context, t target, p *openshellv1alpha1.OpenShellProviderProfile, nsUID types.UID) (string, uint64, error) {
	key := gwconn.Key(t.gw)
	conn, err := r.Gateways.Connect(ctx, t.gw)
	if err != nil {
		return "", 0, err
	}
	ws := ""
	if t.scope == openshellv1alpha1.ProfileScopeWorkspace {
		if ws, err = r.Gateways.EnsureWorkspace(ctx, conn, key, p.Namespace, nsUID); err != nil {
			return "", 0, err
		}
	}
	owner := ownerLabels(p, nsUID)
	item := &openshellv1.ProviderProfileImportItem{Profile: sandboxspec.Profile(p, owner), Source: "kubernetes:" + p.Namespace + "/" + p.Name}
	got, err := conn.GetProviderProfile(ctx, &openshellv1.GetProviderProfileRequest{Id: p.Name, WorkspaceScope: selector(ws)})
	switch grpcstatus.Code(err) {
	case codes.NotFound:
		resp, err := conn.ImportProviderProfiles(ctx, &openshellv1.ImportProviderProfilesRequest{Profiles: []*openshellv1.ProviderProfileImportItem{item},
			WorkspaceScope: selector(ws)})
		if grpcstatus.Code(err) == codes.NotFound && ws != "" {
			r.Gateways.ForgetWorkspace(key, ws) // a new database: the retry creates the workspace again
		}
		if err != nil {
			return ws, 0, err
		}
		if !resp.GetImported() || len(errorsIn(resp.GetDiagnostics())) > 0 {
			return ws, 0, &rejectedError{gateway: key, diags: resp.GetDiagnostics()}
		}
		for _, got := range resp.GetProfiles() {
			if got.GetId() == p.Name {
				return ws, got.GetResourceVersion(), nil
			}
		}
		return ws, 0, nil
	case codes.OK:
	default:
		return ws, 0, err
	}
	if !sandboxspec.OwnedBy(got.GetProfile().GetAnnotations(), owner) {
		return ws, 0, &gwconn.ConflictError{Kind: "provider profile", Name: p.Name, Workspace: catalogName(ws), Gateway: key}
	}
	resp, err := conn.UpdateProviderProfiles(ctx, &openshellv1.UpdateProviderProfilesRequest{Profile: item, Id: p.Name,
		ExpectedResourceVersion: got.GetProfile().GetResourceVersion(), WorkspaceScope: selector(ws)})
	if err != nil {
		return ws, 0, err
	}
	if errs := errorsIn(resp.GetDiagnostics()); len(errs) > 0 {
		return ws, 0, &rejectedError{gateway: key, diags: errs}
	}
	return ws, resp.GetProfile().GetResourceVersion(), nil
}

// catalogName names a catalog in messages.
func catalogName(ws string) string {
	if ws == "" {
		return "the platform catalog"
	}
	return ws
}

// ownerLabels mark a gateway profile as imported for this object in this
// namespace incarnation (carried in the profile's annotations).
func ownerLabels(p *openshellv1alpha1.OpenShellProviderProfile, nsUID types.UID) map[string]string {
	l := sandboxspec.WorkspaceLabels(p.Namespace, nsUID)
	l[sandboxspec.LabelOwnerUID] = string(p.UID)
	return l
}

func (r *Reconciler) reconcileDelete(ctx context.Context, p *openshellv1alpha1.OpenShellProviderProfile) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(p, Finalizer) {
		return ctrl.Result{}, nil
	}
	orig := p.DeepCopy()
	_, nsUID, err := tenancy.ReadNamespace(ctx, r.Client, p.Namespace)
	if err != nil {
		return ctrl.Result{}, err
	}
	left, err := r.withdraw(ctx, p, p.Status.Gateways, nsUID)
	if err != nil {
		return ctrl.Result{}, err
	}
	p.Status.Gateways = left
	if len(left) > 0 {
		if err := status.Patch(ctx, r.Client, orig, p); err != nil {
			return ctrl.Result{}, err
		}
		return ctrl.Result{RequeueAfter: retry}, nil
	}
	return ctrl.Result{}, status.RemoveFinalizer(ctx, r.Client, p, Finalizer)
}

// withdrawStale deletes the profile from the catalogs that no longer need
// it, and reports whether some are left for a retry.
func (r *Reconciler) withdrawStale(ctx context.Context, p *openshellv1alpha1.OpenShellProviderProfile, n needs, nsUID types.UID) (bool, error) {
	var keep, stale []openshellv1alpha1.ProviderProfileGatewayStatus
	for _, e := range p.Status.Gateways {
		if n.has(e.Gateway, e.Scope) {
			keep = append(keep, e)
		} else {
			stale = append(stale, e)
		}
	}
	if len(stale) == 0 {
		return false, nil
	}
	left, err := r.withdraw(ctx, p, stale, nsUID)
	if err != nil {
		return false, err
	}
	p.Status.Gateways = append(keep, left...)
	return len(left) > 0, nil
}

// withdraw deletes the profile from each entry's catalog and returns the
// entries it could not delete yet (a gateway that is gone holds nothing).
func (r *Reconciler) withdraw(ctx context.Context, p *openshellv1alpha1.OpenShellProviderProfile,
	entries []openshellv1alpha1.ProviderProfileGatewayStatus, nsUID types.UID) ([]openshellv1alpha1.ProviderProfileGatewayStatus, error) {
	var left []openshellv1alpha1.ProviderProfileGatewayStatus
	for _, e := range entries {
		gwNS, name, _ := strings.Cut(e.Gateway, "/")
		gw := &openshellv1alpha1.OpenShellGateway{}
		if err := r.Client.Get(ctx, client.ObjectKey{Namespace: gwNS, Name: name}, gw); apierrors.IsNotFound(err) {
			continue
		} else if err != nil {
			return nil, err
		}
		// A gateway no longer served (its namespace unlisted, or gone and
		// re-created by someone else with a gateway of the same name) is
		// never dialled: it could point anywhere.
		if msg, err := r.Platform.Served(ctx, r.Client, gw); err != nil {
			return nil, err
		} else if msg != "" {
			continue
		}
		conn, err := r.Gateways.Connect(ctx, gw)
		if err == nil {
			r.compared.Forget(driftKey(p, e.Gateway, e.Scope))
			err = deleteAt(ctx, conn, p, e, ownerLabels(p, nsUID))
		}
		if err != nil {
			left = append(left, e)
			status.SetCondition(p, openshellv1alpha1.ConditionReady, metav1.ConditionFalse, openshellv1alpha1.ProfileReasonGatewayError,
				"waiting to delete the profile at "+e.Gateway+": "+grpcstatus.Convert(err).Message())
		}
	}
	return left, nil
}

// deleteAt deletes the profile of one entry at its gateway, only if the
// gateway's profile of that id is this object's: another owner's profile
// (or one that replaced ours by hand) is never touched.
func deleteAt(ctx context.Context, conn *gatewayapi.Client, p *openshellv1alpha1.OpenShellProviderProfile,
	e openshellv1alpha1.ProviderProfileGatewayStatus, owner map[string]string) error {
	if !gatewayline.ImportsProfiles(conn.Line) {
		return nil // a gateway moved back to 0.0.x has no catalog
	}
	sel := selector(e.Workspace)
	got, err := conn.GetProviderProfile(ctx, &openshellv1.GetProviderProfileRequest{Id: p.Name, WorkspaceScope: sel})
	if grpcstatus.Code(err) == codes.NotFound {
		return nil
	}
	if err != nil {
		return err
	}
	if !sandboxspec.OwnedBy(got.GetProfile().GetAnnotations(), owner) {
		return nil
	}
	_, err = conn.DeleteProviderProfile(ctx, &openshellv1.DeleteProviderProfileRequest{Id: p.Name, WorkspaceScope: sel, AllowMissing: true})
	return err
}

// SetupWithManager registers the reconciler: providers and sandboxes
// re-queue the profiles of their types; gateways (tenancy, profile list,
// release, replaced pods) and namespace labels re-queue theirs.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&openshellv1alpha1.OpenShellProviderProfile{}).
		Named("openshellproviderprofile").
		WithOptions(controller.Options{RateLimiter: enqueue.Backoff(time.Second, 5*time.Minute)}).
		Watches(&openshellv1alpha1.OpenShellProvider{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: o.GetNamespace(), Name: o.(*openshellv1alpha1.OpenShellProvider).Spec.Type}}}
		})).
		Watches(&openshellv1alpha1.OpenShellSandbox{}, handler.EnqueueRequestsFromMapFunc(r.profilesOfSandbox),
			builder.WithPredicates(index.SpecOrDeletionChanged)).
		Watches(&openshellv1alpha1.OpenShellGateway{}, handler.EnqueueRequestsFromMapFunc(r.profilesOfGateway), builder.WithPredicates(gatewayChanged)).
		WatchesMetadata(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			return enqueue.Requests(ctx, r.Client, &openshellv1alpha1.OpenShellProviderProfileList{}, client.InNamespace(o.GetName()))
		}), builder.WithPredicates(predicate.LabelChangedPredicate{})).
		Complete(traced.Reconciler("openshellproviderprofile", status.RetryStale(r)))
}

// profilesOfSandbox names the profiles of the providers a sandbox attaches.
func (r *Reconciler) profilesOfSandbox(ctx context.Context, o client.Object) []reconcile.Request {
	sb := o.(*openshellv1alpha1.OpenShellSandbox)
	var reqs []reconcile.Request
	for _, name := range sb.Spec.Providers {
		prov := &openshellv1alpha1.OpenShellProvider{}
		if err := r.Client.Get(ctx, client.ObjectKey{Namespace: sb.Namespace, Name: name}, prov); err != nil {
			continue
		}
		req := reconcile.Request{NamespacedName: client.ObjectKey{Namespace: sb.Namespace, Name: prov.Spec.Type}}
		if !slices.Contains(reqs, req) {
			reqs = append(reqs, req)
		}
	}
	return reqs
}

// gatewayChanged passes a gateway whose spec (its profile list, tenancy)
// or deletion changed, or whose release or serving pods did (a gateway now
// on 0.1, or one that may have lost its catalog); not label or annotation
// edits, which a tenant may repeat at will on a gateway of its own.
var gatewayChanged = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	o, ok1 := e.ObjectOld.(*openshellv1alpha1.OpenShellGateway)
	n, ok2 := e.ObjectNew.(*openshellv1alpha1.OpenShellGateway)
	return ok1 && ok2 && (o.Generation != n.Generation || !o.DeletionTimestamp.Equal(n.DeletionTimestamp) ||
		o.Status.Instance != n.Status.Instance || o.Status.Version != n.Status.Version)
}}

// profilesOfGateway names the profiles a gateway's change may concern: the
// ones it lists for its platform catalog, and those of the provider types
// its sandboxes attach (in their namespaces) — never every profile.
func (r *Reconciler) profilesOfGateway(ctx context.Context, o client.Object) []reconcile.Request {
	gw := o.(*openshellv1alpha1.OpenShellGateway)
	var reqs []reconcile.Request
	add := func(ns, id string) {
		if req := (reconcile.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: id}}); !slices.Contains(reqs, req) {
			reqs = append(reqs, req)
		}
	}
	for _, id := range gw.Spec.ProviderProfiles {
		add(gw.Namespace, id)
	}
	sbs := &openshellv1alpha1.OpenShellSandboxList{}
	if err := r.Client.List(ctx, sbs, client.MatchingFields{index.SandboxGateway: gwconn.Key(gw)}); err != nil {
		return reqs
	}
	for i := range sbs.Items {
		for _, req := range r.profilesOfSandbox(ctx, &sbs.Items[i]) {
			add(req.Namespace, req.Name)
		}
	}
	return reqs
}
