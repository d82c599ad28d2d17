package relay

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/rbacchange"
	"github.com/openshell/openshell-operator/internal/saexist"
	scheme2 "github.com/openshell/openshell-operator/internal/scheme"
	"github.com/openshell/openshell-operator/test/metadatafake"
)

// gatedAuthz holds every check until want are in flight at once (or the
// check's context ends), then answers from allow; it records the most in
// flight.
type gatedAuthz struct {
	allow map[string]bool
	want  int

	mu       sync.Mutex
	inFlight int
	most     int
	open     chan struct{}
}

func (a *gatedAuthz) Allowed(ctx context.Context, u user.Info, _, _, _, _ string) (bool, string, error) {
	a.mu.Lock()
	a.inFlight++
	a.most = max(a.most, a.inFlight)
	if a.inFlight >= a.want {
		select {
		case <-a.open:
		default:
			close(a.open)
		}
	}
	a.mu.Unlock()
	defer func() { a.mu.Lock(); a.inFlight--; a.mu.Unlock() }()
	select {
	case <-a.open:
		return a.allow[u.GetName()], "", nil
	case <-ctx.Done():
		return false, "", ctx.Err()
	}
}

// TestRecheckChecksInParallel: a recheck has recheckInFlight
// SubjectAccessReviews in flight at once (a recheck one after another
// holds the first check until its timeout, and revokes nothing), and acts
// on each verdict: the memberships RBAC no longer allows are revoked, the
// others kept.
func TestRecheckChecksInParallel(t *testing.T) {
	ctx := context.Background()
	tk := leaseTokens(t)
	tk.Reader = tk.Leases // the gateway is gone: a revocation deletes the Lease
	allow := map[string]bool{}
	const n = 3 * recheckInFlight
	for i := range n {
		name := fmt.Sprint("user-", i)
		allow[name] = i%3 != 0
		if err := tk.record(ctx, member("team-a", name), lease{user: &user.DefaultInfo{Name: name}, expires: tk.now().Add(time.Minute), grant: exchanged}); err != nil {
			t.Fatal(err)
		}
	}
	authz := &gatedAuthz{allow: allow, want: recheckInFlight, open: make(chan struct{})}
	tk.Authz = authz
	tk.recheck(ctx)
	if authz.most != recheckInFlight {
		t.Errorf("%d checks in flight at most, want %d", authz.most, recheckInFlight)
	}
	list := &coordinationv1.LeaseList{}
	if err := tk.Leases.List(ctx, list, client.InNamespace("operator")); err != nil {
		t.Fatal(err)
	}
	kept := map[string]bool{}
	for i := range list.Items {
		_, l, err := tk.verifiedLease(&list.Items[i])
		if err != nil {
			t.Fatal(err)
		}
		kept[l.user.GetName()] = true
	}
	for name, allowed := range allow {
		if kept[name] != allowed {
			t.Errorf("%s: kept %v, allowed %v", name, kept[name], allowed)
		}
	}
}

// slowAuthz answers every check after a round trip's delay: a
// SubjectAccessReview to the API server (some 3 ms each, timed in
// docs/consumer-access.md).
type slowAuthz time.Duration

func (d slowAuthz) Allowed(context.Context, user.Info, string, string, string, string) (bool, string, error) {
	time.Sleep(time.Duration(d))
	return true, "", nil
}

// BenchmarkRecheck1000: one recheck pass over 1,000 memberships whose
// SubjectAccessReviews take 3 ms each; the pass must end well within the
// 2-second recheck period for a revocation to take effect within it.
func BenchmarkRecheck1000(b *testing.B) {
	ctx := ctrl.LoggerInto(context.Background(), logr.Discard())
	tk := leaseTokens(b)
	// Written as record writes them, without its per-namespace count (a
	// list per write, which would make the setup quadratic).
	for i := range 1000 {
		name := fmt.Sprint("user-", i)
		o, err := renderLease(tk.LeaseNamespace, member(fmt.Sprint("team-", i%4), name), lease{user: &user.DefaultInfo{Name: name},
			expires: tk.now().Add(time.Minute), grant: exchanged}, tk.now())
		if err == nil {
			err = tk.sign(o)
		}
		if err == nil {
			err = tk.Leases.Create(ctx, o)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	tk.Authz = slowAuthz(3 * time.Millisecond)
	b.ResetTimer()
	for range b.N {
		tk.recheck(ctx)
	}
}

// countingAuthz answers from allow and counts the checks per user; during,
// if set, runs inside the next review (it is then cleared), as a change
// the API server had not seen when it answered.
type countingAuthz struct {
	mu     sync.Mutex
	allow  map[string]bool
	asked  map[string]int
	during func()
}

func (a *countingAuthz) Allowed(_ context.Context, u user.Info, _, _, _, _ string) (bool, string, error) {
	a.mu.Lock()
	during := a.during
	a.during = nil
	a.mu.Unlock()
	if during != nil {
		during()
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.asked[u.GetName()]++
	return a.allow[u.GetName()], "", nil
}

// set runs f with the authorizer locked.
func (a *countingAuthz) set(f func()) {
	a.mu.Lock()
	defer a.mu.Unlock()
	f()
}

// rbacObject is an RBAC object's metadata (ns "" for a cluster-scoped kind).
func rbacObject(kind, ns, name string) *metav1.PartialObjectMetadata {
	return metadatafake.Object(rbacv1.SchemeGroupVersion.String(), kind, ns, name)
}

// deleteRBAC deletes an RBAC object from the fake and waits until changes
// has seen it (the informer delivers on its own goroutine): an answer
// asked at seen is stale.
func deleteRBAC(t *testing.T, kube *metadatafake.Client, changes *rbacchange.Changes, resource, ns, name string, seen time.Time) {
	t.Helper()
	<-kube.Watching(resource)
	r := kube.Resource(rbacv1.SchemeGroupVersion.WithResource(resource))
	var err error
	if ns == "" {
		err = r.Delete(context.Background(), name, metav1.DeleteOptions{})
	} else {
		err = r.Namespace(ns).Delete(context.Background(), name, metav1.DeleteOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
	until(t, func() bool { return !changes.Fresh(cmp.Or(ns, "any"), seen, seen.Add(time.Millisecond)) }, "the deletion of "+resource+" "+name+" seen")
}

// until waits up to 10 s for cond (something another goroutine does).
func until(t *testing.T, cond func() bool, what string) {
	t.Helper()
	NewWithT(t).Eventually(cond).WithTimeout(10*time.Second).WithPolling(time.Millisecond).Should(BeTrue(), what)
}

// take returns the checks since the last take, per user.
func (a *countingAuthz) take() map[string]int {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := a.asked
	a.asked = map[string]int{}
	return out
}

// TestRecheckAsksOnlyWhenAnswersAreStale: a membership is authorized again
// only when its last answer no longer holds (internal/rbacchange): when it
// is new, when RBAC changed in its namespace or cluster-wide (at the
// next look, and once more when Settle has passed), when it is renewed,
// or past MaxAge; and a revocation is still seen at the first look after the
// change. Steady state asks the kube-apiserver nothing.
func TestRecheckAsksOnlyWhenAnswersAreStale(t *testing.T) {
	ctx := ctrl.LoggerInto(context.Background(), logr.Discard())
	var mu sync.Mutex
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); defer mu.Unlock(); now = now.Add(d) }

	kube := metadatafake.New(t, rbacObject("RoleBinding", "team-a", "dave"), rbacObject("RoleBinding", "team-a", "other"),
		rbacObject("ClusterRoleBinding", "", "everyone"))
	changes := &rbacchange.Changes{MaxAge: time.Minute, Settle: 10 * time.Second, Now: clock}
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	if err := changes.Watch(wctx, kube); err != nil {
		t.Fatal(err)
	}

	tk := leaseTokens(t)
	tk.Reader, tk.Now, tk.RBAC = tk.Leases, clock, changes
	authz := &countingAuthz{allow: map[string]bool{"dave": true, "erin": true, "bob": true}, asked: map[string]int{}}
	tk.Authz = authz
	grant := func(ns, name string) {
		t.Helper()
		if err := tk.record(ctx, member(ns, name), lease{user: &user.DefaultInfo{Name: name}, expires: clock().Add(time.Hour), grant: exchanged}); err != nil {
			t.Fatal(err)
		}
	}
	grant("team-a", "dave")
	grant("team-a", "erin")
	grant("team-b", "bob")
	look := func(want map[string]int, why string) {
		t.Helper()
		advance(2 * time.Second)
		tk.recheck(ctx)
		if got := authz.take(); !maps.Equal(got, want) {
			t.Errorf("%s: asked %v, want %v", why, got, want)
		}
	}
	everyone := map[string]int{"dave": 1, "erin": 1, "bob": 1}
	look(everyone, "within Settle of the informers' sync")
	advance(10 * time.Second)
	look(everyone, "first look past Settle")
	look(map[string]int{}, "steady state")
	look(map[string]int{}, "steady state")

	// dave's RoleBinding goes: team-a is asked again, and dave revoked.
	authz.set(func() { authz.allow["dave"] = false })
	deleteRBAC(t, kube, changes, "rolebindings", "team-a", "dave", clock())
	look(map[string]int{"dave": 1, "erin": 1}, "RBAC changed in team-a")
	if got := leaseUsers(t, tk); !maps.Equal(got, map[string]bool{"erin": true, "bob": true}) {
		t.Fatalf("memberships after the revocation: %v, want erin and bob", got)
	}
	look(map[string]int{}, "within Settle of the change, asked since")
	advance(10 * time.Second)
	look(map[string]int{"erin": 1}, "first look past Settle of the change: asked once more")
	look(map[string]int{}, "steady again")

	// A change the API server had not seen when it answered: the answer
	// counts from before the review, so the change makes it stale.
	advance(10 * time.Second)
	authz.set(func() {
		authz.during = func() {
			advance(time.Second)
			deleteRBAC(t, kube, changes, "rolebindings", "team-a", "other", clock())
			advance(time.Second)
		}
	})
	advance(time.Minute) // past MaxAge: erin and bob are asked, the first review deletes
	look(map[string]int{"erin": 1, "bob": 1}, "past MaxAge")
	look(map[string]int{"erin": 1}, "RBAC changed in team-a during the review")
	// A ClusterRoleBinding's deletion makes every answer stale.
	advance(10 * time.Second)
	look(map[string]int{"erin": 1}, "past Settle of the change during the review")
	look(map[string]int{}, "steady")
	deleteRBAC(t, kube, changes, "clusterrolebindings", "", "everyone", clock())
	look(map[string]int{"erin": 1, "bob": 1}, "a ClusterRoleBinding deleted")

	// A renewal writes the lease again: asked again.
	advance(10 * time.Second)
	look(map[string]int{"erin": 1, "bob": 1}, "past Settle of the ClusterRoleBinding's deletion")
	grant("team-b", "bob")
	look(map[string]int{"bob": 1}, "renewed")
}

// leaseUsers are the users whose memberships the relay holds.
func leaseUsers(t *testing.T, tk *Tokens) map[string]bool {
	t.Helper()
	list := &coordinationv1.LeaseList{}
	if err := tk.Leases.List(context.Background(), list, client.InNamespace(tk.LeaseNamespace)); err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for i := range list.Items {
		if _, l, err := tk.verifiedLease(&list.Items[i]); err == nil {
			out[l.user.GetName()] = true
		}
	}
	return out
}

// countingReader counts the reads of a session's checks.
type countingReader struct {
	client.Reader
	mu    sync.Mutex
	reads int
}

func (r *countingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	r.mu.Lock()
	r.reads++
	r.mu.Unlock()
	return r.Reader.Get(ctx, key, obj, opts...)
}

func (r *countingReader) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reads
}

// TestOpenSessionsAskAgainOnlyAfterRBACChanges: an open session's sandbox
// is looked at every check, but its user is authorized again only when
// the last answer no longer holds; a RoleBinding deleted in its namespace
// makes the next check ask, and end the session.
func TestOpenSessionsAskAgainOnlyAfterRBACChanges(t *testing.T) {
	kube := metadatafake.New(t, rbacObject("RoleBinding", "team-a", "dave"), rbacObject("RoleBinding", "team-a", "other"))
	// A Settle longer than the test: an answer asked after a change holds.
	changes := &rbacchange.Changes{MaxAge: time.Hour, Settle: time.Hour}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	if err := changes.Watch(ctx, kube); err != nil {
		t.Fatal(err)
	}
	sb := &openshellv1alpha1.OpenShellSandbox{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "sb", UID: "u1"},
		Status: openshellv1alpha1.OpenShellSandboxStatus{Phase: openshellv1alpha1.SandboxPhaseReady, Gateway: "p/gw", GatewaySandboxName: "x"}}
	reader := &countingReader{Reader: fake.NewClientBuilder().WithScheme(scheme2.New()).WithObjects(sb).Build()}
	// The first review answers before the API server sees a RoleBinding of
	// team-a deleted: the answer counts from before it, so it is stale.
	authz := &countingAuthz{allow: map[string]bool{"dave": true}, asked: map[string]int{},
		during: func() { deleteRBAC(t, kube, changes, "rolebindings", "team-a", "other", time.Now()) }}
	s := &Server{Reader: reader, Authz: authz, RBAC: changes, sessionRecheck: 5 * time.Millisecond}
	session, end := context.WithCancelCause(ctx)
	go s.watch(session, end, &user.DefaultInfo{Name: "dave"}, "create", sb, SubresourceExec)

	until(t, func() bool { return reader.count() >= 10 }, "ten checks")
	if got := authz.take(); got["dave"] != 2 {
		t.Fatalf("ten checks asked %d reviews, want 2 (the first, and the one after the change it raced)", got["dave"])
	}
	until(t, func() bool { return reader.count() >= 20 }, "ten more checks")
	if got := authz.take(); got["dave"] != 0 {
		t.Fatalf("ten checks asked %d reviews with RBAC unchanged, want none", got["dave"])
	}
	authz.set(func() { authz.allow["dave"] = false })
	deleteRBAC(t, kube, changes, "rolebindings", "team-a", "dave", time.Now())
	until(t, func() bool { return session.Err() != nil }, "the session's end after its RoleBinding was deleted")
	if why := context.Cause(session); why == nil || !strings.Contains(why.Error(), "may no longer create") {
		t.Errorf("the session ended because %v, want its revocation", why)
	}
}

// notStarted is a cache that has not started yet.
type notStarted struct{ client.Reader }

func (notStarted) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return &cache.ErrCacheNotStarted{}
}

// unsynced is a cache whose informer cannot sync: its reads block.
type unsynced struct{ client.Reader }

func (unsynced) List(ctx context.Context, _ client.ObjectList, _ ...client.ListOption) error {
	<-ctx.Done()
	return ctx.Err()
}

// TestALookListsFromTheCache: with a membership cache, a look lists the
// Leases from it, not from the API server (a list of every Lease every
// Recheck on every replica otherwise); before the cache has started, or
// when it cannot sync (after checkTimeout), from the API server.
func TestALookListsFromTheCache(t *testing.T) {
	ctx := ctrl.LoggerInto(context.Background(), logr.Discard())
	tk := leaseTokens(t)
	tk.Reader = tk.Leases
	if err := tk.record(ctx, member("team-a", "dave"), lease{user: &user.DefaultInfo{Name: "dave"}, expires: tk.now().Add(time.Minute), grant: exchanged}); err != nil {
		t.Fatal(err)
	}
	stored := tk.Leases.(client.WithWatch)
	lists := 0
	tk.Leases = interceptor.NewClient(stored, interceptor.Funcs{List: func(ctx context.Context, c client.WithWatch, l client.ObjectList, opts ...client.ListOption) error {
		lists++
		return c.List(ctx, l, opts...)
	}})
	authz := &countingAuthz{allow: map[string]bool{"dave": true}, asked: map[string]int{}}
	tk.Authz = authz
	for _, tc := range []struct {
		name      string
		cache     client.Reader
		wantLists int
	}{{"no cache", nil, 1}, {"a cache not started yet", notStarted{}, 1}, {"a cache that cannot sync", unsynced{}, 1},
		{"a started cache", stored, 0}} {
		lists, tk.LeaseCache = 0, tc.cache
		tk.recheck(ctx)
		if lists != tc.wantLists {
			t.Errorf("%s: %d lists from the API server, want %d", tc.name, lists, tc.wantLists)
		}
		if got := authz.take(); got["dave"] != 1 {
			t.Errorf("%s: dave's membership was not looked at (%v)", tc.name, got)
		}
	}
}

// TestADeletedServiceAccountLosesItsAccess: a ServiceAccount's membership
// is revoked, and its open session ends, once the ServiceAccount is
// deleted, though RBAC still allows its name (its RoleBinding stays); a
// user's and another ServiceAccount's are kept.
func TestADeletedServiceAccountLosesItsAccess(t *testing.T) {
	ctx := ctrl.LoggerInto(context.Background(), logr.Discard())
	const bot, other = "system:serviceaccount:team-a:chatbot", "system:serviceaccount:team-a:other"
	sa := func(name string) *metav1.PartialObjectMetadata {
		return metadatafake.Object("v1", "ServiceAccount", "team-a", name)
	}
	kube := metadatafake.New(t, sa("chatbot"), sa("other"))
	accounts := &saexist.Accounts{}
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	if err := accounts.Watch(wctx, kube); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func() { mu.Lock(); defer mu.Unlock(); now = now.Add(time.Second) }
	// RBAC followed, so that a look after the first reuses its answers:
	// the deletion must end what a fresh answer still allows.
	changes := &rbacchange.Changes{MaxAge: time.Hour, Settle: time.Nanosecond, Now: clock}
	if err := changes.Watch(wctx, metadatafake.New(t)); err != nil {
		t.Fatal(err)
	}
	tk := leaseTokens(t)
	tk.Reader, tk.Accounts, tk.RBAC, tk.Now = tk.Leases, accounts, changes, clock
	authz := &countingAuthz{allow: map[string]bool{bot: true, other: true, "dave": true}, asked: map[string]int{}}
	tk.Authz = authz
	for _, name := range []string{bot, other, "dave"} {
		if err := tk.record(ctx, member("team-a", name), lease{user: &user.DefaultInfo{Name: name}, expires: tk.now().Add(time.Hour), grant: exchanged}); err != nil {
			t.Fatal(err)
		}
	}
	sb := &openshellv1alpha1.OpenShellSandbox{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "sb", UID: "u1"},
		Status: openshellv1alpha1.OpenShellSandboxStatus{Phase: openshellv1alpha1.SandboxPhaseReady, Gateway: "p/gw", GatewaySandboxName: "x"}}
	s := &Server{Reader: fake.NewClientBuilder().WithScheme(scheme2.New()).WithObjects(sb).Build(), Authz: tk.Authz, Accounts: accounts}
	if why, err := s.stillAllowed(ctx, &user.DefaultInfo{Name: bot}, "create", sb, SubresourceExec, false); err != nil || why != "" {
		t.Fatalf("before the deletion: %q, %v", why, err)
	}
	advance()
	tk.recheck(ctx)
	advance()
	tk.recheck(ctx)
	if got := authz.take(); !maps.Equal(got, map[string]int{bot: 1, other: 1, "dave": 1}) {
		t.Fatalf("two looks asked %v, want one review each (the second reuses them)", got)
	}

	<-kube.Watching("serviceaccounts")
	if err := kube.Resource(corev1.SchemeGroupVersion.WithResource("serviceaccounts")).Namespace("team-a").Delete(ctx, "chatbot", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	until(t, func() bool { return accounts.Gone(ctx, &user.DefaultInfo{Name: bot}) }, "the ServiceAccount's deletion seen")
	why, err := s.stillAllowed(ctx, &user.DefaultInfo{Name: bot}, "create", sb, SubresourceExec, false)
	if err != nil || !strings.Contains(why, "ServiceAccount "+bot+" was deleted") {
		t.Errorf("its open session goes on: %q, %v", why, err)
	}
	advance()
	tk.recheck(ctx)
	if got := authz.take(); len(got) != 0 {
		t.Errorf("the look after the deletion asked %v: its answers were fresh", got)
	}
	if got := leaseUsers(t, tk); !maps.Equal(got, map[string]bool{other: true, "dave": true}) {
		t.Errorf("memberships after the deletion: %v, want the other ServiceAccount's and dave's", got)
	}
}
