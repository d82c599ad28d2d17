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

// TestRenew: nothing new while both are current; a leaf whose names
// changed is reissued from the same CA; a CA past two thirds of its life
// is replaced, and its leaf with it.
func TestRenew(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	req := LeafRequest{CommonName: "relay", DNSNames: []string{"relay.ns.svc"}, Server: true, Validity: 24 * time.Hour}
	first, err := Renew(nil, nil, "test-ca", 30*24*time.Hour, req, now)
	if err != nil || !first.NewCA || !first.NewLeaf || !SignedBy(first.Leaf.Cert, first.CA.Cert) {
		t.Fatalf("from nothing: %+v, %v", first, err)
	}
	same, err := Renew(first.CA, first.Leaf, "test-ca", 30*24*time.Hour, req, now.Add(time.Hour))
	if err != nil || same.NewCA || same.NewLeaf || same.CA != first.CA || same.Leaf != first.Leaf {
		t.Fatalf("current pair renewed: %+v, %v", same, err)
	}
	renamed := req
	renamed.DNSNames = []string{"relay.ns.svc", "relay.ns.svc.cluster.local"}
	names, err := Renew(first.CA, first.Leaf, "test-ca", 30*24*time.Hour, renamed, now.Add(time.Hour))
	if err != nil || names.NewCA || !names.NewLeaf || names.CA != first.CA || !SignedBy(names.Leaf.Cert, first.CA.Cert) {
		t.Fatalf("new names: %+v, %v", names, err)
	}
	late, err := Renew(first.CA, first.Leaf, "test-ca", 30*24*time.Hour, req, now.Add(21*24*time.Hour))
	if err != nil || !late.NewCA || !late.NewLeaf || !SignedBy(late.Leaf.Cert, late.CA.Cert) || SignedBy(late.Leaf.Cert, first.CA.Cert) {
		t.Fatalf("CA past two thirds: %+v, %v", late, err)
	}
}
