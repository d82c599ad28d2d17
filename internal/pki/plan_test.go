package pki

import (
	"testing"
	"time"
)

func TestRenewalPlan(t *testing.T) {
	now := time.Now()
	ca, err := NewCA("ca", 30*24*time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	other, err := NewCA("other", 30*24*time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Issue(LeafRequest{CommonName: "x", DNSNames: []string{"a.svc", "b.svc"}, Server: true, Validity: 3 * 24 * time.Hour}, now)
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"a.svc", "b.svc"}
	renewLeafAt := RenewAt(leaf.Cert)
	for _, tc := range []struct {
		name string
		leaf *KeyPair
		ca   *KeyPair
		dns  []string
		at   time.Time
		due  bool
	}{
		{"fresh", leaf, ca, names, now, false},
		{"just before two thirds", leaf, ca, names, renewLeafAt.Add(-time.Second), false},
		{"at two thirds", leaf, ca, names, renewLeafAt, true},
		{"missing", nil, ca, names, now, true},
		{"signed by another CA (rotated)", leaf, other, names, now, true},
		{"a name was added", leaf, ca, []string{"a.svc", "b.svc", "c.svc"}, now, true},
		{"names in another order", leaf, ca, []string{"b.svc", "a.svc"}, now, true},
		{"no CA", leaf, nil, names, now, true},
	} {
		if got := LeafDue(tc.leaf, tc.ca, tc.dns, tc.at); got != tc.due {
			t.Errorf("%s: LeafDue = %v, want %v", tc.name, got, tc.due)
		}
	}
	if CADue(ca, now) || !CADue(nil, now) || !CADue(ca, RenewAt(ca.Cert)) {
		t.Error("CADue: want false for a fresh CA, true when missing or at two thirds of its life")
	}
	if got := NextRenewal(ca, nil, leaf); !got.Equal(renewLeafAt) {
		t.Errorf("NextRenewal = %v, want the leaf's %v", got, renewLeafAt)
	}
	if !NextRenewal().IsZero() {
		t.Error("NextRenewal of nothing is not zero")
	}
}
