// Package pki is the operator's small built-in PKI for clusters without
// cert-manager: an ECDSA P-256 CA and the gateway's server and client
// leaf certificates, renewed before they expire. It also generates the
// gateway's Ed25519 JWT signing key and the credential key-encryption key.
package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"time"
)

// Secret data keys, as kubernetes.io/tls Secrets and cert-manager use them.
const (
	KeyCert = "tls.crt"
	KeyKey  = "tls.key"
	KeyCA   = "ca.crt"
)

// KeyPair is a certificate and its private key.
type KeyPair struct {
	Cert *x509.Certificate
	Key  crypto.Signer
	// CertPEM and KeyPEM are the encoded forms stored in Secrets.
	CertPEM, KeyPEM []byte
}

// LeafRequest describes a leaf certificate.
type LeafRequest struct {
	CommonName   string
	DNSNames     []string
	IPs          []net.IP
	Server       bool // server auth usage
	Client       bool // client auth usage
	Validity     time.Duration
	Organization string
}

// NewCA creates a self-signed CA.
func NewCA(commonName string, validity time.Duration, now time.Time) (*KeyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: commonName, Organization: []string{"openshell"}},
		NotBefore:             now.Add(-5 * time.Minute), // tolerate clock skew
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	return sign(tmpl, key, nil)
}

// Issue signs a leaf certificate with the CA.
func (ca *KeyPair) Issue(req LeafRequest, now time.Time) (*KeyPair, error) {
	if !ca.Cert.IsCA {
		return nil, errors.New("issuer is not a CA")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate leaf key: %w", err)
	}
	notAfter := now.Add(req.Validity)
	if notAfter.After(ca.Cert.NotAfter) {
		notAfter = ca.Cert.NotAfter // a leaf never outlives its CA
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: req.CommonName},
		DNSNames:    req.DNSNames,
		IPAddresses: req.IPs,
		NotBefore:   now.Add(-5 * time.Minute),
		NotAfter:    notAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
	}
	if req.Organization != "" {
		tmpl.Subject.OrganizationalUnit = []string{req.Organization}
	}
	if req.Server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	if req.Client {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	return sign(tmpl, key, ca)
}

func sign(tmpl *x509.Certificate, key *ecdsa.PrivateKey, parent *KeyPair) (*KeyPair, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("serial: %w", err)
	}
	tmpl.SerialNumber = serial
	parentCert, parentKey := tmpl, crypto.Signer(key)
	if parent != nil {
		parentCert, parentKey = parent.Cert, parent.Key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parentCert, key.Public(), parentKey)
	if err != nil {
		return nil, fmt.Errorf("sign certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	return &KeyPair{
		Cert:    cert,
		Key:     key,
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}, nil
}

// Parse decodes a PEM certificate and key (as stored in a Secret).
func Parse(certPEM, keyPEM []byte) (*KeyPair, error) {
	cert, err := ParseCert(certPEM)
	if err != nil {
		return nil, err
	}
	kb, _ := pem.Decode(keyPEM)
	if kb == nil {
		return nil, errors.New("tls.key is not PEM")
	}
	var key crypto.Signer
	switch kb.Type {
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(kb.Bytes)
	default:
		var k any
		k, err = x509.ParsePKCS8PrivateKey(kb.Bytes)
		if err == nil {
			var ok bool
			if key, ok = k.(crypto.Signer); !ok {
				err = errors.New("private key cannot sign")
			}
		}
	}
	if err != nil {
		return nil, fmt.Errorf("parse tls.key: %w", err)
	}
	return &KeyPair{Cert: cert, Key: key, CertPEM: certPEM, KeyPEM: keyPEM}, nil
}

// ParseCert decodes the first PEM certificate.
func ParseCert(certPEM []byte) (*x509.Certificate, error) {
	b, _ := pem.Decode(certPEM)
	if b == nil || b.Type != "CERTIFICATE" {
		return nil, errors.New("tls.crt is not a PEM certificate")
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parse tls.crt: %w", err)
	}
	return c, nil
}

// RenewAt is when a certificate should be replaced: at two thirds of its
// lifetime (cert-manager's default), so that a missed reconcile or two
// still leaves plenty of validity.
func RenewAt(c *x509.Certificate) time.Time {
	life := c.NotAfter.Sub(c.NotBefore)
	return c.NotBefore.Add(life * 2 / 3)
}

// SignedBy reports whether cert chains to ca.
func SignedBy(cert, ca *x509.Certificate) bool {
	return cert.CheckSignatureFrom(ca) == nil
}

// JWTKeys is the gateway's sandbox-JWT signing key in the layout the
// gateway reads: signing.pem (Ed25519 PKCS#8), public.pem (SPKI), kid.
type JWTKeys struct {
	SigningPEM, PublicPEM []byte
	KID                   string
}

// NewJWTKeys generates an Ed25519 key; kid is 32 hex characters derived
// from the public key.
func NewJWTKeys() (*JWTKeys, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate JWT key: %w", err)
	}
	privDER, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(pubDER)
	return &JWTKeys{
		SigningPEM: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: privDER}),
		PublicPEM:  pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}),
		KID:        hex.EncodeToString(sum[:16]),
	}, nil
}

// NewKEK returns a credential key-encryption key: base64 of 32 random bytes.
func NewKEK() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generate KEK: %w", err)
	}
	return base64.StdEncoding.EncodeToString(b), nil
}
