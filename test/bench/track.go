package main

import (
	"context"
	"sort"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openshell/openshell-operator/test/testgateway"
)

// tracker follows one namespace's objects of a path by watch and records,
// for each object the creator announced, when it became ready.
type tracker struct {
	mu      sync.Mutex
	created map[string]time.Time
	ready   map[string]time.Time
	want    int
	done    chan struct{}
}

// track starts following ns until want objects are ready or ctx ends; stop
// ends the watch.
func track(ctx context.Context, w client.WithWatch, p path, ns string, want int) (*tracker, func(), error) {
	wi, err := w.Watch(ctx, p.list(), client.InNamespace(ns))
	if err != nil {
		return nil, nil, err
	}
	t := &tracker{created: map[string]time.Time{}, ready: map[string]time.Time{}, want: want, done: make(chan struct{})}
	go func() {
		defer close(t.done)
		for ev := range wi.ResultChan() {
			if ev.Type != watch.Added && ev.Type != watch.Modified {
				continue
			}
			name, ok := p.ready(ev.Object)
			if !ok {
				continue
			}
			if t.markReady(name) {
				return
			}
		}
	}()
	return t, wi.Stop, nil
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

// readyAt is when name became ready (zero if not yet).
func (t *tracker) readyAt(name string) time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.ready[name]
}

// createdAt is when the creator announced name.
func (t *tracker) createdAt(name string) time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.created[name]
}

// Stages splits the operator path's create→Ready (p50 of each part): from
// the OpenShellSandbox create until the gateway's agents.x-k8s.io Sandbox
// exists (webhooks, the operator's watch and reconcile, CreateSandbox, the
// gateway's own create), until that Sandbox is Ready (what the raw path
// measures, less its create), and until the OpenShellSandbox says Ready
// (the gateway's watch and stream, the operator's reconcile and status
// write, the client's watch).
type Stages struct {
	Front time.Duration `json:"front"`
	Inner time.Duration `json:"inner"`
	Back  time.Duration `json:"back"`
}

// stageWatch records when each gateway Sandbox in ns appeared and became
// Ready, by the OpenShellSandbox it belongs to (names maps the gateway
// sandbox name, which the driver annotates, to it).
type stageWatch struct {
	mu           sync.Mutex
	names        map[string]string
	added, ready map[string]time.Time
}

func watchStages(ctx context.Context, w client.WithWatch, ns string, names map[string]string) (*stageWatch, func(), error) {
	wi, err := w.Watch(ctx, rawPath.list(), client.InNamespace(ns))
	if err != nil {
		return nil, nil, err
	}
	s := &stageWatch{names: names, added: map[string]time.Time{}, ready: map[string]time.Time{}}
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
			owner, ok := s.names[u.GetAnnotations()[testgateway.LabelSandboxName]]
			if !ok {
				continue
			}
			_, ready := rawPath.ready(ev.Object)
			s.mu.Lock()
			if _, seen := s.added[owner]; !seen {
				s.added[owner] = now
			}
			if _, seen := s.ready[owner]; ready && !seen {
				s.ready[owner] = now
			}
			s.mu.Unlock()
		}
	}()
	return s, wi.Stop, nil
}

// split computes the stages of every object both watches saw whole.
func (s *stageWatch) split(t *tracker) *Stages {
	s.mu.Lock()
	defer s.mu.Unlock()
	var front, inner, back []time.Duration
	for owner, added := range s.added {
		created, sbReady, done := t.createdAt(owner), s.ready[owner], t.readyAt(owner)
		if created.IsZero() || sbReady.IsZero() || done.IsZero() {
			continue
		}
		front, inner, back = append(front, added.Sub(created)), append(inner, sbReady.Sub(added)), append(back, done.Sub(sbReady))
	}
	if len(front) == 0 {
		return nil
	}
	for _, d := range [][]time.Duration{front, inner, back} {
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	}
	return &Stages{Front: pct(front, 50), Inner: pct(inner, 50), Back: pct(back, 50)}
}
