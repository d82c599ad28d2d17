package operator

import (
	"context"
	"crypto/x509"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/openshell/openshell-operator/internal/oidc"
	"github.com/openshell/openshell-operator/internal/scheme"
)

// TestServingCertRenewsWhileRunning: the self-issued serving certificate
// is renewed by the running issuer once it is due, and the next handshake
// gets the new one (a pod may run longer than a leaf lives).
func TestServingCertRenewsWhileRunning(t *testing.T) {
	now := time.Now()
	c := fake.NewClientBuilder().WithScheme(scheme.New()).Build()
	s := &issuerServer{issuer: &oidc.Issuer{URL: "https://openshell-operator-oidc.ops.svc:8444", SecretNamespace: "ops"},
		tlsSecret: OIDCTLSSecret, client: c, now: func() time.Time { return now }}
	served := func() *x509.Certificate {
		t.Helper()
		cert := s.serving.Load()
		if cert == nil || cert.Leaf == nil {
			t.Fatal("no serving certificate")
		}
		return cert.Leaf
	}
	if err := s.renewServingCert(context.Background()); err != nil {
		t.Fatal(err)
	}
	first := served()
	if first.DNSNames[0] != "openshell-operator-oidc.ops.svc" {
		t.Fatalf("serving certificate for %v", first.DNSNames)
	}
	if err := s.renewServingCert(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !served().Equal(first) {
		t.Fatal("a certificate that is not due was reissued")
	}
	now = first.NotBefore.Add(first.NotAfter.Sub(first.NotBefore) * 3 / 4) // past two thirds
	if err := s.renewServingCert(context.Background()); err != nil {
		t.Fatal(err)
	}
	if renewed := served(); renewed.Equal(first) || !renewed.NotAfter.After(first.NotAfter) {
		t.Fatalf("not renewed: %v → %v", first.NotAfter, renewed.NotAfter)
	}
	if len(s.issuer.CA()) == 0 {
		t.Fatal("the CA gateways trust was not published")
	}
}
