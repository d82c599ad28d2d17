package preflight

import (
	"maps"
	"reflect"
	"slices"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"
)

// notification is the object carried by change events; handlers re-queue
// every object they own rather than looking at it.
var notification = &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "preflight"}}

// Transition is a capability that appeared or disappeared between probes.
type Transition struct {
	Capability string
	Available  bool
}

// Store holds the latest probe result for every reconciler and tells
// subscribers when it changes, so that they re-queue their objects instead
// of polling.
type Store struct {
	mu          sync.RWMutex
	result      Result
	known       bool
	subscribers []chan event.GenericEvent
}

// NewStore returns an empty store; Get reports ok=false until the first Set.
func NewStore() *Store { return &Store{} }

// Get returns the latest result and whether any probe has completed.
func (s *Store) Get() (Result, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.result, s.known
}

// Subscribe returns a channel that receives an event after every change.
// Call it before the manager starts; the channel is buffered and a pending
// notification is never duplicated.
func (s *Store) Subscribe() <-chan event.GenericEvent {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := make(chan event.GenericEvent, 1)
	s.subscribers = append(s.subscribers, ch)
	return ch
}

// Set records a result. It returns the capabilities that flipped since the
// previous result (none on the first Set: nothing appeared, it was just
// learned) and whether anything changed.
func (s *Store) Set(r Result) ([]Transition, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.known && reflect.DeepEqual(s.result, r) {
		return nil, false
	}
	var ts []Transition
	prev := s.result.Capabilities()
	next := r.Capabilities()
	for _, name := range slices.Sorted(maps.Keys(next)) {
		if s.known && prev[name] != next[name] {
			ts = append(ts, Transition{Capability: name, Available: next[name]})
		}
	}
	s.result, s.known = r, true
	for _, ch := range s.subscribers {
		select {
		case ch <- event.GenericEvent{Object: notification}:
		default: // a notification is already pending; it covers this change too
		}
	}
	return ts, true
}
