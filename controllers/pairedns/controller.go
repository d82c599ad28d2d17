// Package pairedns prepares the paired namespaces of workspace mode
// Operator: for each tenant namespace whose sandboxes run on a gateway in
// that mode, the namespace the gateway's driver runs them in
// (internal/render/gateway WorkspaceObjects: the namespace, the sandbox
// ServiceAccount and the gateway's grants there), and deletes it once no
// sandbox of the tenant uses that gateway any more. One reconcile per
// tenant namespace: it alone decides which paired namespace exists for it.
//
// A namespace of the paired name that the operator did not create for
// that tenant and gateway (a project a self-provisioner requested under a
// name they guessed, or another gateway's) is never adopted: the sandbox
// controller reports it on the sandboxes (WorkspaceNamespaceConflict), and
// the gateway's allowlist never names it.
package pairedns

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/controllers/internal/enqueue"
	"github.com/openshell/openshell-operator/controllers/internal/traced"
	"github.com/openshell/openshell-operator/internal/apply"
	"github.com/openshell/openshell-operator/internal/index"
	"github.com/openshell/openshell-operator/internal/preflight"
	render "github.com/openshell/openshell-operator/internal/render/gateway"
	"github.com/openshell/openshell-operator/internal/sandboxspec"
	"github.com/openshell/openshell-operator/internal/tenancy"
)

// Workspace mode Operator needs the AllNamespaces install mode (the
// sandbox controller refuses it otherwise), where OLM grants the
// namespaced rules below cluster-wide; in the other modes they stay in the
// target namespaces, where no paired namespace is ever made. Only the
// namespaces themselves, cluster-scoped, need a cluster rule. RoleBindings
// bind only what the operator may bind (openshell-gateway-sandboxes and
// -runtime, controllers/gateway).
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;create;patch;delete
// +kubebuilder:rbac:groups="",resources=serviceaccounts,verbs=get;create;patch,namespace=system
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=rolebindings,verbs=get;create;patch,namespace=system
// +kubebuilder:rbac:groups="",resources=resourcequotas;limitranges,verbs=get;list;watch;create;patch;delete,namespace=system
// +kubebuilder:rbac:groups="",resources=secrets,verbs=patch,namespace=system

// Reconciler reconciles a tenant namespace's paired namespace.
type Reconciler struct {
	Client client.Client
	// APIReader reads the objects inside paired namespaces, which the
	// manager's cache does not hold (it holds the operator's children in
	// platform namespaces only).
	APIReader client.Reader
	Platform  tenancy.Platform
	// SecretMetadata is the operator's metadata-only Secret cache: a pull
	// Secret that changes is copied again (nil: not watched).
	SecretMetadata cache.Cache
	// AllNamespaces says the operator watches every namespace: paired
	// namespaces are made only then (the sandbox controller says why not).
	AllNamespaces bool
	// ReleaseGrace is how long a released paired namespace stays, off the
	// allowlist, before it is deleted (0: DefaultReleaseGrace).
	ReleaseGrace time.Duration
	// Preflight says whether AdminNetworkPolicies are served (tenant
	// egress); Recorder reports its outcome's changes.
	Preflight *preflight.Store
	Recorder  events.EventRecorder
	// now is the clock (nil: time.Now).
	now func() time.Time
}

// DefaultReleaseGrace covers the kubelet's update of a mounted ConfigMap
// (its sync period and cache TTL, a minute each by default) and the
// driver's reload.
const DefaultReleaseGrace = 3 * time.Minute

// Reconcile makes the tenant namespace req.Name's paired namespace match
// the gateways its sandboxes use: observe, decide (pure), act.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	obs, err := r.observe(ctx, req.Name)
	if err != nil {
		return ctrl.Result{}, err
	}
	ensure, release := decide(obs)
	var errs []error
	if ensure != nil {
		errs = append(errs, r.ensure(ctx, ensure, obs.tenant, obs.uid))
	} else {
		// A paired namespace kept for a gateway no longer usable (access
		// revoked, gateway going) still runs sandboxes: its tenant's
		// egress still follows the tenant's policies.
		errs = append(errs, r.keptEgress(ctx, obs, release))
	}
	var res ctrl.Result
	for _, ns := range release {
		after, err := r.release(ctx, ns)
		errs = append(errs, err)
		res.RequeueAfter = enqueue.Sooner(res.RequeueAfter, after)
	}
	return res, errors.Join(errs...)
}

// observed is what decide needs of one tenant namespace.
type observed struct {
	tenant string
	// uid is the tenant namespace's incarnation; "" when it is gone.
	uid types.UID
	// inUse are the gateways its OpenShellSandboxes name (any of them, a
	// deleting one included: its gateway sandbox may still run); starting
	// those that a sandbox not refused outright names.
	inUse, starting []types.NamespacedName
	// usable are the gateways a paired namespace may be made for: in
	// workspace mode Operator, not deleting, admitting the tenant, with an
	// operator that watches every namespace.
	usable map[types.NamespacedName]*openshellv1alpha1.OpenShellGateway
	// gateways are all the gateways in use that exist, usable or not.
	gateways map[types.NamespacedName]*openshellv1alpha1.OpenShellGateway
	// paired are the namespaces the operator made for this tenant name.
	paired []*metav1.PartialObjectMetadata
}

func (r *Reconciler) observe(ctx context.Context, tenant string) (observed, error) {
	obs := observed{tenant: tenant, usable: map[types.NamespacedName]*openshellv1alpha1.OpenShellGateway{},
		gateways: map[types.NamespacedName]*openshellv1alpha1.OpenShellGateway{}}
	ns, uid, err := tenancy.ReadNamespace(ctx, r.Client, tenant)
	if err != nil && !apierrors.IsNotFound(err) {
		return obs, err
	}
	obs.uid = uid
	sandboxes := &openshellv1alpha1.OpenShellSandboxList{}
	if err := r.Client.List(ctx, sandboxes, client.InNamespace(tenant)); err != nil {
		return obs, fmt.Errorf("list the sandboxes of %s: %w", tenant, err)
	}
	for i := range sandboxes.Items {
		sb := &sandboxes.Items[i]
		k := sb.GatewayKey()
		if !slices.Contains(obs.inUse, k) {
			obs.inUse = append(obs.inUse, k)
		}
		if sb.Status.Phase != openshellv1alpha1.SandboxPhaseRejected && sb.DeletionTimestamp.IsZero() && !slices.Contains(obs.starting, k) {
			obs.starting = append(obs.starting, k)
		}
	}
	slices.SortFunc(obs.starting, compareKeys)
	for _, k := range obs.inUse {
		gw := &openshellv1alpha1.OpenShellGateway{}
		if err := r.Client.Get(ctx, k, gw); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return obs, err
		}
		obs.gateways[k] = gw
		if !slices.Contains(obs.starting, k) || !render.OperatorMode(gw) || !gw.DeletionTimestamp.IsZero() || !r.AllNamespaces || uid == "" {
			continue
		}
		gwNS, _, err := tenancy.ReadNamespace(ctx, r.Client, gw.Namespace)
		if apierrors.IsNotFound(err) {
			continue
		} else if err != nil {
			return obs, err
		}
		if r.Platform.GatewayAccess(gw, gwNS, ns) == "" {
			obs.usable[k] = gw
		}
	}
	obs.paired, err = r.paired(ctx, tenant)
	return obs, err
}

// decide chooses the gateway whose paired namespace to ensure (nil: none)
// and the paired namespaces to delete. A paired namespace stays while any
// sandbox of its tenant incarnation names its gateway, whatever else
// changed (access revoked, gateway deleting): its sandboxes still run in
// it, and only the gateway may end them. One is made for the first usable
// gateway a starting sandbox names, unless the tenant's incarnation has
// one already: then only that gateway's is ensured (a tenant incarnation
// has one paired name; the other gateway's sandboxes wait with
// WorkspaceNamespaceConflict). Pure.
func decide(obs observed) (ensure *openshellv1alpha1.OpenShellGateway, release []*metav1.PartialObjectMetadata) {
	var kept *types.NamespacedName
	for _, ns := range obs.paired {
		k, uid := gatewayOf(ns), types.UID(ns.Labels[sandboxspec.LabelNamespaceUID])
		if obs.uid != "" && uid == obs.uid && slices.Contains(obs.inUse, k) {
			kept = &k
			continue
		}
		release = append(release, ns)
	}
	if obs.uid == "" {
		return nil, release
	}
	if kept != nil {
		return obs.usable[*kept], release
	}
	for _, k := range obs.starting {
		if gw := obs.usable[k]; gw != nil {
			return gw, release
		}
	}
	return nil, release
}

// gatewayOf is the gateway a paired namespace was made for, by its
// labels (paired only returns namespaces whose labels name one).
func gatewayOf(ns *metav1.PartialObjectMetadata) types.NamespacedName {
	return types.NamespacedName{Namespace: ns.Labels[render.LabelGatewayNamespace], Name: ns.Annotations[render.AnnotationGatewayName]}
}

func compareKeys(a, b types.NamespacedName) int {
	return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
}

// paired are the namespaces the operator made for this tenant name (any
// incarnation, any gateway): its labels, and the name they imply.
func (r *Reconciler) paired(ctx context.Context, tenant string) ([]*metav1.PartialObjectMetadata, error) {
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("NamespaceList"))
	if err := r.Client.List(ctx, list, client.MatchingLabels{render.LabelManagedBy: render.ManagedByValue,
		render.LabelComponent: render.ComponentWorkspace, sandboxspec.LabelNamespace: tenant}); err != nil {
		return nil, fmt.Errorf("list the paired namespaces of %s: %w", tenant, err)
	}
	var out []*metav1.PartialObjectMetadata
	for i := range list.Items {
		ns := &list.Items[i]
		if ns.Name == render.PairedNamespace(tenant, types.UID(ns.Labels[sandboxspec.LabelNamespaceUID])) && ns.Annotations[render.AnnotationGatewayName] != "" {
			out = append(out, ns)
		}
	}
	return out, nil
}

// ensure creates the paired namespace if there is none, then keeps its
// ServiceAccount, grants and copied controls, unless a namespace of its
// name exists that the operator did not make for this tenant and gateway.
// The namespace is created, never applied: an apply (create or update)
// racing a namespace someone else just created under that name would
// label it as the operator's and so adopt it.
func (r *Reconciler) ensure(ctx context.Context, gw *openshellv1alpha1.OpenShellGateway, tenant string, uid types.UID) error {
	objs := render.WorkspaceObjects(gw, tenant, uid)
	name := objs[0].GetName()
	cur := &metav1.PartialObjectMetadata{}
	cur.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
	ref := pairedRef{name: name, tenantUID: uid}
	switch err := r.APIReader.Get(ctx, client.ObjectKey{Name: name}, cur); {
	case apierrors.IsNotFound(err):
		if err := r.Client.Create(ctx, objs[0]); err != nil {
			// AlreadyExists: someone was quicker; the next reconcile
			// looks at whose it is.
			return fmt.Errorf("create paired namespace %s: %w", name, err)
		}
		ref.uid, ref.pending = objs[0].GetUID(), objs[0].GetLabels()[render.LabelEgressPending] != ""
	case err != nil:
		return fmt.Errorf("read namespace %s: %w", name, err)
	default:
		if _, u, ok := render.PairedTenant(gw, cur); !ok || u != uid || !cur.DeletionTimestamp.IsZero() {
			return nil // not ours, or going: WorkspaceNamespaceConflict or pending
		}
		ref.uid, ref.outcome, ref.pending = cur.UID, cur.Annotations[render.AnnotationTenantEgress], cur.Labels[render.LabelEgressPending] != ""
		if render.Draining(cur) {
			// A sandbox came back while it was being released: keep it.
			patch := fmt.Sprintf(`{"metadata":{"uid":%q,"labels":{%q:null}}}`, cur.UID, render.LabelDraining)
			obj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
			if err := r.Client.Patch(ctx, obj, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
				return fmt.Errorf("keep paired namespace %s: %w", name, err)
			}
		}
	}
	for _, o := range objs[1:] {
		if err := apply.Apply(ctx, r.Client, r.APIReader, o); err != nil {
			return fmt.Errorf("paired namespace %s: %w", name, err)
		}
	}
	return errors.Join(r.mirror(ctx, gw, tenant, uid), r.egress(ctx, gw, tenant, ref))
}

// mirror copies the tenant namespace's ResourceQuotas and LimitRanges into
// its paired namespace and deletes copies whose original went.
func (r *Reconciler) mirror(ctx context.Context, gw *openshellv1alpha1.OpenShellGateway, tenant string, uid types.UID) error {
	quotas, limits := &corev1.ResourceQuotaList{}, &corev1.LimitRangeList{}
	for _, l := range []client.ObjectList{quotas, limits} {
		if err := r.Client.List(ctx, l, client.InNamespace(tenant)); err != nil {
			return fmt.Errorf("list the controls of %s: %w", tenant, err)
		}
	}
	pull, err := r.pullSecret(ctx, gw, tenant, uid)
	if err != nil {
		return err
	}
	want := append(render.MirroredControls(gw, tenant, uid, quotas.Items, limits.Items), pull)
	for _, o := range want {
		if err := apply.Apply(ctx, r.Client, r.APIReader, o); err != nil {
			return fmt.Errorf("mirror %s into %s: %w", o.GetName(), o.GetNamespace(), err)
		}
	}
	paired := render.PairedNamespace(tenant, uid)
	var stale []client.Object
	haveQ, haveL := &corev1.ResourceQuotaList{}, &corev1.LimitRangeList{}
	for _, l := range []client.ObjectList{haveQ, haveL} {
		if err := r.Client.List(ctx, l, client.InNamespace(paired)); err != nil {
			return fmt.Errorf("list the controls of %s: %w", paired, err)
		}
	}
	for i := range haveQ.Items {
		stale = append(stale, &haveQ.Items[i])
	}
	for i := range haveL.Items {
		stale = append(stale, &haveL.Items[i])
	}
	for _, o := range stale {
		if !render.IsMirror(o) || slices.ContainsFunc(want, func(w client.Object) bool {
			return w.GetName() == o.GetName() && fmt.Sprintf("%T", w) == fmt.Sprintf("%T", o)
		}) {
			continue
		}
		if err := r.Client.Delete(ctx, o); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete %s/%s: %w", paired, o.GetName(), err)
		}
	}
	return nil
}

// release takes a paired namespace no sandbox of its tenant needs off its
// gateway's allowlist (LabelDraining), then, once the mounted allowlist
// has surely followed (ReleaseGrace), deletes it: its gateway sandboxes
// went with the OpenShellSandboxes (their finalizer waits for the
// gateway). Deleting at once would free the name while a gateway's file
// still names it, for a self-provisioner to create a namespace of that
// name and receive what the gateway would put there. The precondition on
// its UID never deletes a namespace of that name created since. It
// returns when to look again.
func (r *Reconciler) release(ctx context.Context, ns *metav1.PartialObjectMetadata) (time.Duration, error) {
	if !ns.DeletionTimestamp.IsZero() {
		return 0, nil
	}
	now := time.Now()
	if r.now != nil {
		now = r.now()
	}
	grace := cmp.Or(r.ReleaseGrace, DefaultReleaseGrace)
	since, err := strconv.ParseInt(ns.Labels[render.LabelDraining], 10, 64)
	if err != nil {
		// The UID in the patch fails it on a namespace of that name made since.
		patch := fmt.Sprintf(`{"metadata":{"uid":%q,"labels":{%q:"%d"}}}`, ns.UID, render.LabelDraining, now.Unix())
		obj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns.Name}}
		if err := r.Client.Patch(ctx, obj, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
			return 0, client.IgnoreNotFound(err)
		}
		return grace, nil
	}
	if left := time.Unix(since, 0).Add(grace).Sub(now); left > 0 {
		return left, nil
	}
	obj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns.Name}}
	err = r.Client.Delete(ctx, obj, client.Preconditions{UID: &ns.UID})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return 0, fmt.Errorf("delete paired namespace %s: %w", ns.Name, err)
	}
	return 0, nil
}

// pullSecret is the paired namespace's pull Secret: the gateway's pull
// Secrets, then those the tenant namespace's image policies name, read
// uncached one at a time (only those named; a Secret missing or of another
// type is left out, and the image policy's PullSecretsResolved says so).
func (r *Reconciler) pullSecret(ctx context.Context, gw *openshellv1alpha1.OpenShellGateway, tenant string, uid types.UID) (*corev1.Secret, error) {
	read := func(ns string, names []string) ([]corev1.Secret, error) {
		var out []corev1.Secret
		for _, name := range names {
			s := &corev1.Secret{}
			switch err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, s); {
			case apierrors.IsNotFound(err):
			case err != nil:
				return nil, fmt.Errorf("read pull Secret %s/%s: %w", ns, name, err)
			default:
				out = append(out, *s)
			}
		}
		return out, nil
	}
	platform, err := read(gw.Namespace, gw.Spec.Managed.Sandboxes.ImagePullSecrets)
	if err != nil {
		return nil, err
	}
	names, err := index.PullSecrets(ctx, r.Client, tenant)
	if err != nil {
		return nil, err
	}
	tenants, err := read(tenant, names)
	if err != nil {
		return nil, err
	}
	s, _ := render.PullSecret(gw, tenant, uid, platform, tenants)
	return s, nil
}

// SetupWithManager watches sandboxes (a new gateway in use, or the last
// one gone), gateways in Operator mode, and the paired namespaces
// themselves (deleted or changed by hand: put back).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	ofSandbox := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: o.GetNamespace()}}}
	})
	// A paired namespace re-queues its tenant; any other namespace itself
	// (its labels decide gateway access; its deletion ends its sandboxes).
	ofNamespace := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		if render.IsPairedNamespace(o.GetLabels()) {
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: o.GetLabels()[sandboxspec.LabelNamespace]}}}
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: o.GetName()}}}
	})
	// A tenant's control changed: its own namespace is the request; a copy
	// changed or deleted in the paired namespace: its tenant's.
	ofControl := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		if render.IsMirror(o) {
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: o.GetLabels()[sandboxspec.LabelNamespace]}}}
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: o.GetNamespace()}}}
	})
	c, err := ctrl.NewControllerManagedBy(mgr).
		Named("pairednamespace").
		WatchesMetadata(&corev1.Namespace{}, ofNamespace, builder.WithPredicates(predicate.Or[client.Object](predicate.LabelChangedPredicate{}, index.DeletionStarted))).
		Watches(&corev1.ResourceQuota{}, ofControl, builder.WithPredicates(quotaSpecChanged)).
		Watches(&corev1.LimitRange{}, ofControl).
		// Its ID and pod labels decide which tenant egress applies to it.
		Watches(&openshellv1alpha1.OpenShellSandbox{}, ofSandbox, builder.WithPredicates(predicate.Or[client.Object](startsOrEnds, idOrSpecChanged))).
		Watches(&openshellv1alpha1.OpenShellGateway{}, handler.EnqueueRequestsFromMapFunc(r.tenantsOf), builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		// Its image policies name the tenant's pull Secrets.
		Watches(&openshellv1alpha1.OpenShellImagePolicy{}, ofControl).
		Build(traced.Reconciler("pairednamespaces", r))
	if err != nil {
		return err
	}
	if r.Preflight != nil {
		// The AdminNetworkPolicy API appears (or the first probe lands):
		// tenant egress is put in place where it waited for it.
		if err := c.Watch(source.Channel(r.Preflight.Subscribe(), handler.EnqueueRequestsFromMapFunc(r.egressTenants))); err != nil {
			return err
		}
	}
	if r.SecretMetadata == nil {
		return nil
	}
	// A tenant's NetworkPolicies decide its tenant egress: watched by
	// metadata only (a spec change bumps the generation), and read
	// uncached when needed, so that tenants cannot grow the cache.
	policies := &metav1.PartialObjectMetadata{}
	policies.SetGroupVersionKind(networkingv1.SchemeGroupVersion.WithKind("NetworkPolicy"))
	if err := c.Watch(source.Kind(r.SecretMetadata, policies, handler.TypedEnqueueRequestsFromMapFunc(func(_ context.Context, o *metav1.PartialObjectMetadata) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: o.Namespace}}}
	}), predicate.TypedGenerationChangedPredicate[*metav1.PartialObjectMetadata]{})); err != nil {
		return err
	}
	// A pull Secret changed: the tenant's own, or a gateway's.
	return c.Watch(source.Kind(r.SecretMetadata, index.SecretMetadata(), handler.TypedEnqueueRequestsFromMapFunc(r.pullSecretUsers)))
}

// pullSecretUsers re-queues the tenant namespaces whose paired pull Secret
// holds Secret o: o's own namespace when its image policies name it, and
// the tenants of the Operator mode gateways of o's namespace that name it.
func (r *Reconciler) pullSecretUsers(ctx context.Context, o *metav1.PartialObjectMetadata) []reconcile.Request {
	var out []reconcile.Request
	if names, err := index.PullSecrets(ctx, r.Client, o.Namespace); err == nil && slices.Contains(names, o.Name) {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: o.Namespace}})
	}
	gws := &openshellv1alpha1.OpenShellGatewayList{}
	if err := r.Client.List(ctx, gws, client.InNamespace(o.Namespace)); err != nil {
		return out
	}
	for i := range gws.Items {
		if gw := &gws.Items[i]; render.OperatorMode(gw) && slices.Contains(gw.Spec.Managed.Sandboxes.ImagePullSecrets, o.Name) {
			out = append(out, r.tenantsOf(ctx, gw)...)
		}
	}
	return out
}

// startsOrEnds passes a sandbox's creation and deletion, and its move into
// or out of phase Rejected (a refused sandbox does not make a namespace).
var startsOrEnds = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	rejected := func(o client.Object) bool {
		sb, ok := o.(*openshellv1alpha1.OpenShellSandbox)
		return ok && sb.Status.Phase == openshellv1alpha1.SandboxPhaseRejected
	}
	return rejected(e.ObjectOld) != rejected(e.ObjectNew) || e.ObjectOld.GetDeletionTimestamp().IsZero() != e.ObjectNew.GetDeletionTimestamp().IsZero()
}}

// idOrSpecChanged passes a sandbox's gateway ID being assigned or
// changed, and its spec (its pod labels) changing.
var idOrSpecChanged = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	o, ok1 := e.ObjectOld.(*openshellv1alpha1.OpenShellSandbox)
	n, ok2 := e.ObjectNew.(*openshellv1alpha1.OpenShellSandbox)
	return ok1 && ok2 && (o.Status.SandboxID != n.Status.SandboxID || o.Generation != n.Generation)
}}

// quotaSpecChanged passes a ResourceQuota's spec or label changes, not the
// quota controller's status writes (ResourceQuotas have no generation).
var quotaSpecChanged = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	o, ok1 := e.ObjectOld.(*corev1.ResourceQuota)
	n, ok2 := e.ObjectNew.(*corev1.ResourceQuota)
	return !ok1 || !ok2 || !equality.Semantic.DeepEqual(o.Spec, n.Spec) || !equality.Semantic.DeepEqual(o.Labels, n.Labels)
}}

// tenantsOf re-queues the tenant namespaces with sandboxes on an Operator
// mode gateway (it was created, changed its tenancy, or is going).
func (r *Reconciler) tenantsOf(ctx context.Context, o client.Object) []reconcile.Request {
	gw, ok := o.(*openshellv1alpha1.OpenShellGateway)
	if !ok || !render.OperatorMode(gw) {
		return nil
	}
	list := &openshellv1alpha1.OpenShellSandboxList{}
	if err := r.Client.List(ctx, list, client.MatchingFields{index.SandboxGateway: gw.Namespace + "/" + gw.Name}); err != nil {
		return nil
	}
	var out []reconcile.Request
	for _, sb := range list.Items {
		req := reconcile.Request{NamespacedName: types.NamespacedName{Name: sb.Namespace}}
		if !slices.Contains(out, req) {
			out = append(out, req)
		}
	}
	return out
}
