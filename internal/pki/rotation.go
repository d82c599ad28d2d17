package pki

import (
	"bytes"
	"fmt"
	"time"
)

// CAPhase is where a CA rotation stands. A CA is never replaced in one
// step: whoever holds the old trust bundle (a sandbox that has not re-read
// its mounted ca.crt yet) would reject certificates from the new CA, and
// the new CA's holders would reject the old leaves. The new CA is trusted
// first, signs only after an overlap, and the old one is trusted for
// another overlap after that.
type CAPhase string

const (
	// CAPhaseNone: one CA trusted and signing.
	CAPhaseNone CAPhase = ""
	// CAPhaseIntroduced: the next CA is trusted alongside the active one,
	// which still signs.
	CAPhaseIntroduced CAPhase = "Introduced"
	// CAPhasePromoted: the new CA signs (every leaf is reissued); the
	// previous one is still trusted.
	CAPhasePromoted CAPhase = "Promoted"
)

// CASet is a CA and its rotation state.
type CASet struct {
	// Active signs leaves.
	Active *KeyPair
	// Next is the CA that signs after promotion (CAPhaseIntroduced).
	Next *KeyPair
	// Previous is the certificate (PEM) of the CA that signed before the
	// last promotion (CAPhasePromoted).
	Previous []byte
	Phase    CAPhase
	// Since is when the current phase began.
	Since time.Time
}

// Bundle is the PEM trust bundle every holder of ca.crt must have now:
// the active CA and, during a rotation, the next or the previous one.
func (s CASet) Bundle() []byte {
	var b bytes.Buffer
	if s.Active != nil {
		b.Write(s.Active.CertPEM)
	}
	if s.Next != nil {
		b.Write(s.Next.CertPEM)
	}
	b.Write(s.Previous)
	return b.Bytes()
}

// Rotating reports whether a rotation is under way.
func (s CASet) Rotating() bool { return s.Phase != CAPhaseNone }

// NextStep is when the rotation moves on (zero when none is under way).
func (s CASet) NextStep(overlap time.Duration) time.Time {
	if !s.Rotating() {
		return time.Time{}
	}
	return s.Since.Add(overlap)
}

// PlanCA decides the CA set after now: a missing CA is created outright
// (nothing trusts anything yet); a due CA starts a rotation by introducing
// its successor; after overlap the successor is promoted, and after
// another overlap the previous CA is dropped. An active CA that has
// already expired is promoted past at once: nothing it signed verifies any
// more. newCA issues a CA. changed is false when s is already right.
func PlanCA(s CASet, now time.Time, overlap time.Duration, newCA func() (*KeyPair, error)) (_ CASet, changed bool, _ error) {
	expired := s.Active != nil && !now.Before(s.Active.Cert.NotAfter)
	switch {
	case s.Active == nil || (expired && s.Next == nil):
		ca, err := newCA()
		if err != nil {
			return s, false, fmt.Errorf("issue CA: %w", err)
		}
		return CASet{Active: ca}, true, nil
	case s.Phase == CAPhaseNone && CADue(s.Active, now):
		next, err := newCA()
		if err != nil {
			return s, false, fmt.Errorf("issue the next CA: %w", err)
		}
		return CASet{Active: s.Active, Next: next, Phase: CAPhaseIntroduced, Since: now}, true, nil
	case s.Phase == CAPhaseIntroduced && (expired || !now.Before(s.Since.Add(overlap))):
		if s.Next == nil {
			return CASet{Active: s.Active}, true, nil // a half-written rotation: start over
		}
		return CASet{Active: s.Next, Previous: s.Active.CertPEM, Phase: CAPhasePromoted, Since: now}, true, nil
	case s.Phase == CAPhasePromoted && !now.Before(s.Since.Add(overlap)):
		return CASet{Active: s.Active}, true, nil
	}
	return s, false, nil
}
