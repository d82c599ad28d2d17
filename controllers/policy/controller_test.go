package policy

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/scheme"
	"github.com/openshell/openshell-operator/test/fakeclient"
)

const ns = "team-a"

// env is a fake client plus counts of the writes made through it: writes
// counts all of them, statusWrites those to the status subresource.
type env struct {
	c            client.Client
	writes       *int
	statusWrites *int
}

func newEnv(t *testing.T, objs ...client.Object) env {
	t.Helper()
	b := fake.NewClientBuilder().WithScheme(scheme.New()).
		WithStatusSubresource(&openshellv1alpha1.OpenShellPolicy{}, &openshellv1alpha1.OpenShellSandbox{}).
		WithObjects(objs...)
	w := fakeclient.CountWrites(b)
	fakeclient.WithIndexes(t, b)
	return env{c: b.Build(), writes: &w.All, statusWrites: &w.Status}
}

func policy(name string, finalizers ...string) *openshellv1alpha1.OpenShellPolicy {
	return &openshellv1alpha1.OpenShellPolicy{ObjectMeta: metav1.ObjectMeta{
		Namespace: ns, Name: name, Generation: 3, Finalizers: finalizers}}
}

func sandbox(namespace, name, policyName string, finalizers ...string) *openshellv1alpha1.OpenShellSandbox {
	sb := &openshellv1alpha1.OpenShellSandbox{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Finalizers: finalizers},
		Spec:       openshellv1alpha1.OpenShellSandboxSpec{GatewayRef: openshellv1alpha1.GatewayReference{Name: "gw"}},
	}
	if policyName != "" {
		sb.Spec.PolicyRef = &openshellv1alpha1.LocalObjectReference{Name: policyName}
	}
	return sb
}

func reconcileOK(t *testing.T, e env, name string) {
	t.Helper()
	r := &Reconciler{Client: e.c}
	res, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: name}})
	if err != nil {
		t.Fatalf("Reconcile(%s): %v", name, err)
	}
	if res.RequeueAfter != 0 {
		t.Fatalf("Reconcile(%s) = %+v, want no requeue", name, res)
	}
}

func get(t *testing.T, e env, name string) *openshellv1alpha1.OpenShellPolicy {
	t.Helper()
	p := &openshellv1alpha1.OpenShellPolicy{}
	if err := e.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, p); err != nil {
		t.Fatalf("get policy %s: %v", name, err)
	}
	return p
}

func checkReady(t *testing.T, p *openshellv1alpha1.OpenShellPolicy, st metav1.ConditionStatus, reason, msgPart string) {
	t.Helper()
	c := meta.FindStatusCondition(p.Status.Conditions, openshellv1alpha1.ConditionReady)
	if c == nil {
		t.Fatalf("no Ready condition in %+v", p.Status.Conditions)
	}
	if c.Status != st || c.Reason != reason || !strings.Contains(c.Message, msgPart) {
		t.Fatalf("Ready = %s/%s %q, want %s/%s containing %q", c.Status, c.Reason, c.Message, st, reason, msgPart)
	}
	if c.ObservedGeneration != p.Generation {
		t.Fatalf("Ready.observedGeneration = %d, want %d", c.ObservedGeneration, p.Generation)
	}
}

func TestReconcileUnusedPolicy(t *testing.T) {
	e := newEnv(t, policy("p"), sandbox(ns, "other", "q"), sandbox(ns, "none", ""))
	reconcileOK(t, e, "p")
	p := get(t, e, "p")
	if controllerutil.ContainsFinalizer(p, Finalizer) {
		t.Error("unused policy got the in-use finalizer")
	}
	if p.Status.SandboxCount != 0 || p.Status.ObservedGeneration != 3 {
		t.Errorf("status count=%d observedGeneration=%d, want 0 and 3", p.Status.SandboxCount, p.Status.ObservedGeneration)
	}
	checkReady(t, p, metav1.ConditionTrue, openshellv1alpha1.PolicyReasonValid, "used by 0 sandbox(es)")
}

func TestReconcileCountsUsersAndHoldsFinalizer(t *testing.T) {
	e := newEnv(t, policy("p"),
		sandbox(ns, "a", "p"), sandbox(ns, "b", "p"),
		sandbox(ns, "c", "q"),                           // another policy
		sandbox("team-b", "d", "p"),                     // same name, other namespace
		sandbox(ns, "gone", "p", "example.com/hold-on"), // being deleted below
	)
	ctx := context.Background()
	if err := e.c.Delete(ctx, sandbox(ns, "gone", "p")); err != nil {
		t.Fatal(err)
	}
	reconcileOK(t, e, "p")
	p := get(t, e, "p")
	if !controllerutil.ContainsFinalizer(p, Finalizer) {
		t.Fatalf("finalizers %v, want %s", p.Finalizers, Finalizer)
	}
	if p.Status.SandboxCount != 2 {
		t.Errorf("sandboxCount = %d, want 2 (a, b; not c, d, or the deleting one)", p.Status.SandboxCount)
	}
	if p.Status.ObservedGeneration != 3 {
		t.Errorf("observedGeneration = %d, want 3", p.Status.ObservedGeneration)
	}
	checkReady(t, p, metav1.ConditionTrue, openshellv1alpha1.PolicyReasonValid, "used by 2 sandbox(es)")

	// Steady state: nothing changed, nothing written.
	before, writes := p.ResourceVersion, *e.writes
	reconcileOK(t, e, "p")
	if after := get(t, e, "p").ResourceVersion; after != before || *e.writes != writes {
		t.Errorf("second reconcile wrote: resourceVersion %s -> %s, writes %d -> %d", before, after, writes, *e.writes)
	}

	// The last users go: the finalizer is dropped, the count reaches 0.
	for _, n := range []string{"a", "b"} {
		if err := e.c.Delete(ctx, sandbox(ns, n, "p")); err != nil {
			t.Fatal(err)
		}
	}
	reconcileOK(t, e, "p")
	p = get(t, e, "p")
	if controllerutil.ContainsFinalizer(p, Finalizer) {
		t.Errorf("finalizer kept with no users: %v", p.Finalizers)
	}
	if p.Status.SandboxCount != 0 {
		t.Errorf("sandboxCount = %d, want 0", p.Status.SandboxCount)
	}
	checkReady(t, p, metav1.ConditionTrue, openshellv1alpha1.PolicyReasonValid, "used by 0 sandbox(es)")
}

func TestReconcileKeepsOtherFinalizers(t *testing.T) {
	e := newEnv(t, policy("p", "example.com/other"), sandbox(ns, "a", "p"))
	reconcileOK(t, e, "p")
	if got := get(t, e, "p").Finalizers; len(got) != 2 || !controllerutil.ContainsFinalizer(get(t, e, "p"), "example.com/other") {
		t.Errorf("finalizers %v, want example.com/other and %s", got, Finalizer)
	}
	if err := e.c.Delete(context.Background(), sandbox(ns, "a", "p")); err != nil {
		t.Fatal(err)
	}
	reconcileOK(t, e, "p")
	if got := get(t, e, "p").Finalizers; len(got) != 1 || got[0] != "example.com/other" {
		t.Errorf("finalizers %v, want only example.com/other", got)
	}
}

func TestDeletionWaitsWhileInUse(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, policy("p"), sandbox(ns, "b", "p"), sandbox(ns, "a", "p"))
	reconcileOK(t, e, "p") // adds the finalizer
	if err := e.c.Delete(ctx, policy("p")); err != nil {
		t.Fatal(err)
	}
	reconcileOK(t, e, "p")
	p := get(t, e, "p")
	if p.DeletionTimestamp.IsZero() || !controllerutil.ContainsFinalizer(p, Finalizer) {
		t.Fatalf("policy in use: deletionTimestamp=%v finalizers=%v, want deleting and held", p.DeletionTimestamp, p.Finalizers)
	}
	if p.Status.SandboxCount != 2 {
		t.Errorf("sandboxCount = %d, want 2", p.Status.SandboxCount)
	}
	checkReady(t, p, metav1.ConditionFalse, openshellv1alpha1.PolicyReasonInUse, "no sandbox references this policy: a, b")

	// Steady state while waiting.
	before, writes := p.ResourceVersion, *e.writes
	reconcileOK(t, e, "p")
	if after := get(t, e, "p").ResourceVersion; after != before || *e.writes != writes {
		t.Errorf("second reconcile wrote: resourceVersion %s -> %s, writes %d -> %d", before, after, writes, *e.writes)
	}

	// One user left: still held, message names it.
	if err := e.c.Delete(ctx, sandbox(ns, "a", "p")); err != nil {
		t.Fatal(err)
	}
	reconcileOK(t, e, "p")
	p = get(t, e, "p")
	if !controllerutil.ContainsFinalizer(p, Finalizer) || p.Status.SandboxCount != 1 {
		t.Fatalf("finalizers=%v count=%d, want held and 1", p.Finalizers, p.Status.SandboxCount)
	}
	checkReady(t, p, metav1.ConditionFalse, openshellv1alpha1.PolicyReasonInUse, "this policy: b")

	// No user left: the finalizer goes and the policy with it.
	if err := e.c.Delete(ctx, sandbox(ns, "b", "p")); err != nil {
		t.Fatal(err)
	}
	r := &Reconciler{Client: e.c}
	_, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: "p"}})
	if gerr := e.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "p"}, &openshellv1alpha1.OpenShellPolicy{}); !apierrors.IsNotFound(gerr) {
		t.Fatalf("policy still exists after its last user went (get: %v)", gerr)
	}
	// Removing the last finalizer deletes the policy: no status write may
	// follow (it would find nothing and make the reconcile fail and retry).
	if err != nil {
		t.Errorf("Reconcile that released the deleted policy returned %v", err)
	}
	// The next event for the vanished policy is a no-op.
	reconcileOK(t, e, "p")
}

func TestDeletingPolicyIsNotGivenTheFinalizer(t *testing.T) {
	// A policy held only by someone else's finalizer, already being deleted:
	// a new user does not re-acquire the in-use finalizer.
	ctx := context.Background()
	e := newEnv(t, policy("p", "example.com/other"), sandbox(ns, "a", "p"))
	if err := e.c.Delete(ctx, policy("p")); err != nil {
		t.Fatal(err)
	}
	reconcileOK(t, e, "p")
	p := get(t, e, "p")
	if controllerutil.ContainsFinalizer(p, Finalizer) {
		t.Errorf("deleting policy got the in-use finalizer: %v", p.Finalizers)
	}
	checkReady(t, p, metav1.ConditionFalse, openshellv1alpha1.PolicyReasonInUse, "this policy: a")

	// Steady state: no write at all.
	before, writes, statusWrites := p, *e.writes, *e.statusWrites
	reconcileOK(t, e, "p")
	after := get(t, e, "p")
	if *e.statusWrites != statusWrites {
		t.Errorf("second reconcile wrote status: %d -> %d", statusWrites, *e.statusWrites)
	}
	if len(after.Finalizers) != 1 || after.Status.SandboxCount != before.Status.SandboxCount {
		t.Errorf("second reconcile changed the policy: finalizers %v, count %d", after.Finalizers, after.Status.SandboxCount)
	}
	if *e.writes != writes {
		t.Errorf("%d no-op metadata write(s) per reconcile (resourceVersion %s -> %s)",
			*e.writes-writes, before.ResourceVersion, after.ResourceVersion)
	}
}

func TestReconcileMissingPolicy(t *testing.T) {
	e := newEnv(t, sandbox(ns, "a", "p"))
	reconcileOK(t, e, "p")
	if *e.writes != 0 {
		t.Errorf("reconciling a missing policy made %d writes", *e.writes)
	}
}
