package externalports_test

import (
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/controllers/externalports"
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
// listener is HTTPS, the Gateway accepted the route and resolved its
// backend for that listener (for the route's current generation), and
// accepted the BackendTLSPolicy; every other state says why.
func TestHTTPRoutePublished(t *testing.T) {
	https := &gatewayv1.Gateway{Spec: gatewayv1.GatewaySpec{Listeners: []gatewayv1.Listener{
		{Name: "http", Protocol: gatewayv1.HTTPProtocolType, Port: 80},
		{Name: "https", Protocol: gatewayv1.HTTPSProtocolType, Port: 443}}}}
	plain := &gatewayv1.Gateway{Spec: gatewayv1.GatewaySpec{Listeners: []gatewayv1.Listener{{Name: "https", Protocol: gatewayv1.HTTPProtocolType, Port: 80}}}}
	route := func(parent gatewayv1.ParentReference, conds ...metav1.Condition) *gatewayv1.HTTPRoute {
		rt := &gatewayv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Name: "ports-x", Generation: 2}}
		rt.Status.Parents = []gatewayv1.RouteParentStatus{{ParentRef: parent, ControllerName: "example.com/gateway", Conditions: conds}}
		return rt
	}
	ours := gatewayv1.ParentReference{Namespace: ptr.To(gatewayv1.Namespace("gateways")), Name: "public", SectionName: ptr.To(gatewayv1.SectionName("https"))}
	otherListener := gatewayv1.ParentReference{Namespace: ptr.To(gatewayv1.Namespace("gateways")), Name: "public", SectionName: ptr.To(gatewayv1.SectionName("http"))}
	accepted := []metav1.Condition{cond("Accepted", metav1.ConditionTrue, "Accepted", 2), cond("ResolvedRefs", metav1.ConditionTrue, "ResolvedRefs", 2)}
	policy := func(conds ...metav1.Condition) *gatewayv1.BackendTLSPolicy {
		p := &gatewayv1.BackendTLSPolicy{ObjectMeta: metav1.ObjectMeta{Name: externalports.BackendTLSPolicyName}}
		p.Status.Ancestors = []gatewayv1.PolicyAncestorStatus{{AncestorRef: gatewayv1.ParentReference{Namespace: ptr.To(gatewayv1.Namespace("gateways")), Name: "public"},
			ControllerName: "example.com/gateway", Conditions: conds}}
		return p
	}
	policyOK := policy(cond("Accepted", metav1.ConditionTrue, "Accepted", 1), cond("ResolvedRefs", metav1.ConditionTrue, "ResolvedRefs", 1))

	for _, tc := range []struct {
		name           string
		route          *gatewayv1.HTTPRoute
		parent         *gatewayv1.Gateway
		policy         *gatewayv1.BackendTLSPolicy
		reason, substr string
	}{
		{"all accepted on the HTTPS listener", route(ours, accepted...), https, policyOK, openshellv1alpha1.ExternalPortsReasonAccepted, "accepted the HTTPRoute"},
		{"no Gateway", route(ours, accepted...), nil, policyOK, openshellv1alpha1.ExternalPortsReasonListenerNotHTTPS, "not found"},
		{"no such listener", route(ours, accepted...), &gatewayv1.Gateway{}, policyOK, openshellv1alpha1.ExternalPortsReasonListenerNotHTTPS, `no listener "https"`},
		{"a plain HTTP listener, even accepted", route(ours, accepted...), plain, policyOK, openshellv1alpha1.ExternalPortsReasonListenerNotHTTPS, "plain text"},
		{"the route not created yet", nil, https, policyOK, openshellv1alpha1.ExternalPortsReasonRouteNotAccepted, "being created"},
		{"no report for the listener", route(otherListener, accepted...), https, policyOK, openshellv1alpha1.ExternalPortsReasonRouteNotAccepted, "admit routes from the operator's namespace"},
		{"refused by the listener", route(ours, cond("Accepted", metav1.ConditionFalse, "NotAllowedByListeners", 2), cond("ResolvedRefs", metav1.ConditionTrue, "ResolvedRefs", 2)),
			https, policyOK, openshellv1alpha1.ExternalPortsReasonRouteNotAccepted, "NotAllowedByListeners"},
		{"backend not resolved", route(ours, cond("Accepted", metav1.ConditionTrue, "Accepted", 2), cond("ResolvedRefs", metav1.ConditionFalse, "BackendNotFound", 2)),
			https, policyOK, openshellv1alpha1.ExternalPortsReasonRouteNotAccepted, "BackendNotFound"},
		{"a report for an older generation", route(ours, cond("Accepted", metav1.ConditionTrue, "Accepted", 1), cond("ResolvedRefs", metav1.ConditionTrue, "ResolvedRefs", 1)),
			https, policyOK, openshellv1alpha1.ExternalPortsReasonRouteNotAccepted, "generation 2"},
		{"no policy yet", route(ours, accepted...), https, nil, openshellv1alpha1.ExternalPortsReasonBackendTLSNotAccepted, "being created"},
		{"policy not reported (no BackendTLSPolicy support)", route(ours, accepted...), https, policy(), openshellv1alpha1.ExternalPortsReasonBackendTLSNotAccepted, "speaks only TLS"},
		{"policy refused", route(ours, accepted...), https, policy(cond("Accepted", metav1.ConditionFalse, "NoValidCACertificate", 1)),
			openshellv1alpha1.ExternalPortsReasonBackendTLSNotAccepted, "NoValidCACertificate"},
		{"policy's CA not resolved", route(ours, accepted...), https, policy(cond("Accepted", metav1.ConditionTrue, "Accepted", 1), cond("ResolvedRefs", metav1.ConditionFalse, "InvalidCACertificateRef", 1)),
			openshellv1alpha1.ExternalPortsReasonBackendTLSNotAccepted, "InvalidCACertificateRef"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			reason, msg := externalports.HTTPRoutePublished(listener, tc.route, tc.parent, tc.policy)
			g.Expect(reason).To(Equal(tc.reason), msg)
			g.Expect(msg).To(ContainSubstring(tc.substr))
			st := externalports.Status(httpRouteGateway(), reason, msg, "")
			c := st.Conditions[0]
			g.Expect(c.Status == metav1.ConditionTrue).To(Equal(reason == openshellv1alpha1.ExternalPortsReasonAccepted))
		})
	}
}
