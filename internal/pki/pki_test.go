package pki

import (
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"net"
	"testing"
	"time"
)

func TestCAAndLeaves(t *testing.T) {
	now := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	ca, err := NewCA("openshell-ca", 5*365*24*time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	server, err := ca.Issue(LeafRequest{CommonName: "gw", DNSNames: []string{"gw.ns.svc"}, IPs: []net.IP{net.ParseIP("127.0.0.1")},
		Server: true, Validity: 365 * 24 * time.Hour}, now)
	if err != nil {
		t.Fatal(err)
	}
	client, err := ca.Issue(LeafRequest{CommonName: "openshell-client", Organization: "openshell-user", Client: true, Validity: 365 * 24 * time.Hour}, now)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	if _, err := server.Cert.Verify(x509.VerifyOptions{DNSName: "gw.ns.svc", Roots: pool, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Fatalf("server certificate does not verify: %v", err)
	}
	if _, err := client.Cert.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatalf("client certificate does not verify: %v", err)
	}
	if _, err := client.Cert.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
		t.Fatal("client certificate must not be usable as a server certificate")
	}
	// Round trip through PEM as stored in Secrets, and usable by crypto/tls.
	parsed, err := Parse(server.CertPEM, server.KeyPEM)
	if err != nil || !parsed.Cert.Equal(server.Cert) {
		t.Fatalf("Parse: %v", err)
	}
	if _, err := tls.X509KeyPair(server.CertPEM, server.KeyPEM); err != nil {
		t.Fatalf("tls.X509KeyPair: %v", err)
	}
	if !SignedBy(server.Cert, ca.Cert) {
		t.Fatal("SignedBy(server, ca) = false")
	}
	other, _ := NewCA("other", time.Hour, now)
	if SignedBy(server.Cert, other.Cert) {
		t.Fatal("SignedBy(server, other CA) = true")
	}
	if got, want := RenewAt(server.Cert), server.Cert.NotBefore.Add(server.Cert.NotAfter.Sub(server.Cert.NotBefore)*2/3); !got.Equal(want) {
		t.Fatalf("RenewAt = %v, want %v", got, want)
	}
}

func TestLeafNeverOutlivesCA(t *testing.T) {
	now := time.Now()
	ca, _ := NewCA("short", time.Hour, now)
	leaf, err := ca.Issue(LeafRequest{CommonName: "x", Server: true, Validity: 24 * time.Hour}, now)
	if err != nil {
		t.Fatal(err)
	}
	if leaf.Cert.NotAfter.After(ca.Cert.NotAfter) {
		t.Fatalf("leaf expires %v after its CA %v", leaf.Cert.NotAfter, ca.Cert.NotAfter)
	}
}

func TestParseRejectsGarbage(t *testing.T) {
	if _, err := Parse([]byte("nope"), []byte("nope")); err == nil {
		t.Fatal("Parse accepted garbage")
	}
}

func TestJWTKeysAndKEK(t *testing.T) {
	k, err := NewJWTKeys()
	if err != nil {
		t.Fatal(err)
	}
	if len(k.KID) != 32 {
		t.Fatalf("kid %q is not 32 hex characters", k.KID)
	}
	b, _ := pem.Decode(k.SigningPEM)
	key, err := x509.ParsePKCS8PrivateKey(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := key.(ed25519.PrivateKey); !ok {
		t.Fatalf("signing key is %T, want Ed25519", key)
	}
	kek, err := NewKEK()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := base64.StdEncoding.DecodeString(kek)
	if err != nil || len(raw) != 32 {
		t.Fatalf("KEK decodes to %d bytes (%v), want 32", len(raw), err)
	}
	other, _ := NewKEK()
	if other == kek {
		t.Fatal("two KEKs are equal")
	}
}
