package gateway

import (
	"time"

	cmv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
)

// Certificate lifetimes (cert-manager and the built-in PKI alike).
const (
	CAValidity   = 5 * 365 * 24 * time.Hour
	LeafValidity = 365 * 24 * time.Hour
	// LeafRenewBefore matches a 2/3-lifetime renewal of a one-year leaf.
	LeafRenewBefore = 120 * 24 * time.Hour
)

// Common names of the internal certificates.
const (
	CACommonName     = "openshell-ca"
	ClientCommonName = "openshell-client"
	ClientOU         = "openshell-user"
)

// ServerDNSNames are the names on the internal server certificate: the
// Service names, plus the Route host when there is no external issuer
// (with one, the Route host gets the external certificate by SNI).
func ServerDNSNames(gw *openshellv1alpha1.OpenShellGateway, in Inputs) []string {
	names := append(ServiceDNSNames(gw), "localhost")
	if ExternalIssuer(gw) == nil && RouteEnabled(gw, in) {
		names = append(names, ExternalDNSNames(gw)...)
	}
	return names
}

// CertManagerObjects renders the cert-manager chain: self-signed issuer →
// CA certificate → CA issuer → server and client certificates, plus the
// external server certificate from the admin's issuer when one is set.
func CertManagerObjects(gw *openshellv1alpha1.OpenShellGateway, in Inputs) []client.Object {
	n := NamesFor(gw)
	selfSigned, caIssuer := n.Fullname+"-selfsigned", n.Fullname+"-ca-issuer"
	ecdsa := &cmv1.CertificatePrivateKey{Algorithm: cmv1.ECDSAKeyAlgorithm, Size: 256, RotationPolicy: cmv1.RotationPolicyAlways}
	// The CA keeps its key when cert-manager renews it: leaves signed
	// before the renewal verify under the renewed CA certificate and the
	// other way round, so a sandbox holding either stays connected. (A new
	// CA key would disconnect every sandbox whose ca.crt is not refreshed.)
	caKey := &cmv1.CertificatePrivateKey{Algorithm: cmv1.ECDSAKeyAlgorithm, Size: 256, RotationPolicy: cmv1.RotationPolicyNever}
	dur := &metav1.Duration{Duration: LeafValidity}
	renew := &metav1.Duration{Duration: LeafRenewBefore}
	// cert-manager copies these labels onto the Secrets it writes: the
	// operator caches only Secrets labelled as its own.
	tmpl := &cmv1.CertificateSecretTemplate{Labels: Labels(gw, "tls")}
	local := func(name string) cmmeta.IssuerReference {
		return cmmeta.IssuerReference{Name: name, Kind: cmv1.IssuerKind, Group: "cert-manager.io"}
	}
	out := []client.Object{
		&cmv1.Issuer{ObjectMeta: meta(gw, selfSigned, gw.Namespace, "tls"),
			Spec: cmv1.IssuerSpec{IssuerConfig: cmv1.IssuerConfig{SelfSigned: &cmv1.SelfSignedIssuer{}}}},
		&cmv1.Certificate{ObjectMeta: meta(gw, n.Fullname+"-ca", gw.Namespace, "tls"),
			Spec: cmv1.CertificateSpec{IsCA: true, CommonName: CACommonName, SecretName: n.CA, SecretTemplate: tmpl,
				Duration: &metav1.Duration{Duration: CAValidity}, PrivateKey: caKey, IssuerRef: local(selfSigned)}},
		&cmv1.Issuer{ObjectMeta: meta(gw, caIssuer, gw.Namespace, "tls"),
			Spec: cmv1.IssuerSpec{IssuerConfig: cmv1.IssuerConfig{CA: &cmv1.CAIssuer{SecretName: n.CA}}}},
		&cmv1.Certificate{ObjectMeta: meta(gw, n.Fullname+"-server", gw.Namespace, "tls"),
			Spec: cmv1.CertificateSpec{CommonName: n.Fullname, DNSNames: ServerDNSNames(gw, in), IPAddresses: []string{"127.0.0.1"},
				SecretName: n.ServerTLS, SecretTemplate: tmpl, Duration: dur, RenewBefore: renew, PrivateKey: ecdsa, IssuerRef: local(caIssuer),
				Usages: []cmv1.KeyUsage{cmv1.UsageServerAuth, cmv1.UsageDigitalSignature, cmv1.UsageKeyEncipherment}}},
		&cmv1.Certificate{ObjectMeta: meta(gw, n.Fullname+"-client", gw.Namespace, "tls"),
			Spec: cmv1.CertificateSpec{CommonName: ClientCommonName, Subject: &cmv1.X509Subject{OrganizationalUnits: []string{ClientOU}},
				SecretName: n.ClientTLS, SecretTemplate: tmpl, Duration: dur, RenewBefore: renew, PrivateKey: ecdsa, IssuerRef: local(caIssuer),
				Usages: []cmv1.KeyUsage{cmv1.UsageClientAuth, cmv1.UsageDigitalSignature, cmv1.UsageKeyEncipherment}}},
	}
	if ext := ExternalIssuer(gw); ext != nil {
		names := ExternalDNSNames(gw)
		cn := ""
		if len(names) > 0 {
			cn = names[0]
		}
		out = append(out, &cmv1.Certificate{ObjectMeta: meta(gw, n.Fullname+"-server-external", gw.Namespace, "tls"),
			Spec: cmv1.CertificateSpec{CommonName: cn, DNSNames: names, SecretName: n.ServerExternal, SecretTemplate: tmpl,
				Duration: dur, RenewBefore: renew, PrivateKey: ecdsa,
				IssuerRef: cmmeta.IssuerReference{Name: ext.Name, Kind: ext.Kind, Group: ext.Group},
				Usages:    []cmv1.KeyUsage{cmv1.UsageServerAuth, cmv1.UsageDigitalSignature, cmv1.UsageKeyEncipherment}}})
	}
	return out
}
