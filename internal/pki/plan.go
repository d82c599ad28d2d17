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

// Renewal is a CA and the leaf it signs after Renew, and which of the two
// are new (to be stored).
type Renewal struct {
	CA, Leaf       *KeyPair
	NewCA, NewLeaf bool
}

// Renew keeps a CA and one leaf current, as CADue and LeafDue decide: a
// due CA is replaced by one named caName, valid for caValidity; a due leaf
// (a new CA makes it due) is issued from the CA for req. The relay's
// external certificate and the OIDC issuer's serving certificate are
// kept so; the gateway PKI, whose CA rotates with an overlap, uses PlanCA.
func Renew(ca, leaf *KeyPair, caName string, caValidity time.Duration, req LeafRequest, now time.Time) (Renewal, error) {
	r := Renewal{CA: ca, Leaf: leaf}
	if CADue(ca, now) {
		var err error
		if r.CA, err = NewCA(caName, caValidity, now); err != nil {
			return Renewal{}, err
		}
		r.NewCA = true
	}
	if LeafDue(leaf, r.CA, req.DNSNames, now) {
		var err error
		if r.Leaf, err = r.CA.Issue(req, now); err != nil {
			return Renewal{}, err
		}
		r.NewLeaf = true
	}
	return r, nil
}
