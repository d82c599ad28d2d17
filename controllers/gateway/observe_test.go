package gateway

import (
	"context"
	"testing"

	routev1 "github.com/openshift/api/route/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	render "github.com/openshell/openshell-operator/internal/render/gateway"
	"github.com/openshell/openshell-operator/internal/scheme"
)

// TestRouteAdmittedOnlyForItsCurrentHost: after spec.managed.route.host
// changes, neither a cache still holding the previous Route nor a router's
// word on the previous host makes the gateway's endpoint.
func TestRouteAdmittedOnlyForItsCurrentHost(t *testing.T) {
	gw := &openshellv1alpha1.OpenShellGateway{ObjectMeta: metav1.ObjectMeta{Name: "gw", Namespace: "platform"}}
	name := render.NamesFor(gw).Fullname
	admitted := func(host string) routev1.RouteIngress {
		return routev1.RouteIngress{Host: host, RouterName: "default",
			Conditions: []routev1.RouteIngressCondition{{Type: routev1.RouteAdmitted, Status: corev1.ConditionTrue}}}
	}
	for desc, tc := range map[string]struct {
		specHost  string
		ingress   []routev1.RouteIngress
		applied   int64
		wantHost  string // the host this reconcile applied
		wantAdmit bool
	}{
		"admitted for its host":               {specHost: "new.example.com", ingress: []routev1.RouteIngress{admitted("new.example.com")}, wantAdmit: true},
		"admitted for a host the router made": {specHost: "", ingress: []routev1.RouteIngress{admitted("gw-platform.apps.example.com")}, wantAdmit: true},
		"admitted only for the previous host": {specHost: "new.example.com", ingress: []routev1.RouteIngress{admitted("old.example.com")}},
		"refused by one router shard, admitted by another": {specHost: "new.example.com", ingress: []routev1.RouteIngress{{Host: "new.example.com", RouterName: "internal",
			Conditions: []routev1.RouteIngressCondition{{Type: routev1.RouteAdmitted, Status: corev1.ConditionFalse, Reason: "HostAlreadyClaimed"}}}, admitted("new.example.com")},
			wantAdmit: true},
		"the cache predates the apply":           {specHost: "old.example.com", ingress: []routev1.RouteIngress{admitted("old.example.com")}, applied: 3},
		"the cache holds the applied generation": {specHost: "new.example.com", ingress: []routev1.RouteIngress{admitted("new.example.com")}, applied: 2, wantAdmit: true},
		// openshift-apiserver keeps no generation for Routes.
		"the cache holds the previous host, no generation": {specHost: "old.example.com", ingress: []routev1.RouteIngress{admitted("old.example.com")},
			wantHost: "new.example.com"},
		"the cache holds the applied host, no generation": {specHost: "new.example.com", ingress: []routev1.RouteIngress{admitted("new.example.com")},
			wantHost: "new.example.com", wantAdmit: true},
	} {
		t.Run(desc, func(t *testing.T) {
			gen := int64(2)
			if tc.wantHost != "" {
				gen = 0
			}
			cached := &routev1.Route{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: gw.Namespace, Generation: gen},
				Spec: routev1.RouteSpec{Host: tc.specHost}, Status: routev1.RouteStatus{Ingress: tc.ingress}}
			c := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(cached).Build()
			r := &Reconciler{Client: c}
			rendered := []client.Object{&routev1.Route{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: gw.Namespace, Generation: tc.applied},
				Spec: routev1.RouteSpec{Host: tc.wantHost}}}
			got, err := r.observeRoute(context.Background(), gw, rendered)
			if err != nil {
				t.Fatal(err)
			}
			if got.Admitted != tc.wantAdmit {
				t.Fatalf("admitted = %v, want %v (%s)", got.Admitted, tc.wantAdmit, got.Message)
			}
		})
	}
}
