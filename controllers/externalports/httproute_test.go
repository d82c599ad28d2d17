package externalports_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/controllers/externalports"
	"github.com/openshell/openshell-operator/internal/pki"
)

var listener = openshellv1alpha1.ExternalPortsParentRef{Namespace: "gateways", Name: "public", SectionName: "https"}

func httpRouteGateway() *openshellv1alpha1.OpenShellGateway {
	ref := listener
	return gateway("platform", "gw", &openshellv1alpha1.ExternalPorts{Expose: openshellv1alpha1.ExternalPortsHTTPRoute,
		Host: "ports.example.com", ParentRef: &ref})
}

// TestHTTPRouteRendering: the gateway's HTTPRoute attaches to the one
// listener named (never a whole Gateway, which may have a plain HTTP
// listener too), for the Platform Admin's host, to the relay's external
// port Service; the BackendTLSPolicy verifies the relay's certificate for
// the Service's DNS name against the CA bundle, which holds key ca.crt.
func TestHTTPRouteRendering(t *testing.T) {
	g := NewWithT(t)
	gw := httpRouteGateway()
	g.Expect(externalports.WantsHTTPRoute(gw)).To(BeTrue())
	g.Expect(externalports.Wanted(gw)).To(BeFalse(), "no OpenShift Route")

	rt := externalports.HTTPRoute(gw, "openshell-operator")
	g.Expect(rt.Namespace).To(Equal("openshell-operator"))
	g.Expect(rt.Name).To(Equal(externalports.RouteName(types.NamespacedName{Namespace: gw.Namespace, Name: gw.Name})), "named as the Route is")
	g.Expect(rt.Annotations).To(HaveKeyWithValue(externalports.AnnotationGateway, "platform/gw"))
	g.Expect(rt.Labels).To(HaveKeyWithValue("app.kubernetes.io/component", externalports.Component))
	g.Expect(rt.Spec.ParentRefs).To(HaveLen(1))
	p := rt.Spec.ParentRefs[0]
	g.Expect(string(p.Name)).To(Equal("public"))
	g.Expect(p.Namespace).To(HaveValue(BeEquivalentTo("gateways")))
	g.Expect(p.SectionName).To(HaveValue(BeEquivalentTo("https")), "one listener, never the whole Gateway")
	g.Expect(p.Kind).To(HaveValue(BeEquivalentTo("Gateway")))
	g.Expect(rt.Spec.Hostnames).To(ConsistOf(gatewayv1.Hostname("ports.example.com")))
	g.Expect(rt.Spec.Rules).To(HaveLen(1))
	b := rt.Spec.Rules[0].BackendRefs
	g.Expect(b).To(HaveLen(1))
	g.Expect(string(b[0].Name)).To(Equal(externalports.RelayService))
	g.Expect(b[0].Port).To(HaveValue(BeEquivalentTo(8445)))
	g.Expect(rt.Spec.Rules[0].Timeouts.Request).To(HaveValue(BeEquivalentTo("150s")))

	pol := externalports.BackendTLSPolicy("openshell-operator")
	g.Expect(pol.Spec.TargetRefs).To(HaveLen(1))
	g.Expect(string(pol.Spec.TargetRefs[0].Kind)).To(Equal("Service"))
	g.Expect(string(pol.Spec.TargetRefs[0].Name)).To(Equal(externalports.RelayService))
	g.Expect(string(pol.Spec.Validation.Hostname)).To(Equal(externalports.RelayService + ".openshell-operator.svc"))
	g.Expect(pol.Spec.Validation.CACertificateRefs).To(HaveLen(1))
	g.Expect(string(pol.Spec.Validation.CACertificateRefs[0].Name)).To(Equal(externalports.CABundleConfigMap))
	g.Expect(externalports.CABundle("openshell-operator", []byte("PEM")).Data).To(Equal(map[string]string{"ca.crt": "PEM"}))

	// A Route exposure, or an HTTPRoute without a listener, wants none.
	g.Expect(externalports.WantsHTTPRoute(gateway("p", "gw", &openshellv1alpha1.ExternalPorts{Expose: openshellv1alpha1.ExternalPortsRoute}))).To(BeFalse())
	g.Expect(externalports.WantsHTTPRoute(gateway("p", "gw", &openshellv1alpha1.ExternalPorts{Expose: openshellv1alpha1.ExternalPortsHTTPRoute}))).To(BeFalse())
}

func cond(typ string, status metav1.ConditionStatus, reason string, gen int64) metav1.Condition {
	return metav1.Condition{Type: typ, Status: status, Reason: reason, Message: reason + " message", ObservedGeneration: gen}
}

// TestHTTPRoutePublished: Published is True only when the Gateway's
// listener is HTTPS and the operator's alone, the Gateway accepted the
// route and resolved its backend for that listener (for the route's
// current generation), and accepted the BackendTLSPolicy; every other
// state says why.
func TestHTTPRoutePublished(t *testing.T) {
	const opNS = "openshell-operator"
	listenerFor := func(proto gatewayv1.ProtocolType, host string, ar *gatewayv1.AllowedRoutes) gatewayv1.Listener {
		l := gatewayv1.Listener{Name: "https", Protocol: proto, Port: 443, AllowedRoutes: ar}
		if host != "" {
			l.Hostname = ptr.To(gatewayv1.Hostname(host))
		}
		return l
	}
	from := func(f gatewayv1.FromNamespaces, sel *metav1.LabelSelector) *gatewayv1.AllowedRoutes {
		return &gatewayv1.AllowedRoutes{Namespaces: &gatewayv1.RouteNamespaces{From: ptr.To(f), Selector: sel}}
	}
	byName := &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": opNS}}
	parentWith := func(ns string, ls ...gatewayv1.Listener) *gatewayv1.Gateway {
		return &gatewayv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "public"},
			Spec: gatewayv1.GatewaySpec{Listeners: append([]gatewayv1.Listener{{Name: "http", Protocol: gatewayv1.HTTPProtocolType, Port: 80}}, ls...)}}
	}
	https := parentWith("gateways", listenerFor(gatewayv1.HTTPSProtocolType, "ports.example.com", from(gatewayv1.NamespacesFromSelector, byName)))
	withListener := func(gw *gatewayv1.Gateway, l gatewayv1.Listener) *gatewayv1.Gateway {
		out := gw.DeepCopy()
		out.Spec.Listeners = append(out.Spec.Listeners, l)
		return out
	}
	listenerSets := https.DeepCopy()
	listenerSets.Spec.AllowedListeners = &gatewayv1.AllowedListeners{Namespaces: &gatewayv1.ListenerNamespaces{From: ptr.To(gatewayv1.NamespacesFromAll)}}
	route := func(parent gatewayv1.ParentReference, conds ...metav1.Condition) *gatewayv1.HTTPRoute {
		rt := &gatewayv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Name: "ports-x", Generation: 2}}
		rt.Status.Parents = []gatewayv1.RouteParentStatus{{ParentRef: parent, ControllerName: "example.com/gateway", Conditions: conds}}
		return rt
	}
	ours := gatewayv1.ParentReference{Namespace: ptr.To(gatewayv1.Namespace("gateways")), Name: "public", SectionName: ptr.To(gatewayv1.SectionName("https"))}
	otherListener := gatewayv1.ParentReference{Namespace: ptr.To(gatewayv1.Namespace("gateways")), Name: "public", SectionName: ptr.To(gatewayv1.SectionName("http"))}
	accepted := []metav1.Condition{cond("Accepted", metav1.ConditionTrue, "Accepted", 2), cond("ResolvedRefs", metav1.ConditionTrue, "ResolvedRefs", 2)}
	policy := func(gen int64, conds ...metav1.Condition) *gatewayv1.BackendTLSPolicy {
		p := &gatewayv1.BackendTLSPolicy{ObjectMeta: metav1.ObjectMeta{Name: externalports.BackendTLSPolicyName, Generation: gen}}
		p.Status.Ancestors = []gatewayv1.PolicyAncestorStatus{{AncestorRef: gatewayv1.ParentReference{Namespace: ptr.To(gatewayv1.Namespace("gateways")), Name: "public"},
			ControllerName: "example.com/gateway", Conditions: conds}}
		return p
	}
	policyOK := policy(1, cond("Accepted", metav1.ConditionTrue, "Accepted", 1), cond("ResolvedRefs", metav1.ConditionTrue, "ResolvedRefs", 1))
	state := func(rt *gatewayv1.HTTPRoute, parent *gatewayv1.Gateway, pol *gatewayv1.BackendTLSPolicy) externalports.HTTPRouteState {
		return externalports.HTTPRouteState{Ref: listener, Host: "ports.example.com", Namespace: opNS, Route: rt, Parent: parent, Policy: pol}
	}
	stale := state(route(ours, accepted...), https, policyOK)
	stale.Generation = 3
	// The Gateway in the operator's own namespace, admitting routes from
	// there only (Same, the default).
	inOpNS := gatewayv1.ParentReference{Namespace: ptr.To(gatewayv1.Namespace(opNS)), Name: "public", SectionName: ptr.To(gatewayv1.SectionName("https"))}
	polOpNS := policyOK.DeepCopy()
	polOpNS.Status.Ancestors[0].AncestorRef.Namespace = ptr.To(gatewayv1.Namespace(opNS))
	sameNamespace := state(route(inOpNS, accepted...), parentWith(opNS, listenerFor(gatewayv1.HTTPSProtocolType, "ports.example.com", nil)), polOpNS)
	sameNamespace.Ref.Namespace = opNS

	for _, tc := range []struct {
		name           string
		state          externalports.HTTPRouteState
		reason, substr string
	}{
		{"all accepted on the operator's own HTTPS listener", state(route(ours, accepted...), https, policyOK), openshellv1alpha1.ExternalPortsReasonAccepted, "accepted the HTTPRoute"},
		{"a Gateway in the operator's namespace, routes from Same", sameNamespace, openshellv1alpha1.ExternalPortsReasonAccepted, "Gateway " + opNS + "/public accepted"},
		{"no Gateway", state(route(ours, accepted...), nil, policyOK), openshellv1alpha1.ExternalPortsReasonListenerNotHTTPS, "not found"},
		{"no such listener", state(route(ours, accepted...), &gatewayv1.Gateway{}, policyOK), openshellv1alpha1.ExternalPortsReasonListenerNotHTTPS, `no listener "https"`},
		{"a plain HTTP listener, even accepted", state(route(ours, accepted...),
			parentWith("gateways", listenerFor(gatewayv1.HTTPProtocolType, "ports.example.com", from(gatewayv1.NamespacesFromSelector, byName))), policyOK),
			openshellv1alpha1.ExternalPortsReasonListenerNotHTTPS, "plain text"},
		{"a listener without a hostname", state(route(ours, accepted...),
			parentWith("gateways", listenerFor(gatewayv1.HTTPSProtocolType, "", from(gatewayv1.NamespacesFromSelector, byName))), policyOK),
			openshellv1alpha1.ExternalPortsReasonListenerShared, "hostname none"},
		{"a wildcard listener", state(route(ours, accepted...),
			parentWith("gateways", listenerFor(gatewayv1.HTTPSProtocolType, "*.example.com", from(gatewayv1.NamespacesFromSelector, byName))), policyOK),
			openshellv1alpha1.ExternalPortsReasonListenerShared, "not exactly ports.example.com"},
		{"routes admitted from every namespace", state(route(ours, accepted...),
			parentWith("gateways", listenerFor(gatewayv1.HTTPSProtocolType, "ports.example.com", from(gatewayv1.NamespacesFromAll, nil))), policyOK),
			openshellv1alpha1.ExternalPortsReasonListenerShared, "allowedRoutes from All"},
		{"routes from Same on a Gateway elsewhere", state(route(ours, accepted...),
			parentWith("gateways", listenerFor(gatewayv1.HTTPSProtocolType, "ports.example.com", nil)), policyOK),
			openshellv1alpha1.ExternalPortsReasonListenerShared, "allowedRoutes from Same"},
		{"a selector wider than the operator's namespace", state(route(ours, accepted...),
			parentWith("gateways", listenerFor(gatewayv1.HTTPSProtocolType, "ports.example.com", from(gatewayv1.NamespacesFromSelector,
				&metav1.LabelSelector{MatchLabels: map[string]string{"gateway-access": "true"}}))), policyOK),
			openshellv1alpha1.ExternalPortsReasonListenerShared, "allowedRoutes from Selector"},
		{"listeners of other namespaces on the Gateway", state(route(ours, accepted...), listenerSets, policyOK),
			openshellv1alpha1.ExternalPortsReasonListenerShared, "allowedListeners from All"},
		{"a wildcard listener on the same port open to every namespace", state(route(ours, accepted...), withListener(https,
			gatewayv1.Listener{Name: "apps", Protocol: gatewayv1.HTTPSProtocolType, Port: 443, Hostname: ptr.To(gatewayv1.Hostname("*.example.com")),
				AllowedRoutes: from(gatewayv1.NamespacesFromAll, nil)}), policyOK),
			openshellv1alpha1.ExternalPortsReasonListenerShared, `shares its Gateway with listener "apps"`},
		{"a listener without hostname on the same port, routes from the Gateway's namespace", state(route(ours, accepted...), withListener(https,
			gatewayv1.Listener{Name: "any", Protocol: gatewayv1.HTTPSProtocolType, Port: 443}), policyOK),
			openshellv1alpha1.ExternalPortsReasonListenerShared, `shares its Gateway with listener "any"`},
		{"an open listener on another port does not take the host's requests", state(route(ours, accepted...), withListener(https,
			gatewayv1.Listener{Name: "alt", Protocol: gatewayv1.HTTPSProtocolType, Port: 8443, AllowedRoutes: from(gatewayv1.NamespacesFromAll, nil)}), policyOK),
			openshellv1alpha1.ExternalPortsReasonAccepted, "accepted the HTTPRoute"},
		{"an open listener for another host on the same port", state(route(ours, accepted...), withListener(https,
			gatewayv1.Listener{Name: "web", Protocol: gatewayv1.HTTPSProtocolType, Port: 443, Hostname: ptr.To(gatewayv1.Hostname("web.example.com")),
				AllowedRoutes: from(gatewayv1.NamespacesFromAll, nil)}), policyOK),
			openshellv1alpha1.ExternalPortsReasonAccepted, "accepted the HTTPRoute"},
		{"a selector naming the operator's namespace by an In expression", state(route(ours, accepted...),
			parentWith("gateways", listenerFor(gatewayv1.HTTPSProtocolType, "ports.example.com", from(gatewayv1.NamespacesFromSelector,
				&metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpIn, Values: []string{opNS}}}}))), policyOK),
			openshellv1alpha1.ExternalPortsReasonAccepted, "accepted the HTTPRoute"},
		{"a NotIn expression", state(route(ours, accepted...),
			parentWith("gateways", listenerFor(gatewayv1.HTTPSProtocolType, "ports.example.com", from(gatewayv1.NamespacesFromSelector,
				&metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"other"}}}}))), policyOK),
			openshellv1alpha1.ExternalPortsReasonListenerShared, "allowedRoutes from Selector"},
		{"an In expression naming another namespace too", state(route(ours, accepted...),
			parentWith("gateways", listenerFor(gatewayv1.HTTPSProtocolType, "ports.example.com", from(gatewayv1.NamespacesFromSelector,
				&metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpIn, Values: []string{opNS, "other"}}}}))), policyOK),
			openshellv1alpha1.ExternalPortsReasonListenerShared, "allowedRoutes from Selector"},
		{"the route not created yet", state(nil, https, policyOK), openshellv1alpha1.ExternalPortsReasonRouteNotAccepted, "being created"},
		{"the cache behind the generation just applied", stale, openshellv1alpha1.ExternalPortsReasonRouteNotAccepted, "generation 3"},
		{"no report for the listener", state(route(otherListener, accepted...), https, policyOK), openshellv1alpha1.ExternalPortsReasonRouteNotAccepted,
			"admit routes from the operator's namespace"},
		{"refused by the listener", state(route(ours, cond("Accepted", metav1.ConditionFalse, "NotAllowedByListeners", 2), cond("ResolvedRefs", metav1.ConditionTrue, "ResolvedRefs", 2)),
			https, policyOK), openshellv1alpha1.ExternalPortsReasonRouteNotAccepted, "NotAllowedByListeners"},
		{"backend not resolved", state(route(ours, cond("Accepted", metav1.ConditionTrue, "Accepted", 2), cond("ResolvedRefs", metav1.ConditionFalse, "BackendNotFound", 2)),
			https, policyOK), openshellv1alpha1.ExternalPortsReasonRouteNotAccepted, "BackendNotFound"},
		{"a report for an older generation", state(route(ours, cond("Accepted", metav1.ConditionTrue, "Accepted", 1), cond("ResolvedRefs", metav1.ConditionTrue, "ResolvedRefs", 1)),
			https, policyOK), openshellv1alpha1.ExternalPortsReasonRouteNotAccepted, "generation 2"},
		{"a report without a generation", state(route(ours, cond("Accepted", metav1.ConditionTrue, "Accepted", 0), cond("ResolvedRefs", metav1.ConditionTrue, "ResolvedRefs", 0)),
			https, policyOK), openshellv1alpha1.ExternalPortsReasonRouteNotAccepted, "generation 2"},
		{"no policy yet", state(route(ours, accepted...), https, nil), openshellv1alpha1.ExternalPortsReasonBackendTLSNotAccepted, "being created"},
		{"policy not reported (no BackendTLSPolicy support)", state(route(ours, accepted...), https, policy(1)), openshellv1alpha1.ExternalPortsReasonBackendTLSNotAccepted, "speaks only TLS"},
		{"policy reported for an older generation", state(route(ours, accepted...), https, policy(2, cond("Accepted", metav1.ConditionTrue, "Accepted", 1))),
			openshellv1alpha1.ExternalPortsReasonBackendTLSNotAccepted, "generation 2"},
		{"policy refused", state(route(ours, accepted...), https, policy(1, cond("Accepted", metav1.ConditionFalse, "NoValidCACertificate", 1))),
			openshellv1alpha1.ExternalPortsReasonBackendTLSNotAccepted, "NoValidCACertificate"},
		{"policy's CA not resolved", state(route(ours, accepted...), https, policy(1, cond("Accepted", metav1.ConditionTrue, "Accepted", 1), cond("ResolvedRefs", metav1.ConditionFalse, "InvalidCACertificateRef", 1))),
			openshellv1alpha1.ExternalPortsReasonBackendTLSNotAccepted, "InvalidCACertificateRef"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			reason, msg, url := externalports.HTTPRoutePublished(tc.state)
			g.Expect(reason).To(Equal(tc.reason), msg)
			g.Expect(msg).To(ContainSubstring(tc.substr))
			if reason == openshellv1alpha1.ExternalPortsReasonAccepted {
				g.Expect(url).To(HavePrefix("https://ports.example.com"))
			} else {
				g.Expect(url).To(BeEmpty())
			}
			st := externalports.Status(httpRouteGateway(), reason, msg, "")
			c := st.Conditions[0]
			g.Expect(c.Status == metav1.ConditionTrue).To(Equal(reason == openshellv1alpha1.ExternalPortsReasonAccepted))
		})
	}
}

// TestHostRivals: a gateway whose host an older gateway (of either
// exposure, by its spec or its admitted Route) already asks for gets
// that one back; a younger one, one that publishes nothing, one being
// deleted and another host do not count.
func TestHostRivals(t *testing.T) {
	g := NewWithT(t)
	at := func(ns, name string, sec int64, ports *openshellv1alpha1.ExternalPorts) openshellv1alpha1.OpenShellGateway {
		gw := gateway(ns, name, ports)
		gw.CreationTimestamp = metav1.Unix(sec, 0)
		return *gw
	}
	host := func(h string) *openshellv1alpha1.ExternalPorts {
		return &openshellv1alpha1.ExternalPorts{Expose: openshellv1alpha1.ExternalPortsHTTPRoute, Host: h, ParentRef: &listener}
	}
	me := at("b", "gw", 100, host("Ports.Example.com"))
	routeOlder := at("a", "route", 50, &openshellv1alpha1.ExternalPorts{Expose: openshellv1alpha1.ExternalPortsRoute})
	routeOlder.Status.ExternalPorts = &openshellv1alpha1.ExternalPortsStatus{URL: "https://ports.example.com"}
	sameSecond := at("a", "gw", 100, host("ports.example.com"))
	younger := at("c", "gw", 200, host("ports.example.com"))
	off := at("d", "gw", 10, &openshellv1alpha1.ExternalPorts{Expose: openshellv1alpha1.ExternalPortsNone, Host: "ports.example.com"})
	going := at("e", "gw", 10, host("ports.example.com"))
	going.DeletionTimestamp = ptr.To(metav1.Unix(300, 0))
	other := at("f", "gw", 10, host("other.example.com"))
	all := []openshellv1alpha1.OpenShellGateway{me, routeOlder, sameSecond, younger, off, going, other}

	var got []string
	for _, o := range externalports.HostRivals(&me, all) {
		got = append(got, o.Namespace+"/"+o.Name)
	}
	g.Expect(got).To(ConsistOf("a/route", "a/gw"), "older ones; the same second breaks by namespace/name")
	g.Expect(externalports.HostRivals(&younger, all)).To(HaveLen(3))
	g.Expect(externalports.HostRivals(&routeOlder, all)).To(BeEmpty(), "the first one keeps its host")
	g.Expect(externalports.HostOf(&me)).To(Equal("ports.example.com"))

	// A host in use stays with the gateway published there: an older
	// gateway asking for it later does not take it away.
	published := at("g", "live", 500, host("live.example.com"))
	published.Status.ExternalPorts = externalports.Status(&published, openshellv1alpha1.ExternalPortsReasonAccepted, "", "https://live.example.com")
	latecomer := at("h", "old", 1, host("live.example.com"))
	pair := []openshellv1alpha1.OpenShellGateway{published, latecomer}
	g.Expect(externalports.HostRivals(&published, pair)).To(BeEmpty())
	g.Expect(externalports.HostRivals(&latecomer, pair)).To(HaveLen(1))
	g.Expect(externalports.PublishedHost(&published)).To(Equal("live.example.com"))
	// Moving away, it still holds the host it is published at until it
	// is published elsewhere.
	moved := published.DeepCopy()
	moved.Spec.ExternalPorts.Host = "new.example.com"
	g.Expect(externalports.HostRivals(&latecomer, []openshellv1alpha1.OpenShellGateway{*moved, latecomer})).To(HaveLen(1))
	// A gateway held back keeps its URL (Published False): its claim, not
	// a publication.
	held := at("i", "held", 600, &openshellv1alpha1.ExternalPorts{Expose: openshellv1alpha1.ExternalPortsRoute})
	held.Status.ExternalPorts = externalports.Status(&held, openshellv1alpha1.ExternalPortsReasonHostConflict, "", "https://live.example.com")
	g.Expect(externalports.PublishedHost(&held)).To(BeEmpty())
	g.Expect(externalports.HostRivals(&held, []openshellv1alpha1.OpenShellGateway{published, held})).To(HaveLen(1))
}

// TestVerifyRelayCert: the relay's certificate passes only as the Gateway
// would take it: for the Service's DNS name, under the bundle's CA, in
// its validity.
func TestVerifyRelayCert(t *testing.T) {
	g := NewWithT(t)
	now := time.Now()
	ca, err := pki.NewCA("ca", time.Hour, now)
	g.Expect(err).NotTo(HaveOccurred())
	other, err := pki.NewCA("other", time.Hour, now)
	g.Expect(err).NotTo(HaveOccurred())
	host := externalports.RelayHostname("openshell-operator")
	leaf, err := ca.Issue(pki.LeafRequest{CommonName: "relay", DNSNames: []string{host}, Server: true, Validity: time.Hour}, now)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(externalports.VerifyRelayCert(leaf.CertPEM, ca.CertPEM, host, now)).To(Succeed())
	g.Expect(externalports.VerifyRelayCert(leaf.CertPEM, other.CertPEM, host, now)).NotTo(Succeed(), "another CA")
	g.Expect(externalports.VerifyRelayCert(leaf.CertPEM, ca.CertPEM, externalports.RelayHostname("elsewhere"), now)).NotTo(Succeed(), "another name")
	g.Expect(externalports.VerifyRelayCert(leaf.CertPEM, ca.CertPEM, host, now.Add(2*time.Hour))).NotTo(Succeed(), "expired")
	g.Expect(externalports.VerifyRelayCert(nil, ca.CertPEM, host, now)).NotTo(Succeed(), "no certificate")
	g.Expect(externalports.VerifyRelayCert(leaf.CertPEM, nil, host, now)).NotTo(Succeed(), "no CA")
}

// TestHTTPRoutePublishedURL: the URL names the listener's port unless it
// is 443, so callers reach the listener that was checked.
func TestHTTPRoutePublishedURL(t *testing.T) {
	g := NewWithT(t)
	gen := int64(1)
	parent := &gatewayv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: "openshell-operator", Name: "public"},
		Spec: gatewayv1.GatewaySpec{Listeners: []gatewayv1.Listener{{Name: "https", Protocol: gatewayv1.HTTPSProtocolType, Port: 8443,
			Hostname: ptr.To(gatewayv1.Hostname("ports.example.com"))}}}}
	ref := gatewayv1.ParentReference{Namespace: ptr.To(gatewayv1.Namespace("openshell-operator")), Name: "public", SectionName: ptr.To(gatewayv1.SectionName("https"))}
	rt := &gatewayv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Name: "ports-x", Generation: gen}}
	rt.Status.Parents = []gatewayv1.RouteParentStatus{{ParentRef: ref, Conditions: []metav1.Condition{
		cond("Accepted", metav1.ConditionTrue, "Accepted", gen), cond("ResolvedRefs", metav1.ConditionTrue, "ResolvedRefs", gen)}}}
	pol := &gatewayv1.BackendTLSPolicy{ObjectMeta: metav1.ObjectMeta{Name: externalports.BackendTLSPolicyName, Generation: gen}}
	pol.Status.Ancestors = []gatewayv1.PolicyAncestorStatus{{AncestorRef: gatewayv1.ParentReference{Namespace: ref.Namespace, Name: "public"},
		Conditions: []metav1.Condition{cond("Accepted", metav1.ConditionTrue, "Accepted", gen)}}}
	reason, msg, url := externalports.HTTPRoutePublished(externalports.HTTPRouteState{
		Ref:  openshellv1alpha1.ExternalPortsParentRef{Namespace: "openshell-operator", Name: "public", SectionName: "https"},
		Host: "ports.example.com", Namespace: "openshell-operator", Route: rt, Parent: parent, Policy: pol})
	g.Expect(reason).To(Equal(openshellv1alpha1.ExternalPortsReasonAccepted), msg)
	g.Expect(url).To(Equal("https://ports.example.com:8443"))
}
