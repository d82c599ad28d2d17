package relay

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
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
