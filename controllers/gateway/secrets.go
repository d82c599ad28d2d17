package gateway

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
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
	// CAOverlap is how long each phase of a CA rotation lasts: the next CA
	// is trusted that long before it signs, and the previous one that long
	// after (default 24 h, far beyond the kubelet's refresh of mounted
	// Secrets, so every sandbox that re-reads its ca.crt stays connected).
	CAOverlap time.Duration
}

// DefaultCAOverlap is the length of each phase of a CA rotation.
const DefaultCAOverlap = 24 * time.Hour

func (o PKIOptions) withDefaults() PKIOptions {
	if o.CAValidity == 0 {
		o.CAValidity = render.CAValidity
	}
	if o.LeafValidity == 0 {
		o.LeafValidity = render.LeafValidity
	}
	if o.CAOverlap == 0 {
		o.CAOverlap = DefaultCAOverlap
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

// builtinPKI keeps the built-in PKI's certificates (when it issues them)
// and schedules their renewal in res. It returns the reader of the
// certificate Secrets for this reconcile's observation: the cache, unless
// this reconcile wrote one of them, which the cache may not show yet (the
// Secrets would be read as they were: a CA rotation not begun, a leaf
// expired).
func (r *Reconciler) builtinPKI(ctx context.Context, gw *openshellv1alpha1.OpenShellGateway, in render.Inputs, res *ctrl.Result) (client.Reader, error) {
	if in.TLS != render.TLSBuiltin {
		return r.Client, nil
	}
	next, wrote, err := r.ensureBuiltinPKI(ctx, gw, in)
	if err != nil {
		return nil, fmt.Errorf("built-in PKI: %w", err)
	}
	// Renewal is scheduled for its moment, not discovered by polling.
	res.RequeueAfter = max(next.Sub(r.now()), time.Second)
	if wrote {
		return r.APIReader, nil
	}
	return r.Client, nil
}

// ensureBuiltinPKI keeps the CA, server and client Secrets valid: it creates
// them when missing, reissues a leaf that is due for renewal, no longer
// matches the active CA or misses a DNS name, and rotates a due CA in
// phases (pki.PlanCA) so that nobody holding the old trust bundle is
// disconnected: every leaf Secret's ca.crt carries the whole bundle. It
// returns when the next renewal or rotation step is due, and whether it
// wrote a Secret.
func (r *Reconciler) ensureBuiltinPKI(ctx context.Context, gw *openshellv1alpha1.OpenShellGateway, in render.Inputs) (next time.Time, wrote bool, err error) {
	n := render.NamesFor(gw)
	now := r.now()
	opts := r.PKI.withDefaults()

	cur, err := r.loadCASet(ctx, r.Client, gw.Namespace, n.CA)
	if err != nil {
		return time.Time{}, wrote, err
	}
	set, changed, err := pki.PlanCA(cur, now, opts.CAOverlap, func() (*pki.KeyPair, error) {
		return pki.NewCA(render.CACommonName, opts.CAValidity, now)
	})
	if err != nil {
		return time.Time{}, wrote, err
	}
	if changed {
		if err := r.writeCASet(ctx, gw, n.CA, set); err != nil {
			return time.Time{}, wrote, err
		}
		wrote = true
	}
	ca, bundle := set.Active, set.Bundle()
	// A promoted CA makes every leaf due: it is no longer signed by it.
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
		leaf, trusted, err := r.loadLeaf(ctx, gw.Namespace, l.name)
		if err != nil {
			return time.Time{}, wrote, err
		}
		due := pki.LeafDue(leaf, ca, l.req.DNSNames, now)
		if due {
			if leaf, err = ca.Issue(l.req, now); err != nil {
				return time.Time{}, wrote, fmt.Errorf("issue %s: %w", l.name, err)
			}
		}
		if due || !bytes.Equal(trusted, bundle) {
			if err := r.writeTLSSecret(ctx, gw, l.name, leaf, bundle, due); err != nil {
				return time.Time{}, wrote, err
			}
			wrote = true
		}
		issued = append(issued, leaf)
	}
	next = pki.NextRenewal(issued...)
	if step := set.NextStep(opts.CAOverlap); !step.IsZero() && step.Before(next) {
		next = step
	}
	return next, wrote, nil
}

// Keys and annotations of the CA Secret beyond tls.crt and tls.key (the
// active CA) and ca.crt (the trust bundle).
const (
	caNextCert     = "next.crt"
	caNextKey      = "next.key"
	caPreviousCert = "previous.crt"
	// AnnotationCARotation records the rotation phase and when it began
	// ("Introduced 2026-11-30T10:00:00Z").
	AnnotationCARotation = "openshell.ai/ca-rotation"
)

// loadCASet reads the CA Secret; a missing or unparsable CA is nil (and is
// replaced).
func (r *Reconciler) loadCASet(ctx context.Context, read client.Reader, ns, name string) (pki.CASet, error) {
	s := &corev1.Secret{}
	if err := read.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, s); err != nil {
		if apierrors.IsNotFound(err) {
			return pki.CASet{}, nil
		}
		return pki.CASet{}, fmt.Errorf("read secret %s: %w", name, err)
	}
	active, err := pki.Parse(s.Data[pki.KeyCert], s.Data[pki.KeyKey])
	if err != nil {
		return pki.CASet{}, nil
	}
	set := pki.CASet{Active: active}
	if phase, since, ok := strings.Cut(s.Annotations[AnnotationCARotation], " "); ok {
		at, err := time.Parse(time.RFC3339, since)
		if err == nil {
			set.Phase, set.Since = pki.CAPhase(phase), at
		}
	}
	switch set.Phase {
	case pki.CAPhaseIntroduced:
		set.Next, _ = pki.Parse(s.Data[caNextCert], s.Data[caNextKey]) // nil: PlanCA starts over
	case pki.CAPhasePromoted:
		set.Previous = s.Data[caPreviousCert]
	}
	return set, nil
}

// writeCASet stores a CA set in the CA Secret.
func (r *Reconciler) writeCASet(ctx context.Context, gw *openshellv1alpha1.OpenShellGateway, name string, set pki.CASet) error {
	data := map[string][]byte{pki.KeyCert: set.Active.CertPEM, pki.KeyKey: set.Active.KeyPEM, pki.KeyCA: set.Bundle()}
	if set.Next != nil {
		data[caNextCert], data[caNextKey] = set.Next.CertPEM, set.Next.KeyPEM
	}
	if len(set.Previous) > 0 {
		data[caPreviousCert] = set.Previous
	}
	var annotations map[string]string
	if set.Rotating() {
		annotations = map[string]string{AnnotationCARotation: string(set.Phase) + " " + set.Since.UTC().Format(time.RFC3339)}
	}
	if err := r.putSecret(ctx, gw, name, data, annotations); err != nil {
		return err
	}
	msg := "built-in PKI issued the gateway CA (expires " + set.Active.Cert.NotAfter.UTC().Format(time.RFC3339) + ")"
	switch set.Phase {
	case pki.CAPhaseIntroduced:
		msg = "built-in PKI introduced the next gateway CA: trusted now, signing after the overlap"
	case pki.CAPhasePromoted:
		msg = "built-in PKI promoted the new gateway CA: leaves are reissued; the previous CA stays trusted for the overlap"
	}
	r.Recorder.Eventf(gw, nil, corev1.EventTypeNormal, "CertificateAuthorityRotated", "Reconcile", "%s", msg)
	return nil
}

// loadLeaf reads a leaf TLS Secret: its key pair (nil when missing or
// unparsable) and the trust bundle it carries.
func (r *Reconciler) loadLeaf(ctx context.Context, ns, name string) (*pki.KeyPair, []byte, error) {
	s := &corev1.Secret{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, s); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil, nil
		}
		return nil, nil, fmt.Errorf("read secret %s: %w", name, err)
	}
	kp, err := pki.Parse(s.Data[pki.KeyCert], s.Data[pki.KeyKey])
	if err != nil {
		return nil, nil, nil // unusable: replace it
	}
	return kp, s.Data[pki.KeyCA], nil
}

// writeTLSSecret writes a leaf's kubernetes.io/tls Secret with the trust
// bundle as ca.crt; issued says whether the leaf is new (an event) or only
// the bundle changed.
func (r *Reconciler) writeTLSSecret(ctx context.Context, gw *openshellv1alpha1.OpenShellGateway, name string, kp *pki.KeyPair, bundle []byte, issued bool) error {
	data := map[string][]byte{pki.KeyCert: kp.CertPEM, pki.KeyKey: kp.KeyPEM, pki.KeyCA: bundle}
	if err := r.putSecret(ctx, gw, name, data, nil); err != nil {
		return err
	}
	if issued {
		r.Recorder.Eventf(gw, nil, corev1.EventTypeNormal, "CertificateIssued", "Reconcile",
			"built-in PKI issued %s (expires %s)", name, kp.Cert.NotAfter.UTC().Format(time.RFC3339))
	}
	return nil
}

// putSecret creates or replaces one of the gateway's kubernetes.io/tls
// Secrets.
func (r *Reconciler) putSecret(ctx context.Context, gw *openshellv1alpha1.OpenShellGateway, name string, data map[string][]byte, annotations map[string]string) error {
	s := &corev1.Secret{ObjectMeta: secretMeta(gw, name, "tls"), Type: corev1.SecretTypeTLS, Data: data}
	s.Annotations = annotations
	cur := &corev1.Secret{}
	err := r.Client.Get(ctx, client.ObjectKeyFromObject(s), cur)
	switch {
	case apierrors.IsNotFound(err):
		err = r.Client.Create(ctx, s)
		if apierrors.IsAlreadyExists(err) && r.ownSecretThere(ctx, s) {
			// The cache lags a write of this operator's (the last
			// reconcile's): a conflict, run again on fresh data.
			err = apierrors.NewConflict(corev1.Resource("secrets"), name, err)
		}
	case err == nil:
		cur.Data, cur.Labels, cur.Type, cur.Annotations = data, s.Labels, s.Type, annotations
		cur.OwnerReferences = s.OwnerReferences
		err = r.Client.Update(ctx, cur)
	}
	if err != nil {
		return fmt.Errorf("write TLS secret %s: %w", name, err)
	}
	return nil
}

// ownSecretThere says whether the Secret the cache did not hold is there,
// written by the operator for this gateway (its labels and owner): the
// cache lags. Another's Secret of that name is not, and stays an error.
func (r *Reconciler) ownSecretThere(ctx context.Context, want *corev1.Secret) bool {
	live := &corev1.Secret{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(want), live); err != nil {
		return false
	}
	for k, v := range want.Labels {
		if live.Labels[k] != v {
			return false
		}
	}
	owner := metav1.GetControllerOf(live)
	return owner != nil && len(want.OwnerReferences) == 1 && owner.UID == want.OwnerReferences[0].UID
}
