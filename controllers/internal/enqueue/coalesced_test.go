package enqueue

import (
	"context"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// TestCoalesced: a burst of events for one target becomes one request once
// the delay has passed, not before; an update re-queues what the old and
// the new object map to.
func TestCoalesced(t *testing.T) {
	g := NewWithT(t)
	clock := clocktesting.NewFakeClock(time.Now())
	q := workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request](),
		workqueue.TypedRateLimitingQueueConfig[reconcile.Request]{Clock: clock})
	defer q.ShutDown()
	// Each ConfigMap maps to the request named by its "target" label.
	h := Coalesced(time.Second, func(_ context.Context, o client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: "ns", Name: o.GetLabels()["target"]}}}
	})
	obj := func(i int, target string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprint(i), Namespace: "ns", Labels: map[string]string{"target": target}}}
	}
	ctx := context.Background()
	for i := range 100 {
		h.Create(ctx, event.CreateEvent{Object: obj(i, "a")}, q)
	}
	h.Update(ctx, event.UpdateEvent{ObjectOld: obj(1, "a"), ObjectNew: obj(1, "b")}, q)
	h.Delete(ctx, event.DeleteEvent{Object: obj(2, "a")}, q)
	g.Expect(q.Len()).To(BeZero(), "nothing is ready before the delay")

	clock.Step(time.Second)
	g.Eventually(q.Len).Should(Equal(2))
	got := map[string]bool{}
	for range 2 {
		r, _ := q.Get()
		got[r.Name] = true
		q.Done(r)
	}
	g.Expect(got).To(Equal(map[string]bool{"a": true, "b": true}))
	g.Expect(q.Len()).To(BeZero(), "one request per target for the whole burst")
}
