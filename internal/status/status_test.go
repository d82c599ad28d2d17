package status

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/scheme"
)

func TestSetConditionKeepsTransitionTimeUnlessStatusFlips(t *testing.T) {
	o := &openshellv1alpha1.OpenShellPolicy{ObjectMeta: metav1.ObjectMeta{Generation: 3}}
	if !SetCondition(o, "Ready", metav1.ConditionFalse, "Pending", "waiting") {
		t.Fatal("first SetCondition reported no change")
	}
	first := o.Status.Conditions[0]
	if first.ObservedGeneration != 3 {
		t.Fatalf("observedGeneration = %d, want 3", first.ObservedGeneration)
	}
	if SetCondition(o, "Ready", metav1.ConditionFalse, "Pending", "waiting") {
		t.Fatal("identical SetCondition reported a change")
	}
	if !SetCondition(o, "Ready", metav1.ConditionFalse, "Pending", "still waiting") {
		t.Fatal("message change not reported")
	}
	if !o.Status.Conditions[0].LastTransitionTime.Equal(&first.LastTransitionTime) {
		t.Fatal("lastTransitionTime moved without a status flip")
	}
	o.Generation = 4
	if !SetCondition(o, "Ready", metav1.ConditionFalse, "Pending", "still waiting") {
		t.Fatal("new generation not reported as a change")
	}
}

func TestPatchWritesOnlyChanges(t *testing.T) {
	ctx := context.Background()
	o := &openshellv1alpha1.OpenShellPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", Generation: 1}}
	writes := 0
	c := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(o).WithStatusSubresource(o).
		WithInterceptorFuncs(interceptor.Funcs{
			SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
				writes++
				return c.SubResource(sub).Patch(ctx, obj, p, opts...)
			},
		}).Build()

	orig := o.DeepCopy()
	if err := Patch(ctx, c, orig, o); err != nil || writes != 0 {
		t.Fatalf("unchanged status: err=%v writes=%d, want no write", err, writes)
	}
	o.SetObservedGeneration(1)
	if err := Patch(ctx, c, orig, o); err != nil || writes != 1 {
		t.Fatalf("changed status: err=%v writes=%d, want one write", err, writes)
	}
	got := &openshellv1alpha1.OpenShellPolicy{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(o), got); err != nil || got.Status.ObservedGeneration != 1 {
		t.Fatalf("stored observedGeneration = %d (err %v), want 1", got.Status.ObservedGeneration, err)
	}
}

// TestRecordPersistsAnIntentWithoutLosingTheRest: Record writes only the
// intent, keeps o's other in-memory changes, and leaves orig and o at the
// new resourceVersion, so the reconcile's final Patch neither conflicts
// nor repeats the intent.
func TestRecordPersistsAnIntentWithoutLosingTheRest(t *testing.T) {
	ctx := context.Background()
	stored := &openshellv1alpha1.OpenShellSandbox{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "ns", Generation: 1}}
	c := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(stored).WithStatusSubresource(stored).Build()
	o := &openshellv1alpha1.OpenShellSandbox{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(stored), o); err != nil {
		t.Fatal(err)
	}
	orig := o.DeepCopy()
	o.Status.Phase = openshellv1alpha1.SandboxPhaseProvisioning // decided earlier in the reconcile
	intent := func(s *openshellv1alpha1.OpenShellSandbox) { s.Status.Workspace = "ws-1" }
	if err := Record(ctx, c, orig, o, intent); err != nil {
		t.Fatal(err)
	}
	got := &openshellv1alpha1.OpenShellSandbox{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(o), got); err != nil {
		t.Fatal(err)
	}
	if got.Status.Workspace != "ws-1" || got.Status.Phase != "" {
		t.Fatalf("stored %+v: want only the intent", got.Status)
	}
	if o.Status.Phase != openshellv1alpha1.SandboxPhaseProvisioning || o.Status.Workspace != "ws-1" || orig.Status.Workspace != "ws-1" {
		t.Fatalf("in memory: o %+v, orig %+v", o.Status, orig.Status)
	}
	if orig.ResourceVersion != got.ResourceVersion || o.ResourceVersion != got.ResourceVersion {
		t.Fatalf("resourceVersions orig %s o %s, stored %s", orig.ResourceVersion, o.ResourceVersion, got.ResourceVersion)
	}
	if err := Patch(ctx, c, orig, o); err != nil {
		t.Fatalf("the final patch conflicts: %v", err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(o), got); err != nil || got.Status.Phase != openshellv1alpha1.SandboxPhaseProvisioning {
		t.Fatalf("final status %+v (err %v)", got.Status, err)
	}
	// Recording what is already recorded writes nothing.
	rv := o.ResourceVersion
	if err := Record(ctx, c, o.DeepCopy(), o, intent); err != nil || o.ResourceVersion != rv {
		t.Fatalf("a repeated intent wrote (err %v)", err)
	}
}

// TestAddFinalizerKeepsTheStatusPatchUnconflicted: the finalizer write
// changes the object's resourceVersion; AddFinalizer carries it into orig,
// so the reconcile's optimistically locked status patch that follows does
// not conflict with the reconcile's own write (RetryStale would hide such a
// conflict on every first reconcile behind a delayed retry).
func TestAddFinalizerKeepsTheStatusPatchUnconflicted(t *testing.T) {
	ctx := context.Background()
	o := &openshellv1alpha1.OpenShellPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", Generation: 1}}
	c := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(o).WithStatusSubresource(o).Build()
	if err := c.Get(ctx, client.ObjectKeyFromObject(o), o); err != nil {
		t.Fatal(err)
	}
	orig := o.DeepCopy()
	if wrote, err := AddFinalizer(ctx, c, orig, o, "openshell.ai/test"); err != nil || !wrote {
		t.Fatalf("AddFinalizer: wrote=%v err=%v", wrote, err)
	}
	o.SetObservedGeneration(1)
	if err := Patch(ctx, c, orig, o); err != nil {
		t.Fatalf("status patch after the finalizer write: %v", err)
	}
	got := &openshellv1alpha1.OpenShellPolicy{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(o), got); err != nil || got.Status.ObservedGeneration != 1 || len(got.Finalizers) != 1 {
		t.Fatalf("stored %+v (err %v), want the finalizer and observedGeneration 1", got, err)
	}
	if wrote, err := AddFinalizer(ctx, c, got.DeepCopy(), got, "openshell.ai/test"); err != nil || wrote {
		t.Fatalf("second AddFinalizer: wrote=%v err=%v, want no write", wrote, err)
	}
}

// TestLongMessagesAreTruncated (L11): a condition message comes from
// gateways and tenants; one over the API's limit would make every status
// write of the object fail.
func TestLongMessagesAreTruncated(t *testing.T) {
	o := &openshellv1alpha1.OpenShellSandbox{}
	SetCondition(o, "Ready", metav1.ConditionFalse, "GatewayError", strings.Repeat("é", 40000))
	msg := o.Status.Conditions[0].Message
	if len(msg) > maxMessage || !strings.HasSuffix(msg, "(truncated)") || !utf8.ValidString(msg) {
		t.Fatalf("message of %d bytes, valid UTF-8 %v", len(msg), utf8.ValidString(msg))
	}
}

func TestClip(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"exactly10!", 10, "exactly10!"},
		{"abcdefghijkl", 10, "abcdefg…"},
		// "é" is two bytes: a cut inside one moves back to its start.
		{strings.Repeat("é", 6), 10, "ééé…"},
	} {
		got := Clip(tc.in, tc.n, "…")
		if got != tc.want || len(got) > tc.n || !utf8.ValidString(got) {
			t.Errorf("Clip(%q, %d) = %q (%d bytes), want %q", tc.in, tc.n, got, len(got), tc.want)
		}
	}
}

func TestMessageDropsTheConflictsResourceVersion(t *testing.T) {
	err := fmt.Errorf("apply X: %w", errors.New(`Operation cannot be fulfilled on x "y": the object has been modified; please apply your changes to the latest version and try again`))
	if got := Message(err); got != `apply X: Operation cannot be fulfilled on x "y": conflict, retrying` {
		t.Fatalf("Message = %q", got)
	}
	if got := Message(errors.New("forbidden")); got != "forbidden" {
		t.Fatalf("Message = %q", got)
	}
}
