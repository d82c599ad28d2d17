package gateway

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/preflight"
	render "github.com/openshell/openshell-operator/internal/render/gateway"
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

// TestCertificatesJustWrittenAreReadFromTheAPIServer: the reconcile that
// issues the CA or a leaf (a first install, a renewal, a CA rotation step)
// reads them back for its status from the API server, not from a cache
// that may still show them as they were (a rotation not begun, a leaf
// expired: Degraded for that moment). A reconcile that writes none reads
// the cache.
func TestCertificatesJustWrittenAreReadFromTheAPIServer(t *testing.T) {
	gw := &openshellv1alpha1.OpenShellGateway{ObjectMeta: metav1.ObjectMeta{Name: "gw", Namespace: "platform", UID: "gw-uid"},
		Spec: openshellv1alpha1.OpenShellGatewaySpec{Mode: openshellv1alpha1.GatewayModeManaged, Managed: &openshellv1alpha1.ManagedGatewaySpec{}}}
	c := fake.NewClientBuilder().WithScheme(scheme.New()).Build()
	apiServer := fake.NewClientBuilder().WithScheme(scheme.New()).Build()
	r := &Reconciler{Client: c, APIReader: apiServer, Recorder: events.NewFakeRecorder(10)}
	in := render.Inputs{TLS: render.TLSBuiltin}
	var res ctrl.Result
	read, err := r.builtinPKI(context.Background(), gw, in, &res)
	if err != nil {
		t.Fatal(err)
	}
	if read != client.Reader(apiServer) {
		t.Error("the reconcile that issued the certificates reads them from the cache")
	}
	if res.RequeueAfter <= 0 {
		t.Error("no renewal scheduled")
	}
	if read, err = r.builtinPKI(context.Background(), gw, in, &res); err != nil {
		t.Fatal(err)
	}
	if read != client.Reader(c) {
		t.Error("a reconcile that wrote nothing reads the certificates from the API server")
	}
}

// TestTheBuiltinCAIsKeptWhenTheCacheHasNotSeenIt: cert-manager found just
// after the built-in PKI made the gateway's CA, by a reconcile whose cache
// does not show that CA yet, must not move the gateway to cert-manager
// (whose CA would replace the one sandboxes trust).
func TestTheBuiltinCAIsKeptWhenTheCacheHasNotSeenIt(t *testing.T) {
	gw := &openshellv1alpha1.OpenShellGateway{ObjectMeta: metav1.ObjectMeta{Name: "gw", Namespace: "platform", UID: "gw-uid"}}
	ca := &corev1.Secret{ObjectMeta: secretMeta(gw, render.NamesFor(gw).CA, "tls")}
	r := &Reconciler{Client: fake.NewClientBuilder().WithScheme(scheme.New()).Build(),
		APIReader: fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(ca).Build()}
	got, err := r.tlsSource(context.Background(), gw, preflight.Result{CertManager: true})
	if err != nil {
		t.Fatal(err)
	}
	if got != render.TLSBuiltin {
		t.Fatalf("TLS source %s, want the built-in PKI that made the CA", got)
	}
}
