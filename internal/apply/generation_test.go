package apply

import (
	"context"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/openshell/openshell-operator/internal/scheme"
)

// TestTheRecordedGenerationIsNotApplied: Apply records the server's
// generation and UID in the object it applied; applying that object again
// is not a change (the API server owns both).
func TestTheRecordedGenerationIsNotApplied(t *testing.T) {
	ctx := context.Background()
	applies := 0
	c := fake.NewClientBuilder().WithScheme(scheme.New()).WithInterceptorFuncs(interceptor.Funcs{
		Apply: func(ctx context.Context, c client.WithWatch, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
			applies++
			return c.Apply(ctx, obj, opts...)
		},
	}).Build()
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "gw", Namespace: "ns"}}
	d.Spec.Template.Spec.Containers = []corev1.Container{{Name: "gw", Image: "a"}}
	if err := Apply(ctx, c, c, d); err != nil {
		t.Fatal(err)
	}
	d.Generation, d.UID = 7, "uid-1" // as a real API server's answer would set them
	if err := Apply(ctx, c, c, d); err != nil {
		t.Fatal(err)
	}
	if applies != 1 {
		t.Fatalf("%d apply requests, want 1: the recorded generation was taken for a change", applies)
	}
}
