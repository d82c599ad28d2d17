package pairedns

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	render "github.com/openshell/openshell-operator/internal/render/gateway"
)

func gateway(name string) *openshellv1alpha1.OpenShellGateway {
	return &openshellv1alpha1.OpenShellGateway{ObjectMeta: metav1.ObjectMeta{Namespace: "platform", Name: name},
		Spec: openshellv1alpha1.OpenShellGatewaySpec{Mode: openshellv1alpha1.GatewayModeManaged, Managed: &openshellv1alpha1.ManagedGatewaySpec{
			Sandboxes: openshellv1alpha1.SandboxPlacement{WorkspaceMode: openshellv1alpha1.WorkspaceModeOperator}}}}
}

// pairedFor is the metadata of the paired namespace the operator made for
// tenant incarnation uid and gw.
func pairedFor(gw *openshellv1alpha1.OpenShellGateway, uid types.UID) *metav1.PartialObjectMetadata {
	ns := render.WorkspaceObjects(gw, "team-a", uid)[0]
	return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: ns.GetName(), Labels: ns.GetLabels(), Annotations: ns.GetAnnotations()}}
}

// TestDecide: a paired namespace stays while any sandbox of its tenant
// incarnation names its gateway, whatever else changed; a second gateway
// in workspace mode Operator never takes the first's namespace; nothing is
// made for a refused sandbox or a tenant that is gone.
func TestDecide(t *testing.T) {
	g0, g1 := gateway("g0"), gateway("g1")
	k0, k1 := types.NamespacedName{Namespace: "platform", Name: "g0"}, types.NamespacedName{Namespace: "platform", Name: "g1"}
	usable := func(gws ...*openshellv1alpha1.OpenShellGateway) map[types.NamespacedName]*openshellv1alpha1.OpenShellGateway {
		m := map[types.NamespacedName]*openshellv1alpha1.OpenShellGateway{}
		for _, gw := range gws {
			m[types.NamespacedName{Namespace: gw.Namespace, Name: gw.Name}] = gw
		}
		return m
	}
	keys := func(k ...types.NamespacedName) []types.NamespacedName { return k }
	for _, tc := range []struct {
		name        string
		obs         observed
		ensure      string
		releasedNum int
	}{
		{"the first sandbox on a usable gateway", observed{uid: "u1", inUse: keys(k1), starting: keys(k1), usable: usable(g1)}, "g1", 0},
		{"a refused sandbox makes nothing", observed{uid: "u1", inUse: keys(k1), usable: usable(g1)}, "", 0},
		{"access revoked with sandboxes running: kept, not ensured", observed{uid: "u1", inUse: keys(k1), starting: keys(k1),
			usable: usable(), paired: []*metav1.PartialObjectMetadata{pairedFor(g1, "u1")}}, "", 0},
		{"a second Operator gateway, sorted first, never takes the first's", observed{uid: "u1", inUse: keys(k0, k1), starting: keys(k0, k1),
			usable: usable(g0, g1), paired: []*metav1.PartialObjectMetadata{pairedFor(g1, "u1")}}, "g1", 0},
		{"the gateway is deleting, a deleting sandbox still names it: kept", observed{uid: "u1", inUse: keys(k1),
			usable: usable(), paired: []*metav1.PartialObjectMetadata{pairedFor(g1, "u1")}}, "", 0},
		{"no sandbox names its gateway any more: released", observed{uid: "u1", usable: usable(),
			paired: []*metav1.PartialObjectMetadata{pairedFor(g1, "u1")}}, "", 1},
		{"the tenant namespace is gone", observed{paired: []*metav1.PartialObjectMetadata{pairedFor(g1, "u1")}}, "", 1},
		{"an earlier incarnation's: released, the new one's made", observed{uid: "u2", inUse: keys(k1), starting: keys(k1), usable: usable(g1),
			paired: []*metav1.PartialObjectMetadata{pairedFor(g1, "u1")}}, "g1", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.obs.tenant = "team-a"
			ensure, release := decide(tc.obs)
			got := ""
			if ensure != nil {
				got = ensure.Name
			}
			if got != tc.ensure || len(release) != tc.releasedNum {
				t.Fatalf("ensure %q, release %d; want %q, %d", got, len(release), tc.ensure, tc.releasedNum)
			}
		})
	}
}
