// Package sandboxtemplate reconciles OpenShellSandboxTemplate objects: it
// creates each template as a workspace template at the OpenShell 0.1
// gateways whose sandboxes name it, once the namespace's image policy (as
// each gateway enforces it) allows its image, and deletes there what no
// sandbox needs any more.
//
// The gateway has no update for templates, and a sandbox records the one
// it was created from, so a template's spec is created at a gateway under
// a name of its own (sandboxspec.GatewayTemplateName); the template of an
// older spec stays while a sandbox created from it runs, then goes. A
// template of the name that this object did not create is never adopted
// or deleted (TemplateConflict).
package sandboxtemplate

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
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
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
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
	"github.com/openshell/openshell-operator/internal/imagepolicy"
	"github.com/openshell/openshell-operator/internal/index"
	"github.com/openshell/openshell-operator/internal/sandboxspec"
	"github.com/openshell/openshell-operator/internal/status"
	"github.com/openshell/openshell-operator/internal/tenancy"
)

// Finalizer deletes the template at its gateways first.
const Finalizer = "openshell.ai/template-cleanup"

// retry is how soon a failed gateway call is tried again; collectRetry,
// a template the gateway would not delete (a sandbox someone made there
// from it still runs, say).
const (
	retry        = 5 * time.Second
	collectRetry = time.Minute
)

// +kubebuilder:rbac:groups=openshell.ai,resources=openshellsandboxtemplates,verbs=list;watch;patch,namespace=system
// +kubebuilder:rbac:groups=openshell.ai,resources=openshellsandboxtemplates/status,verbs=patch,namespace=system
// +kubebuilder:rbac:groups=openshell.ai,resources=openshellsandboxtemplates/finalizers,verbs=update,namespace=system

// Reconciler reconciles OpenShellSandboxTemplate.
type Reconciler struct {
	Client   client.Client
	Gateways *gwconn.Resolver
	Recorder events.EventRecorder
	// Platform decides which gateways a namespace may use.
	Platform tenancy.Platform
	// Policies judges the template's image as each gateway enforces the
	// namespace's image policy.
	Policies *imagepolicy.Cache
	// DriftPeriod bounds how long a template deleted or replaced at a
	// gateway directly stays so (0: driftcheck.DefaultPeriod).
	DriftPeriod time.Duration

	// compared remembers when each template was last read back from each
	// gateway (gateway/name → time.Time): only this reconciler uses it.
	compared driftcheck.Schedule
}

// target is one gateway the template belongs at, and why it may not be
// synced there ("" if it may), with that reason.
type target struct {
	gw             *openshellv1alpha1.OpenShellGateway
	reason, reject string
}

// Reconcile syncs the template to the gateways whose sandboxes name it.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	t := &openshellv1alpha1.OpenShellSandboxTemplate{}
	if err := r.Client.Get(ctx, req.NamespacedName, t); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	users, err := index.TemplateUsers(ctx, r.Client, t)
	if err != nil {
		return ctrl.Result{}, err
	}
	if !t.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, t, users)
	}
	orig := t.DeepCopy()
	ns, nsUID, err := tenancy.ReadNamespace(ctx, r.Client, t.Namespace)
	if err != nil {
		return ctrl.Result{}, err
	}
	targets, err := r.targets(ctx, t, users, ns)
	if err != nil {
		return ctrl.Result{}, err
	}
	if len(targets) > 0 {
		if _, err := status.AddFinalizer(ctx, r.Client, orig, t, Finalizer); err != nil {
			return ctrl.Result{}, err
		}
	}
	res := r.report(t, r.syncAll(ctx, t, nsUID, targets))
	if left, err := r.collect(ctx, t, users); err != nil {
		return ctrl.Result{}, err
	} else if left {
		res.RequeueAfter = enqueue.Sooner(res.RequeueAfter, collectRetry)
	}
	return res, status.Patch(ctx, r.Client, orig, t)
}

// targets are the existing gateways of the sandboxes that name t, each
// with what keeps t from it: the namespace may not use it, it runs 0.0.x,
// or it does not allow the image.
func (r *Reconciler) targets(ctx context.Context, t *openshellv1alpha1.OpenShellSandboxTemplate, users []openshellv1alpha1.OpenShellSandbox,
	ns tenancy.Namespace) ([]target, error) {
	var out []target
	seen := map[types.NamespacedName]bool{}
	for i := range users {
		key := users[i].GatewayKey()
		if seen[key] || !users[i].DeletionTimestamp.IsZero() {
			continue
		}
		seen[key] = true
		gw := &openshellv1alpha1.OpenShellGateway{}
		if err := r.Client.Get(ctx, key, gw); apierrors.IsNotFound(err) {
			continue
		} else if err != nil {
			return nil, err
		}
		tg, err := r.judge(ctx, t, gw, ns)
		if err != nil {
			return nil, err
		}
		out = append(out, tg)
	}
	slices.SortFunc(out, func(a, b target) int { return strings.Compare(gwconn.Key(a.gw), gwconn.Key(b.gw)) })
	return out, nil
}

// judge says whether t may be synced to gw.
func (r *Reconciler) judge(ctx context.Context, t *openshellv1alpha1.OpenShellSandboxTemplate, gw *openshellv1alpha1.OpenShellGateway,
	ns tenancy.Namespace) (target, error) {
	tg := target{gw: gw}
	access, err := r.Platform.Access(ctx, r.Client, gw, ns)
	if err != nil {
		return tg, err
	}
	if access != "" {
		tg.reason, tg.reject = openshellv1alpha1.ReasonGatewayNotAllowed, access
		return tg, nil
	}
	line, err := r.Gateways.Line(ctx, gw)
	if err != nil {
		tg.reason, tg.reject = openshellv1alpha1.TemplateReasonGatewayError, fmt.Sprintf("%s: %s", gwconn.Key(gw), err)
		return tg, nil
	}
	if line != gatewayline.V01 {
		tg.reason, tg.reject = openshellv1alpha1.TemplateReasonUnsupported, fmt.Sprintf(
			"gateway %s runs OpenShell 0.0.x, which has no workspace templates: its sandboxes cannot use one", gwconn.Key(gw))
		return tg, nil
	}
	probe := &openshellv1alpha1.OpenShellSandbox{ObjectMeta: metav1.ObjectMeta{Namespace: t.Namespace}, Spec: openshellv1alpha1.OpenShellSandboxSpec{Image: t.Spec.Image}}
	d, _, err := r.Policies.Check(ctx, r.Client, probe, gw)
	if err != nil {
		return tg, err
	}
	if !d.Allowed {
		tg.reason, tg.reject = openshellv1alpha1.TemplateReasonImageNotAllowed, fmt.Sprintf("gateway %s: %s", gwconn.Key(gw), d.Message)
	}
	return tg, nil
}

// outcome is what syncing to every target came to: the reason of the
// first refusal and every message.
type outcome struct {
	reason   string
	messages []string
	synced   int
	retry    bool
}

// syncAll creates the current spec's template at each target that allows
// it (or checks it is still there, once a drift period).
func (r *Reconciler) syncAll(ctx context.Context, t *openshellv1alpha1.OpenShellSandboxTemplate, nsUID types.UID, targets []target) outcome {
	var o outcome
	for _, tg := range targets {
		if tg.reject != "" {
			o.reason = cmp.Or(o.reason, tg.reason)
			o.messages = append(o.messages, tg.reject)
			o.retry = o.retry || tg.reason == openshellv1alpha1.TemplateReasonGatewayError
			continue
		}
		err := r.syncTo(ctx, t, nsUID, tg.gw)
		var conflict *gwconn.ConflictError
		switch {
		case errors.As(err, &conflict):
			o.reason = cmp.Or(o.reason, openshellv1alpha1.TemplateReasonConflict)
			o.messages = append(o.messages, conflict.Error())
		case err != nil:
			o.reason, o.retry = cmp.Or(o.reason, openshellv1alpha1.TemplateReasonGatewayError), true
			o.messages = append(o.messages, fmt.Sprintf("%s: %s", gwconn.Key(tg.gw), grpcstatus.Convert(err).Message()))
		default:
			o.synced++
		}
	}
	return o
}

// report sets Ready from the outcome.
func (r *Reconciler) report(t *openshellv1alpha1.OpenShellSandboxTemplate, o outcome) ctrl.Result {
	t.Status.ObservedGeneration = t.Generation
	switch {
	case o.reason != "":
		status.SetCondition(t, openshellv1alpha1.ConditionReady, metav1.ConditionFalse, o.reason, strings.Join(o.messages, "; "))
		if o.retry {
			return ctrl.Result{RequeueAfter: retry}
		}
		return ctrl.Result{}
	case o.synced == 0:
		status.SetCondition(t, openshellv1alpha1.ConditionReady, metav1.ConditionTrue, openshellv1alpha1.TemplateReasonUnused,
			"no sandbox names this template yet")
		return ctrl.Result{}
	}
	status.SetCondition(t, openshellv1alpha1.ConditionReady, metav1.ConditionTrue, openshellv1alpha1.TemplateReasonSynced,
		fmt.Sprintf("at %d gateway(s)", o.synced))
	return ctrl.Result{RequeueAfter: driftcheck.Period(r.DriftPeriod)}
}

// syncTo makes the current spec's template exist at gw. An entry of this
// generation and gateway incarnation is read back only once a drift
// period: a template deleted there is created again; one replaced by
// someone else's is a conflict.
func (r *Reconciler) syncTo(ctx context.Context, t *openshellv1alpha1.OpenShellSandboxTemplate, nsUID types.UID, gw *openshellv1alpha1.OpenShellGateway) error {
	key, name := gwconn.Key(gw), sandboxspec.GatewayTemplateName(t)
	i := slices.IndexFunc(t.Status.Gateways, func(e openshellv1alpha1.SandboxTemplateGatewayStatus) bool { return e.Gateway == key && e.Name == name })
	if i >= 0 && t.Status.Gateways[i].GatewayInstance == gw.Status.Instance {
		if !r.compared.Due(r.driftKey(t, key, name), r.DriftPeriod) {
			return nil
		}
	}
	conn, err := r.Gateways.Connect(ctx, gw)
	if err != nil {
		return err
	}
	ws, err := r.Gateways.EnsureWorkspace(ctx, conn, key, t.Namespace, nsUID)
	if err != nil {
		return err
	}
	recorded := ""
	if i >= 0 {
		recorded = t.Status.Gateways[i].ID
	}
	got, err := r.ensure(ctx, conn, t, nsUID, key, ws, name, recorded)
	if c := (*gwconn.ConflictError)(nil); errors.As(err, &c) && i >= 0 {
		// No longer the operator's: forgotten, so that no sandbox is
		// created from it, and never deleted by the operator.
		t.Status.Gateways = slices.Delete(t.Status.Gateways, i, i+1)
	}
	if err != nil {
		return err
	}
	e := openshellv1alpha1.SandboxTemplateGatewayStatus{Gateway: key, Name: name, Workspace: ws, ID: got.GetId(), ResourceVersion: got.GetResourceVersion(),
		ObservedGeneration: t.Generation, GatewayInstance: gw.Status.Instance}
	if i >= 0 {
		t.Status.Gateways[i] = e
	} else {
		t.Status.Gateways = append(t.Status.Gateways, e)
	}
	r.compared.Done(r.driftKey(t, key, name))
	return nil
}

// driftKey names one template object's gateway template in compared.
func (r *Reconciler) driftKey(t *openshellv1alpha1.OpenShellSandboxTemplate, gateway, name string) string {
	return string(t.UID) + " " + gateway + " " + name
}

// ensure reads the template name in ws and creates it when missing; it
// returns its metadata there. One the operator did not create, or that
// is not what the name says, is a *gwconn.ConflictError; so is one whose
// ID is not recorded, the one status holds ("" for none): it was created
// again by someone else.
func (r *Reconciler) ensure(ctx context.Context, conn *gatewayapi.Client, t *openshellv1alpha1.OpenShellSandboxTemplate, nsUID types.UID,
	key, ws, name, recorded string) (*datamodelv1.ObjectMeta, error) {
	owner := sandboxspec.TemplateLabels(t, nsUID)
	got, err := conn.GetSandboxTemplate(ctx, &openshellv1.GetSandboxTemplateRequest{Name: name, WorkspaceScope: gatewayapi.Workspace(ws)})
	switch {
	case grpcstatus.Code(err) == codes.NotFound:
		if recorded != "" {
			r.Recorder.Eventf(t, nil, corev1.EventTypeWarning, openshellv1alpha1.ReasonDriftReverted, "Sync",
				"template %s was deleted at gateway %s directly: creating it again", name, key)
		}
		resp, err := conn.CreateSandboxTemplate(ctx, &openshellv1.CreateSandboxTemplateRequest{
			Template: sandboxspec.WorkloadTemplate(t, name, owner), WorkspaceScope: gatewayapi.Workspace(ws)})
		if grpcstatus.Code(err) == codes.NotFound {
			r.Gateways.ForgetWorkspace(key, ws) // a new database: the retry creates the workspace again
		}
		if err != nil {
			return nil, err
		}
		r.Recorder.Eventf(t, nil, corev1.EventTypeNormal, "TemplateSynced", "Sync", "template created at gateway %s as %s", key, name)
		return resp.GetTemplate().GetMetadata(), nil
	case err != nil:
		return nil, err
	}
	md := got.GetTemplate().GetMetadata()
	if !sandboxspec.OwnedBy(md.GetLabels(), owner) {
		return nil, &gwconn.ConflictError{Kind: "sandbox template", Name: name, Workspace: ws, Gateway: key}
	}
	if why := sandboxspec.TemplateDiffers(t, got.GetTemplate()); why != "" {
		// Ours by its labels, yet not what its name says: made again
		// with the labels copied. Never used as it is.
		return nil, &gwconn.ConflictError{Kind: "sandbox template", Name: name + " (" + why + ")", Workspace: ws, Gateway: key}
	}
	if recorded != "" && recorded != md.GetId() {
		return nil, &gwconn.ConflictError{Kind: "sandbox template", Name: name + " (created again at the gateway by someone else)", Workspace: ws, Gateway: key}
	}
	return md, nil
}

// collect deletes, at the gateways, the templates of status that no
// sandbox took and that are not the current spec's at a gateway a live
// sandbox uses, and drops them from status. It reports whether a deletion
// failed (retried).
func (r *Reconciler) collect(ctx context.Context, t *openshellv1alpha1.OpenShellSandboxTemplate, users []openshellv1alpha1.OpenShellSandbox) (bool, error) {
	current := sandboxspec.GatewayTemplateName(t)
	left := false
	keep := t.Status.Gateways[:0:0]
	for _, e := range t.Status.Gateways {
		if pinned(e, current, users, t.DeletionTimestamp.IsZero()) {
			keep = append(keep, e)
			continue
		}
		if err := r.deleteAt(ctx, e); err != nil {
			ctrl.LoggerFrom(ctx).Info("deleting an unused template at its gateway failed; retried", "gateway", e.Gateway, "template", e.Name, "error", err.Error())
			keep, left = append(keep, e), true
			continue
		}
		r.compared.Forget(r.driftKey(t, e.Gateway, e.Name))
	}
	// One a sandbox pins is looked at again when that sandbox changes or
	// goes (the watch), not on a timer.
	t.Status.Gateways = keep
	return left, nil
}

// pinned says whether a gateway template must stay: a sandbox of its
// gateway took it (created from it, or about to be), or it is the current
// spec's at a gateway some live sandbox uses (unless the object is being
// deleted). Pure.
func pinned(e openshellv1alpha1.SandboxTemplateGatewayStatus, current string, users []openshellv1alpha1.OpenShellSandbox, live bool) bool {
	for i := range users {
		sb := &users[i]
		if sb.GatewayKey().String() != e.Gateway {
			continue
		}
		if a := sb.Status.Template; a != nil && a.GatewayName == e.Name {
			return true
		}
		if live && e.Name == current && sb.DeletionTimestamp.IsZero() {
			return true
		}
	}
	return false
}

// deleteAt deletes one template at its gateway (gone already is done).
func (r *Reconciler) deleteAt(ctx context.Context, e openshellv1alpha1.SandboxTemplateGatewayStatus) error {
	ns, name, _ := strings.Cut(e.Gateway, "/")
	gw := &openshellv1alpha1.OpenShellGateway{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, gw); apierrors.IsNotFound(err) {
		return nil // the gateway and its database are gone
	} else if err != nil {
		return err
	}
	conn, err := r.Gateways.Connect(ctx, gw)
	if err != nil {
		return err
	}
	_, err = conn.DeleteSandboxTemplate(ctx, &openshellv1.DeleteSandboxTemplateRequest{Name: e.Name, WorkspaceScope: gatewayapi.Workspace(e.Workspace),
		AllowMissing: true})
	return err
}

// reconcileDelete waits for the sandboxes that name the template, then
// deletes it at its gateways and lets it go.
func (r *Reconciler) reconcileDelete(ctx context.Context, t *openshellv1alpha1.OpenShellSandboxTemplate, users []openshellv1alpha1.OpenShellSandbox) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(t, Finalizer) {
		return ctrl.Result{}, nil
	}
	orig := t.DeepCopy()
	if len(users) > 0 {
		names := make([]string, 0, len(users))
		for _, u := range users {
			names = append(names, u.Name)
		}
		status.SetCondition(t, openshellv1alpha1.ConditionReady, metav1.ConditionFalse, openshellv1alpha1.TemplateReasonInUse,
			"deletion waits for the sandboxes created from it: "+strings.Join(names, ", "))
		return ctrl.Result{}, status.Patch(ctx, r.Client, orig, t)
	}
	left, err := r.collect(ctx, t, nil)
	if err != nil {
		return ctrl.Result{}, err
	}
	if left {
		return ctrl.Result{RequeueAfter: collectRetry}, status.Patch(ctx, r.Client, orig, t)
	}
	if err := status.Patch(ctx, r.Client, orig, t); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, status.RemoveFinalizer(ctx, r.Client, t, Finalizer)
}

// SetupWithManager registers the reconciler: a sandbox that names a
// template (created, changed, deleted, or created at its gateway) re-queues
// it; so does a change of a gateway or of the namespace's image policies.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&openshellv1alpha1.OpenShellSandboxTemplate{}).
		Named("openshellsandboxtemplate").
		WithOptions(controller.Options{RateLimiter: enqueue.Backoff(time.Second, 5*time.Minute)}).
		Watches(&openshellv1alpha1.OpenShellSandbox{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			if ref := o.(*openshellv1alpha1.OpenShellSandbox).Spec.TemplateRef; ref != nil {
				return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: o.GetNamespace(), Name: ref.Name}}}
			}
			return nil
		})).
		Watches(&openshellv1alpha1.OpenShellImagePolicy{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			return enqueue.Requests(ctx, r.Client, &openshellv1alpha1.OpenShellSandboxTemplateList{}, client.InNamespace(o.GetNamespace()))
		})).
		Watches(&openshellv1alpha1.OpenShellGateway{}, handler.EnqueueRequestsFromMapFunc(r.templatesOnGateway)).
		Complete(traced.Reconciler("openshellsandboxtemplate", status.RetryStale(r)))
}

// templatesOnGateway re-queues the templates named by a gateway's sandboxes.
func (r *Reconciler) templatesOnGateway(ctx context.Context, o client.Object) []reconcile.Request {
	list := &openshellv1alpha1.OpenShellSandboxList{}
	if err := r.Client.List(ctx, list, client.MatchingFields{index.SandboxGateway: client.ObjectKeyFromObject(o).String()}); err != nil {
		return nil
	}
	var out []reconcile.Request
	for _, sb := range list.Items {
		if ref := sb.Spec.TemplateRef; ref != nil {
			req := reconcile.Request{NamespacedName: client.ObjectKey{Namespace: sb.Namespace, Name: ref.Name}}
			if !slices.Contains(out, req) {
				out = append(out, req)
			}
		}
	}
	return out
}
