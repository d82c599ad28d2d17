// Package gateway reconciles OpenShellGateway objects. A Managed gateway is
// installed and kept in sync: observe (preflight, secrets, workload, Route,
// certificates) → ensure generated secrets → render (pure) → server-side
// apply → report status. An External gateway is only reported on.
package gateway

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	cmv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	routev1 "github.com/openshift/api/route/v1"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/controllers/internal/enqueue"
	"github.com/openshell/openshell-operator/controllers/internal/traced"
	"github.com/openshell/openshell-operator/internal/apply"
	"github.com/openshell/openshell-operator/internal/gwconn"
	"github.com/openshell/openshell-operator/internal/index"
	"github.com/openshell/openshell-operator/internal/oidc"
	"github.com/openshell/openshell-operator/internal/operatorenv"
	"github.com/openshell/openshell-operator/internal/preflight"
	"github.com/openshell/openshell-operator/internal/profilecatalog"
	render "github.com/openshell/openshell-operator/internal/render/gateway"
	"github.com/openshell/openshell-operator/internal/status"
	"github.com/openshell/openshell-operator/internal/tenancy"
)

// Finalizer removes what owner references cannot: cluster-scoped objects and
// children in another sandbox namespace; before that it waits for the
// OpenShellSandboxes on the gateway to be deleted (managed and External).
const Finalizer = "openshell.ai/gateway-cleanup"

// +kubebuilder:rbac:groups=openshell.ai,resources=openshellgateways,verbs=list;watch;patch,namespace=system
// +kubebuilder:rbac:groups=openshell.ai,resources=openshellgateways/status,verbs=patch,namespace=system
// +kubebuilder:rbac:groups=openshell.ai,resources=openshellgateways/finalizers,verbs=update,namespace=system
// Namespaced (the CSV's permissions: OLM grants them in the operator's
// namespace and each target namespace). Children are read from the cache
// (list, watch), written by server-side apply (patch; create when the apply
// creates), and deleted one by one by prune and the finalizer, each verb
// only where a code path needs it (test/e2e TestLeastPrivilege checks).
// +kubebuilder:rbac:groups="",resources=services;configmaps;serviceaccounts,verbs=list;watch;create;patch,namespace=system
// +kubebuilder:rbac:groups="",resources=serviceaccounts,verbs=delete,namespace=system
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;update;delete,namespace=system
// +kubebuilder:rbac:groups=apps,resources=statefulsets;deployments,verbs=list;watch;create;patch;delete,namespace=system
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=list;watch;create;patch,namespace=system
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=list;watch;create;patch;delete,namespace=system
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=rolebindings,verbs=list;watch;create;patch;delete,namespace=system
// +kubebuilder:rbac:groups=route.openshift.io,resources=routes,verbs=list;watch;create;patch;delete,namespace=system
// +kubebuilder:rbac:groups=route.openshift.io,resources=routes/custom-host,verbs=create;update,namespace=system
// +kubebuilder:rbac:groups=monitoring.coreos.com,resources=servicemonitors,verbs=list;watch;create;patch,namespace=system
// +kubebuilder:rbac:groups=cert-manager.io,resources=issuers;certificates,verbs=list;watch;create;patch,namespace=system
// +kubebuilder:rbac:groups=cert-manager.io,resources=certificates,verbs=delete,namespace=system
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch,namespace=system
// +kubebuilder:rbac:groups="",resources=pods,verbs=list;watch,namespace=system
//
// The operator grants gateways only the static ClusterRoles the bundle
// ships (config/operand): it may bind them, by name, and holds none of
// their rules itself (RBAC lets a subject bind a role it does not hold
// only with `bind` on it).
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=clusterroles,verbs=bind,resourceNames=openshell-gateway-sandboxes;openshell-gateway-runtime;openshell-sandbox-sidecar-scc-use,namespace=system
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=clusterroles,verbs=bind,resourceNames=openshell-gateway;openshell-gateway-workspaces
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=roles,verbs=list;watch;create;patch,namespace=system
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=clusterrolebindings,verbs=list;watch;create;patch;delete
//
// Cluster-scoped reads: namespaces (tenancy decisions), and the sandbox
// SCC by name, which a cluster admin applies and the operator verifies.
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=list;watch
// +kubebuilder:rbac:groups=security.openshift.io,resources=securitycontextconstraints,verbs=get,resourceNames=openshell-sandbox-sidecar

// MaxConcurrentReconciles bounds parallel gateway reconciles.
const MaxConcurrentReconciles = 4

// Reconciler reconciles OpenShellGateway.
type Reconciler struct {
	Client client.Client
	// APIReader reads what the cache does not hold (the sandbox SCC).
	APIReader client.Reader
	Preflight *preflight.Store
	Recorder  events.EventRecorder
	// Images are the operator's RELATED_IMAGE_* images of each release it
	// ships.
	Images operatorenv.Releases
	// Proxy is the cluster proxy, passed on to the gateway and its sandboxes.
	Proxy operatorenv.Proxy
	// Issuer is the operator's OIDC issuer, configured into managed gateways.
	Issuer *oidc.Issuer
	// Catalog is the operator's shipped provider profiles, which a gateway
	// moving to 0.1 counts as declared where it imports them.
	Catalog *profilecatalog.Catalog
	// Gateways connects to gateways (External health checks).
	Gateways *gwconn.Resolver
	// Platform says in which namespaces gateways are served and whether
	// operand images may be overridden.
	Platform tenancy.Platform
	// TrustRoots are the public roots gateways trust (the operator image's
	// system bundle, internal/trust.SystemPEM).
	TrustRoots []byte
	// SCCRecheck is how soon a gateway whose SCC is missing or modified
	// reads it again (default 30 s).
	SCCRecheck time.Duration
	// PKI tunes the built-in PKI; Clock defaults to time.Now.
	PKI   PKIOptions
	Clock func() time.Time

	ctrl    controller.Controller
	cache   sourceKinder
	watchMu sync.Mutex
	watched map[string]bool
}

// sourceKinder creates watch sources lazily for APIs that may appear later.
type sourceKinder func(obj client.Object, h handler.EventHandler) source.Source

func (r *Reconciler) now() time.Time {
	if r.Clock != nil {
		return r.Clock()
	}
	return time.Now()
}

// Reconcile installs or reports one gateway.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, retErr error) {
	gw := &openshellv1alpha1.OpenShellGateway{}
	if err := r.Client.Get(ctx, req.NamespacedName, gw); err != nil {
		if apierrors.IsNotFound(err) {
			// Gone: drop its connection, credentials and workspaces.
			r.Gateways.Forget(req.String())
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !gw.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, gw)
	}
	pf, known := r.Preflight.Get()
	if !known {
		// Nothing is known about the cluster yet: writing "pending" would
		// only churn status (after every operator restart). The first probe
		// re-queues every gateway.
		return ctrl.Result{}, nil
	}
	orig := gw.DeepCopy()
	r.ensureWatches(pf, known)

	h, res, retErr, err := r.reconcileByMode(ctx, orig, gw, pf)
	if errors.Is(err, errNotNow) {
		return res, nil // nothing new is known: the status stays as it is
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	setStatus(gw, pf, known, h)
	if retErr == nil {
		gw.Status.ObservedGeneration = gw.Generation
	}
	// The event follows the write: a reconcile that read a stale copy
	// (its write conflicts) would otherwise announce a phase again.
	patchErr := status.Patch(ctx, r.Client, orig, gw)
	if patchErr == nil && orig.Status.Phase != gw.Status.Phase {
		typ := corev1.EventTypeNormal
		if gw.Status.Phase == openshellv1alpha1.GatewayPhaseDegraded || gw.Status.Phase == openshellv1alpha1.GatewayPhasePending {
			typ = corev1.EventTypeWarning
		}
		r.Recorder.Eventf(gw, nil, typ, "Phase"+string(gw.Status.Phase), "Reconcile", "%s", phaseMessage(gw))
	}
	return res, errors.Join(retErr, patchErr)
}

// gatewaysOfNamespace re-queues the gateways in namespace o, the gateways
// whose sandbox namespace o is, and the gateway whose paired namespace
// (workspace mode Operator) o is: its allowlist changes.
func (r *Reconciler) gatewaysOfNamespace(ctx context.Context, o client.Object) []reconcile.Request {
	all := &openshellv1alpha1.OpenShellGatewayList{}
	if err := r.Client.List(ctx, all); err != nil {
		return nil
	}
	var out []reconcile.Request
	for i := range all.Items {
		gw := &all.Items[i]
		if gw.Namespace == o.GetName() || (gw.Spec.Mode != openshellv1alpha1.GatewayModeExternal && render.NamesFor(gw).SandboxNamespace == o.GetName()) ||
			(render.OperatorMode(gw) && ownedBy(o, gw)) {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(gw)})
		}
	}
	return out
}

// gatewaysWithSandboxesIn are the Managed gateways that place their
// sandboxes in o's namespace, or where o places its own (o itself aside).
func (r *Reconciler) gatewaysWithSandboxesIn(ctx context.Context, o client.Object) []reconcile.Request {
	all := &openshellv1alpha1.OpenShellGatewayList{}
	if err := r.Client.List(ctx, all); err != nil {
		return nil
	}
	its := ""
	if gw, ok := o.(*openshellv1alpha1.OpenShellGateway); ok {
		// A gateway that is not served never counts in another's verdict
		// (tenancy.SandboxNamespaceServed): tenants' inert gateways, which
		// they may create without limit, re-queue nothing.
		if msg, err := r.Platform.Served(ctx, r.Client, gw); err != nil || msg != "" {
			return nil
		}
		its = tenancy.SandboxNamespace(gw)
	}
	var out []reconcile.Request
	for i := range all.Items {
		gw := &all.Items[i]
		ns := tenancy.SandboxNamespace(gw)
		if ns == "" || (ns != o.GetNamespace() && ns != its) || client.ObjectKeyFromObject(gw) == client.ObjectKeyFromObject(o) {
			continue
		}
		if msg, err := r.Platform.Served(ctx, r.Client, gw); err == nil && msg == "" {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(gw)})
		}
	}
	return out
}

// reconcileByMode refuses a gateway of a namespace that is not served, or
// checks an External one, or installs a Managed one. err stops the
// reconcile before status; applyErr is reported in status and retried.
func (r *Reconciler) reconcileByMode(ctx context.Context, orig, gw *openshellv1alpha1.OpenShellGateway, pf preflight.Result) (h health, res ctrl.Result, applyErr, err error) {
	served, err := r.Platform.Served(ctx, r.Client, gw)
	if err != nil {
		return h, res, nil, err
	}
	switch {
	case served != "":
		// Refused before anything is rendered, connected to or finalized:
		// OLM lets every namespace admin and editor create gateways.
		h.degraded = append(h.degraded, issue{Reason: openshellv1alpha1.GatewayReasonNamespaceNotServed, Message: served, Phase: openshellv1alpha1.GatewayPhasePending})
	case gw.Spec.Mode == openshellv1alpha1.GatewayModeExternal:
		// The finalizer lets its deletion wait for the sandboxes on it (drain).
		if _, err := status.AddFinalizer(ctx, r.Client, orig, gw, Finalizer); err != nil {
			return h, res, nil, err
		}
		var err error
		if h, res, err = r.checkExternal(ctx, gw); err != nil {
			return h, res, nil, err
		}
	default:
		plan, err := r.planManaged(ctx, gw, pf)
		if err != nil {
			return h, res, nil, err
		}
		// Reported from the first reconcile on, whatever the install's
		// progress, so that the status it is part of is written once.
		if err := r.reportPodSecurity(ctx, gw, pf, plan.Line()); err != nil {
			return h, res, nil, err
		}
		if err := r.reportTenantEgress(ctx, gw, pf); err != nil {
			return h, res, nil, err
		}
		h, res, applyErr = r.reconcileManaged(ctx, orig, gw, pf, plan)
		if errors.Is(applyErr, errNotNow) || status.OnlyConflicts(applyErr) {
			// Nothing new, or a write based on a cache that lags this
			// reconciler's own last write (RetryStale runs it again):
			// neither is a failure to report.
			return h, res, nil, applyErr
		}
		if applyErr != nil {
			h.degraded = append(h.degraded, issue{Reason: openshellv1alpha1.GatewayReasonApplyFailed, Message: status.Message(applyErr)})
		}
	}
	return h, res, applyErr, nil
}

// reconcileManaged installs a Managed gateway: validate and resolve the
// render inputs, ensure the generated Secrets and the built-in PKI, render
// and apply, then observe what the applied objects became and derive the
// detail conditions from that observation.
func (r *Reconciler) reconcileManaged(ctx context.Context, orig, gw *openshellv1alpha1.OpenShellGateway, pf preflight.Result, plan versionPlan) (health, ctrl.Result, error) {
	var h health
	var res ctrl.Result
	if refused, err := r.refusal(ctx, gw); err != nil || refused != nil {
		if refused != nil {
			h.degraded = append(h.degraded, *refused)
		}
		return h, res, err
	}
	reportVersion(gw, plan)
	if plan.Render == "" {
		return notInstalled(plan), res, nil
	}
	if gw.Status.Version == "" {
		// What runs (read from a workload an earlier operator rendered) is
		// recorded before a new release is rendered over it: the next
		// reconcile would read the new template instead.
		gw.Status.Version = plan.Running
	}
	if _, err := status.AddFinalizer(ctx, r.Client, orig, gw, Finalizer); err != nil {
		return h, res, err
	}
	source, err := r.tlsSource(ctx, gw, pf)
	if err != nil {
		return h, res, err
	}
	in, blocked := r.resolveInputs(gw, pf, source, plan)
	if blocked != nil {
		return blockedBy(orig, h, *blocked)
	}
	if err := r.ensureGeneratedSecrets(ctx, gw); err != nil {
		return h, res, err
	}
	if in.TrustBundle, err = r.trustBundle(ctx, gw, in); err != nil {
		return h, res, err
	}
	tlsReader, err := r.builtinPKI(ctx, gw, in, &res)
	if err != nil {
		return h, res, err
	}
	rendered, err := r.apply(ctx, gw, in)
	if err != nil {
		return h, res, err
	}
	o, err := r.observe(ctx, gw, in, pf, rendered.Objects, tlsReader)
	if err != nil {
		return h, res, err
	}
	gw.Status.Endpoint = render.InternalEndpoint(gw)
	if o.route.Admitted {
		gw.Status.Endpoint = "https://" + o.route.Host + ":443"
	}
	h = managedHealth(gw, o, pf, in, rendered.UsesSCC, followVersion(gw, plan, o.workload))
	return h, r.recheckSCC(res, render.UsesNarrowSCC(gw, in), o.scc), nil
}

// defaultSCCRecheck is how soon a gateway whose SCC is missing or modified reads it again.
const defaultSCCRecheck = 30 * time.Second

// sccAuditPeriod is how often a gateway whose SCC matches reads it again,
// so that an SCC loosened later is reported within minutes.
const sccAuditPeriod = 5 * time.Minute

// recheckSCC requeues a gateway that uses the SCC: the SCC is not watched
// (see observeSCC), so a missing or modified one is read again until an
// admin fixes it, and a matching one is audited periodically.
func (r *Reconciler) recheckSCC(res ctrl.Result, used bool, s sccState) ctrl.Result {
	if !used {
		return res
	}
	recheck := sccAuditPeriod
	if s.Missing || len(s.Diff) > 0 {
		recheck = r.SCCRecheck
		if recheck <= 0 {
			recheck = defaultSCCRecheck
		}
	}
	res.RequeueAfter = enqueue.Sooner(res.RequeueAfter, recheck)
	return res
}

// refusal says why the platform refuses to install this gateway at all:
// operand images it may not override, or a sandbox namespace that is not a
// platform namespace.
func (r *Reconciler) refusal(ctx context.Context, gw *openshellv1alpha1.OpenShellGateway) (*issue, error) {
	if msg := r.Platform.ImageOverride(gw); msg != "" {
		return &issue{Reason: openshellv1alpha1.GatewayReasonImageOverrideNotAllowed, Message: msg}, nil
	}
	msg, err := r.Platform.SandboxNamespaceServed(ctx, r.Client, gw, render.NamesFor(gw).SandboxNamespace)
	if err != nil || msg == "" {
		return nil, err
	}
	return &issue{Reason: openshellv1alpha1.GatewayReasonSandboxNamespaceNotServed, Message: msg}, nil
}

// blockedBy reports what keeps a gateway from being rendered. The
// operator's issuer still starting is a wait (rendering without it would
// roll the gateway twice); a gateway already installed is not reported
// Installing for it, or after every operator restart it would flip to
// Installing and back: nothing new is known (errNotNow).
func blockedBy(orig *openshellv1alpha1.OpenShellGateway, h health, b issue) (health, ctrl.Result, error) {
	if b.Reason != openshellv1alpha1.GatewayReasonInstalling {
		h.degraded = append(h.degraded, b)
		return h, ctrl.Result{}, nil
	}
	res := ctrl.Result{RequeueAfter: issuerStartPoll}
	if orig.Status.Phase != "" && orig.Status.Phase != openshellv1alpha1.GatewayPhasePending {
		return h, res, errNotNow
	}
	h.waiting = append(h.waiting, b)
	return h, res, nil
}

// issuerStartPoll is how soon a gateway waiting for the OIDC issuer looks again.
const issuerStartPoll = 2 * time.Second

// tlsSource is where the gateway's certificates come from. A gateway
// keeps the source it started with, read from its CA Secret (which
// cert-manager annotates when it writes it): installing cert-manager next
// to a running gateway, or removing it, must not swap its CA under
// sandboxes that trust the old one. Only a gateway without a CA yet
// follows the cluster.
func (r *Reconciler) tlsSource(ctx context.Context, gw *openshellv1alpha1.OpenShellGateway, pf preflight.Result) (render.TLSSource, error) {
	ca := &corev1.Secret{}
	key := client.ObjectKey{Namespace: gw.Namespace, Name: render.NamesFor(gw).CA}
	err := r.Client.Get(ctx, key, ca)
	if apierrors.IsNotFound(err) {
		// Only until a CA exists: the cache may not show the one the last
		// reconcile made, and cert-manager found since must not replace it.
		err = r.APIReader.Get(ctx, key, ca)
	}
	if err != nil && !apierrors.IsNotFound(err) {
		return "", fmt.Errorf("read the gateway CA Secret: %w", err)
	}
	if err != nil {
		ca = nil
	}
	return pinnedTLSSource(ca, pf.CertManager), nil
}

// pinnedTLSSource decides the TLS source from the gateway's CA Secret (nil
// when there is none yet) and whether cert-manager is installed. Pure.
func pinnedTLSSource(ca *corev1.Secret, certManager bool) render.TLSSource {
	switch {
	case ca == nil && certManager:
		return render.TLSCertManager
	case ca == nil:
		return render.TLSBuiltin
	case ca.Annotations[cmv1.CertificateNameKey] != "":
		return render.TLSCertManager
	default:
		return render.TLSBuiltin
	}
}

// resolveInputs decides the render inputs from the gateway, its TLS
// source, the cluster and the operator's settings. A non-nil issue says
// why nothing can be rendered yet (reason Installing: wait; otherwise the
// gateway is degraded).
func (r *Reconciler) resolveInputs(gw *openshellv1alpha1.OpenShellGateway, pf preflight.Result, source render.TLSSource, plan versionPlan) (render.Inputs, *issue) {
	images := gw
	if plan.Render != plan.Target {
		// spec.managed.images name the target's images, not those of the
		// release the gateway is held on.
		images = gw.DeepCopy()
		images.Spec.Managed.Images = openshellv1alpha1.GatewayImages{}
	}
	in := render.Inputs{Line: plan.Line(), Version: plan.Render, Replaces: plan.replaces(), Images: render.ResolveImages(images, r.Images, plan.Render),
		Route: pf.Route, SCC: pf.SCC, ServiceMonitor: pf.ServiceMonitor, Proxy: r.Proxy, TLS: source}
	if source == render.TLSCertManager && !pf.CertManager {
		return in, &issue{Reason: openshellv1alpha1.GatewayReasonCertManagerRequired,
			Message: "this gateway's certificates come from cert-manager, which is no longer installed: reinstall it. " +
				"The operator does not move a running gateway to its built-in PKI: a new CA would disconnect its sandboxes"}
	}
	if r.Issuer != nil {
		ca := r.Issuer.CA()
		if len(ca) == 0 {
			return in, &issue{Reason: openshellv1alpha1.GatewayReasonInstalling, Message: "waiting for the operator's OIDC issuer to serve"}
		}
		in.OIDC = &render.OIDC{Issuer: r.Issuer.URL, Audience: oidc.Audience(gw.Namespace, gw.Name), CAPEM: ca}
	}
	if missing := render.MissingImages(in.Images, in.Line); len(missing) > 0 {
		// The release it runs, held there by a blocker, lacks images too.
		return in, &issue{Reason: openshellv1alpha1.GatewayReasonRelatedImagesMissing,
			Message: fmt.Sprintf("the operator has no %s image for OpenShell %s: set its RELATED_IMAGE_* variables, or spec.managed.images", strings.Join(missing, ", "), plan.Render)}
	}
	return in, nil
}

// apply renders the gateway's objects, applies them and prunes what the
// render no longer holds.
func (r *Reconciler) apply(ctx context.Context, gw *openshellv1alpha1.OpenShellGateway, in render.Inputs) (render.Rendered, error) {
	if render.OperatorMode(gw) {
		ws, err := r.workspaceNamespaces(ctx, gw)
		if err != nil {
			return render.Rendered{}, err
		}
		in.Workspaces = ws
	}
	rendered, err := render.Render(gw, in)
	if err != nil {
		return rendered, err
	}
	// Every kind the renderer emits is cached (operator/cache.go selects
	// them by the managed-by label) and watched by this controller, so
	// checking whether an object is already in place costs no request: a
	// steady state sends none at all.
	for _, o := range rendered.Objects {
		if err := apply.Apply(ctx, r.Client, r.Client, o); err != nil {
			return rendered, err
		}
	}
	return rendered, r.prune(ctx, gw, in, rendered)
}

// observation is what the applied objects became.
type observation struct {
	workload workload
	tls      tlsState
	route    routeState
	scc      sccState
}

// observe reads what the applied objects became: rendered is what this
// reconcile applied, tlsReader reads the certificate Secrets.
func (r *Reconciler) observe(ctx context.Context, gw *openshellv1alpha1.OpenShellGateway, in render.Inputs, pf preflight.Result,
	rendered []client.Object, tlsReader client.Reader) (observation, error) {
	var o observation
	var err error
	if o.workload, err = r.observeWorkload(ctx, gw, rendered); err != nil {
		return o, err
	}
	if o.tls, err = r.observeTLS(ctx, gw, in.TLS, tlsReader); err != nil {
		return o, err
	}
	if pf.Route && render.RouteEnabled(gw, in) {
		if o.route, err = r.observeRoute(ctx, gw, rendered); err != nil {
			return o, err
		}
	}
	if render.UsesNarrowSCC(gw, in) {
		if o.scc, err = r.observeSCC(ctx); err != nil {
			return o, err
		}
	}
	return o, nil
}

// ensureWatches starts watches on kinds whose API may appear after the
// operator started (Route, cert-manager): a watch on a missing API
// would stop the manager.
func (r *Reconciler) ensureWatches(pf preflight.Result, known bool) {
	if r.ctrl == nil || !known {
		return
	}
	r.watchMu.Lock()
	defer r.watchMu.Unlock()
	owned := handler.EnqueueRequestForOwner(r.Client.Scheme(), r.Client.RESTMapper(), &openshellv1alpha1.OpenShellGateway{}, handler.OnlyControllerOwner())
	for name, w := range map[string]struct {
		ok   bool
		objs []client.Object
		h    handler.EventHandler
	}{
		"route":       {pf.Route, []client.Object{&routev1.Route{}}, owned},
		"certmanager": {pf.CertManager, []client.Object{&cmv1.Certificate{}, &cmv1.Issuer{}}, owned},
		"monitoring":  {pf.ServiceMonitor, []client.Object{&monitoringv1.ServiceMonitor{}}, owned},
	} {
		if !w.ok || r.watched[name] {
			continue
		}
		for _, o := range w.objs {
			if err := r.ctrl.Watch(r.cache(o, w.h)); err != nil {
				ctrl.Log.WithName("gateway").Error(err, "Starting watch", "kind", fmt.Sprintf("%T", o))
				return
			}
		}
		r.watched[name] = true
	}
}

// byGatewayLabels maps a cluster-scoped object the operator rendered (which
// cannot carry an owner reference to a namespaced gateway) to its gateway.
var byGatewayLabels = handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
	ns, name := o.GetLabels()[render.LabelGatewayNamespace], o.GetLabels()[render.LabelInstance]
	if ns == "" || name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: ns, Name: name}}}
})

// managedByUs passes only the objects the operator rendered.
var managedByUs = builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
	return o.GetLabels()[render.LabelManagedBy] == render.ManagedByValue
}))

// Event filters of the watches.
var (
	onlyDeletes = predicate.Funcs{CreateFunc: func(event.CreateEvent) bool { return false },
		UpdateFunc: func(event.UpdateEvent) bool { return false }, GenericFunc: func(event.GenericEvent) bool { return false }}
	createsAndDeletes = predicate.Funcs{UpdateFunc: func(event.UpdateEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false }}
)

// gatewayOfSandbox names the gateway a sandbox uses.
func gatewayOfSandbox(_ context.Context, o client.Object) []reconcile.Request {
	sb, ok := o.(*openshellv1alpha1.OpenShellSandbox)
	if !ok {
		return nil
	}
	return []reconcile.Request{{NamespacedName: sb.GatewayKey()}}
}

// SetupWithManager registers the reconciler with watches on every kind it
// owns; cluster-scoped children map back to their gateway by label.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.watched = map[string]bool{}
	c, err := ctrl.NewControllerManagedBy(mgr).
		For(&openshellv1alpha1.OpenShellGateway{}).
		Named("openshellgateway").
		// Several at once: one gateway whose identity provider or endpoint
		// is slow must not hold every other's PKI renewal and health check.
		WithOptions(controller.Options{MaxConcurrentReconciles: MaxConcurrentReconciles}).
		Owns(&appsv1.StatefulSet{}).
		Owns(&appsv1.Deployment{}).
		Owns(&corev1.Service{}).
		Owns(&corev1.ConfigMap{}).
		Owns(&corev1.Secret{}).
		Owns(&corev1.ServiceAccount{}).
		Owns(&rbacv1.RoleBinding{}).
		Owns(&rbacv1.Role{}).
		Owns(&networkingv1.NetworkPolicy{}).
		Owns(&policyv1.PodDisruptionBudget{}).
		WatchesMetadata(&rbacv1.ClusterRoleBinding{}, byGatewayLabels, managedByUs).
		// A replaced gateway pod changes status.instance (its readiness
		// reaches the reconciler through the workload's status).
		WatchesMetadata(&corev1.Pod{}, byGatewayLabels, managedByUs, builder.WithPredicates(predicate.Funcs{
			UpdateFunc: func(e event.UpdateEvent) bool {
				return !e.ObjectOld.GetDeletionTimestamp().Equal(e.ObjectNew.GetDeletionTimestamp())
			}})).
		// A deleting gateway waits for its last sandbox to go (drain).
		Watches(&openshellv1alpha1.OpenShellSandbox{}, handler.EnqueueRequestsFromMapFunc(gatewayOfSandbox), builder.WithPredicates(onlyDeletes)).
		// A gateway created in (or deleted from) a namespace another gateway
		// places its sandboxes in changes that gateway's verdict
		// (tenancy.SandboxNamespaceServed): re-queue only those. Tenants may
		// create gateways without limit (OLM's aggregated roles), so one
		// must not re-queue every other.
		Watches(&openshellv1alpha1.OpenShellGateway{}, handler.EnqueueRequestsFromMapFunc(r.gatewaysWithSandboxesIn), builder.WithPredicates(createsAndDeletes)).
		// A declared provider profile, a provider deleted or a sandbox's
		// providers changed may release a gateway held on 0.0.x for want
		// of a profile (ProviderProfilesRequired): re-queue only those.
		Watches(&openshellv1alpha1.OpenShellProviderProfile{}, handler.EnqueueRequestsFromMapFunc(r.gatewaysHeldForProfiles), builder.WithPredicates(createsAndDeletes)).
		Watches(&openshellv1alpha1.OpenShellProvider{}, handler.EnqueueRequestsFromMapFunc(r.gatewaysHeldForProfiles), builder.WithPredicates(onlyDeletes)).
		Watches(&openshellv1alpha1.OpenShellSandbox{}, handler.EnqueueRequestsFromMapFunc(r.gatewaysHeldForProfiles), builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		// The serve-gateways label of a namespace decides whether its gateways are served.
		// A namespace's labels concern the gateways in it (served) and those
		// whose sandboxes run in it (PodSecurityAdmitted).
		// A paired namespace that starts to go leaves the allowlist at once;
		// its annotations record its tenant egress (TenantEgressEnforced).
		WatchesMetadata(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(r.gatewaysOfNamespace),
			builder.WithPredicates(predicate.Or[client.Object](predicate.LabelChangedPredicate{}, predicate.AnnotationChangedPredicate{}, index.DeletionStarted))).
		WatchesRawSource(source.Channel(r.Preflight.Subscribe(), handler.EnqueueRequestsFromMapFunc(
			enqueue.All(r.Client, func() client.ObjectList { return &openshellv1alpha1.OpenShellGatewayList{} })))).
		Build(traced.Reconciler("openshellgateway", status.RetryStale(r)))
	if err != nil {
		return err
	}
	r.ctrl = c
	r.cache = func(obj client.Object, h handler.EventHandler) source.Source {
		return source.Kind(mgr.GetCache(), obj, h)
	}
	return nil
}

// workspaceNamespaces are the paired namespaces of an Operator mode
// gateway that the operator made for it (pairedns), not being deleted nor
// waiting for their tenant egress: the driver's allowlist.
func (r *Reconciler) workspaceNamespaces(ctx context.Context, gw *openshellv1alpha1.OpenShellGateway) ([]string, error) {
	paired, err := r.pairedNamespaces(ctx, gw)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, ns := range paired {
		if render.Allowlisted(ns) {
			out = append(out, ns.Name)
		}
	}
	return out, nil
}

// pairedNamespaces are the namespaces the operator made for gw (pairedns):
// a namespace of a paired name made by anyone else never carries the
// labels PairedTenant checks.
func (r *Reconciler) pairedNamespaces(ctx context.Context, gw *openshellv1alpha1.OpenShellGateway) ([]*metav1.PartialObjectMetadata, error) {
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("NamespaceList"))
	if err := r.Client.List(ctx, list, gatewaySelector(gw)); err != nil {
		return nil, fmt.Errorf("list paired namespaces: %w", err)
	}
	var out []*metav1.PartialObjectMetadata
	for i := range list.Items {
		if _, _, ok := render.PairedTenant(gw, &list.Items[i]); ok {
			out = append(out, &list.Items[i])
		}
	}
	return out, nil
}
