package trust

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/openshell/openshell-operator/internal/pki"
)

func pemOf(t *testing.T, cn string) []byte {
	t.Helper()
	ca, err := pki.NewCA(cn, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return ca.CertPEM
}

func TestBundle(t *testing.T) {
	a, b, c := pemOf(t, "a"), pemOf(t, "b"), pemOf(t, "c")
	key := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte("secret")})
	for name, tc := range map[string]struct {
		parts [][]byte
		want  [][]byte
	}{
		"order kept":              {[][]byte{a, b, c}, [][]byte{a, b, c}},
		"duplicates across parts": {[][]byte{a, append(append([]byte{}, b...), a...), b}, [][]byte{a, b}},
		"keys and junk dropped":   {[][]byte{append(append([]byte("# comment\n"), key...), c...), []byte("not pem")}, [][]byte{c}},
		"empty and nil parts":     {[][]byte{nil, {}, a}, [][]byte{a}},
		"nothing":                 {nil, nil},
	} {
		got, n := Bundle(tc.parts...)
		if want := bytes.Join(tc.want, nil); !bytes.Equal(got, want) || n != len(tc.want) {
			t.Errorf("%s: got %d certificates:\n%s\nwant %d:\n%s", name, n, got, len(tc.want), want)
		}
		if bytes.Contains(got, []byte("PRIVATE KEY")) {
			t.Errorf("%s: a private key reached the bundle", name)
		}
	}
}

func TestSystemPEMHonoursSSLCertFile(t *testing.T) {
	f := t.TempDir() + "/roots.pem"
	a := pemOf(t, "root")
	if err := os.WriteFile(f, a, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SSL_CERT_FILE", f)
	got, path := SystemPEM()
	if path != f || !bytes.Equal(got, a) {
		t.Fatalf("SystemPEM = %q from %q, want the SSL_CERT_FILE", got, path)
	}
	// A missing SSL_CERT_FILE is not replaced by a distribution bundle.
	t.Setenv("SSL_CERT_FILE", f+".missing")
	if _, path := SystemPEM(); path != BuiltinSource {
		t.Fatalf("a missing SSL_CERT_FILE must fall back to the built-in roots only, got %q", path)
	}
}

// TestSystemPEMFallsBackToBuiltinRoots: in a scratch image (no bundle
// file) the public roots still come from the binary, so managed gateways
// and the operator's own outbound TLS verify public endpoints.
func TestSystemPEMFallsBackToBuiltinRoots(t *testing.T) {
	t.Setenv("SSL_CERT_FILE", filepath.Join(t.TempDir(), "none.pem"))
	pem, from := SystemPEM()
	if from != BuiltinSource {
		t.Fatalf("from %q, want the built-in roots", from)
	}
	if _, n := Bundle(pem); n < 100 {
		t.Fatalf("the built-in bundle holds %d certificates, want the Mozilla roots (over 100)", n)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatal("the built-in bundle does not parse")
	}
}
