package externalports

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openshell/openshell-operator/internal/pki"
	render "github.com/openshell/openshell-operator/internal/render/gateway"
)

// Lifetimes of the relay's external certificate where the operator issues
// it. The CA is long-lived: a new one reaches the Gateway (the CA bundle)
// and the relay (its mounted Secret) at different moments.
const (
	relayCAValidity   = 10 * 365 * 24 * time.Hour
	relayLeafValidity = 365 * 24 * time.Hour
	// serviceCARecheck is how often OpenShift's service CA is copied
	// again into the CA bundle (it rotates with a long overlap).
	serviceCARecheck = time.Hour
)

// errNotOurs is a relay certificate Secret someone else wrote, with no CA
// known for it.
var errNotOurs = errors.New("not the operator's")

// relayCA returns the CA that signs the relay's external certificate, and
// when to look again. On OpenShift (the service CA published in the
// operator's namespace) the service-ca issues the certificate; elsewhere
// the operator issues it and its CA here, and reissues them before they
// expire or when the names change.
func (r *Reconciler) relayCA(ctx context.Context, now time.Time) (caPEM []byte, recheck time.Duration, err error) {
	// Listed by name: the bundle grants list on ConfigMaps, not get.
	cms := &corev1.ConfigMapList{}
	if err := r.APIReader.List(ctx, cms, client.InNamespace(r.Namespace), client.MatchingFields{"metadata.name": ServiceCAConfigMap}); err != nil {
		return nil, 0, fmt.Errorf("look up ConfigMap %s: %w", ServiceCAConfigMap, err)
	}
	for _, cm := range cms.Items {
		if ca := cm.Data[ServiceCAKey]; ca != "" {
			return []byte(ca), serviceCARecheck, nil
		}
	}
	ca, leaf, err := r.issueRelayCert(ctx, now)
	if err != nil {
		return nil, 0, err
	}
	return ca.CertPEM, max(time.Until(pki.NextRenewal(ca, leaf)), time.Minute), nil
}

// issueRelayCert keeps the operator's CA (RelayCASecret, mounted nowhere)
// and the relay's leaf (RelayCertSecret, which the relay mounts) current.
func (r *Reconciler) issueRelayCert(ctx context.Context, now time.Time) (ca, leaf *pki.KeyPair, err error) {
	caSecret, err := r.ownSecret(ctx, RelayCASecret)
	if err != nil {
		return nil, nil, err
	}
	leafSecret, err := r.ownSecret(ctx, RelayCertSecret)
	if err != nil {
		return nil, nil, err
	}
	ca, _ = pki.Parse(caSecret.Data[pki.KeyCert], caSecret.Data[pki.KeyKey])
	leaf, _ = pki.Parse(leafSecret.Data[pki.KeyCert], leafSecret.Data[pki.KeyKey])
	names := []string{RelayHostname(r.Namespace), RelayHostname(r.Namespace) + ".cluster.local"}
	ren, err := pki.Renew(ca, leaf, "openshell-operator-relay-external-ports-ca", relayCAValidity,
		pki.LeafRequest{CommonName: RelayService, DNSNames: names, Server: true, Validity: relayLeafValidity}, now)
	if err != nil {
		return nil, nil, err
	}
	if ren.NewCA {
		caSecret.Data = map[string][]byte{pki.KeyCert: ren.CA.CertPEM, pki.KeyKey: ren.CA.KeyPEM}
		if err := r.storeSecret(ctx, caSecret, corev1.SecretTypeOpaque); err != nil {
			return nil, nil, err
		}
	}
	if ren.NewLeaf {
		leafSecret.Data = map[string][]byte{pki.KeyCert: ren.Leaf.CertPEM, pki.KeyKey: ren.Leaf.KeyPEM}
		if err := r.storeSecret(ctx, leafSecret, corev1.SecretTypeTLS); err != nil {
			return nil, nil, err
		}
	}
	return ren.CA, ren.Leaf, nil
}

// ownSecret reads a Secret of the operator's namespace that the operator
// writes: empty (no resource version) when there is none; errNotOurs when
// someone else's stands there.
func (r *Reconciler) ownSecret(ctx context.Context, name string) (*corev1.Secret, error) {
	s := &corev1.Secret{}
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: r.Namespace, Name: name}, s)
	switch {
	case apierrors.IsNotFound(err):
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: r.Namespace, Name: name, Labels: sharedLabels()}}, nil
	case err != nil:
		return nil, fmt.Errorf("read Secret %s: %w", name, err)
	case s.Labels[render.LabelManagedBy] != render.ManagedByValue || s.Labels[render.LabelComponent] != Component:
		return nil, fmt.Errorf("the Secret %s/%s is %w (no %s ConfigMap says which CA signs it): remove it or label it %s=%s, %s=%s",
			r.Namespace, name, errNotOurs, ServiceCAConfigMap, render.LabelManagedBy, render.ManagedByValue, render.LabelComponent, Component)
	}
	return s, nil
}

// storeSecret creates or updates (on its resource version: a concurrent
// writer's conflict is retried from a fresh read) a Secret ownSecret read.
func (r *Reconciler) storeSecret(ctx context.Context, s *corev1.Secret, typ corev1.SecretType) error {
	if s.ResourceVersion == "" {
		s.Type = typ
		if err := r.Client.Create(ctx, s); err != nil {
			return fmt.Errorf("create Secret %s: %w", s.Name, err)
		}
		return nil
	}
	if err := r.Client.Update(ctx, s); err != nil {
		return fmt.Errorf("update Secret %s: %w", s.Name, err)
	}
	return nil
}
