package sandbox

import (
	"context"
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/gatewayapi"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/datamodelv1"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/openshellv1"
	"github.com/openshell/openshell-operator/internal/gatewayline"
	"github.com/openshell/openshell-operator/internal/sandboxspec"
	"github.com/openshell/openshell-operator/internal/scheme"
)

// BenchmarkSweepDriftCompare1000 is the operator's side of one drift sweep
// of a gateway with 1,000 sandboxes in steady state (nothing drifted): for
// each listed gateway sandbox, a cache read of its OpenShellSandbox and the
// two comparisons. No request is made and nothing is written; the
// gateway's side is its ListSandboxes pages (500 a page).
func BenchmarkSweepDriftCompare1000(b *testing.B) {
	const n = 1000
	var objs []client.Object
	var listed []*openshellv1.Sandbox
	for i := range n {
		name, uid, id := fmt.Sprintf("agent-%d", i), types.UID(fmt.Sprintf("uid-%d", i)), fmt.Sprintf("id-%d", i)
		objs = append(objs, &openshellv1alpha1.OpenShellSandbox{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team-a", UID: uid},
			Status: openshellv1alpha1.OpenShellSandboxStatus{SandboxID: id, AttachedProviders: []string{"anthropic"}, AppliedPolicyHash: "h", PolicyVersion: 2}})
		listed = append(listed, &openshellv1.Sandbox{
			Metadata: &datamodelv1.ObjectMeta{Id: id, Name: sandboxspec.SandboxName("team-a", name), Labels: map[string]string{sandboxspec.LabelOwnerUID: string(uid)},
				Annotations: map[string]string{sandboxspec.AnnotationNamespace: "team-a", sandboxspec.AnnotationName: name}},
			Spec:   &openshellv1.SandboxSpec{Providers: []string{"anthropic"}},
			Status: &openshellv1.SandboxStatus{CurrentPolicyVersion: 2}})
	}
	s := &Sweeper{Client: fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(objs...).Build()}
	conn := &gatewayapi.Client{Line: gatewayline.V01}
	ctx := context.Background()
	b.ResetTimer()
	for range b.N {
		for _, sb := range listed {
			s.drifted(ctx, conn, sb)
		}
	}
}
