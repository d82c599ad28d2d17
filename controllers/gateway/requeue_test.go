package gateway

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/scheme"
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
	inSandboxes := managed("platform", "a", "sandboxes")
	objs := []client.Object{inSandboxes, managed("platform", "b", ""), managed("other", "c", "elsewhere")}
	for i := range 50 {
		objs = append(objs, &openshellv1alpha1.OpenShellGateway{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "inert-" + string(rune('a'+i%26)) + string(rune('a'+i/26))},
			Spec: openshellv1alpha1.OpenShellGatewaySpec{Mode: openshellv1alpha1.GatewayModeExternal}})
	}
	r := &Reconciler{Client: fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(objs...).Build()}
	got := r.gatewaysWithSandboxesIn(context.Background(), &openshellv1alpha1.OpenShellGateway{ObjectMeta: metav1.ObjectMeta{Namespace: "sandboxes", Name: "new"}})
	if len(got) != 1 || got[0].NamespacedName != client.ObjectKeyFromObject(inSandboxes) {
		t.Fatalf("re-queued %v, want only %s", got, client.ObjectKeyFromObject(inSandboxes))
	}
	if got := r.gatewaysWithSandboxesIn(context.Background(), objs[3]); len(got) != 0 {
		t.Fatalf("an inert gateway in a tenant namespace re-queued %v", got)
	}
}
