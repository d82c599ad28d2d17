package externalports_test

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	routev1 "github.com/openshift/api/route/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/controllers/externalports"
	render "github.com/openshell/openshell-operator/internal/render/gateway"
)

func gateway(ns, name string, ports *openshellv1alpha1.ExternalPorts) *openshellv1alpha1.OpenShellGateway {
	return &openshellv1alpha1.OpenShellGateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Generation: 3},
		Spec: openshellv1alpha1.OpenShellGatewaySpec{ExternalPorts: ports}}
}

func TestWanted(t *testing.T) {
	g := NewWithT(t)
	g.Expect(externalports.Wanted(gateway("p", "gw", nil))).To(BeFalse(), "off by default")
	g.Expect(externalports.Wanted(gateway("p", "gw", &openshellv1alpha1.ExternalPorts{}))).To(BeFalse())
	g.Expect(externalports.Wanted(gateway("p", "gw", &openshellv1alpha1.ExternalPorts{Expose: openshellv1alpha1.ExternalPortsNone}))).To(BeFalse())
	g.Expect(externalports.Wanted(gateway("p", "gw", &openshellv1alpha1.ExternalPorts{Expose: openshellv1alpha1.ExternalPortsRoute}))).To(BeTrue())
}

// TestRouteNameLeavesTheHostOneLabel: the router makes NAME-NAMESPACE the
// host's first label, which must stay within 63 characters for a usual
// operator namespace; names differ per gateway, namespace included.
func TestRouteNameLeavesTheHostOneLabel(t *testing.T) {
	g := NewWithT(t)
	a := externalports.RouteName(types.NamespacedName{Namespace: "platform", Name: "gw"})
	g.Expect(a).To(MatchRegexp("^ports-[0-9a-f]{20}$"), "80 bits of hash")
	g.Expect(validation.IsDNS1123Label(a + "-openshell-operator")).To(BeEmpty())
	g.Expect(externalports.RouteName(types.NamespacedName{Namespace: "platform", Name: "gw"})).To(Equal(a), "stable")
	g.Expect(externalports.RouteName(types.NamespacedName{Namespace: "platformg", Name: "w"})).NotTo(Equal(a))
	long := externalports.RouteName(types.NamespacedName{Namespace: strings.Repeat("n", 63), Name: strings.Repeat("g", 253)})
	g.Expect(len(long)).To(Equal(len(a)))
}

// TestRouteIsReencryptWithoutPlainHTTP renders the Route: to the relay's
// external port Service, reencrypt, no plain HTTP, no wildcard, the
// Platform Admin's host or none, and found again by its annotation (its
// labels cannot hold every gateway name).
func TestRouteIsReencryptWithoutPlainHTTP(t *testing.T) {
	for _, tc := range []struct {
		name, gwName, host string
	}{
		{"router's host", "gw", ""},
		{"admin's host", "gw", "ports.apps.example.com"},
		{"a gateway name no label holds", strings.Repeat("g", 100), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			gw := gateway("platform", tc.gwName, &openshellv1alpha1.ExternalPorts{Expose: openshellv1alpha1.ExternalPortsRoute, Host: tc.host})
			rt := externalports.Route(gw, "openshell-operator")
			g.Expect(rt.Namespace).To(Equal("openshell-operator"))
			g.Expect(rt.Name).To(Equal(externalports.RouteName(types.NamespacedName{Namespace: "platform", Name: tc.gwName})))
			g.Expect(rt.Spec.To).To(Equal(routev1.RouteTargetReference{Kind: "Service", Name: externalports.RelayService, Weight: rt.Spec.To.Weight}))
			g.Expect(rt.Spec.Port.TargetPort.String()).To(Equal("https"))
			g.Expect(rt.Spec.TLS.Termination).To(Equal(routev1.TLSTerminationReencrypt))
			g.Expect(rt.Spec.TLS.InsecureEdgeTerminationPolicy).To(Equal(routev1.InsecureEdgeTerminationPolicyNone))
			g.Expect(rt.Spec.TLS.DestinationCACertificate).To(BeEmpty(), "the router verifies the service-ca's certificate itself")
			g.Expect(rt.Spec.WildcardPolicy).To(Equal(routev1.WildcardPolicyNone))
			g.Expect(rt.Spec.Host).To(Equal(tc.host))
			g.Expect(rt.Annotations).To(HaveKeyWithValue(externalports.AnnotationGateway, "platform/"+tc.gwName))
			g.Expect(rt.Labels).To(HaveKeyWithValue(render.LabelComponent, externalports.Component))
			g.Expect(rt.Labels).To(HaveKeyWithValue(render.LabelManagedBy, render.ManagedByValue))
			for k, v := range rt.Labels {
				g.Expect(validation.IsValidLabelValue(v)).To(BeEmpty(), "label %s", k)
			}
		})
	}
}

func TestAdmission(t *testing.T) {
	admitted := func(host string, ok corev1.ConditionStatus) routev1.RouteIngress {
		return routev1.RouteIngress{Host: host, RouterName: "default", Conditions: []routev1.RouteIngressCondition{{
			Type: routev1.RouteAdmitted, Status: ok, Reason: "HostAlreadyClaimed", Message: "another route has the host"}}}
	}
	for _, tc := range []struct {
		name       string
		route      routev1.Route
		wantReason string
		wantHost   string
		says       string
	}{
		{"no router yet", routev1.Route{}, openshellv1alpha1.ExternalPortsReasonNotAdmitted, "", "waiting for a router"},
		{"admitted", routev1.Route{Spec: routev1.RouteSpec{Host: "a.example"},
			Status: routev1.RouteStatus{Ingress: []routev1.RouteIngress{admitted("a.example", corev1.ConditionTrue)}}},
			openshellv1alpha1.ExternalPortsReasonAdmitted, "a.example", "admitted by router default"},
		{"admitted for a previous host", routev1.Route{Spec: routev1.RouteSpec{Host: "b.example"},
			Status: routev1.RouteStatus{Ingress: []routev1.RouteIngress{admitted("a.example", corev1.ConditionTrue)}}},
			openshellv1alpha1.ExternalPortsReasonNotAdmitted, "", "waiting"},
		{"refused", routev1.Route{Spec: routev1.RouteSpec{Host: "a.example"},
			Status: routev1.RouteStatus{Ingress: []routev1.RouteIngress{admitted("a.example", corev1.ConditionFalse)}}},
			openshellv1alpha1.ExternalPortsReasonNotAdmitted, "", "HostAlreadyClaimed"},
		{"refused by one shard, admitted by another", routev1.Route{Spec: routev1.RouteSpec{Host: "a.example"},
			Status: routev1.RouteStatus{Ingress: []routev1.RouteIngress{admitted("a.example", corev1.ConditionFalse), admitted("a.example", corev1.ConditionTrue)}}},
			openshellv1alpha1.ExternalPortsReasonAdmitted, "a.example", "admitted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			reason, msg, host := externalports.Admission(&tc.route)
			g.Expect(reason).To(Equal(tc.wantReason))
			g.Expect(host).To(Equal(tc.wantHost))
			g.Expect(msg).To(ContainSubstring(tc.says))
		})
	}
}

func TestStatusIsPublishedOnlyWhenAdmitted(t *testing.T) {
	g := NewWithT(t)
	gw := gateway("p", "gw", &openshellv1alpha1.ExternalPorts{Expose: openshellv1alpha1.ExternalPortsRoute})
	st := externalports.Status(gw, openshellv1alpha1.ExternalPortsReasonAdmitted, "ok", "https://h")
	g.Expect(st.URL).To(Equal("https://h"))
	g.Expect(st.ObservedGeneration).To(Equal(int64(3)))
	g.Expect(meta.IsStatusConditionTrue(st.Conditions, openshellv1alpha1.ExternalPortsConditionPublished)).To(BeTrue())
	for _, reason := range []string{openshellv1alpha1.ExternalPortsReasonNotAdmitted, openshellv1alpha1.ExternalPortsReasonRouteAPIUnavailable,
		openshellv1alpha1.ExternalPortsReasonNamespaceNotServed, openshellv1alpha1.ExternalPortsReasonApplyFailed} {
		st := externalports.Status(gw, reason, strings.Repeat("x", 5000), "")
		c := meta.FindStatusCondition(st.Conditions, openshellv1alpha1.ExternalPortsConditionPublished)
		g.Expect(c.Status).To(Equal(metav1.ConditionFalse), reason)
		g.Expect(c.Reason).To(Equal(reason))
		g.Expect(len(c.Message)).To(BeNumerically("<=", 32768), "a condition message is bounded")
	}
}
