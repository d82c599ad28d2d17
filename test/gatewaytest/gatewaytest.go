// Package gatewaytest starts the in-process test gateway (real gRPC over
// TLS, real token validation) with the operator's OIDC issuer and a fake
// Kubernetes client, and registers it as an External OpenShellGateway, so
// that reconcilers that talk to gateways are tested without a cluster.
package gatewaytest

import (
	"context"
	"crypto/tls"
	"net"
	"net/http/httptest"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/gatewayapi"
	"github.com/openshell/openshell-operator/internal/gwconn"
	"github.com/openshell/openshell-operator/internal/oidc"
	"github.com/openshell/openshell-operator/internal/pki"
	"github.com/openshell/openshell-operator/internal/scheme"
	"github.com/openshell/openshell-operator/test/testgateway"
)

// Env is a running test gateway and what a reconciler needs to reach it.
type Env struct {
	Gateway *testgateway.Gateway
	// Object is the OpenShellGateway "platform/gw" (External) for it.
	Object   *openshellv1alpha1.OpenShellGateway
	Resolver *gwconn.Resolver
	// Client is the fake Kubernetes client holding the gateway's CA Secret
	// and objs; build it further with Builder before Start if needed.
	Client client.WithWatch
}

// Start starts the gateway; it stops with the test. objs are added to the
// fake client (with status subresources for the openshell.ai kinds).
func Start(t testing.TB, objs ...client.Object) *Env {
	t.Helper()
	return StartWith(t, nil, objs...)
}

// StartWith is Start with configure applied to the fake client's builder
// before it is built (field indexes, interceptors); configure may be nil.
func StartWith(t testing.TB, configure func(*fake.ClientBuilder), objs ...client.Object) *Env {
	t.Helper()
	ca, _, cert := LoopbackCert(t)
	objs = append(objs, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "gw-ca", Namespace: "platform"}, Data: map[string][]byte{"ca.crt": ca.CertPEM}})
	b := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(objs...).
		WithStatusSubresource(&openshellv1alpha1.OpenShellSandbox{}, &openshellv1alpha1.OpenShellProvider{},
			&openshellv1alpha1.OpenShellPolicy{}, &openshellv1alpha1.OpenShellGateway{}, &openshellv1alpha1.OpenShellProviderProfile{},
			&openshellv1alpha1.OpenShellSandboxTemplate{}).
		// The API server selects any kind by metadata.name; the fake
		// client needs an index for it.
		WithIndex(&openshellv1alpha1.OpenShellSandbox{}, "metadata.name", func(o client.Object) []string { return []string{o.GetName()} })
	if configure != nil {
		configure(b)
	}
	k := b.Build()
	issuer := &oidc.Issuer{Client: k, SecretNamespace: "platform", SecretName: "keys"}
	if err := issuer.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(issuer.Handler())
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	issuer.URL = srv.URL
	gw, err := testgateway.Start(context.Background(), testgateway.Options{Cert: cert,
		OIDC: testgateway.OIDC{Issuer: issuer.URL, Audience: oidc.Audience("platform", "gw"), CAPEM: ca.CertPEM,
			RolesClaim: oidc.RolesClaim, AdminRole: oidc.AdminRole}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gw.Stop)
	obj := &openshellv1alpha1.OpenShellGateway{ObjectMeta: metav1.ObjectMeta{Name: "gw", Namespace: "platform"},
		Spec: openshellv1alpha1.OpenShellGatewaySpec{Mode: openshellv1alpha1.GatewayModeExternal,
			External: &openshellv1alpha1.ExternalGatewaySpec{Endpoint: gw.Endpoint(),
				CASecretRef: openshellv1alpha1.SecretKeyReference{Name: "gw-ca", Key: "ca.crt"}},
			Tenancy: openshellv1alpha1.GatewayTenancy{AllowedNamespaces: openshellv1alpha1.AllowedNamespaces{From: openshellv1alpha1.NamespacesFromAll}}}}
	return &Env{Gateway: gw, Object: obj, Client: k,
		Resolver: &gwconn.Resolver{Client: k, APIReader: k, Pool: gatewayapi.NewPool(), Issuer: issuer}}
}

// LoopbackCert issues a CA and, from it, a server certificate for
// 127.0.0.1 and dnsNames, valid for an hour: what a loopback TLS server in
// a test needs.
func LoopbackCert(t testing.TB, dnsNames ...string) (ca, leaf *pki.KeyPair, cert tls.Certificate) {
	t.Helper()
	now := time.Now()
	ca, err := pki.NewCA("test-ca", time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err = ca.Issue(pki.LeafRequest{CommonName: "test-server", DNSNames: dnsNames, IPs: []net.IP{net.ParseIP("127.0.0.1")},
		Server: true, Validity: time.Hour}, now)
	if err != nil {
		t.Fatal(err)
	}
	if cert, err = tls.X509KeyPair(leaf.CertPEM, leaf.KeyPEM); err != nil {
		t.Fatal(err)
	}
	return ca, leaf, cert
}
