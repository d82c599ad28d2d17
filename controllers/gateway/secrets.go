package gateway

import (
	"context"
	"fmt"
	"net"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/pki"
	render "github.com/openshell/openshell-operator/internal/render/gateway"
)

// PKIOptions set certificate lifetimes of the built-in PKI (tests shorten
// them to exercise rotation).
type PKIOptions struct {
	CAValidity   time.Duration
	LeafValidity time.Duration
}

func (o PKIOptions) withDefaults() PKIOptions {
	if o.CAValidity == 0 {
		o.CAValidity = render.CAValidity
	}
	if o.LeafValidity == 0 {
		o.LeafValidity = render.LeafValidity
	}
	return o
}

func secretMeta(gw *openshellv1alpha1.OpenShellGateway, name, component string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: gw.Namespace, Labels: render.Labels(gw, component),
		OwnerReferences: []metav1.OwnerReference{render.OwnerReference(gw)}}
}

// ensureGeneratedSecrets creates the JWT signing key and the credential
// KEK once. They are never regenerated while they exist: a new KEK would
// make stored credentials unreadable, a new JWT key would log out every
// sandbox.
func (r *Reconciler) ensureGeneratedSecrets(ctx context.Context, gw *openshellv1alpha1.OpenShellGateway) error {
	n := render.NamesFor(gw)
	if err := r.createIfMissing(ctx, n.JWT, func() (*corev1.Secret, error) {
		k, err := pki.NewJWTKeys()
		if err != nil {
			return nil, err
		}
		return &corev1.Secret{ObjectMeta: secretMeta(gw, n.JWT, "jwt"), Type: corev1.SecretTypeOpaque,
			Data: map[string][]byte{"signing.pem": k.SigningPEM, "public.pem": k.PublicPEM, "kid": []byte(k.KID)}}, nil
	}, gw.Namespace); err != nil {
		return fmt.Errorf("ensure JWT key secret: %w", err)
	}
	if err := r.createIfMissing(ctx, n.KEK, func() (*corev1.Secret, error) {
		kek, err := pki.NewKEK()
		if err != nil {
			return nil, err
		}
		return &corev1.Secret{ObjectMeta: secretMeta(gw, n.KEK, "credential-kek"), Type: corev1.SecretTypeOpaque,
			Data: map[string][]byte{render.KEKSecretKey: []byte(kek)}}, nil
	}, gw.Namespace); err != nil {
		return fmt.Errorf("ensure credential KEK secret: %w", err)
	}
	return nil
}

func (r *Reconciler) createIfMissing(ctx context.Context, name string, build func() (*corev1.Secret, error), ns string) error {
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &corev1.Secret{})
	if err == nil || !apierrors.IsNotFound(err) {
		return err
	}
	s, err := build()
	if err != nil {
		return err
	}
	if err := r.Client.Create(ctx, s); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// ensureBuiltinPKI keeps the CA, server and client Secrets valid: it creates
// them when missing, reissues a leaf that is due for renewal, no longer
// matches the CA or misses a DNS name, and rotates the CA (and so both
// leaves) when the CA is due. It returns when the next renewal is due.
func (r *Reconciler) ensureBuiltinPKI(ctx context.Context, gw *openshellv1alpha1.OpenShellGateway, in render.Inputs) (time.Time, error) {
	n := render.NamesFor(gw)
	now := r.now()
	opts := r.PKI.withDefaults()

	ca, err := r.loadKeyPair(ctx, gw.Namespace, n.CA)
	if err != nil {
		return time.Time{}, err
	}
	if pki.CADue(ca, now) {
		if ca, err = pki.NewCA(render.CACommonName, opts.CAValidity, now); err != nil {
			return time.Time{}, err
		}
		if err := r.writeTLSSecret(ctx, gw, n.CA, ca, nil); err != nil {
			return time.Time{}, err
		}
	}
	// A rotated CA makes every leaf due: it is no longer signed by it.
	issued := []*pki.KeyPair{ca}
	leaves := []struct {
		name string
		req  pki.LeafRequest
	}{
		{n.ServerTLS, pki.LeafRequest{CommonName: n.Fullname, DNSNames: render.ServerDNSNames(gw, in),
			IPs: []net.IP{net.ParseIP("127.0.0.1")}, Server: true, Validity: opts.LeafValidity}},
		{n.ClientTLS, pki.LeafRequest{CommonName: render.ClientCommonName, Organization: render.ClientOU, Client: true, Validity: opts.LeafValidity}},
	}
	for _, l := range leaves {
		cur, err := r.loadKeyPair(ctx, gw.Namespace, l.name)
		if err != nil {
			return time.Time{}, err
		}
		if pki.LeafDue(cur, ca, l.req.DNSNames, now) {
			if cur, err = ca.Issue(l.req, now); err != nil {
				return time.Time{}, fmt.Errorf("issue %s: %w", l.name, err)
			}
			if err := r.writeTLSSecret(ctx, gw, l.name, cur, ca.CertPEM); err != nil {
				return time.Time{}, err
			}
		}
		issued = append(issued, cur)
	}
	return pki.NextRenewal(issued...), nil
}

// loadKeyPair reads a TLS Secret; a missing or unparsable one gives nil.
func (r *Reconciler) loadKeyPair(ctx context.Context, ns, name string) (*pki.KeyPair, error) {
	s := &corev1.Secret{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, s); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("read secret %s: %w", name, err)
	}
	kp, err := pki.Parse(s.Data[pki.KeyCert], s.Data[pki.KeyKey])
	if err != nil {
		return nil, nil // unusable: replace it
	}
	return kp, nil
}

// writeTLSSecret creates or replaces a kubernetes.io/tls Secret.
func (r *Reconciler) writeTLSSecret(ctx context.Context, gw *openshellv1alpha1.OpenShellGateway, name string, kp *pki.KeyPair, caPEM []byte) error {
	data := map[string][]byte{pki.KeyCert: kp.CertPEM, pki.KeyKey: kp.KeyPEM}
	if caPEM != nil {
		data[pki.KeyCA] = caPEM
	} else {
		data[pki.KeyCA] = kp.CertPEM
	}
	s := &corev1.Secret{ObjectMeta: secretMeta(gw, name, "tls"), Type: corev1.SecretTypeTLS, Data: data}
	cur := &corev1.Secret{}
	err := r.Client.Get(ctx, client.ObjectKeyFromObject(s), cur)
	switch {
	case apierrors.IsNotFound(err):
		err = r.Client.Create(ctx, s)
	case err == nil:
		cur.Data, cur.Labels, cur.Type = data, s.Labels, s.Type
		cur.OwnerReferences = s.OwnerReferences
		err = r.Client.Update(ctx, cur)
	}
	if err != nil {
		return fmt.Errorf("write TLS secret %s: %w", name, err)
	}
	r.Recorder.Eventf(gw, nil, corev1.EventTypeNormal, "CertificateIssued", "Reconcile",
		"built-in PKI issued %s (expires %s)", name, kp.Cert.NotAfter.UTC().Format(time.RFC3339))
	return nil
}
