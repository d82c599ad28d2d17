package sandbox

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
)

func TestUnclaimedSandboxesAreClaimedOnce(t *testing.T) {
	now := time.Now()
	var u upstreamWatch
	u.orphaned("id-1", now, none)
	if u.claim("id-2", now) {
		t.Error("claimed an ID never remembered")
	}
	if !u.claim("id-1", now.Add(time.Second)) {
		t.Fatal("a Sandbox gone before the cache named its sandbox was not claimed")
	}
	if u.claim("id-1", now.Add(time.Second)) {
		t.Error("claimed twice")
	}
	u.orphaned("id-3", now, none)
	if u.claim("id-3", now.Add(unclaimedTTL+time.Second)) {
		t.Error("claimed past its TTL")
	}
	// Bounded: past the bound, expired entries make room and new ones
	// beyond it are dropped.
	for i := range unclaimedMax + 10 {
		u.orphaned(string(rune('a'+i%26))+time.Duration(i).String(), now, none)
	}
	if n := len(u.unclaimed); n > unclaimedMax {
		t.Fatalf("%d tombstones, bound %d", n, unclaimedMax)
	}
	u.orphaned("late", now.Add(unclaimedTTL+time.Minute), none)
	if !u.claim("late", now.Add(unclaimedTTL+time.Minute)) {
		t.Error("expired entries did not make room")
	}
}

// none is a lookup that finds no sandbox naming the ID.
func none() []reconcile.Request { return nil }

// TestAClaimNeverSlipsPastAMiss: the cache's update that names a sandbox's
// ID can land after a Sandbox event's lookup missed it and before that
// miss leaves its tombstone. The claim that update brings must still find
// the tombstone; otherwise neither side re-queues the sandbox and its loss
// waits for the next resync (a CI failure: Ready on a gateway sandbox that
// was gone). Here the update lands, and its claim runs, exactly then.
func TestAClaimNeverSlipsPastAMiss(t *testing.T) {
	for i := range 200 {
		var u upstreamWatch
		var named atomic.Bool
		looked, landed := make(chan struct{}), make(chan struct{})
		claimed := make(chan bool, 1)
		go func() {
			<-looked
			named.Store(true) // the cache now names the ID...
			close(landed)
			claimed <- u.claim("id-1", time.Now()) // ...and its update's claim runs
		}()
		reqs := u.orphaned("id-1", time.Now(), func() []reconcile.Request {
			found := named.Load()
			close(looked)
			<-landed
			if found {
				return []reconcile.Request{{}}
			}
			return nil
		})
		if len(reqs) == 0 && !<-claimed {
			t.Fatalf("round %d: the lookup missed and the claim found no tombstone: the sandbox is never re-queued", i)
		}
	}
}

func TestClaimedRequeuesTheSandboxThatNamesTheID(t *testing.T) {
	r := &Reconciler{}
	sb := &openshellv1alpha1.OpenShellSandbox{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "agent"},
		Status: openshellv1alpha1.OpenShellSandboxStatus{SandboxID: "id-1"}}
	if reqs := r.claimed(context.Background(), sb); len(reqs) != 0 {
		t.Fatalf("requeued %v with nothing unclaimed", reqs)
	}
	r.upstream.orphaned("id-1", time.Now(), none)
	old := sb.DeepCopy()
	old.Status.SandboxID = ""
	if !namesNewSandboxID.Update(event.UpdateEvent{ObjectOld: old, ObjectNew: sb}) || namesNewSandboxID.Update(event.UpdateEvent{ObjectOld: sb, ObjectNew: sb}) {
		t.Error("the predicate does not pass exactly the update that names a new sandbox ID")
	}
	if reqs := r.claimed(context.Background(), sb); len(reqs) != 1 || reqs[0].NamespacedName != client.ObjectKeyFromObject(sb) {
		t.Fatalf("requeued %v, want the sandbox", reqs)
	}
}
