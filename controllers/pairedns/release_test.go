package pairedns

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	render "github.com/openshell/openshell-operator/internal/render/gateway"
	"github.com/openshell/openshell-operator/internal/scheme"
)

// TestReleaseDrainsFirst: a released paired namespace is first marked
// draining (its gateway's allowlist drops it) and deleted only once the
// grace has passed, so its name is never free while a mounted allowlist
// may still name it.
func TestReleaseDrainsFirst(t *testing.T) {
	ns := render.WorkspaceObjects(gateway("g1"), "team-a", "u1")[0].(*corev1.Namespace)
	ns.UID = "ns-uid"
	c := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(ns).Build()
	now := time.Unix(1_000_000, 0)
	r := &Reconciler{Client: c, ReleaseGrace: time.Minute, now: func() time.Time { return now }}
	read := func() *metav1.PartialObjectMetadata {
		t.Helper()
		cur := &corev1.Namespace{}
		if err := c.Get(context.Background(), client.ObjectKey{Name: ns.Name}, cur); err != nil {
			t.Fatalf("the namespace went: %v", err)
		}
		return &metav1.PartialObjectMetadata{ObjectMeta: cur.ObjectMeta}
	}
	after, err := r.release(context.Background(), read())
	if err != nil || after != time.Minute || !render.Draining(read()) {
		t.Fatalf("first release: after %v, err %v, draining %v", after, err, render.Draining(read()))
	}
	now = now.Add(59 * time.Second)
	if after, err = r.release(context.Background(), read()); err != nil || after != time.Second {
		t.Fatalf("within the grace: after %v, err %v", after, err)
	}
	now = now.Add(time.Second)
	if _, err = r.release(context.Background(), read()); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(context.Background(), client.ObjectKey{Name: ns.Name}, &corev1.Namespace{}); err == nil {
		t.Fatal("still there after the grace")
	}
}
