// Package externalports publishes the ports tenants list in their
// OpenShellSandboxTemplates (spec.externalPorts) outside the cluster, for
// the gateways whose Platform Admin chose so (OpenShellGateway
// spec.externalPorts.expose): one OpenShift Route (Route) or Gateway API
// HTTPRoute (HTTPRoute) per gateway, in the operator's namespace, to the
// relay's external port listener, which authenticates every caller's
// bearer token and authorizes it as openshellsandboxes/proxy
// (internal/relay's External). For HTTPRoutes it also keeps the one
// BackendTLSPolicy by which Gateways verify the relay, its CA bundle, and
// off OpenShift the relay's certificate (relaycert.go). This controller
// owns those objects and the gateways' status.externalPorts, and nothing
// else of a gateway.
//
// The routes live in the operator's namespace because a Route reaches only
// a Service of its own namespace (an HTTPRoute one without a
// ReferenceGrant), and the relay's is there; owner references cannot cross
// namespaces, so a route is found again by its gateway annotation and
// deleted when its gateway goes or stops asking.
package externalports

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"

	routev1 "github.com/openshift/api/route/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/controllers/internal/routeadmission"
	"github.com/openshell/openshell-operator/controllers/internal/traced"
	"github.com/openshell/openshell-operator/internal/apply"
	"github.com/openshell/openshell-operator/internal/status"
	"github.com/openshell/openshell-operator/internal/tenancy"
)

// RelayService is the relay's external port Service as the bundle names it
// (config/relay/external_ports_service.yaml with config/olm's name prefix).
const RelayService = "openshell-operator-relay-external-ports"

// Component is the Routes' app.kubernetes.io/component: the Routes cache
// selects it.
const Component = "external-ports"

// AnnotationGateway names a Route's gateway (namespace/name): labels
// cannot hold every gateway name.
const AnnotationGateway = "openshell.ai/gateway"

// routeTimeout is the router's wait for an answer: the relay gives a
// sandbox's service 2 minutes to start one (internal/relay), the router's
// default is 30 s.
const routeTimeout = "150s"

// +kubebuilder:rbac:groups=route.openshift.io,resources=routes,verbs=list;watch;create;patch;delete,namespace=system
// +kubebuilder:rbac:groups=route.openshift.io,resources=routes/custom-host,verbs=create;update,namespace=system
// +kubebuilder:rbac:groups=gateway.networking.k8s.io,resources=httproutes;backendtlspolicies,verbs=list;watch;create;patch;delete,namespace=system
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=delete,namespace=system
// +kubebuilder:rbac:groups=gateway.networking.k8s.io,resources=gateways,verbs=get

// Reconciler keeps each gateway's external ports Route and reports it.
type Reconciler struct {
	// Client reads gateways (the manager's cache) and writes the Routes and
	// the gateways' status.
	Client client.Client
	// Routes caches the Routes of this controller, in the operator's
	// namespace; nil where route.openshift.io was not served at start.
	Routes cache.Cache
	// GatewayAPI caches this controller's HTTPRoutes, BackendTLSPolicy and
	// CA bundle, in the operator's namespace; nil where HTTPRoutes and
	// BackendTLSPolicies (gateway.networking.k8s.io/v1) were not served
	// at start.
	GatewayAPI cache.Cache
	// APIReader reads a Route before it is written, whatever its labels.
	APIReader client.Reader
	// Namespace is the operator's namespace (empty out of cluster).
	Namespace string
	// Platform says which gateways are served: a tenant may create an
	// OpenShellGateway anywhere, and must not get a Route in the
	// operator's namespace by it.
	Platform tenancy.Platform
}

// Reconcile observes the gateway and its route, decides, applies or
// deletes the route (and the objects HTTPRoutes share), and reports in
// status.externalPorts.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	gw := &openshellv1alpha1.OpenShellGateway{}
	if err := r.Client.Get(ctx, req.NamespacedName, gw); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, r.removeUnwanted(ctx, req.NamespacedName, false, false)
		}
		return ctrl.Result{}, fmt.Errorf("get gateway: %w", err)
	}
	served, err := r.Platform.Served(ctx, r.Client, gw)
	if err != nil {
		return ctrl.Result{}, err
	}
	live := gw.DeletionTimestamp.IsZero() && served == ""
	if err := r.removeUnwanted(ctx, req.NamespacedName, live && Wanted(gw), live && WantsHTTPRoute(gw)); err != nil {
		return ctrl.Result{}, err
	}
	switch {
	case !(Wanted(gw) || WantsHTTPRoute(gw)) || !gw.DeletionTimestamp.IsZero():
		return ctrl.Result{}, r.report(ctx, gw, nil)
	case served != "":
		// OLM lets namespace admins and editors create gateways: one the
		// platform does not serve gets no route in the operator's
		// namespace, and says so.
		return ctrl.Result{}, r.report(ctx, gw, Status(gw, openshellv1alpha1.ExternalPortsReasonNamespaceNotServed, served, ""))
	}
	st, recheck, err := r.publishEither(ctx, gw)
	if err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: recheck}, r.report(ctx, gw, st)
}

// publishEither publishes the gateway's external ports the way it asks,
// unless an older published gateway claims the same host: the relay tells
// gateways apart by host, so a second route for it would lead callers to
// the first gateway's sandboxes past that gateway's own route and network
// controls. The younger one then publishes nothing, and says which.
func (r *Reconciler) publishEither(ctx context.Context, gw *openshellv1alpha1.OpenShellGateway) (*openshellv1alpha1.ExternalPortsStatus, time.Duration, error) {
	other, err := r.hostTakenBy(ctx, gw)
	if err != nil {
		return nil, 0, err
	}
	if other != "" {
		if err := r.removeUnwanted(ctx, client.ObjectKeyFromObject(gw), false, false); err != nil {
			return nil, 0, err
		}
		// The URL stays (Published is False, so the relay serves nothing
		// at it): a Route whose host the router assigned keeps its claim,
		// rather than publishing again at the same host.
		prev := ""
		if gw.Status.ExternalPorts != nil {
			prev = gw.Status.ExternalPorts.URL
		}
		return Status(gw, openshellv1alpha1.ExternalPortsReasonHostConflict, fmt.Sprintf(
			"gateway %s claims host %s first (it is published there, or it was created earlier and neither is): set another spec.externalPorts.host",
			other, HostOf(gw)), prev), 0, nil
	}
	if WantsHTTPRoute(gw) {
		return r.publishHTTPRoute(ctx, gw)
	}
	st, err := r.publish(ctx, gw)
	return st, 0, err
}

// hostTakenBy names the older served gateway that publishes (or asks to
// publish) gw's host, "" when none does.
func (r *Reconciler) hostTakenBy(ctx context.Context, gw *openshellv1alpha1.OpenShellGateway) (string, error) {
	list := &openshellv1alpha1.OpenShellGatewayList{}
	if err := r.Client.List(ctx, list); err != nil {
		return "", fmt.Errorf("list gateways: %w", err)
	}
	for _, o := range HostRivals(gw, list.Items) {
		served, err := r.Platform.Served(ctx, r.Client, o)
		if err != nil {
			return "", err
		}
		if served == "" {
			return o.Namespace + "/" + o.Name, nil
		}
	}
	return "", nil
}

// HostOf is the host a gateway's external ports are (to be) published at:
// the one its spec names, else the one its Route was admitted at; "" when
// neither is known yet.
func HostOf(gw *openshellv1alpha1.OpenShellGateway) string {
	if ep := gw.Spec.ExternalPorts; ep != nil && ep.Host != "" {
		return strings.ToLower(ep.Host)
	}
	return gw.Status.ExternalPorts.Host()
}

// PublishedHost is the host the gateway's external ports are published at
// now, "" when they are not.
func PublishedHost(gw *openshellv1alpha1.OpenShellGateway) string {
	return gw.Status.ExternalPorts.PublishedHost()
}

// claims are the hosts a gateway asks for or holds.
func claims(gw *openshellv1alpha1.OpenShellGateway) []string {
	var out []string
	for _, h := range []string{HostOf(gw), PublishedHost(gw)} {
		if h != "" && !slices.Contains(out, h) {
			out = append(out, h)
		}
	}
	return out
}

// beats says whether o keeps host over gw: the one published there now,
// else the one created first (at the same second, the smaller
// namespace/name). A host in use is not taken away by an older gateway
// asking for it later.
func beats(o, gw *openshellv1alpha1.OpenShellGateway, host string) bool {
	if op, gp := PublishedHost(o) == host, PublishedHost(gw) == host; op != gp {
		return op
	}
	if !o.CreationTimestamp.Equal(&gw.CreationTimestamp) {
		return o.CreationTimestamp.Before(&gw.CreationTimestamp)
	}
	return o.Namespace+"/"+o.Name < gw.Namespace+"/"+gw.Name
}

// HostRivals are the gateways among all, other than gw, that ask to
// publish external ports at a host gw asks for or holds, and keep it over
// gw (beats). Pure.
func HostRivals(gw *openshellv1alpha1.OpenShellGateway, all []openshellv1alpha1.OpenShellGateway) []*openshellv1alpha1.OpenShellGateway {
	mine := claims(gw)
	var out []*openshellv1alpha1.OpenShellGateway
	for i := range all {
		o := &all[i]
		if o.Namespace == gw.Namespace && o.Name == gw.Name || !(Wanted(o) || WantsHTTPRoute(o)) || !o.DeletionTimestamp.IsZero() {
			continue
		}
		for _, h := range claims(o) {
			if slices.Contains(mine, h) && beats(o, gw, h) {
				out = append(out, o)
				break
			}
		}
	}
	return out
}

// removeUnwanted deletes the gateway key's Route unless it is to keep
// it, and its HTTPRoute unless it is to keep that, and then the objects
// HTTPRoutes share once no served gateway asks for one.
func (r *Reconciler) removeUnwanted(ctx context.Context, key types.NamespacedName, keepRoute, keepHTTPRoute bool) error {
	if !keepRoute {
		if err := r.deleteRoute(ctx, key); err != nil {
			return err
		}
	}
	if !keepHTTPRoute {
		if err := r.deleteHTTPRoute(ctx, key); err != nil {
			return err
		}
		return r.releaseShared(ctx)
	}
	return nil
}

// publish applies the gateway's Route and reads what the routers made of
// it; what cannot be done here is the status's to say.
func (r *Reconciler) publish(ctx context.Context, gw *openshellv1alpha1.OpenShellGateway) (*openshellv1alpha1.ExternalPortsStatus, error) {
	switch {
	case r.Namespace == "":
		return Status(gw, openshellv1alpha1.ExternalPortsReasonNoOperatorNamespace,
			"the operator runs outside a cluster namespace, where the relay's Service is not: nothing is published", ""), nil
	case r.Routes == nil:
		return Status(gw, openshellv1alpha1.ExternalPortsReasonRouteAPIUnavailable,
			"route.openshift.io is not served (or was not when the operator started): nothing is published", ""), nil
	}
	rt := Route(gw, r.Namespace)
	if taken, err := r.takenBy(ctx, &routev1.RouteList{}, rt, client.ObjectKeyFromObject(gw)); err != nil || taken != "" {
		return Status(gw, openshellv1alpha1.ExternalPortsReasonApplyFailed, taken, ""), err
	}
	if err := apply.Apply(ctx, r.Client, r.Routes, rt); err != nil {
		if apierrors.IsConflict(err) {
			return nil, err
		}
		return Status(gw, openshellv1alpha1.ExternalPortsReasonApplyFailed, status.Message(err), ""), nil
	}
	live := &routev1.Route{}
	if err := r.Routes.Get(ctx, client.ObjectKeyFromObject(rt), live); err != nil {
		if apierrors.IsNotFound(err) {
			return Status(gw, openshellv1alpha1.ExternalPortsReasonNotAdmitted, "the Route is being created", ""), nil
		}
		return nil, fmt.Errorf("get the external ports Route: %w", err)
	}
	reason, msg, host := Admission(live)
	url := ""
	if reason == openshellv1alpha1.ExternalPortsReasonAdmitted {
		url = "https://" + host
	}
	return Status(gw, reason, msg, url), nil
}

// report writes status.externalPorts (nil: none), once, when it changed.
func (r *Reconciler) report(ctx context.Context, gw *openshellv1alpha1.OpenShellGateway, st *openshellv1alpha1.ExternalPortsStatus) error {
	orig := gw.DeepCopy()
	if st != nil && gw.Status.ExternalPorts != nil {
		// Each condition keeps its transition time while its status holds.
		conds := slices.Clone(gw.Status.ExternalPorts.Conditions)
		for _, c := range st.Conditions {
			meta.SetStatusCondition(&conds, c)
		}
		st.Conditions = conds
	}
	gw.Status.ExternalPorts = st
	return status.Patch(ctx, r.Client, orig, gw)
}

// deleteRoute deletes the Route of the gateway key, if there is one.
func (r *Reconciler) deleteRoute(ctx context.Context, key types.NamespacedName) error {
	if r.Routes == nil {
		return nil
	}
	return r.deleteOwned(ctx, r.Routes, &routev1.Route{}, "Route", key)
}

// deleteOwned deletes the route of obj's kind (RouteName(key) in the
// operator's namespace, read from live) if its annotation says it is
// gateway key's; another gateway's is left, whatever its name.
func (r *Reconciler) deleteOwned(ctx context.Context, live client.Reader, obj client.Object, kind string, key types.NamespacedName) error {
	if r.Namespace == "" {
		return nil
	}
	if err := live.Get(ctx, client.ObjectKey{Namespace: r.Namespace, Name: RouteName(key)}, obj); err != nil {
		return client.IgnoreNotFound(err)
	}
	if !ownedBy(obj, key) {
		return nil
	}
	uid := obj.GetUID()
	if err := r.Client.Delete(ctx, obj, client.Preconditions{UID: &uid}); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("delete the external ports %s %s: %w", kind, obj.GetName(), err)
	}
	return nil
}

// takenBy says (a message) when an object of obj's name and list's kind
// is another gateway's. It reads from the API server, so that one that
// lost the cache's labels is not taken over either (listed by name: the
// bundle grants list, not get).
func (r *Reconciler) takenBy(ctx context.Context, list client.ObjectList, obj client.Object, key types.NamespacedName) (string, error) {
	if err := r.APIReader.List(ctx, list, client.InNamespace(obj.GetNamespace()), client.MatchingFields{"metadata.name": obj.GetName()}); err != nil {
		return "", fmt.Errorf("look up %s %s: %w", obj.GetObjectKind().GroupVersionKind().Kind, obj.GetName(), err)
	}
	taken := ""
	err := meta.EachListItem(list, func(o runtime.Object) error {
		if mo, ok := o.(client.Object); ok && taken == "" && !ownedBy(mo, key) {
			taken = fmt.Sprintf("%s %s/%s is another gateway's (%s): not overwritten", obj.GetObjectKind().GroupVersionKind().Kind,
				obj.GetNamespace(), obj.GetName(), mo.GetAnnotations()[AnnotationGateway])
		}
		return nil
	})
	return taken, err
}

// Wanted says whether the gateway's Platform Admin asked for a Route.
func Wanted(gw *openshellv1alpha1.OpenShellGateway) bool {
	return gw.Spec.ExternalPorts != nil && gw.Spec.ExternalPorts.Expose == openshellv1alpha1.ExternalPortsRoute
}

// RouteName is the Route's name for a gateway: short, so that the host
// the router makes of it (NAME-NAMESPACE.DOMAIN) stays one DNS label,
// which the router's wildcard certificate covers; 80 bits of hash, so
// that no gateway name is found whose Route name is another's (the
// controller still touches only a Route its annotation says is the
// gateway's).
func RouteName(gw types.NamespacedName) string {
	sum := sha256.Sum256([]byte(gw.Namespace + "/" + gw.Name))
	return "ports-" + hex.EncodeToString(sum[:10])
}

// ownedBy says whether a Route or HTTPRoute is gateway key's.
func ownedBy(o client.Object, key types.NamespacedName) bool {
	return o.GetAnnotations()[AnnotationGateway] == key.Namespace+"/"+key.Name
}

// Route renders the gateway's Route: to the relay's external port
// Service, reencrypt (the router verifies the relay's service-ca
// certificate), no plain HTTP, no wildcard, and the Platform Admin's host
// or one the router chooses. Pure; gw must want a Route (Wanted).
func Route(gw *openshellv1alpha1.OpenShellGateway, namespace string) *routev1.Route {
	return &routev1.Route{
		TypeMeta: metav1.TypeMeta{APIVersion: routev1.GroupVersion.String(), Kind: "Route"},
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: RouteName(client.ObjectKeyFromObject(gw)), Labels: objectLabels(gw),
			Annotations: map[string]string{
				AnnotationGateway:                     gw.Namespace + "/" + gw.Name,
				"haproxy.router.openshift.io/timeout": routeTimeout,
			}},
		Spec: routev1.RouteSpec{
			To:   routev1.RouteTargetReference{Kind: "Service", Name: RelayService, Weight: ptr.To[int32](100)},
			Port: &routev1.RoutePort{TargetPort: intstr.FromString("https")},
			TLS: &routev1.TLSConfig{Termination: routev1.TLSTerminationReencrypt,
				InsecureEdgeTerminationPolicy: routev1.InsecureEdgeTerminationPolicyNone},
			WildcardPolicy: routev1.WildcardPolicyNone,
			Host:           gw.Spec.ExternalPorts.Host,
		},
	}
}

// Admission reads a Route's admission by the routers
// (routeadmission.Read) as status.externalPorts reports it: the reason, a
// message, and the host admitted. Pure.
func Admission(rt *routev1.Route) (reason, msg, host string) {
	admitted, host, msg := routeadmission.Read(rt)
	switch {
	case admitted:
		return openshellv1alpha1.ExternalPortsReasonAdmitted, msg, host
	case msg == "":
		msg = "waiting for a router to admit the Route " + rt.Name
	}
	return openshellv1alpha1.ExternalPortsReasonNotAdmitted, msg, ""
}

// Status is status.externalPorts for a Published reason. Pure.
func Status(gw *openshellv1alpha1.OpenShellGateway, reason, msg, url string) *openshellv1alpha1.ExternalPortsStatus {
	cond := metav1.ConditionFalse
	if reason == openshellv1alpha1.ExternalPortsReasonAdmitted || reason == openshellv1alpha1.ExternalPortsReasonAccepted {
		cond = metav1.ConditionTrue
	}
	st := &openshellv1alpha1.ExternalPortsStatus{URL: url, ObservedGeneration: gw.Generation}
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: openshellv1alpha1.ExternalPortsConditionPublished, Status: cond,
		Reason: reason, Message: status.Clip(msg, 1024, "…"), ObservedGeneration: gw.Generation})
	return st
}

// gatewayOfRoute maps a Route or HTTPRoute back to its gateway.
func gatewayOfRoute(_ context.Context, o client.Object) []reconcile.Request {
	ns, name, ok := strings.Cut(o.GetAnnotations()[AnnotationGateway], "/")
	if !ok {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}}}
}

// sameHostGateways maps a gateway's event (old and new object alike) to
// the other gateways that ask for or hold one of its hosts: only they can
// gain or lose a host by it.
func (r *Reconciler) sameHostGateways(ctx context.Context, o client.Object) []reconcile.Request {
	gw, ok := o.(*openshellv1alpha1.OpenShellGateway)
	if !ok {
		return nil
	}
	return r.sharingHosts(ctx, claims(gw), client.ObjectKeyFromObject(gw))
}

// sharingHosts lists the gateways, other than skip, that ask to publish at
// one of hosts or hold one.
func (r *Reconciler) sharingHosts(ctx context.Context, hosts []string, skip client.ObjectKey) []reconcile.Request {
	if len(hosts) == 0 {
		return nil
	}
	list := &openshellv1alpha1.OpenShellGatewayList{}
	if err := r.Client.List(ctx, list); err != nil {
		return nil
	}
	var reqs []reconcile.Request
	for i := range list.Items {
		o := &list.Items[i]
		key := client.ObjectKeyFromObject(o)
		if key == skip || !(Wanted(o) || WantsHTTPRoute(o)) {
			continue
		}
		if slices.ContainsFunc(claims(o), func(h string) bool { return slices.Contains(hosts, h) }) {
			reqs = append(reqs, reconcile.Request{NamespacedName: key})
		}
	}
	return reqs
}

// hostChanged passes a gateway that appears, goes, or changes the hosts it
// asks for or holds, or whether it publishes.
var hostChanged = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	o, ok1 := e.ObjectOld.(*openshellv1alpha1.OpenShellGateway)
	n, ok2 := e.ObjectNew.(*openshellv1alpha1.OpenShellGateway)
	return ok1 && ok2 && (!slices.Equal(claims(o), claims(n)) || Wanted(o) != Wanted(n) || WantsHTTPRoute(o) != WantsHTTPRoute(n) ||
		o.DeletionTimestamp.IsZero() != n.DeletionTimestamp.IsZero())
}}

// gatewaysWithHTTPRoutes maps an object the HTTPRoutes share to every
// gateway that asks for one.
func (r *Reconciler) gatewaysWithHTTPRoutes(ctx context.Context, _ client.Object) []reconcile.Request {
	list := &openshellv1alpha1.OpenShellGatewayList{}
	if err := r.Client.List(ctx, list); err != nil {
		return nil
	}
	var reqs []reconcile.Request
	for i := range list.Items {
		if WantsHTTPRoute(&list.Items[i]) {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
	}
	return reqs
}

// gatewaysIn are the gateways of a namespace, and those sharing a host
// with one of them (a gateway that becomes served, or stops, changes who
// keeps its host).
func (r *Reconciler) gatewaysIn(ctx context.Context, o client.Object) []reconcile.Request {
	list := &openshellv1alpha1.OpenShellGatewayList{}
	if err := r.Client.List(ctx, list, client.InNamespace(o.GetName())); err != nil {
		return nil
	}
	var reqs []reconcile.Request
	for i := range list.Items {
		gw := &list.Items[i]
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(gw)})
		reqs = append(reqs, r.sharingHosts(ctx, claims(gw), client.ObjectKeyFromObject(gw))...)
	}
	return reqs
}

// SetupWithManager reconciles every gateway (one whose route is to go
// included) and every route and shared object of this controller's
// (drift is repaired).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	b := ctrl.NewControllerManagedBy(mgr).Named("externalports").
		For(&openshellv1alpha1.OpenShellGateway{})
	if r.Routes != nil {
		b = b.WatchesRawSource(source.Kind[client.Object](r.Routes, &routev1.Route{}, handler.EnqueueRequestsFromMapFunc(gatewayOfRoute)))
	}
	if r.GatewayAPI != nil {
		b = b.WatchesRawSource(source.Kind[client.Object](r.GatewayAPI, &gatewayv1.HTTPRoute{}, handler.EnqueueRequestsFromMapFunc(gatewayOfRoute))).
			WatchesRawSource(source.Kind[client.Object](r.GatewayAPI, &gatewayv1.BackendTLSPolicy{}, handler.EnqueueRequestsFromMapFunc(r.gatewaysWithHTTPRoutes))).
			WatchesRawSource(source.Kind[client.Object](r.GatewayAPI, &corev1.ConfigMap{}, handler.EnqueueRequestsFromMapFunc(r.gatewaysWithHTTPRoutes)))
	}
	// A gateway that takes, changes or gives up a host decides what the
	// other gateways of that host get (HostConflict).
	b = b.Watches(&openshellv1alpha1.OpenShellGateway{}, handler.EnqueueRequestsFromMapFunc(r.sameHostGateways),
		builder.WithPredicates(hostChanged))
	// A namespace that stops (or starts) being served changes what its
	// gateways get.
	b = b.WatchesMetadata(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(r.gatewaysIn),
		builder.WithPredicates(predicate.LabelChangedPredicate{}))
	return b.Complete(traced.Reconciler("externalports", status.RetryStale(r)))
}
