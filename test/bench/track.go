package main

import (
	"context"
	"slices"
	"sort"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openshell/openshell-operator/test/testgateway"
)

// tracker follows one namespace's objects of a path by watch and records,
// for each object the creator announced, when it became ready.
type tracker struct {
	mu      sync.Mutex
	created map[string]time.Time
	posted  map[string]time.Time
	ready   map[string]time.Time
	want    int
	done    chan struct{}
}

// track starts following ns until want objects are ready or ctx ends; stop
// ends the watch. The API server ends watches now and then (its request
// timeout, or a watcher that fell behind: the 10,000-sandbox run lost
// its watch after 2,880), so the tracker resumes from the last
// resourceVersion it saw, or lists again when that is too old.
func track(ctx context.Context, w client.WithWatch, p path, ns string, want int) (*tracker, func(), error) {
	ctx, cancel := context.WithCancel(ctx)
	wi, err := w.Watch(ctx, p.list(), client.InNamespace(ns))
	if err != nil {
		cancel()
		return nil, nil, err
	}
	t := &tracker{created: map[string]time.Time{}, posted: map[string]time.Time{}, ready: map[string]time.Time{}, want: want, done: make(chan struct{})}
	go func() {
		defer close(t.done)
		rv := ""
		for {
			all := t.follow(wi, p, &rv)
			wi.Stop()
			if all {
				return
			}
			if wi, all = t.resume(ctx, w, p, ns, &rv); wi == nil || all {
				return
			}
		}
	}()
	return t, cancel, nil
}

// follow records readiness from wi's events until every wanted object is
// ready (true) or the watch ends (false); rv keeps the last resourceVersion
// seen, and is cleared when the API server says it is too old.
func (t *tracker) follow(wi watch.Interface, p path, rv *string) bool {
	for ev := range wi.ResultChan() {
		switch ev.Type {
		case watch.Error:
			if err := apierrors.FromObject(ev.Object); apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
				*rv = ""
			}
			return false
		case watch.Added, watch.Modified, watch.Bookmark:
			if m, err := meta.Accessor(ev.Object); err == nil {
				*rv = m.GetResourceVersion()
			}
		}
		if ev.Type == watch.Bookmark {
			continue
		}
		if name, ok := p.ready(ev.Object); ok && t.markReady(name) {
			return true
		}
	}
	return false
}

// resume watches again from rv, after listing (and recording what is
// ready) when rv is empty; it retries every second until ctx ends (nil).
// all says the list found every wanted object ready.
func (t *tracker) resume(ctx context.Context, w client.WithWatch, p path, ns string, rv *string) (_ watch.Interface, all bool) {
	for {
		if *rv == "" {
			l := p.list()
			if err := w.List(ctx, l, client.InNamespace(ns)); err == nil {
				*rv = l.GetResourceVersion()
				_ = meta.EachListItem(l, func(o runtime.Object) error {
					if name, ok := p.ready(o); ok && t.markReady(name) {
						all = true
					}
					return nil
				})
				if all {
					return nil, true
				}
			}
		}
		if *rv != "" {
			wi, err := w.Watch(ctx, p.list(), client.InNamespace(ns), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: *rv}})
			if err == nil {
				return wi, false
			}
			if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
				*rv = ""
			}
		}
		select {
		case <-ctx.Done():
			return nil, false
		case <-time.After(time.Second):
		}
	}
}

// markReady records name's readiness and says whether every wanted object
// is ready.
func (t *tracker) markReady(name string) bool {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, seen := t.created[name]; seen {
		if _, already := t.ready[name]; !already {
			t.ready[name] = now
		}
	}
	return len(t.ready) == t.want
}

// markCreated records that the creator is about to create name.
func (t *tracker) markCreated(name string) {
	now := time.Now()
	t.mu.Lock()
	t.created[name] = now
	t.mu.Unlock()
}

// markPosted records that the create request of name returned.
func (t *tracker) markPosted(name string) {
	now := time.Now()
	t.mu.Lock()
	t.posted[name] = now
	t.mu.Unlock()
}

// wait returns when every wanted object is ready or ctx ends.
func (t *tracker) wait(ctx context.Context) {
	select {
	case <-t.done:
	case <-ctx.Done():
	}
}

// latencies are the create→ready times, sorted.
func (t *tracker) latencies() []time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]time.Duration, 0, len(t.ready))
	for name, at := range t.ready {
		out = append(out, at.Sub(t.created[name]))
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// readyBetween counts the objects that became ready in [from, to).
func (t *tracker) readyBetween(from, to time.Time) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, at := range t.ready {
		if !at.Before(from) && at.Before(to) {
			n++
		}
	}
	return n
}

// times are when the creator announced name, when its create returned and
// when it became ready.
func (t *tracker) times(name string) (created, posted, ready time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.created[name], t.posted[name], t.ready[name]
}

// postP50 is the median time the create requests took.
func (t *tracker) postP50() time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	d := make([]time.Duration, 0, len(t.posted))
	for name, at := range t.posted {
		d = append(d, at.Sub(t.created[name]))
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return pct(d, 50)
}

// Stages splits the operator path's create→Ready (p50 of each part).
type Stages struct {
	// Post is the OpenShellSandbox create request (both webhooks included).
	Post time.Duration `json:"post"`
	// ToGateway runs until the gateway receives CreateSandbox: the
	// operator's watch, its reconcile and the call.
	ToGateway time.Duration `json:"toGateway"`
	// GatewayCreate runs until the gateway's agents.x-k8s.io Sandbox is
	// seen: the gateway creates it (the raw path's create request) and the
	// watch delivers it.
	GatewayCreate time.Duration `json:"gatewayCreate"`
	// Inner runs until that Sandbox is Ready: the raw path's part.
	Inner time.Duration `json:"inner"`
	// GatewayNotice runs until the gateway sends READY on the operator's
	// WatchSandbox stream (its own watch of the Sandbox).
	GatewayNotice time.Duration `json:"gatewayNotice"`
	// Report runs until the OpenShellSandbox is seen Ready: the stream, the
	// operator's reconcile and status write, and the watch.
	Report time.Duration `json:"report"`
}

// stageWatch records, by the OpenShellSandbox they belong to (names maps
// the gateway sandbox name to it), when the gateway received its
// CreateSandbox, when its agents.x-k8s.io Sandbox appeared and became Ready,
// and when the gateway sent READY.
type stageWatch struct {
	mu                                sync.Mutex
	names                             map[string]string
	received, added, ready, readySent map[string]time.Time
}

func watchStages(ctx context.Context, w client.WithWatch, gw *testgateway.Gateway, ns string, names map[string]string) (*stageWatch, func(), error) {
	wi, err := w.Watch(ctx, rawPath.list(), client.InNamespace(ns))
	if err != nil {
		return nil, nil, err
	}
	s := &stageWatch{names: names, received: map[string]time.Time{}, added: map[string]time.Time{}, ready: map[string]time.Time{},
		readySent: map[string]time.Time{}}
	gw.Trace(func(event, sandbox string) {
		switch event {
		case testgateway.TraceCreateReceived:
			s.first(s.received, sandbox, time.Now())
		case testgateway.TraceReadySent:
			s.first(s.readySent, sandbox, time.Now())
		}
	})
	go func() {
		for ev := range wi.ResultChan() {
			if ev.Type != watch.Added && ev.Type != watch.Modified {
				continue
			}
			now := time.Now()
			u, ok := ev.Object.(interface{ GetAnnotations() map[string]string })
			if !ok {
				continue
			}
			name := u.GetAnnotations()[testgateway.LabelSandboxName]
			s.first(s.added, name, now)
			if _, ready := rawPath.ready(ev.Object); ready {
				s.first(s.ready, name, now)
			}
		}
	}()
	return s, func() { gw.Trace(nil); wi.Stop() }, nil
}

// first records at for the owner of the gateway sandbox name, once.
func (s *stageWatch) first(m map[string]time.Time, sandbox string, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	owner, ok := s.names[sandbox]
	if !ok {
		return
	}
	if _, seen := m[owner]; !seen {
		m[owner] = at
	}
}

// split computes the stages over every object seen at every point.
func (s *stageWatch) split(t *tracker) *Stages {
	s.mu.Lock()
	defer s.mu.Unlock()
	var parts [6][]time.Duration
	for owner, added := range s.added {
		created, posted, done := t.times(owner)
		received, sbReady, sent := s.received[owner], s.ready[owner], s.readySent[owner]
		points := []time.Time{created, posted, received, added, sbReady, sent, done}
		if slices.ContainsFunc(points, time.Time.IsZero) {
			continue
		}
		for i := range parts {
			parts[i] = append(parts[i], points[i+1].Sub(points[i]))
		}
	}
	if len(parts[0]) == 0 {
		return nil
	}
	var p50 [6]time.Duration
	for i, d := range parts {
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		p50[i] = pct(d, 50)
	}
	return &Stages{Post: p50[0], ToGateway: p50[1], GatewayCreate: p50[2], Inner: p50[3], GatewayNotice: p50[4], Report: p50[5]}
}
