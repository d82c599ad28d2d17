package relay

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openshell/openshell-operator/internal/relayload"
)

// LoadKeys signs this replica's load and checks the others' (oidc.Issuer):
// RotatedAt tells when to sign again, before the old key is retired.
type LoadKeys interface {
	relayload.Signer
	relayload.Verifier
	RotatedAt() time.Time
}

// LoadShare publishes this replica's open sessions in its Lease
// (internal/relayload) and follows the other replicas', so that the
// per-user and per-namespace limits hold across replicas and the operator
// can scale the relay on sessions. It is the only owner of the others'
// counts.
type LoadShare struct {
	// Client writes the replica's Lease; Kube lists and watches the
	// others' (an informer, in Namespace, selected by relayload.Label).
	Client    client.Client
	Kube      kubernetes.Interface
	Namespace string
	Replica   relayload.Replica
	Keys      LoadKeys
	// MinInterval spaces the replica's writes (default one second): a busy
	// replica writes at most once per interval, an idle one never.
	MinInterval time.Duration
	Log         logr.Logger

	mu     sync.Mutex
	others map[string]relayload.Load // by Lease name, this replica's left out
	// own is the load this replica last wrote; repair hears when its Lease
	// is seen otherwise (changed, deleted, unlabelled by someone else), so
	// that the replica writes it again at once.
	own        *relayload.Load
	repairOnce sync.Once
	repair     chan struct{}
}

// Run shares s's load until ctx ends, then deletes the replica's Lease.
func (l *LoadShare) Run(ctx context.Context, s *Server) {
	open := s.sessions()
	factory := informers.NewSharedInformerFactoryWithOptions(l.Kube, 0, informers.WithNamespace(l.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = relayload.Label + "=true" }))
	inf := factory.Coordination().V1().Leases().Informer()
	_, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    l.observe,
		UpdateFunc: func(_, o any) { l.observe(o) },
		DeleteFunc: l.forget,
	})
	if err != nil {
		// Not expected (the informer has not started); the replica then
		// counts its limits alone, as one without a pod name does.
		l.Log.Error(err, "Following the other relay replicas' sessions: this replica counts its session limits alone")
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	l.publish(ctx, open)
}

// observe records another replica's published load, or forgets a Lease
// that is not a relay's.
func (l *LoadShare) observe(obj any) {
	o, ok := obj.(*coordinationv1.Lease)
	if !ok {
		return
	}
	load, err := relayload.Read(o, l.Keys)
	l.mu.Lock()
	defer l.mu.Unlock()
	if o.Name == relayload.Name(l.Replica.Pod) {
		// This replica's own: written again if it is not what it wrote (a
		// replayed older version, a forged count). An older write of its own
		// seen late is written again too, with the same content, so this
		// settles.
		if l.own != nil && (err != nil || !reflect.DeepEqual(load, *l.own)) {
			l.signalRepair()
		}
		return
	}
	if l.others == nil {
		l.others = map[string]relayload.Load{}
	}
	if err != nil {
		delete(l.others, o.Name) // forged, or signed with a retired key: counts for nothing
		return
	}
	l.others[o.Name] = load
}

func (l *LoadShare) forget(obj any) {
	if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	if o, ok := obj.(*coordinationv1.Lease); ok {
		l.mu.Lock()
		defer l.mu.Unlock()
		if o.Name == relayload.Name(l.Replica.Pod) {
			l.signalRepair() // deleted or unlabelled by someone else
			return
		}
		delete(l.others, o.Name)
	}
}

// signalRepair asks publish to write the replica's Lease again.
func (l *LoadShare) signalRepair() {
	select {
	case l.repairs() <- struct{}{}:
	default:
	}
}

// repairs is the channel signalRepair and publish share.
func (l *LoadShare) repairs() chan struct{} {
	l.repairOnce.Do(func() { l.repair = make(chan struct{}, 1) })
	return l.repair
}

// wrote records the load the replica's Lease holds now, or is being
// written to hold (a failed write is tried again, so a repair it causes
// meanwhile costs one write).
func (l *LoadShare) wrote(load *relayload.Load) {
	l.mu.Lock()
	l.own = load
	l.mu.Unlock()
}

// othersFor counts the other replicas' open sessions of h's user, its
// namespace and its requester.
func (l *LoadShare) othersFor(h holder) relayload.Counts {
	l.mu.Lock()
	defer l.mu.Unlock()
	var c relayload.Counts
	for _, o := range l.others {
		c.User += o.Users[h.user]
		c.Namespace += o.Namespaces[h.namespace]
		if h.requester != "" {
			c.Requester += o.Requesters[h.requester]
		}
	}
	return c
}

// publish writes the replica's load whenever it changes, at most once per
// MinInterval, and again when the signing key rotates; a write that fails
// is tried again on the next change or rotation check.
func (l *LoadShare) publish(ctx context.Context, open *sessions) {
	interval := l.MinInterval
	if interval <= 0 {
		interval = time.Second
	}
	const rotationCheck = time.Minute
	var (
		written   *coordinationv1.Lease
		published *relayload.Load
		signedAt  time.Time
	)
	repair := l.repairs()
	retry := time.NewTimer(0) // the first write: a restarted process replaces what its pod published before
	defer retry.Stop()
	for {
		select {
		case <-ctx.Done():
			l.wrote(nil) // its deletion is not someone else's
			l.remove(written)
			return
		case <-open.changed:
		case <-retry.C:
		case <-repair:
			written, published = nil, nil // read it back and write it whatever it holds
		}
		retry.Reset(rotationCheck)
		load, rotated := open.snapshot(), l.Keys.RotatedAt()
		if published != nil && reflect.DeepEqual(load, *published) && rotated.Equal(signedAt) {
			continue
		}
		o, err := relayload.Render(l.Namespace, l.Replica, load, l.Keys)
		if err == nil {
			// Recorded before the write, not after: a replay seen while the
			// write is in flight is then compared with what the Lease is about
			// to hold, not with what it held before (which the replay may
			// equal, and would then stand).
			l.wrote(&load)
			err = l.put(ctx, o, written)
		}
		if err != nil {
			l.Log.V(1).Info("Publishing this replica's sessions; trying again", "error", err.Error())
			retry.Reset(interval)
		} else {
			written, published, signedAt = o, &load, rotated
		}
		select {
		case <-ctx.Done():
		case <-time.After(interval):
		}
	}
}

// put writes o over the replica's Lease as last written (nil: read it).
func (l *LoadShare) put(ctx context.Context, o, last *coordinationv1.Lease) error {
	if last != nil {
		o.ResourceVersion = last.ResourceVersion
		err := l.Client.Update(ctx, o)
		if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
			return wrapLease(err, "update", o)
		}
	}
	cur := &coordinationv1.Lease{}
	err := l.Client.Get(ctx, client.ObjectKeyFromObject(o), cur)
	switch {
	case apierrors.IsNotFound(err):
		o.ResourceVersion = ""
		return wrapLease(l.Client.Create(ctx, o), "create", o)
	case err != nil:
		return wrapLease(err, "read", o)
	}
	o.ResourceVersion = cur.ResourceVersion
	return wrapLease(l.Client.Update(ctx, o), "update", o)
}

func wrapLease(err error, verb string, o *coordinationv1.Lease) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s load Lease %s/%s: %w", verb, o.Namespace, o.Name, err)
}

// remove deletes the replica's Lease as it stops (its pod's deletion would,
// later): its sessions are closed.
func (l *LoadShare) remove(written *coordinationv1.Lease) {
	if written == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := l.Client.Delete(ctx, written); err != nil && !apierrors.IsNotFound(err) {
		l.Log.V(1).Info("Deleting this replica's load Lease", "error", err.Error())
	}
}
