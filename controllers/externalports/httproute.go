package externalports

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	render "github.com/openshell/openshell-operator/internal/render/gateway"
)

// The Gateway API objects of expose HTTPRoute, besides each gateway's
// HTTPRoute: one BackendTLSPolicy for the relay's Service (a second one
// for the same Service would be Conflicted: the oldest wins), its CA
// bundle, and, off OpenShift, the relay's certificate and its CA.
const (
	// BackendTLSPolicyName names the relay Service's BackendTLSPolicy.
	BackendTLSPolicyName = RelayService
	// CABundleConfigMap holds the CA that signs the relay's external
	// certificate, in key ca.crt (what BackendTLSPolicy reads).
	CABundleConfigMap = "openshell-operator-relay-external-ports-ca"
	// RelayCertSecret is the relay's external certificate, mounted by the
	// relay's Deployment; OpenShift's service-ca issues it (the Service's
	// serving-cert annotation), elsewhere the operator does.
	RelayCertSecret = "openshell-operator-relay-external-ports-cert"
	// RelayCASecret holds the operator's CA for RelayCertSecret, off
	// OpenShift only; it is not mounted anywhere.
	RelayCASecret = "openshell-operator-relay-external-ports-ca"
	// ServiceCAConfigMap is where OpenShift publishes the service CA in
	// every namespace (key service-ca.crt).
	ServiceCAConfigMap = "openshift-service-ca.crt"
	// ServiceCAKey is that ConfigMap's key.
	ServiceCAKey = "service-ca.crt"
	// relayPort is the relay external Service's port
	// (config/relay/external_ports_service.yaml).
	relayPort = 8445
)

// WantsHTTPRoute says whether the gateway's Platform Admin asked for an
// HTTPRoute.
func WantsHTTPRoute(gw *openshellv1alpha1.OpenShellGateway) bool {
	return gw.Spec.ExternalPorts != nil && gw.Spec.ExternalPorts.Expose == openshellv1alpha1.ExternalPortsHTTPRoute &&
		gw.Spec.ExternalPorts.ParentRef != nil
}

// RelayHostname is the name the relay's external certificate is for and
// the Gateway verifies: the Service's cluster DNS name, as the service-ca
// writes it too.
func RelayHostname(namespace string) string {
	return RelayService + "." + namespace + ".svc"
}

// HTTPRoute renders the gateway's HTTPRoute: the Platform Admin's host on
// the one listener named, every path to the relay's external port
// Service, with the same 150 s request timeout as the Route (the relay
// gives a sandbox's service 2 minutes to answer). Pure; gw must want an
// HTTPRoute (WantsHTTPRoute).
func HTTPRoute(gw *openshellv1alpha1.OpenShellGateway, namespace string) *gatewayv1.HTTPRoute {
	ref := gw.Spec.ExternalPorts.ParentRef
	return &gatewayv1.HTTPRoute{
		TypeMeta: metav1.TypeMeta{APIVersion: gatewayv1.GroupVersion.String(), Kind: "HTTPRoute"},
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: RouteName(client.ObjectKeyFromObject(gw)), Labels: objectLabels(gw),
			Annotations: map[string]string{AnnotationGateway: gw.Namespace + "/" + gw.Name}},
		Spec: gatewayv1.HTTPRouteSpec{
			CommonRouteSpec: gatewayv1.CommonRouteSpec{ParentRefs: []gatewayv1.ParentReference{{
				Group:       ptr.To(gatewayv1.Group(gatewayv1.GroupName)),
				Kind:        ptr.To(gatewayv1.Kind("Gateway")),
				Namespace:   ptr.To(gatewayv1.Namespace(ref.Namespace)),
				Name:        gatewayv1.ObjectName(ref.Name),
				SectionName: ptr.To(gatewayv1.SectionName(ref.SectionName)),
			}}},
			Hostnames: []gatewayv1.Hostname{gatewayv1.Hostname(gw.Spec.ExternalPorts.Host)},
			Rules: []gatewayv1.HTTPRouteRule{{
				Matches: []gatewayv1.HTTPRouteMatch{{Path: &gatewayv1.HTTPPathMatch{
					Type: ptr.To(gatewayv1.PathMatchPathPrefix), Value: ptr.To("/")}}},
				BackendRefs: []gatewayv1.HTTPBackendRef{{BackendRef: gatewayv1.BackendRef{BackendObjectReference: gatewayv1.BackendObjectReference{
					Group: ptr.To(gatewayv1.Group("")), Kind: ptr.To(gatewayv1.Kind("Service")),
					Name: gatewayv1.ObjectName(RelayService), Port: ptr.To(gatewayv1.PortNumber(relayPort))}}}},
				Timeouts: &gatewayv1.HTTPRouteTimeouts{Request: ptr.To(gatewayv1.Duration(routeTimeout))},
			}},
		},
	}
}

// BackendTLSPolicy renders the policy by which a Gateway speaks TLS to the
// relay's external port Service and verifies its certificate: the CA in
// CABundleConfigMap, for the Service's DNS name. Pure.
func BackendTLSPolicy(namespace string) *gatewayv1.BackendTLSPolicy {
	return &gatewayv1.BackendTLSPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: gatewayv1.GroupVersion.String(), Kind: "BackendTLSPolicy"},
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: BackendTLSPolicyName, Labels: sharedLabels()},
		Spec: gatewayv1.BackendTLSPolicySpec{
			TargetRefs: []gatewayv1.LocalPolicyTargetReferenceWithSectionName{{LocalPolicyTargetReference: gatewayv1.LocalPolicyTargetReference{
				Group: "", Kind: "Service", Name: gatewayv1.ObjectName(RelayService)}}},
			Validation: gatewayv1.BackendTLSPolicyValidation{
				CACertificateRefs: []gatewayv1.LocalObjectReference{{Group: "", Kind: "ConfigMap", Name: gatewayv1.ObjectName(CABundleConfigMap)}},
				Hostname:          gatewayv1.PreciseHostname(RelayHostname(namespace)),
			},
		},
	}
}

// CABundle renders the ConfigMap the BackendTLSPolicy names. Pure.
func CABundle(namespace string, caPEM []byte) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: CABundleConfigMap, Labels: sharedLabels()},
		Data:       map[string]string{"ca.crt": string(caPEM)},
	}
}

// objectLabels are the labels of a gateway's Route or HTTPRoute: the
// caches select them.
func objectLabels(gw *openshellv1alpha1.OpenShellGateway) map[string]string {
	labels := render.Labels(gw, Component)
	// The gateway's name may not fit a label value.
	delete(labels, render.LabelInstance)
	return labels
}

// sharedLabels are the labels of the objects every HTTPRoute shares.
func sharedLabels() map[string]string {
	return map[string]string{render.LabelComponent: Component, render.LabelManagedBy: render.ManagedByValue,
		render.LabelName: "openshell-relay"}
}

// HTTPRouteState is what the Published condition of expose HTTPRoute is
// decided from. A nil object is one not found.
type HTTPRouteState struct {
	// Ref names the Gateway's listener; Host is the route's hostname.
	Ref  openshellv1alpha1.ExternalPortsParentRef
	Host string
	// Namespace is the operator's, where the HTTPRoute is.
	Namespace string
	// Route is the live HTTPRoute; Generation the generation this
	// reconcile applied (0 when it wrote nothing): a cache that has not
	// seen it yet holds an older route's status.
	Route      *gatewayv1.HTTPRoute
	Generation int64
	Parent     *gatewayv1.Gateway
	Policy     *gatewayv1.BackendTLSPolicy
}

// HTTPRoutePublished decides the Published condition of expose HTTPRoute
// from what the Gateway and its controller report: the named listener
// HTTPS and the operator's alone (its exact hostname, routes from the
// operator's namespace only, no listeners of other namespaces on the
// Gateway: another route there could take the callers' bearer tokens),
// the HTTPRoute accepted and its backend resolved on that listener for
// its current generation, and the BackendTLSPolicy accepted for that
// Gateway; and the URL it is published at (the listener's port named
// unless 443). Pure.
func HTTPRoutePublished(s HTTPRouteState) (reason, msg, url string) {
	ref := s.Ref
	gwName := ref.Namespace + "/" + ref.Name
	if s.Parent == nil {
		return openshellv1alpha1.ExternalPortsReasonListenerNotHTTPS, fmt.Sprintf("Gateway %s not found", gwName), ""
	}
	var listener *gatewayv1.Listener
	for i := range s.Parent.Spec.Listeners {
		if string(s.Parent.Spec.Listeners[i].Name) == ref.SectionName {
			listener = &s.Parent.Spec.Listeners[i]
		}
	}
	switch {
	case listener == nil:
		return openshellv1alpha1.ExternalPortsReasonListenerNotHTTPS, fmt.Sprintf("Gateway %s has no listener %q", gwName, ref.SectionName), ""
	case listener.Protocol != gatewayv1.HTTPSProtocolType:
		return openshellv1alpha1.ExternalPortsReasonListenerNotHTTPS, fmt.Sprintf(
			"listener %q of Gateway %s is %s, not HTTPS: callers' bearer tokens would cross the network in plain text; name an HTTPS listener",
			ref.SectionName, gwName, listener.Protocol), ""
	}
	if why := sharedListener(s, listener); why != "" {
		return openshellv1alpha1.ExternalPortsReasonListenerShared, fmt.Sprintf(
			"listener %q of Gateway %s %s: a route there from another namespace could take the callers' bearer tokens; "+
				"give the external ports a listener of their own: hostname %s, allowedRoutes from the operator's namespace %s only "+
				"(from: Same on a Gateway in it, or a selector on kubernetes.io/metadata.name), and no allowedListeners",
			ref.SectionName, gwName, why, s.Host, s.Namespace), ""
	}
	switch {
	case s.Route == nil:
		return openshellv1alpha1.ExternalPortsReasonRouteNotAccepted, "the HTTPRoute is being created", ""
	case s.Generation > s.Route.Generation:
		return openshellv1alpha1.ExternalPortsReasonRouteNotAccepted, fmt.Sprintf("waiting to read the HTTPRoute's generation %d", s.Generation), ""
	}
	if ok, why := routeAccepted(ref, s.Route); !ok {
		return openshellv1alpha1.ExternalPortsReasonRouteNotAccepted, why, ""
	}
	if ok, why := policyAccepted(ref, s.Policy); !ok {
		return openshellv1alpha1.ExternalPortsReasonBackendTLSNotAccepted, why, ""
	}
	url = "https://" + s.Host
	if listener.Port != 443 {
		url += fmt.Sprintf(":%d", listener.Port)
	}
	return openshellv1alpha1.ExternalPortsReasonAccepted, fmt.Sprintf("Gateway %s accepted the HTTPRoute %s on its HTTPS listener %q and the BackendTLSPolicy %s",
		gwName, s.Route.Name, ref.SectionName, BackendTLSPolicyName), url
}

// sharedListener says how another party's route could receive requests
// for the host ("" when none can): the named listener's hostname must be
// exactly the host, and it and every other listener of the Gateway whose
// hostname covers the host on the same port (any protocol: a Gateway
// without listener isolation may route by the longest path across the
// listeners of a port) must admit routes from the operator's namespace
// only; and the Gateway must admit no listeners of other namespaces.
func sharedListener(s HTTPRouteState, named *gatewayv1.Listener) string {
	if named.Hostname == nil || !strings.EqualFold(string(*named.Hostname), s.Host) {
		got := "none"
		if named.Hostname != nil {
			got = string(*named.Hostname)
		}
		return fmt.Sprintf("has hostname %s, not exactly %s", got, s.Host)
	}
	if al := s.Parent.Spec.AllowedListeners; al != nil && al.Namespaces != nil && al.Namespaces.From != nil &&
		*al.Namespaces.From != gatewayv1.NamespacesFromNone {
		return fmt.Sprintf("is on a Gateway that admits listeners from other namespaces (allowedListeners from %s)", *al.Namespaces.From)
	}
	for i := range s.Parent.Spec.Listeners {
		l := &s.Parent.Spec.Listeners[i]
		if l != named && (l.Port != named.Port || !coversHost(l.Hostname, s.Host)) {
			continue
		}
		if from, ok := routesFromOperatorOnly(s.Parent, l, s.Namespace); !ok {
			if l == named {
				return fmt.Sprintf("admits routes from namespaces other than %s (allowedRoutes from %s)", s.Namespace, from)
			}
			return fmt.Sprintf("shares its Gateway with listener %q, whose hostname covers %s too and which admits routes from other namespaces (allowedRoutes from %s)",
				l.Name, s.Host, from)
		}
	}
	return ""
}

// coversHost says whether a listener of this hostname (nil: any) may take
// requests for host.
func coversHost(hostname *gatewayv1.Hostname, host string) bool {
	if hostname == nil || *hostname == "" {
		return true
	}
	h := strings.ToLower(string(*hostname))
	if rest, ok := strings.CutPrefix(h, "*"); ok {
		return strings.HasSuffix(strings.ToLower(host), rest)
	}
	return strings.EqualFold(h, host)
}

// routesFromOperatorOnly says whether the listener admits routes from
// namespace ns alone (from Same on a Gateway in ns, the default, or a
// selector naming ns only), and what it admits from.
func routesFromOperatorOnly(parent *gatewayv1.Gateway, l *gatewayv1.Listener, ns string) (gatewayv1.FromNamespaces, bool) {
	from, sel := gatewayv1.NamespacesFromSame, (*metav1.LabelSelector)(nil)
	if ar := l.AllowedRoutes; ar != nil && ar.Namespaces != nil {
		if ar.Namespaces.From != nil {
			from = *ar.Namespaces.From
		}
		sel = ar.Namespaces.Selector
	}
	switch from {
	case gatewayv1.NamespacesFromSame:
		return from, parent.Namespace == ns
	case gatewayv1.NamespacesFromSelector:
		return from, onlyNamespace(sel, ns)
	}
	return from, false
}

// onlyNamespace says whether sel selects namespace ns by its name label
// and nothing else.
func onlyNamespace(sel *metav1.LabelSelector, ns string) bool {
	const name = "kubernetes.io/metadata.name"
	switch {
	case sel == nil:
		return false
	case len(sel.MatchExpressions) == 0:
		return len(sel.MatchLabels) == 1 && sel.MatchLabels[name] == ns
	case len(sel.MatchLabels) == 0 && len(sel.MatchExpressions) == 1:
		e := sel.MatchExpressions[0]
		return e.Key == name && e.Operator == metav1.LabelSelectorOpIn && len(e.Values) == 1 && e.Values[0] == ns
	}
	return false
}

// routeAccepted reads the route's status for the named parent: Accepted
// and ResolvedRefs, both True for the route's current generation.
func routeAccepted(ref openshellv1alpha1.ExternalPortsParentRef, route *gatewayv1.HTTPRoute) (bool, string) {
	for _, p := range route.Status.Parents {
		pr := p.ParentRef
		if string(pr.Name) != ref.Name || pr.Namespace == nil || string(*pr.Namespace) != ref.Namespace ||
			pr.SectionName == nil || string(*pr.SectionName) != ref.SectionName {
			continue
		}
		for _, typ := range []string{string(gatewayv1.RouteConditionAccepted), string(gatewayv1.RouteConditionResolvedRefs)} {
			c := meta.FindStatusCondition(p.Conditions, typ)
			switch {
			case c == nil:
				return false, fmt.Sprintf("waiting for the Gateway's controller to report %s on the HTTPRoute", typ)
			case c.ObservedGeneration != route.Generation:
				return false, fmt.Sprintf("waiting for the Gateway's controller to read the HTTPRoute's generation %d", route.Generation)
			case c.Status != metav1.ConditionTrue:
				return false, fmt.Sprintf("the Gateway reports the HTTPRoute %s=%s (%s): %s", typ, c.Status, c.Reason, c.Message)
			}
		}
		return true, ""
	}
	return false, fmt.Sprintf("waiting for Gateway %s/%s to report on the HTTPRoute (its listener must admit routes from the operator's namespace)",
		ref.Namespace, ref.Name)
}

// policyAccepted reads the BackendTLSPolicy's status for the Gateway.
func policyAccepted(ref openshellv1alpha1.ExternalPortsParentRef, policy *gatewayv1.BackendTLSPolicy) (bool, string) {
	if policy == nil {
		return false, "the BackendTLSPolicy is being created"
	}
	for _, a := range policy.Status.Ancestors {
		ar := a.AncestorRef
		if string(ar.Name) != ref.Name || ar.Namespace == nil || string(*ar.Namespace) != ref.Namespace ||
			(ar.Kind != nil && *ar.Kind != "Gateway") {
			continue
		}
		c := meta.FindStatusCondition(a.Conditions, string(gatewayv1.PolicyConditionAccepted))
		switch {
		case c == nil:
			continue
		case c.ObservedGeneration != policy.Generation:
			return false, fmt.Sprintf("waiting for the Gateway's controller to read the BackendTLSPolicy's generation %d", policy.Generation)
		case c.Status != metav1.ConditionTrue:
			return false, fmt.Sprintf("the Gateway reports the BackendTLSPolicy %s Accepted=%s (%s): %s", policy.Name, c.Status, c.Reason, c.Message)
		}
		if r := meta.FindStatusCondition(a.Conditions, string(gatewayv1.BackendTLSPolicyConditionResolvedRefs)); r != nil && r.Status != metav1.ConditionTrue {
			return false, fmt.Sprintf("the Gateway reports the BackendTLSPolicy %s ResolvedRefs=%s (%s): %s", policy.Name, r.Status, r.Reason, r.Message)
		}
		return true, ""
	}
	return false, fmt.Sprintf("waiting for Gateway %s/%s to accept the BackendTLSPolicy %s (an implementation without BackendTLSPolicy cannot reach the relay, which speaks only TLS)",
		ref.Namespace, ref.Name, policy.Name)
}

// VerifyRelayCert checks the relay's certificate as the Gateway will: it
// chains to caPEM and is valid for hostname at now. Pure.
func VerifyRelayCert(certPEM, caPEM []byte, hostname string, now time.Time) error {
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return errors.New("the CA bundle holds no certificate")
	}
	block, _ := pem.Decode(certPEM)
	if block == nil {
		return errors.New("no PEM certificate")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return err
	}
	_, err = cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: hostname, CurrentTime: now})
	return err
}
