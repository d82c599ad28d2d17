// Package trust builds the CA bundle a managed gateway trusts for its
// outbound TLS. The gateway reads one file (SSL_CERT_FILE), which replaces
// its built-in store, so the file must hold every root it needs: public
// roots (provider-credential refresh, inference endpoints, https exports),
// the operator's OIDC issuer CA, and on OpenShift the cluster's trusted CA
// bundle (proxy and additionalTrustBundle CAs, injected by the Cluster
// Network Operator into a ConfigMap labelled
// config.openshift.io/inject-trusted-cabundle). The standard library has
// no API that returns the system roots as PEM, hence the file lookup here.
package trust

import (
	"bytes"
	"crypto/sha256"
	"encoding/pem"
	"os"

	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// systemFiles are where Linux distributions keep their PEM bundle (the
// same list crypto/x509 searches).
var systemFiles = []string{
	"/etc/ssl/certs/ca-certificates.crt",
	"/etc/pki/tls/certs/ca-bundle.crt",
	"/etc/ssl/ca-bundle.pem",
	"/etc/pki/tls/cacert.pem",
	"/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
	"/etc/ssl/cert.pem",
}

// SystemPEM reads the operator container's system roots: SSL_CERT_FILE if
// set, else the first distribution bundle that exists, else (a scratch
// image, which the operator's is) the Mozilla roots built into the binary
// (golang.org/x/crypto/x509roots, which cmd/ also installs as crypto/x509's
// fallback for the operator's own connections). It returns the PEM and
// where it came from.
func SystemPEM() ([]byte, string) {
	files := systemFiles
	if f := os.Getenv("SSL_CERT_FILE"); f != "" {
		files = []string{f}
	}
	for _, f := range files {
		if b, err := os.ReadFile(f); err == nil && len(b) > 0 {
			return b, f
		}
	}
	return BuiltinPEM(), BuiltinSource
}

// BuiltinSource names the built-in roots in logs.
const BuiltinSource = "the Mozilla roots built into the operator (golang.org/x/crypto/x509roots)"

// BuiltinPEM is the built-in root bundle as PEM. Roots with a
// distrust-after constraint are left out: a PEM file cannot carry it, and
// trusting them without it would trust certificates NSS no longer does.
func BuiltinPEM() []byte {
	var out bytes.Buffer
	for r := range bundle.Roots() {
		if r.Constraint != nil {
			continue
		}
		_ = pem.Encode(&out, &pem.Block{Type: "CERTIFICATE", Bytes: r.Certificate})
	}
	return out.Bytes()
}

// Bundle concatenates the CERTIFICATE blocks of parts, in order, each
// certificate once; anything else in the inputs (private keys, comments,
// malformed blocks) is dropped. n is the number of certificates.
func Bundle(parts ...[]byte) (bundle []byte, n int) {
	seen := map[[32]byte]bool{}
	var out bytes.Buffer
	for _, p := range parts {
		for {
			var b *pem.Block
			b, p = pem.Decode(p)
			if b == nil {
				break
			}
			if b.Type != "CERTIFICATE" || len(b.Headers) > 0 {
				continue
			}
			sum := sha256.Sum256(b.Bytes)
			if seen[sum] {
				continue
			}
			seen[sum] = true
			_ = pem.Encode(&out, &pem.Block{Type: "CERTIFICATE", Bytes: b.Bytes})
			n++
		}
	}
	return out.Bytes(), n
}
