package imagepolicy

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/imagepolicy"
	"github.com/openshell/openshell-operator/internal/scheme"
	"github.com/openshell/openshell-operator/test/fakeclient"
)

func invalid(n int) []imagepolicy.InvalidEntry {
	out := make([]imagepolicy.InvalidEntry, n)
	for i := range out {
		out[i] = imagepolicy.InvalidEntry{Field: fmt.Sprintf("spec.allowedMirrors[%d]", i), Value: fmt.Sprintf("bad-%d", i), Message: "nope"}
	}
	return out
}

func TestReadinessValid(t *testing.T) {
	p := imagepolicy.Compile("p", openshellv1alpha1.OpenShellImagePolicySpec{
		AllowedMirrors: []string{"mirror.corp/openshell", "mirror.corp:5000"},
		Mirrors:        []openshellv1alpha1.ImageMirror{{Source: "ghcr.io/nvidia", Mirrors: []string{"mirror.corp/ghcr"}}},
	})
	reason, st, msg := readiness(p)
	if reason != openshellv1alpha1.ImagePolicyReasonValid || st != metav1.ConditionTrue || msg != "3 allowed locations" {
		t.Errorf("readiness = %s/%s %q, want Valid/True \"3 allowed locations\"", reason, st, msg)
	}
}

func TestReadinessInvalidEntries(t *testing.T) {
	// Compiled for real: one good location, one bad allowed mirror and a
	// mapping whose only mirror is a wildcard (so the mapping is dropped).
	p := imagepolicy.Compile("p", openshellv1alpha1.OpenShellImagePolicySpec{
		AllowedMirrors: []string{"mirror.corp/openshell", "library"},
		Mirrors:        []openshellv1alpha1.ImageMirror{{Source: "ghcr.io/nvidia", Mirrors: []string{"*.corp"}}},
	})
	reason, st, msg := readiness(p)
	if reason != openshellv1alpha1.ImagePolicyReasonInvalidEntry || st != metav1.ConditionFalse {
		t.Fatalf("readiness = %s/%s, want InvalidEntry/False", reason, st)
	}
	for _, want := range []string{
		"2 entries are ignored: ",
		`spec.allowedMirrors[1] "library": `,
		`spec.mirrors[0].mirrors[0] "*.corp": a mirror cannot be a wildcard`,
		"; 1 allowed locations remain in effect",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
	if strings.Contains(msg, "more") {
		t.Errorf("message %q truncated with only 2 invalid entries", msg)
	}
}

func TestReadinessTruncation(t *testing.T) {
	for _, tc := range []struct {
		n        int
		wantMore string // "" when nothing is cut
	}{
		{n: 1},
		{n: maxReported},
		{n: maxReported + 1, wantMore: "; and 1 more;"},
		{n: maxReported + 7, wantMore: "; and 7 more;"},
	} {
		t.Run(fmt.Sprint(tc.n), func(t *testing.T) {
			_, st, msg := readiness(&imagepolicy.Policy{Invalid: invalid(tc.n)})
			if st != metav1.ConditionFalse {
				t.Errorf("status %s, want False", st)
			}
			if !strings.HasPrefix(msg, fmt.Sprintf("%d entries are ignored: ", tc.n)) {
				t.Errorf("message %q does not count %d entries", msg, tc.n)
			}
			for i := range tc.n {
				listed := strings.Contains(msg, fmt.Sprintf(`spec.allowedMirrors[%d] "bad-%d": nope`, i, i))
				if listed != (i < maxReported) {
					t.Errorf("entry %d listed=%v, want %v (maxReported %d): %q", i, listed, i < maxReported, maxReported, msg)
				}
			}
			if tc.wantMore == "" && strings.Contains(msg, "more") {
				t.Errorf("message %q truncated, want all %d listed", msg, tc.n)
			}
			if tc.wantMore != "" && !strings.Contains(msg, tc.wantMore) {
				t.Errorf("message %q lacks %q", msg, tc.wantMore)
			}
			if got := strings.Count(msg, ": nope"); got != min(tc.n, maxReported) {
				t.Errorf("message lists %d entries, want %d", got, min(tc.n, maxReported))
			}
			if !strings.HasSuffix(msg, "; 0 allowed locations remain in effect") {
				t.Errorf("message %q lacks the remaining count", msg)
			}
		})
	}
}

type env struct {
	c      client.Client
	r      *Reconciler
	writes *int
}

func newEnv(objs ...client.Object) env {
	b := fake.NewClientBuilder().WithScheme(scheme.New()).
		WithStatusSubresource(&openshellv1alpha1.OpenShellImagePolicy{}).
		WithObjects(objs...)
	w := fakeclient.CountWrites(b)
	c := b.Build()
	return env{c: c, r: &Reconciler{Client: c, Policies: imagepolicy.NewCache()}, writes: &w.All}
}

var key = client.ObjectKey{Namespace: "team-a", Name: "mirrors"}

func imagePolicy(gen int64, allowed ...string) *openshellv1alpha1.OpenShellImagePolicy {
	return &openshellv1alpha1.OpenShellImagePolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, Generation: gen},
		Spec:       openshellv1alpha1.OpenShellImagePolicySpec{AllowedMirrors: allowed},
	}
}

func (e env) reconcile(t *testing.T) *openshellv1alpha1.OpenShellImagePolicy {
	t.Helper()
	res, err := e.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: key})
	if err != nil || res.RequeueAfter != 0 {
		t.Fatalf("Reconcile = %+v, %v; want no error, no requeue", res, err)
	}
	p := &openshellv1alpha1.OpenShellImagePolicy{}
	if err := e.c.Get(context.Background(), key, p); err != nil {
		t.Fatal(err)
	}
	return p
}

func ready(t *testing.T, p *openshellv1alpha1.OpenShellImagePolicy, st metav1.ConditionStatus, reason string, msgParts ...string) {
	t.Helper()
	c := meta.FindStatusCondition(p.Status.Conditions, openshellv1alpha1.ConditionReady)
	if c == nil {
		t.Fatalf("no Ready condition: %+v", p.Status)
	}
	if c.Status != st || c.Reason != reason {
		t.Errorf("Ready = %s/%s %q, want %s/%s", c.Status, c.Reason, c.Message, st, reason)
	}
	for _, part := range msgParts {
		if !strings.Contains(c.Message, part) {
			t.Errorf("Ready message %q lacks %q", c.Message, part)
		}
	}
	if c.ObservedGeneration != p.Generation || p.Status.ObservedGeneration != p.Generation {
		t.Errorf("observedGeneration condition=%d status=%d, want %d", c.ObservedGeneration, p.Status.ObservedGeneration, p.Generation)
	}
}

func TestReconcileValidThenInvalid(t *testing.T) {
	e := newEnv(imagePolicy(2, "mirror.corp/openshell", "mirror.corp:5000/agents"))
	p := e.reconcile(t)
	ready(t, p, metav1.ConditionTrue, openshellv1alpha1.ImagePolicyReasonValid, "2 allowed locations")
	if p.Status.ObservedGeneration != 2 {
		t.Errorf("observedGeneration = %d, want 2", p.Status.ObservedGeneration)
	}

	// Steady state: a second reconcile writes nothing.
	before, writes := p.ResourceVersion, *e.writes
	if after := e.reconcile(t).ResourceVersion; after != before || *e.writes != writes {
		t.Errorf("second reconcile wrote: resourceVersion %s -> %s, writes %d -> %d", before, after, writes, *e.writes)
	}

	// A spec change (new resourceVersion, so the cache recompiles) with an
	// unparsable entry flips Ready to False.
	p.Spec.AllowedMirrors = append(p.Spec.AllowedMirrors, "Not A Host")
	p.Generation = 3
	if err := e.c.Update(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	p = e.reconcile(t)
	if p.Generation != 3 {
		t.Fatalf("fake client kept generation %d, want 3", p.Generation)
	}
	ready(t, p, metav1.ConditionFalse, openshellv1alpha1.ImagePolicyReasonInvalidEntry,
		"1 entries are ignored", `spec.allowedMirrors[2] "Not A Host"`, "2 allowed locations remain in effect")
}

func TestReconcileInvalidEntries(t *testing.T) {
	e := newEnv(imagePolicy(5, "mirror.corp/openshell", "", "ubuntu"))
	p := e.reconcile(t)
	ready(t, p, metav1.ConditionFalse, openshellv1alpha1.ImagePolicyReasonInvalidEntry,
		"2 entries are ignored", `spec.allowedMirrors[1] "": empty location`, `spec.allowedMirrors[2] "ubuntu"`,
		"1 allowed locations remain in effect")
	if p.Status.ObservedGeneration != 5 {
		t.Errorf("observedGeneration = %d, want 5", p.Status.ObservedGeneration)
	}
	before, writes := p.ResourceVersion, *e.writes
	if after := e.reconcile(t).ResourceVersion; after != before || *e.writes != writes {
		t.Errorf("second reconcile wrote: resourceVersion %s -> %s, writes %d -> %d", before, after, writes, *e.writes)
	}
}

func TestReconcileDeletedPolicyIsForgotten(t *testing.T) {
	e := newEnv(imagePolicy(1, "mirror.corp/openshell"))
	e.reconcile(t)
	if n := e.r.Policies.Len(); n != 1 {
		t.Fatalf("cache holds %d policies after a reconcile, want 1", n)
	}
	if err := e.c.Delete(context.Background(), imagePolicy(1)); err != nil {
		t.Fatal(err)
	}
	writes := *e.writes
	if _, err := e.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: key}); err != nil {
		t.Fatalf("Reconcile of a deleted policy: %v", err)
	}
	if n := e.r.Policies.Len(); n != 0 {
		t.Errorf("cache holds %d policies after deletion, want 0", n)
	}
	if *e.writes != writes {
		t.Errorf("reconciling a deleted policy wrote %d times", *e.writes-writes)
	}
}
