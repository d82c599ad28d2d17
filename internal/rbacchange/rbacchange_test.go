package rbacchange

import (
	"context"
	"errors"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/openshell/openshell-operator/test/metadatafake"
)

func TestFresh(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	c := &Changes{MaxAge: 60 * time.Second, Settle: 10 * time.Second}
	if c.Fresh("a", at(0), at(1)) {
		t.Fatal("fresh before the informers synced")
	}
	if (*Changes)(nil).Fresh("a", at(0), at(1)) {
		t.Fatal("a nil Changes says fresh")
	}
	type check struct {
		name         string
		ns           string
		checked, now int
		want         bool
	}
	expect := func(checks ...check) {
		t.Helper()
		for _, tc := range checks {
			if got := c.Fresh(tc.ns, at(tc.checked), at(tc.now)); got != tc.want {
				t.Errorf("%s: Fresh(%s, %d, %d) = %t, want %t", tc.name, tc.ns, tc.checked, tc.now, got, tc.want)
			}
		}
	}
	c.setSynced(at(0))
	expect(check{"asked within Settle of the sync, before Settle passed", "b", 5, 9, true},
		check{"asked within Settle of the sync, once Settle passed", "b", 5, 10, false},
		check{"asked Settle after the sync", "b", 10, 11, true},
		check{"no change since, younger than MaxAge", "b", 20, 79, true},
		check{"MaxAge reached", "b", 20, 80, false})
	c.changed("a", at(100))
	expect(check{"its namespace changed after", "a", 95, 101, false},
		check{"asked as its namespace changed", "a", 100, 101, false},
		check{"asked within Settle of its namespace's change, before Settle passed", "a", 105, 109, true},
		check{"asked within Settle of its namespace's change, once Settle passed", "a", 105, 110, false},
		check{"asked Settle after its namespace's change", "a", 110, 111, true},
		check{"another namespace's change does not count", "b", 95, 101, true})
	c.changed("", at(200))
	expect(check{"a cluster-wide change counts everywhere", "b", 195, 201, false},
		check{"asked within Settle of the cluster-wide change, once Settle passed", "a", 205, 211, false},
		check{"asked Settle after the cluster-wide change", "b", 210, 211, true})
	// Namespaces whose change no answer can depend on are forgotten.
	c.changed("c", at(300))
	if _, kept := c.byNS["a"]; kept {
		t.Error("kept a namespace whose last change is older than MaxAge+Settle")
	}
}

func TestNamespaceOfADeletionTheInformerInferred(t *testing.T) {
	rb := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "x"}}
	for _, tc := range []struct {
		obj  any
		want string
	}{
		{rb, "a"},
		{toolscache.DeletedFinalStateUnknown{Key: "a/x", Obj: rb}, "a"},
		{toolscache.DeletedFinalStateUnknown{Key: "a/x"}, "a"},
		{toolscache.DeletedFinalStateUnknown{Key: "x"}, ""},
		{"not an object", ""},
	} {
		if got := namespaceOf(tc.obj); got != tc.want {
			t.Errorf("namespaceOf(%v) = %q, want %q", tc.obj, got, tc.want)
		}
	}
}

func TestOnlyUpdatesAndDeletionsAreChanges(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	c := &Changes{Now: func() time.Time { return t0 }}
	h := c.handler()
	rb := func(rv string) *metav1.PartialObjectMetadata {
		return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "x", ResourceVersion: rv}}
	}
	h.OnAdd(rb("1"), false)
	h.OnUpdate(rb("1"), rb("1"))
	if len(c.byNS) != 0 || !c.cluster.IsZero() {
		t.Fatalf("a creation or an unchanged relist counted: %v, cluster %s", c.byNS, c.cluster)
	}
	h.OnUpdate(rb("1"), rb("2"))
	if !c.byNS["a"].Equal(t0) {
		t.Fatal("an update did not count in its namespace")
	}
	delete(c.byNS, "a")
	h.OnDelete(toolscache.DeletedFinalStateUnknown{Key: "a/x"})
	if !c.byNS["a"].Equal(t0) || !c.cluster.IsZero() {
		t.Fatalf("a deletion did not count in its namespace alone: %v, cluster %s", c.byNS, c.cluster)
	}
}

// TestAWatchFailureIsAChange: what changed while a watch was down may never
// be delivered, so its failure makes every answer stale.
func TestAWatchFailureIsAChange(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	now := t0
	var clusterWide []bool
	c := &Changes{MaxAge: time.Hour, Settle: time.Second, Now: func() time.Time { return now },
		OnChange: func(cw bool) { clusterWide = append(clusterWide, cw) }}
	c.setSynced(t0)
	asked := t0.Add(time.Minute)
	now = asked.Add(time.Second)
	if !c.Fresh("a", asked, now) {
		t.Fatal("not fresh before the failure")
	}
	lw := &toolscache.ListWatch{}
	c.watchFailed(toolscache.NewReflector(lw, &metav1.PartialObjectMetadata{}, toolscache.NewStore(toolscache.MetaNamespaceKeyFunc), 0),
		errors.New("connection refused"))
	if c.Fresh("a", asked, now) {
		t.Error("an answer asked before the watch failed still holds")
	}
	if len(clusterWide) != 1 || !clusterWide[0] {
		t.Errorf("OnChange heard %v, want one cluster-wide change", clusterWide)
	}
}

// TestWatch follows the four kinds through client-go's metadata informers:
// an update or a deletion is a change in its scope, a creation is none.
func TestWatch(t *testing.T) {
	rbac := rbacv1.SchemeGroupVersion.String()
	fake := metadatafake.New(t, metadatafake.Object(rbac, "RoleBinding", "a", "edit"), metadatafake.Object(rbac, "ClusterRole", "", "view"))
	var now time.Time
	tick := make(chan time.Time, 1)
	clock := func() time.Time {
		select {
		case now = <-tick:
		default:
		}
		return now
	}
	c := &Changes{MaxAge: time.Hour, Settle: time.Second, Now: clock}
	now = time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := c.Watch(ctx, fake); err != nil {
		t.Fatal(err)
	}
	later := now.Add(time.Minute)
	if !c.Fresh("a", later, later) {
		t.Fatal("not fresh after the sync with no change")
	}
	rb := fake.Resource(rbacv1.SchemeGroupVersion.WithResource("rolebindings"))
	// A deletion takes access away: a change in its namespace, seen at `at`.
	at := later.Add(time.Minute)
	<-fake.Watching("rolebindings")
	<-fake.Watching("clusterroles")
	tick <- at
	if err := rb.Namespace("a").Delete(ctx, "edit", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The informer delivers on its own goroutine.
	g := NewWithT(t)
	g.Eventually(func() bool { return c.Fresh("a", at, at) }).WithTimeout(10*time.Second).Should(BeFalse(), "the RoleBinding's deletion is not seen")
	if !c.Fresh("b", at, at) {
		t.Error("a deletion in namespace a made namespace b's answers stale")
	}
	if c.Fresh("a", later, at) {
		t.Error("an answer asked before the deletion still holds")
	}
	// A ClusterRole's deletion is a change everywhere.
	at2 := at.Add(time.Minute)
	tick <- at2
	if err := fake.Resource(rbacv1.SchemeGroupVersion.WithResource("clusterroles")).Delete(ctx, "view", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	g.Eventually(func() bool { return c.Fresh("b", at2, at2) }).WithTimeout(10*time.Second).Should(BeFalse(), "the ClusterRole's deletion is not seen")
	if !c.Fresh("a", at2.Add(time.Second), at2.Add(time.Second)) {
		t.Error("an answer asked Settle after the last change is stale")
	}
}
