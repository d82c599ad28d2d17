package pki

import (
	"slices"
	"time"
)

// CADue reports whether a CA must be (re)issued: it is missing or past two
// thirds of its life.
func CADue(ca *KeyPair, now time.Time) bool {
	return ca == nil || !now.Before(RenewAt(ca.Cert))
}

// LeafDue reports whether a leaf must be (re)issued from ca: it is
// missing, past two thirds of its life, not signed by ca (the CA rotated),
// or not for exactly dnsNames. The built-in gateway PKI and the OIDC
// issuer's serving certificate make this one decision.
func LeafDue(leaf, ca *KeyPair, dnsNames []string, now time.Time) bool {
	return leaf == nil || ca == nil || !now.Before(RenewAt(leaf.Cert)) || !SignedBy(leaf.Cert, ca.Cert) ||
		!slices.Equal(leaf.Cert.DNSNames, dnsNames)
}

// NextRenewal is the earliest renewal moment of the given key pairs (nil
// ones are skipped); the zero time when there are none.
func NextRenewal(pairs ...*KeyPair) time.Time {
	var next time.Time
	for _, kp := range pairs {
		if kp == nil {
			continue
		}
		if at := RenewAt(kp.Cert); next.IsZero() || at.Before(next) {
			next = at
		}
	}
	return next
}
