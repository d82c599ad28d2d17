package pki

import (
	"bytes"
	"testing"
	"time"
)

func TestPlanCA(t *testing.T) {
	const overlap = time.Hour
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	mk := func(at time.Time, validity time.Duration) *KeyPair {
		ca, err := NewCA("test-ca", validity, at)
		if err != nil {
			t.Fatal(err)
		}
		return ca
	}
	fresh := mk(t0, 100*time.Hour)
	due := mk(t0.Add(-80*time.Hour), 100*time.Hour) // past two thirds at t0
	next := mk(t0, 100*time.Hour)
	issued := 0
	newCA := func() (*KeyPair, error) { issued++; return next, nil }

	tests := []struct {
		name    string
		in      CASet
		now     time.Time
		want    CASet
		changed bool
		issues  int
	}{
		{"no CA: create one, no rotation", CASet{}, t0, CASet{Active: next}, true, 1},
		{"valid CA: nothing to do", CASet{Active: fresh}, t0, CASet{Active: fresh}, false, 0},
		{"due CA: introduce the next, still signing with the old", CASet{Active: due}, t0,
			CASet{Active: due, Next: next, Phase: CAPhaseIntroduced, Since: t0}, true, 1},
		{"introduced, overlap not over: wait", CASet{Active: due, Next: next, Phase: CAPhaseIntroduced, Since: t0}, t0.Add(overlap - time.Second),
			CASet{Active: due, Next: next, Phase: CAPhaseIntroduced, Since: t0}, false, 0},
		{"introduced, overlap over: promote, keep trusting the old", CASet{Active: due, Next: next, Phase: CAPhaseIntroduced, Since: t0}, t0.Add(overlap),
			CASet{Active: next, Previous: due.CertPEM, Phase: CAPhasePromoted, Since: t0.Add(overlap)}, true, 0},
		{"introduced but the old CA expired: promote at once", CASet{Active: due, Next: next, Phase: CAPhaseIntroduced, Since: t0}, t0.Add(21 * time.Hour),
			CASet{Active: next, Previous: due.CertPEM, Phase: CAPhasePromoted, Since: t0.Add(21 * time.Hour)}, true, 0},
		{"promoted, overlap over: drop the old", CASet{Active: next, Previous: due.CertPEM, Phase: CAPhasePromoted, Since: t0}, t0.Add(overlap),
			CASet{Active: next}, true, 0},
		{"expired CA with no successor: replace (nothing verifies anyway)", CASet{Active: due}, t0.Add(21 * time.Hour), CASet{Active: next}, true, 1},
		{"introduced without a next CA (half written): start over", CASet{Active: fresh, Phase: CAPhaseIntroduced, Since: t0}, t0.Add(overlap),
			CASet{Active: fresh}, true, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			issued = 0
			got, changed, err := PlanCA(tt.in, tt.now, overlap, newCA)
			if err != nil {
				t.Fatal(err)
			}
			if changed != tt.changed || issued != tt.issues {
				t.Fatalf("changed=%v issued=%d, want %v and %d", changed, issued, tt.changed, tt.issues)
			}
			if got.Active != tt.want.Active || got.Next != tt.want.Next || !bytes.Equal(got.Previous, tt.want.Previous) ||
				got.Phase != tt.want.Phase || !got.Since.Equal(tt.want.Since) {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestRotationAlwaysTrustsBothSides walks a whole rotation and checks the
// invariant that keeps everyone connected: at every step, the trust bundle
// published before the step verifies the CA that signs after it, and the
// bundle after it verifies the CA that signed before it.
func TestRotationAlwaysTrustsBothSides(t *testing.T) {
	const overlap = time.Hour
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	old, err := NewCA("old", 100*time.Hour, now.Add(-80*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	newCA := func() (*KeyPair, error) { return NewCA("new", 100*time.Hour, now) }
	s := CASet{Active: old}
	steps := 0
	for range 10 {
		before := s
		next, changed, err := PlanCA(s, now, overlap, newCA)
		if err != nil {
			t.Fatal(err)
		}
		if changed {
			steps++
			if !bytes.Contains(before.Bundle(), next.Active.CertPEM) {
				t.Fatalf("step %d: the CA that now signs was not trusted before the step", steps)
			}
			if !bytes.Contains(next.Bundle(), before.Active.CertPEM) && next.Phase != CAPhaseNone {
				t.Fatalf("step %d: the CA that signed before the step is no longer trusted", steps)
			}
		}
		s = next
		now = now.Add(overlap)
	}
	if steps != 3 || s.Rotating() || s.Active == old {
		t.Fatalf("after %d steps: rotating=%v, still the old CA=%v; want introduce, promote, retire", steps, s.Rotating(), s.Active == old)
	}
}
