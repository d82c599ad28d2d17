package sandbox

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	render "github.com/openshell/openshell-operator/internal/render/gateway"
	"github.com/openshell/openshell-operator/internal/scheme"
)

// TestObservePaired: a sandbox on a gateway in workspace mode Operator
// waits for its paired namespace, then for the allowlist to name it; a
// namespace of that name the operator did not make for this tenant and
// gateway is a conflict, never a wait; an operator that does not watch
// every namespace refuses the mode.
func TestObservePaired(t *testing.T) {
	gw := &openshellv1alpha1.OpenShellGateway{ObjectMeta: metav1.ObjectMeta{Name: "gw", Namespace: "platform"},
		Spec: openshellv1alpha1.OpenShellGatewaySpec{Mode: openshellv1alpha1.GatewayModeManaged, Managed: &openshellv1alpha1.ManagedGatewaySpec{
			Sandboxes: openshellv1alpha1.SandboxPlacement{WorkspaceMode: openshellv1alpha1.WorkspaceModeOperator}}}}
	other := gw.DeepCopy()
	other.Name = "other"
	const tenant, uid = "team-a", "uid-a"
	name := render.PairedNamespace(tenant, uid)
	ours := render.WorkspaceObjects(gw, tenant, uid)[0].(*corev1.Namespace)
	theirs := render.WorkspaceObjects(other, tenant, uid)[0].(*corev1.Namespace)
	squatted := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{"openshift.io/requester": "mallory"}}}
	for _, tc := range []struct {
		name    string
		objs    []client.Object
		watched []string
		reason  string // "" for none
	}{
		{"the paired namespace is not there yet", nil, nil, openshellv1alpha1.SandboxReasonWorkspaceNamespacePending},
		{"it is, but not on the allowlist", []client.Object{ours, render.WorkspacesConfigMap(gw, nil)}, nil, openshellv1alpha1.SandboxReasonWorkspaceNamespacePending},
		{"no allowlist at all", []client.Object{ours}, nil, openshellv1alpha1.SandboxReasonWorkspaceNamespacePending},
		{"on the allowlist", []client.Object{ours, render.WorkspacesConfigMap(gw, []string{name})}, nil, ""},
		{"a squatter's namespace of that name, even allowlisted", []client.Object{squatted, render.WorkspacesConfigMap(gw, []string{name})}, nil,
			openshellv1alpha1.SandboxReasonWorkspaceNamespaceConflict},
		{"another gateway's paired namespace", []client.Object{theirs, render.WorkspacesConfigMap(gw, []string{name})}, nil,
			openshellv1alpha1.SandboxReasonWorkspaceNamespaceConflict},
		{"an operator watching some namespaces only", []client.Object{ours, render.WorkspacesConfigMap(gw, []string{name})}, []string{"platform", tenant},
			openshellv1alpha1.SandboxReasonWorkspaceModeUnsupported},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Reconciler{Client: fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(tc.objs...).Build(), WatchedNamespaces: tc.watched}
			got, err := r.observePaired(context.Background(), gw, tenant, uid)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tc.reason == "" && got != nil:
				t.Fatalf("held: %s: %s", got.reason, got.message)
			case tc.reason != "" && (got == nil || got.reason != tc.reason):
				t.Fatalf("got %+v, want reason %s", got, tc.reason)
			}
		})
	}
}
