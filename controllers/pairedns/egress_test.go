package pairedns

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	anpv1alpha1 "sigs.k8s.io/network-policy-api/apis/v1alpha1"

	"github.com/openshell/openshell-operator/internal/render/tenantegress"
)

func group(ids ...string) *anpv1alpha1.AdminNetworkPolicy {
	return &anpv1alpha1.AdminNetworkPolicy{Spec: anpv1alpha1.AdminNetworkPolicySpec{Subject: anpv1alpha1.AdminNetworkPolicySubject{
		Pods: &anpv1alpha1.NamespacedPod{PodSelector: metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: tenantegress.LabelBoundaryPair, Operator: metav1.LabelSelectorOpIn, Values: ids}}}}}}}
}

// TestAGroupLosesSandboxesBeforeAnyGains: a group written as wanted would
// both take sandboxes out and let others in; the sandboxes it loses are
// taken out first (to the narrower default), so that no write that fails
// afterwards leaves a sandbox in a group it left.
func TestAGroupLosesSandboxesBeforeAnyGains(t *testing.T) {
	for _, tc := range []struct {
		name      string
		cur, want *anpv1alpha1.AdminNetworkPolicy
		shrunk    []string
		drop      bool
	}{
		{"only gains: nothing first", group("a"), group("a", "b"), nil, false},
		{"the same: nothing first", group("a", "b"), group("a", "b"), nil, false},
		{"loses one, gains one: shrunk to what it keeps", group("a", "b"), group("b", "c"), []string{"b"}, false},
		{"keeps none: dropped", group("a"), group("c"), nil, true},
		{"the default: written first as wanted", &anpv1alpha1.AdminNetworkPolicy{}, &anpv1alpha1.AdminNetworkPolicy{}, nil, false},
	} {
		shrunk, drop := shrink(tc.cur, tc.want)
		if drop != tc.drop {
			t.Errorf("%s: drop %v", tc.name, drop)
		}
		var got []string
		if shrunk != nil {
			got = shrunk.Spec.Subject.Pods.PodSelector.MatchExpressions[0].Values
		}
		if len(got) != len(tc.shrunk) || (len(got) > 0 && got[0] != tc.shrunk[0]) {
			t.Errorf("%s: shrunk to %v, want %v", tc.name, got, tc.shrunk)
		}
	}
	w := group("b", "c")
	shrink(group("a", "b"), w)
	if v := w.Spec.Subject.Pods.PodSelector.MatchExpressions[0].Values; len(v) != 2 {
		t.Fatalf("shrink wrote into the wanted policy: %v", v)
	}
}
