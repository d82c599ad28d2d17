package gwconn

import (
	"context"
	"errors"
	"io"
	"sync"

	"google.golang.org/protobuf/proto"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/gatewayapi"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/openshellv1"
)

// Followers stream WatchSandbox for sandboxes that are still moving
// (provisioning, recreating), keep the latest snapshot, and re-queue the
// sandbox on every change: readiness is reported when the gateway sees it,
// not at the next poll. A stream ends once the sandbox is Ready (the
// gateway's stop_on_terminal) or fails; the next reconcile starts a new one
// if the sandbox is still moving.
type Followers struct {
	mu     sync.Mutex
	active map[types.NamespacedName]follow
	latest map[types.NamespacedName]*openshellv1.Sandbox
	events chan event.GenericEvent
}

type follow struct {
	id, gateway string
	pastReady   bool
	cancel      context.CancelFunc
}

// NewFollowers returns an empty set of streams.
func NewFollowers() *Followers {
	return &Followers{active: map[types.NamespacedName]follow{}, latest: map[types.NamespacedName]*openshellv1.Sandbox{},
		events: make(chan event.GenericEvent, 1024)}
}

// Snapshot returns the latest streamed state of sandbox id, if any.
func (f *Followers) Snapshot(key types.NamespacedName, id string) *openshellv1.Sandbox {
	f.mu.Lock()
	defer f.mu.Unlock()
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

// Ensure starts a stream for the sandbox unless one runs for its ID.
func (f *Followers) Ensure(key types.NamespacedName, gatewayKey string, conn *gatewayapi.Client, w Watched) {
	id := w.ID
	f.mu.Lock()
	defer f.mu.Unlock()
	if cur, ok := f.active[key]; ok {
		if cur.id == id && (cur.pastReady || !w.PastReady) {
			return
		}
		cur.cancel()
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.active[key] = follow{id: id, gateway: gatewayKey, pastReady: w.PastReady, cancel: cancel}
	go f.run(ctx, key, conn, w)
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
}

func (f *Followers) run(ctx context.Context, key types.NamespacedName, conn *gatewayapi.Client, w Watched) {
	id := w.ID
	defer func() {
		f.mu.Lock()
		if cur, ok := f.active[key]; ok && cur.id == id {
			delete(f.active, key)
		}
		f.mu.Unlock()
	}()
	stream, err := conn.WatchSandbox(ctx, &openshellv1.WatchSandboxRequest{Sandbox: w.Name,
		WorkspaceScope: gatewayapi.Workspace(w.Workspace), FollowStatus: true, StopOnTerminal: !w.PastReady})
	if err != nil {
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
				f.notify(key) // the reconcile falls back to GetSandbox and follows again
			}
			return
		}
		if s := ev.GetSandbox(); s != nil {
			f.mu.Lock()
			f.latest[key] = proto.Clone(s).(*openshellv1.Sandbox)
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
}

func (f *Followers) notify(key types.NamespacedName) {
	obj := &openshellv1alpha1.OpenShellSandbox{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
	select {
	case f.events <- event.GenericEvent{Object: obj}:
	default:
		// The queue is full of notifications; the periodic follow-up
		// reconcile covers this one.
	}
}
