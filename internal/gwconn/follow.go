package gwconn

import (
	"cmp"
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/gatewayapi"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/openshellv1"
)

// Followers stream WatchSandbox for sandboxes that are still moving
// (provisioning, recreating), or running a command that will end, keep the
// latest snapshot, and re-queue the sandbox on every change: readiness and
// exits are reported when the gateway sees them, not at the next poll. A
// stream ends once the sandbox is Ready (the gateway's stop_on_terminal),
// or, past Ready, once it leaves Ready; or it fails, and is not started
// again for that sandbox before a backoff. The next reconcile starts a new
// one if the sandbox is still moving.
type Followers struct {
	mu     sync.Mutex
	active map[types.NamespacedName]follow
	latest map[types.NamespacedName]*openshellv1.Sandbox
	events chan event.GenericEvent
	// gen numbers the streams, so that an ending stream never forgets its
	// successor.
	gen uint64
	// failed is when a sandbox's last stream failed, and how long to wait.
	failed map[types.NamespacedName]retry
	// MaxPastReady bounds, per gateway, the streams that follow Ready
	// sandboxes to their end (0: DefaultMaxPastReady): a tenant's thousand
	// long-running commands cost the gateway a thousand streams otherwise.
	// Past the bound, an exit is seen at the sandbox's next reconcile.
	MaxPastReady int
}

// DefaultMaxPastReady is the default bound on past-Ready streams per gateway.
const DefaultMaxPastReady = 256

// Backoff of a sandbox whose stream failed: from retryMin, doubling to retryMax.
const (
	retryMin = time.Second
	retryMax = time.Minute
)

type retry struct {
	at   time.Time
	wait time.Duration
}

type follow struct {
	id, gateway string
	pastReady   bool
	gen         uint64
	cancel      context.CancelFunc
}

// NewFollowers returns an empty set of streams.
func NewFollowers() *Followers {
	return &Followers{active: map[types.NamespacedName]follow{}, latest: map[types.NamespacedName]*openshellv1.Sandbox{},
		events: make(chan event.GenericEvent, 1024), failed: map[types.NamespacedName]retry{}}
}

// Snapshot returns the latest streamed state of sandbox id, if any.
func (f *Followers) Snapshot(key types.NamespacedName, id string) *openshellv1.Sandbox {
	f.mu.Lock()
	defer f.mu.Unlock()
	// Only a live stream vouches for its last event: once it ended (the
	// sandbox is Ready, or the gateway went away), the gateway may have
	// lost the sandbox since, and only a read can tell.
	if _, live := f.active[key]; !live {
		return nil
	}
	if s, ok := f.latest[key]; ok && s.GetMetadata().GetId() == id {
		return s
	}
	return nil
}

// Record replaces the snapshot with what a call that changed the sandbox
// (StopSandbox, StartSandbox) returned: the stream may have ended before
// that change, and a snapshot older than it would be read as current.
func (f *Followers) Record(key types.NamespacedName, s *openshellv1.Sandbox) {
	if s == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.latest[key] = proto.Clone(s).(*openshellv1.Sandbox)
}

// Watched names a gateway sandbox to follow: 0.1 gateways watch by name
// in a workspace, and the ID tells one incarnation from the next.
type Watched struct {
	ID, Name, Workspace string
	// PastReady follows a running sandbox until its agent exits (or it
	// stops or fails), not only until it is Ready: a sandbox that runs to
	// completion reports its end as it happens.
	PastReady bool
}

// Ensure starts a stream for the sandbox unless one runs for its ID (one
// that stops at Ready is replaced by one that follows past it when asked),
// its last stream failed too recently, or the gateway has its bound of
// past-Ready streams.
func (f *Followers) Ensure(key types.NamespacedName, gatewayKey string, conn *gatewayapi.Client, w Watched) {
	f.mu.Lock()
	defer f.mu.Unlock()
	cur, running := f.active[key]
	if running && cur.id == w.ID && (cur.pastReady || !w.PastReady) {
		return
	}
	if r, ok := f.failed[key]; ok && time.Since(r.at) < r.wait {
		return
	}
	if w.PastReady && f.pastReadyLocked(gatewayKey) >= cmp.Or(f.MaxPastReady, DefaultMaxPastReady) {
		return
	}
	if running {
		cur.cancel()
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.gen++
	f.active[key] = follow{id: w.ID, gateway: gatewayKey, pastReady: w.PastReady, gen: f.gen, cancel: cancel}
	go f.run(ctx, key, conn, w, f.gen)
}

// pastReadyLocked counts a gateway's past-Ready streams; f.mu is held.
func (f *Followers) pastReadyLocked(gatewayKey string) int {
	n := 0
	for _, cur := range f.active {
		if cur.pastReady && cur.gateway == gatewayKey {
			n++
		}
	}
	return n
}

// stopAll ends every stream (the manager is stopping).
func (f *Followers) stopAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for key, cur := range f.active {
		cur.cancel()
		delete(f.active, key)
	}
}

// stopGateway ends the streams of one gateway (it was deleted).
func (f *Followers) stopGateway(gatewayKey string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for key, cur := range f.active {
		if cur.gateway == gatewayKey {
			cur.cancel()
			delete(f.active, key)
		}
	}
}

// Events re-queue the sandbox whose streamed phase changed.
func (f *Followers) Events() <-chan event.GenericEvent { return f.events }

// Stop ends the stream and forgets the snapshot (deleted sandbox).
func (f *Followers) Stop(key types.NamespacedName) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if cur, ok := f.active[key]; ok {
		cur.cancel()
		delete(f.active, key)
	}
	delete(f.latest, key)
	delete(f.failed, key)
}

func (f *Followers) run(ctx context.Context, key types.NamespacedName, conn *gatewayapi.Client, w Watched, gen uint64) {
	failed := false
	defer func() {
		f.mu.Lock()
		if cur, ok := f.active[key]; ok && cur.gen == gen {
			delete(f.active, key)
		}
		if failed {
			r := f.failed[key]
			f.failed[key] = retry{at: time.Now(), wait: min(max(2*r.wait, retryMin), retryMax)}
		} else {
			delete(f.failed, key)
		}
		f.mu.Unlock()
	}()
	stream, err := conn.WatchSandbox(ctx, &openshellv1.WatchSandboxRequest{Sandbox: w.Name,
		WorkspaceScope: gatewayapi.Workspace(w.Workspace), FollowStatus: true, StopOnTerminal: !w.PastReady})
	if err != nil {
		failed = ctx.Err() == nil
		f.notify(key)
		return
	}
	// The first snapshot repeats what CreateSandbox or GetSandbox returned
	// unless the phase already moved; notify on phase changes only.
	last := openshellv1.SandboxPhase_SANDBOX_PHASE_PROVISIONING
	if w.PastReady {
		last = openshellv1.SandboxPhase_SANDBOX_PHASE_READY
	}
	for {
		ev, err := stream.Recv()
		if err != nil {
			if !errors.Is(err, io.EOF) && ctx.Err() == nil {
				failed = true
				f.notify(key) // the reconcile falls back to GetSandbox and follows again
			}
			return
		}
		s := ev.GetSandbox()
		if s == nil {
			continue
		}
		if s.GetMetadata().GetId() != w.ID {
			// The name now belongs to another incarnation: not this stream's.
			f.notify(key)
			return
		}
		f.mu.Lock()
		if cur, ok := f.active[key]; ok && cur.gen == gen {
			f.latest[key] = proto.Clone(s).(*openshellv1.Sandbox)
		}
		f.mu.Unlock()
		if phase := s.GetStatus().GetPhase(); phase != last {
			last = phase
			f.notify(key)
			if w.PastReady && phase != openshellv1.SandboxPhase_SANDBOX_PHASE_READY {
				return // it ended, or left Ready: the reconcile takes it from here
			}
		}
	}
}

// Requeue re-queues a sandbox whose gateway sandbox changed without a
// stream to say so (the sweep found it differing from what the operator
// set).
func (f *Followers) Requeue(key types.NamespacedName) { f.notify(key) }

func (f *Followers) notify(key types.NamespacedName) {
	obj := &openshellv1alpha1.OpenShellSandbox{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
	select {
	case f.events <- event.GenericEvent{Object: obj}:
	default:
		// The queue is full of notifications; the periodic follow-up
		// reconcile covers this one.
	}
}
