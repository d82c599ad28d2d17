package oidc

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openshell/openshell-operator/internal/pki"
)

// Lifetimes of the issuer's own serving certificate.
const (
	servingCAValidity   = 10 * 365 * 24 * time.Hour
	servingLeafValidity = 365 * 24 * time.Hour
)

// EnsureServingCert keeps the issuer's TLS certificate in a Secret: a
// long-lived CA (which gateways trust, so it must not change needlessly)
// and a leaf for the issuer's host names, reissued before it expires or
// when the names change. It returns the certificate and the CA PEM.
func EnsureServingCert(ctx context.Context, c client.Client, namespace, name string, hosts []string, now time.Time) (tls.Certificate, []byte, error) {
	cert, ca, err := ensureServingCert(ctx, c, namespace, name, hosts, now)
	if apierrors.IsAlreadyExists(err) || apierrors.IsConflict(err) {
		// Another replica wrote it first: use theirs (every replica must
		// serve under the one CA the gateways are given).
		return ensureServingCert(ctx, c, namespace, name, hosts, now)
	}
	return cert, ca, err
}

func ensureServingCert(ctx context.Context, c client.Client, namespace, name string, hosts []string, now time.Time) (tls.Certificate, []byte, error) {
	s := &corev1.Secret{}
	err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, s)
	if err != nil && !apierrors.IsNotFound(err) {
		return tls.Certificate{}, nil, fmt.Errorf("read issuer TLS secret: %w", err)
	}
	exists := err == nil
	ca, _ := pki.Parse(s.Data["ca.crt"], s.Data["ca.key"])
	leaf, _ := pki.Parse(s.Data[pki.KeyCert], s.Data[pki.KeyKey])
	var ips []net.IP
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			ips = append(ips, ip)
		}
	}
	ren, err := pki.Renew(ca, leaf, "openshell-operator-oidc-ca", servingCAValidity, pki.LeafRequest{CommonName: "openshell-operator-oidc",
		DNSNames: dnsNames(hosts), IPs: ips, Server: true, Validity: servingLeafValidity}, now)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	ca, leaf = ren.CA, ren.Leaf
	if !ren.NewCA && !ren.NewLeaf {
		cert, err := tls.X509KeyPair(leaf.CertPEM, leaf.KeyPEM)
		return cert, ca.CertPEM, err
	}
	s.Type = corev1.SecretTypeOpaque
	s.Data = map[string][]byte{"ca.crt": ca.CertPEM, "ca.key": ca.KeyPEM, pki.KeyCert: leaf.CertPEM, pki.KeyKey: leaf.KeyPEM}
	if exists {
		err = c.Update(ctx, s)
	} else {
		s.ObjectMeta = metav1.ObjectMeta{Name: name, Namespace: namespace,
			Labels: map[string]string{"app.kubernetes.io/managed-by": "openshell-operator", "app.kubernetes.io/component": "oidc"}}
		err = c.Create(ctx, s)
	}
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("store issuer TLS secret: %w", err)
	}
	cert, err := tls.X509KeyPair(leaf.CertPEM, leaf.KeyPEM)
	return cert, ca.CertPEM, err
}

func dnsNames(hosts []string) []string {
	var out []string
	for _, h := range hosts {
		if net.ParseIP(h) == nil {
			out = append(out, h)
		}
	}
	return out
}
