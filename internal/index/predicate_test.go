package index

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
)

// TestSpecOrDeletionChanged: status and finalizer writes (a policy's usage
// count, our own status) must not re-queue; spec, deletion, labels and
// annotations must.
func TestSpecOrDeletionChanged(t *testing.T) {
	base := &openshellv1alpha1.OpenShellPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", Generation: 1,
		ResourceVersion: "1", Labels: map[string]string{"team": "a"}}}
	now := metav1.Now()
	cases := map[string]struct {
		edit func(p *openshellv1alpha1.OpenShellPolicy)
		want bool
	}{
		"status only": {func(p *openshellv1alpha1.OpenShellPolicy) { p.Status.SandboxCount = 7 }, false},
		"finalizer only": {func(p *openshellv1alpha1.OpenShellPolicy) {
			p.Finalizers = []string{"openshell.ai/in-use"}
		}, false},
		"spec (generation)": {func(p *openshellv1alpha1.OpenShellPolicy) { p.Generation = 2 }, true},
		"deletion started":  {func(p *openshellv1alpha1.OpenShellPolicy) { p.DeletionTimestamp = &now }, true},
		"label changed":     {func(p *openshellv1alpha1.OpenShellPolicy) { p.Labels = map[string]string{"team": "b"} }, true},
		"annotation added":  {func(p *openshellv1alpha1.OpenShellPolicy) { p.Annotations = map[string]string{"x": "y"} }, true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			n := base.DeepCopy()
			n.ResourceVersion = "2"
			tc.edit(n)
			if got := SpecOrDeletionChanged.Update(event.UpdateEvent{ObjectOld: base, ObjectNew: n}); got != tc.want {
				t.Fatalf("Update passed = %v, want %v", got, tc.want)
			}
		})
	}
}
