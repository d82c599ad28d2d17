package gateway

import (
	"context"
	"fmt"
	"slices"
	"time"

	cmv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	routev1 "github.com/openshift/api/route/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/gatewayline"
	"github.com/openshell/openshell-operator/internal/gwconn"
	"github.com/openshell/openshell-operator/internal/index"
	render "github.com/openshell/openshell-operator/internal/render/gateway"
	"github.com/openshell/openshell-operator/internal/scc"
	"github.com/openshell/openshell-operator/internal/status"
)

// ownedBy reports whether o carries gw's labels (children outside the
// gateway's namespace and at cluster scope have no owner reference).
func ownedBy(o client.Object, gw *openshellv1alpha1.OpenShellGateway) bool {
	want := render.Labels(gw, "")
	l := o.GetLabels()
	return l[render.LabelGatewayNamespace] == want[render.LabelGatewayNamespace] && l[render.LabelGatewayName] == want[render.LabelGatewayName]
}

// deleteIfOurs deletes the named object when it exists and belongs to gw.
func (r *Reconciler) deleteIfOurs(ctx context.Context, gw *openshellv1alpha1.OpenShellGateway, o client.Object) error {
	if err := r.Client.Get(ctx, client.ObjectKeyFromObject(o), o); err != nil {
		return client.IgnoreNotFound(err)
	}
	if !ownedBy(o, gw) {
		return nil
	}
	if err := r.Client.Delete(ctx, o); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete %T %s: %w", o, client.ObjectKeyFromObject(o), err)
	}
	return nil
}

// prune deletes children that an earlier spec needed and this one does not:
// the other workload kind, a disabled Route, the external Certificate once
// spec.managed.tls.issuerRef is removed, the SCC binding after a switch to
// Combined, and what only the other release line uses.
func (r *Reconciler) prune(ctx context.Context, gw *openshellv1alpha1.OpenShellGateway, in render.Inputs, rendered render.Rendered) error {
	n := render.NamesFor(gw)
	var stale []client.Object
	if render.UsesPostgres(gw) {
		stale = append(stale, &appsv1.StatefulSet{})
	} else {
		stale = append(stale, &appsv1.Deployment{})
	}
	for _, o := range stale {
		o.SetNamespace(gw.Namespace)
		o.SetName(n.Fullname)
	}
	if in.Route && !render.RouteEnabled(gw, in) {
		stale = append(stale, &routev1.Route{})
		stale[len(stale)-1].SetNamespace(gw.Namespace)
		stale[len(stale)-1].SetName(n.Fullname)
	}
	if in.TLS == render.TLSCertManager && render.ExternalIssuer(gw) == nil {
		c := &cmv1.Certificate{}
		c.SetNamespace(gw.Namespace)
		c.SetName(n.Fullname + "-server-external")
		stale = append(stale, c)
	}
	// The objects of the other release line go only once every pod runs
	// the rendered one (status.version): until then the old pods and their
	// sandboxes still need their SCC binding and NetworkPolicy. After an
	// upgrade to 0.1, the 0.0.x sandbox NetworkPolicy goes (the gateway
	// fences the namespace itself); on 0.0.x, the 0.1 runtime's grants.
	running, _ := gatewayline.Of(gw.Status.Version)
	settled := running == in.Line
	switch {
	case !settled:
	case in.Line == gatewayline.V01:
		np := &networkingv1.NetworkPolicy{}
		np.SetNamespace(n.SandboxNamespace)
		np.SetName(n.SandboxPolicy)
		stale = append(stale, np)
	default:
		rb := &rbacv1.RoleBinding{}
		rb.SetNamespace(n.SandboxNamespace)
		rb.SetName(n.RuntimeBinding)
		stale = append(stale, rb)
	}
	if in.SCC && !rendered.UsesSCC && settled {
		rb := scc.RoleBinding(n.SandboxNamespace, n.SandboxSA, nil, nil)
		stale = append(stale, &rbacv1.RoleBinding{ObjectMeta: rb.ObjectMeta})
	}
	for _, o := range stale {
		if err := r.deleteIfOurs(ctx, gw, o); err != nil {
			return err
		}
	}
	// (No switch from cert-manager to the built-in PKI: that happens only
	// when cert-manager's CRDs, and with them its objects, are gone.)
	return nil
}

// gatewaySelector selects the objects a gateway's render labelled as its own.
func gatewaySelector(gw *openshellv1alpha1.OpenShellGateway) client.MatchingLabels {
	return client.MatchingLabels{render.LabelGatewayNamespace: gw.Namespace, render.LabelGatewayName: render.Labels(gw, "")[render.LabelGatewayName]}
}

// deleteLabelled deletes, one by one, the objects of list's kind in ns that
// carry sel. The operator holds list and delete but not deletecollection
// (the bundle grants no collection deletes), so DeleteAllOf is not an option.
func (r *Reconciler) deleteLabelled(ctx context.Context, list client.ObjectList, ns string, sel client.MatchingLabels) error {
	if err := r.Client.List(ctx, list, client.InNamespace(ns), sel); err != nil {
		return fmt.Errorf("list %T: %w", list, err)
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return err
	}
	for _, item := range items {
		o, ok := item.(client.Object)
		if !ok {
			continue
		}
		if err := r.Client.Delete(ctx, o); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete %s %s/%s: %w", o.GetObjectKind().GroupVersionKind().Kind, ns, o.GetName(), err)
		}
	}
	return nil
}

// reconcileDelete removes the gateway's ClusterRoleBinding and its children
// in another sandbox namespace. Children in the gateway's namespace go by
// garbage collection. The SCC and the static ClusterRoles are a cluster
// admin's and the bundle's, never deleted here.
func (r *Reconciler) reconcileDelete(ctx context.Context, gw *openshellv1alpha1.OpenShellGateway) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(gw, Finalizer) {
		return ctrl.Result{}, nil
	}
	if draining, err := r.drain(ctx, gw); err != nil || draining {
		return ctrl.Result{RequeueAfter: drainPoll}, err
	}
	return ctrl.Result{}, r.removeChildren(ctx, gw)
}

// drainPoll is how often a deleting gateway counts its sandboxes again.
const drainPoll = 10 * time.Second

// drain reports whether OpenShellSandboxes still use the gateway: they are
// deleted by their owners and their deletion cleans up at this gateway, so
// it keeps running (and keeps its RBAC) until the last is gone; the status
// says which. The operator never deletes tenants' objects.
func (r *Reconciler) drain(ctx context.Context, gw *openshellv1alpha1.OpenShellGateway) (bool, error) {
	list := &openshellv1alpha1.OpenShellSandboxList{}
	if err := r.Client.List(ctx, list, client.MatchingFields{index.SandboxGateway: gwconn.Key(gw)}); err != nil {
		return false, fmt.Errorf("list sandboxes of the gateway: %w", err)
	}
	if len(list.Items) == 0 {
		return false, nil
	}
	orig := gw.DeepCopy()
	msg := fmt.Sprintf("being deleted: %d OpenShellSandboxes still use this gateway (for example %s/%s); it keeps running until their owners delete them",
		len(list.Items), list.Items[0].Namespace, list.Items[0].Name)
	status.SetCondition(gw, openshellv1alpha1.ConditionAvailable, metav1.ConditionFalse, openshellv1alpha1.GatewayReasonDraining, msg)
	gw.Status.Phase = openshellv1alpha1.GatewayPhaseDeleting
	if err := status.Patch(ctx, r.Client, orig, gw); err != nil {
		return true, err
	}
	if orig.Status.Phase != gw.Status.Phase {
		r.Recorder.Eventf(gw, nil, corev1.EventTypeWarning, openshellv1alpha1.GatewayReasonDraining, "Delete", "%s", msg)
	}
	return true, nil
}

// removeChildren deletes what owner references cannot reach, then releases
// the gateway.
func (r *Reconciler) removeChildren(ctx context.Context, gw *openshellv1alpha1.OpenShellGateway) error {
	n := render.NamesFor(gw)
	// Only a served sandbox namespace can hold the gateway's children (and
	// only there does the operator's cache and RBAC reach).
	if n.SandboxNamespace != gw.Namespace && slices.Contains(r.Platform.GatewayNamespaces, n.SandboxNamespace) {
		for _, l := range []client.ObjectList{&rbacv1.RoleBindingList{}, &networkingv1.NetworkPolicyList{}, &corev1.ServiceAccountList{}} {
			if err := r.deleteLabelled(ctx, l, n.SandboxNamespace, gatewaySelector(gw)); err != nil {
				return fmt.Errorf("delete children in %s: %w", n.SandboxNamespace, err)
			}
		}
	}
	// Secrets written by cert-manager carry the labels but no owner
	// reference. Only a served gateway has any (and only there does the
	// cache reach: a tenant who adds the finalizer to an inert gateway
	// must not wedge it). The Certificates go first: while one exists,
	// cert-manager writes its Secret again (found with the real
	// cert-manager: garbage collection removes the Certificates only after
	// the gateway is gone, and the reissued Secrets stayed behind).
	if slices.Contains(r.Platform.GatewayNamespaces, gw.Namespace) {
		if pf, _ := r.Preflight.Get(); pf.CertManager {
			if err := r.deleteLabelled(ctx, &cmv1.CertificateList{}, gw.Namespace, gatewaySelector(gw)); err != nil {
				return fmt.Errorf("delete certificates: %w", err)
			}
		}
		if err := r.deleteLabelled(ctx, &corev1.SecretList{}, gw.Namespace, gatewaySelector(gw)); err != nil {
			return fmt.Errorf("delete certificate secrets: %w", err)
		}
	}
	// The gateway's cluster-scoped binding goes last, after everything that
	// can fail: a still-running gateway keeps TokenReview until the very end.
	for _, name := range []string{n.WorkspacesBinding, n.ClusterScoped} {
		if err := r.deleteIfOurs(ctx, gw, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
			return err
		}
	}
	return status.RemoveFinalizer(ctx, r.Client, gw, Finalizer)
}
