package gateway

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/scheme"
	"github.com/openshell/openshell-operator/internal/status"
)

// TestATLSSecretTheCacheHasNotSeenIsAConflict: the reconcile after the one
// that wrote the CA can read the cache before the Secret arrives, plan a
// new CA and fail to create it. That is a stale read, run again on fresh
// data (status.OnlyConflicts), not a failure to report as Degraded; a
// Secret of that name that is not this gateway's stays an error.
func TestATLSSecretTheCacheHasNotSeenIsAConflict(t *testing.T) {
	gw := &openshellv1alpha1.OpenShellGateway{ObjectMeta: metav1.ObjectMeta{Name: "gw", Namespace: "platform", UID: "gw-uid"}}
	for name, tc := range map[string]struct {
		existing *corev1.Secret
		conflict bool
	}{
		"this gateway's, written by the last reconcile": {
			existing: &corev1.Secret{ObjectMeta: secretMeta(gw, "openshell-ca-tls", "tls")}, conflict: true},
		"another's of the same name": {
			existing: &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "openshell-ca-tls", Namespace: "platform"}}, conflict: false},
	} {
		t.Run(name, func(t *testing.T) {
			live := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(tc.existing).Build()
			// The cache has not seen it.
			cached := interceptor.NewClient(live, interceptor.Funcs{
				Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
					if _, ok := obj.(*corev1.Secret); ok {
						return apierrors.NewNotFound(corev1.Resource("secrets"), key.Name)
					}
					return c.Get(ctx, key, obj, opts...)
				},
			})
			r := &Reconciler{Client: cached, APIReader: live}
			err := r.putSecret(context.Background(), gw, "openshell-ca-tls", map[string][]byte{"tls.crt": []byte("x")}, nil)
			if err == nil {
				t.Fatal("the create succeeded over an existing Secret")
			}
			if got := status.OnlyConflicts(err); got != tc.conflict {
				t.Fatalf("conflict = %v, want %v: %v", got, tc.conflict, err)
			}
		})
	}
}
