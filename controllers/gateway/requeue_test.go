package gateway

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/scheme"
	"github.com/openshell/openshell-operator/internal/tenancy"
)

// TestGatewayEventsRequeueOnlyWhomTheyConcern (N13): a gateway created or
// deleted somewhere re-queues only the Managed gateways that place their
// sandboxes in that namespace, not every gateway: tenants may create
// inert gateways without limit.
func TestGatewayEventsRequeueOnlyWhomTheyConcern(t *testing.T) {
	managed := func(ns, name, sandboxNS string) *openshellv1alpha1.OpenShellGateway {
		return &openshellv1alpha1.OpenShellGateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: openshellv1alpha1.OpenShellGatewaySpec{Mode: openshellv1alpha1.GatewayModeManaged,
				Managed: &openshellv1alpha1.ManagedGatewaySpec{Sandboxes: openshellv1alpha1.SandboxPlacement{Namespace: sandboxNS}}}}
	}
	served := map[string]string{tenancy.LabelServeGateways: "true"}
	inSandboxes := managed("platform", "a", "sandboxes")
	objs := []client.Object{inSandboxes, managed("platform", "b", ""), managed("other", "c", "elsewhere"),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "platform"}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "sandboxes", Labels: served}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "other", Labels: served}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}}}
	// Inert gateways of a tenant, External and Managed (whose sandboxes
	// would go to its own namespace): none is served.
	var managedInert client.Object
	for i := range 50 {
		name := "inert-" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		if i%2 == 0 {
			objs = append(objs, &openshellv1alpha1.OpenShellGateway{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: name},
				Spec: openshellv1alpha1.OpenShellGatewaySpec{Mode: openshellv1alpha1.GatewayModeExternal}})
		} else {
			managedInert = managed("team-a", name, "")
			objs = append(objs, managedInert)
		}
	}
	r := &Reconciler{Client: fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(objs...).Build(),
		Platform: tenancy.Platform{OperatorNamespace: "platform", GatewayNamespaces: []string{"sandboxes", "other"}}}
	got := r.gatewaysWithSandboxesIn(context.Background(), &openshellv1alpha1.OpenShellGateway{ObjectMeta: metav1.ObjectMeta{Namespace: "sandboxes", Name: "new"}})
	if len(got) != 1 || got[0].NamespacedName != client.ObjectKeyFromObject(inSandboxes) {
		t.Fatalf("re-queued %v, want only %s", got, client.ObjectKeyFromObject(inSandboxes))
	}
	for _, inert := range []client.Object{objs[7], managedInert} {
		if got := r.gatewaysWithSandboxesIn(context.Background(), inert); len(got) != 0 {
			t.Fatalf("an inert gateway in a tenant namespace (%s) re-queued %v", inert.GetName(), got)
		}
	}
}
