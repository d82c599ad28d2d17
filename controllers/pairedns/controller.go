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
	"context"
	"errors"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/apply"
	"github.com/openshell/openshell-operator/internal/index"
	render "github.com/openshell/openshell-operator/internal/render/gateway"
	"github.com/openshell/openshell-operator/internal/sandboxspec"
	"github.com/openshell/openshell-operator/internal/tenancy"
)

// The paired namespaces are created at run time, outside any namespace an
// install mode names in advance: these grants are cluster-wide, and
// bounded by what they may bind (the three static gateway ClusterRoles).
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;create;patch;delete
// +kubebuilder:rbac:groups="",resources=serviceaccounts,verbs=get;create;patch
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=rolebindings,verbs=get;create;patch
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=clusterroles,verbs=bind,resourceNames=openshell-gateway-sandboxes;openshell-gateway-runtime
// +kubebuilder:rbac:groups="",resources=resourcequotas;limitranges,verbs=get;list;watch;create;patch;delete

// Reconciler reconciles a tenant namespace's paired namespace.
type Reconciler struct {
	Client client.Client
	// APIReader reads the objects inside paired namespaces, which the
	// manager's cache does not hold (it holds the operator's children in
	// platform namespaces only).
	APIReader client.Reader
	Platform  tenancy.Platform
	// AllNamespaces says the operator watches every namespace: paired
	// namespaces are made only then (the sandbox controller says why not).
	AllNamespaces bool
}

// Reconcile makes the tenant namespace req.Name's paired namespace match
// the gateways its sandboxes use.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	tenant := req.Name
	want, err := r.wanted(ctx, tenant)
	if err != nil {
		return ctrl.Result{}, err
	}
	have, err := r.paired(ctx, tenant)
	if err != nil {
		return ctrl.Result{}, err
	}
	var errs []error
	for _, gw := range want {
		errs = append(errs, r.ensure(ctx, gw.gw, tenant, gw.uid))
	}
	for _, ns := range have {
		if !slices.ContainsFunc(want, func(w wantedGateway) bool { return w.owns(ns) }) {
			errs = append(errs, r.release(ctx, ns))
		}
	}
	return ctrl.Result{}, errors.Join(errs...)
}

type wantedGateway struct {
	gw  *openshellv1alpha1.OpenShellGateway
	uid types.UID
}

func (w wantedGateway) owns(ns metav1.Object) bool {
	t, uid, ok := render.PairedTenant(w.gw, ns)
	return ok && uid == w.uid && t == ns.GetLabels()[sandboxspec.LabelNamespace]
}

// wanted are the Operator mode gateways the tenant's sandboxes name and
// may use (not deleting, admitting the tenant): the first of them by
// name, since a tenant incarnation has one workspace name and so one
// paired namespace (the sandbox controller refuses the others).
func (r *Reconciler) wanted(ctx context.Context, tenant string) ([]wantedGateway, error) {
	ns, uid, err := tenancy.ReadNamespace(ctx, r.Client, tenant)
	if apierrors.IsNotFound(err) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	sandboxes := &openshellv1alpha1.OpenShellSandboxList{}
	if err := r.Client.List(ctx, sandboxes, client.InNamespace(tenant)); err != nil {
		return nil, fmt.Errorf("list the sandboxes of %s: %w", tenant, err)
	}
	var keys []types.NamespacedName
	for i := range sandboxes.Items {
		if k := sandboxes.Items[i].GatewayKey(); !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, compareKeys)
	for _, k := range keys {
		gw := &openshellv1alpha1.OpenShellGateway{}
		if err := r.Client.Get(ctx, k, gw); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return nil, err
		}
		if !render.OperatorMode(gw) || !gw.DeletionTimestamp.IsZero() || !r.AllNamespaces {
			continue
		}
		gwNS, _, err := tenancy.ReadNamespace(ctx, r.Client, gw.Namespace)
		if err != nil {
			return nil, client.IgnoreNotFound(err)
		}
		if r.Platform.GatewayAccess(gw, gwNS, ns) != "" {
			continue
		}
		return []wantedGateway{{gw: gw, uid: uid}}, nil
	}
	return nil, nil
}

func compareKeys(a, b types.NamespacedName) int {
	if a.Namespace != b.Namespace {
		if a.Namespace < b.Namespace {
			return -1
		}
		return 1
	}
	switch {
	case a.Name < b.Name:
		return -1
	case a.Name > b.Name:
		return 1
	}
	return 0
}

// paired are the namespaces the operator made for this tenant name (any
// incarnation, any gateway).
func (r *Reconciler) paired(ctx context.Context, tenant string) ([]*metav1.PartialObjectMetadata, error) {
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("NamespaceList"))
	if err := r.Client.List(ctx, list, client.MatchingLabels{render.LabelManagedBy: render.ManagedByValue, sandboxspec.LabelNamespace: tenant}); err != nil {
		return nil, fmt.Errorf("list the paired namespaces of %s: %w", tenant, err)
	}
	out := make([]*metav1.PartialObjectMetadata, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, &list.Items[i])
	}
	return out, nil
}

// ensure applies the paired namespace's objects, unless a namespace of
// its name exists that the operator did not make for this tenant and
// gateway.
func (r *Reconciler) ensure(ctx context.Context, gw *openshellv1alpha1.OpenShellGateway, tenant string, uid types.UID) error {
	name := render.PairedNamespace(tenant, uid)
	cur := &metav1.PartialObjectMetadata{}
	cur.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
	switch err := r.APIReader.Get(ctx, client.ObjectKey{Name: name}, cur); {
	case apierrors.IsNotFound(err):
	case err != nil:
		return fmt.Errorf("read namespace %s: %w", name, err)
	default:
		if _, u, ok := render.PairedTenant(gw, cur); !ok || u != uid || !cur.DeletionTimestamp.IsZero() {
			return nil // not ours, or going: WorkspaceNamespaceConflict or pending
		}
	}
	for _, o := range render.WorkspaceObjects(gw, tenant, uid) {
		if err := apply.Apply(ctx, r.Client, r.APIReader, o); err != nil {
			return fmt.Errorf("paired namespace %s: %w", name, err)
		}
	}
	return r.mirror(ctx, gw, tenant, uid)
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
	want := render.MirroredControls(gw, tenant, uid, quotas.Items, limits.Items)
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

// release deletes a paired namespace no sandbox of its tenant needs: its
// gateway sandboxes went with the OpenShellSandboxes (their finalizer
// waits for the gateway), so nothing of the tenant's runs in it. The
// precondition on its UID never deletes a namespace of that name created
// since.
func (r *Reconciler) release(ctx context.Context, ns *metav1.PartialObjectMetadata) error {
	if !ns.DeletionTimestamp.IsZero() {
		return nil
	}
	obj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns.Name}}
	err := r.Client.Delete(ctx, obj, client.Preconditions{UID: &ns.UID})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("delete paired namespace %s: %w", ns.Name, err)
	}
	return nil
}

// SetupWithManager watches sandboxes (a new gateway in use, or the last
// one gone), gateways in Operator mode, and the paired namespaces
// themselves (deleted or changed by hand: put back).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	ofSandbox := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: o.GetNamespace()}}}
	})
	ofPaired := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		if t := o.GetLabels()[sandboxspec.LabelNamespace]; t != "" && o.GetLabels()[render.LabelManagedBy] == render.ManagedByValue {
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: t}}}
		}
		return nil
	})
	// A tenant's control changed: its own namespace is the request; a copy
	// changed or deleted in the paired namespace: its tenant's.
	ofControl := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		if render.IsMirror(o) {
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: o.GetLabels()[sandboxspec.LabelNamespace]}}}
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: o.GetNamespace()}}}
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("pairednamespace").
		WatchesMetadata(&corev1.Namespace{}, ofPaired).
		Watches(&corev1.ResourceQuota{}, ofControl, builder.WithPredicates(quotaSpecChanged)).
		Watches(&corev1.LimitRange{}, ofControl).
		Watches(&openshellv1alpha1.OpenShellSandbox{}, ofSandbox, builder.WithPredicates(createsAndDeletes)).
		Watches(&openshellv1alpha1.OpenShellGateway{}, handler.EnqueueRequestsFromMapFunc(r.tenantsOf), builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Complete(r)
}

var createsAndDeletes = predicate.Funcs{UpdateFunc: func(event.UpdateEvent) bool { return false }}

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
