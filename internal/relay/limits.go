package relay

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/openshell/openshell-operator/internal/relayload"
)

// Session limits (defaults of Server.MaxSessionsPerUser,
// MaxSessionsPerNamespace and MaxSessions): one user, or one namespace,
// cannot hold the relay's streams (and the gateway's) for everyone else,
// a refusal is 429 with what to do; and a replica holds no more sessions
// than its memory limit allows (make bench: some 0.9 MiB each over SPDY,
// against the Deployment's 512 MiB), a refusal is 503, which sends the
// client to retry, and the retry may reach another replica.
const (
	maxSessionsPerUser      = 16
	maxSessionsPerNamespace = 64
	// maxSessionsPerRequester bounds the sessions in all the projects one
	// person requested, on a gateway that admits every namespace: there a
	// self-provisioner's new projects each get sandboxes, and without it
	// their count alone would decide how many sessions one person holds
	// (fourth adversarial read, R4).
	maxSessionsPerRequester = 128
	maxSessions             = 400
	// maxCommandBytes bounds an exec's command line (it travels in the
	// URL and in the gateway's start message).
	maxCommandBytes = 32 << 10
)

// errDraining is the cause an open session ends with when its relay
// stops (a rolling update, a drained node): the client is told to
// reconnect, which reaches another replica.
var errDraining = errors.New("the relay serving this session is shutting down: run the command again to reconnect")

// sessions counts the open sessions per user and per namespace, and holds
// the open ones so that a stopping relay can end them with a notice.
type sessions struct {
	mu                                sync.Mutex
	perUser, perNS, perRequester, max int
	metrics                           *Metrics
	total                             int
	byUser                            map[string]int
	byNS                              map[string]int
	byRequester                       map[string]int
	// draining refuses new sessions; ending also ends every open one
	// (after a drain's grace).
	draining, ending bool
	live             map[*stream]struct{}
	// idle is closed when the last open session of a draining relay ends.
	idle chan struct{}
	// others counts the other replicas' open sessions of a holder, as they
	// last published them (nil: this replica alone); changed hears of every
	// change of this replica's counts (buffered, nil: no one listens). Both
	// are the load share's (loadShare).
	others  func(h holder) relayload.Counts
	changed chan struct{}
}

// snapshot is this replica's load as the other replicas and the operator
// read it.
func (s *sessions) snapshot() relayload.Load {
	s.mu.Lock()
	defer s.mu.Unlock()
	return relayload.Load{Sessions: s.total, Users: maps.Clone(s.byUser), Namespaces: maps.Clone(s.byNS), Requesters: maps.Clone(s.byRequester)}
}

// signal tells the load share the counts changed; a signal already
// pending covers this one.
func (s *sessions) signal() {
	if s.changed == nil {
		return
	}
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// track holds an open session until untrack; on a relay whose drain is
// ending sessions it is ended at once instead (one accepted before the
// drain began runs on through its grace).
func (s *sessions) track(st *stream) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ending {
		st.end(errDraining)
	}
	if s.live == nil {
		s.live = map[*stream]struct{}{}
	}
	s.live[st] = struct{}{}
}

func (s *sessions) untrack(st *stream) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.live, st)
	if len(s.live) == 0 && s.idle != nil {
		close(s.idle)
		s.idle = nil
	}
}

// drain refuses new sessions from now on and lets the open ones run for
// grace, so that what a user is doing finishes (an operator upgrade, a
// scale-down); then it ends those still open with errDraining (their
// clients are told to reconnect) and waits until their handlers are done,
// or ctx ends. It reports how many ended of their own and how many it
// ended.
func (s *sessions) drain(ctx context.Context, grace time.Duration) (finished, ended int, err error) {
	s.mu.Lock()
	s.draining = true
	open := len(s.live)
	idle := s.idleLocked()
	s.mu.Unlock()
	if idle == nil {
		return 0, 0, nil
	}
	if grace > 0 {
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-idle:
			return open, 0, nil
		case <-t.C:
		case <-ctx.Done():
		}
	}
	s.mu.Lock()
	s.ending = true
	ended = len(s.live)
	for st := range s.live {
		st.end(errDraining)
	}
	idle = s.idleLocked()
	s.mu.Unlock()
	finished = open - ended
	if idle == nil {
		return finished, ended, nil
	}
	select {
	case <-idle:
		return finished, ended, nil
	case <-ctx.Done():
		return finished, ended, fmt.Errorf("%d sessions ended with a notice, not all closed in time: %w", ended, ctx.Err())
	}
}

// idleLocked is the channel closed when the last open session ends, or
// nil when none is open. s.mu is held.
func (s *sessions) idleLocked() chan struct{} {
	if len(s.live) == 0 {
		return nil
	}
	if s.idle == nil {
		s.idle = make(chan struct{})
	}
	return s.idle
}

// holder is whose a session is: its user, the sandbox's namespace, and
// the person who requested that namespace as an OpenShift project where
// that bound applies ("" otherwise).
type holder struct{ user, namespace, requester string }

// acquire takes a session slot for h, or says why not; release gives it
// back.
func (s *sessions) acquire(h holder) (release func(), refused *apierrors.StatusError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byUser == nil {
		s.byUser, s.byNS, s.byRequester = map[string]int{}, map[string]int{}, map[string]int{}
	}
	if s.draining {
		s.metrics.refused(RefusedDraining)
		return nil, apierrors.NewServiceUnavailable("this relay is shutting down: run the command again to reach another replica")
	}
	perUser, perNS, most := orDefault(s.perUser, maxSessionsPerUser), orDefault(s.perNS, maxSessionsPerNamespace), orDefault(s.max, maxSessions)
	perRequester := orDefault(s.perRequester, maxSessionsPerRequester)
	// The limits hold across the replicas: theirs are added as they last
	// published them (within a second), this replica's exactly.
	open := relayload.Counts{User: s.byUser[h.user], Namespace: s.byNS[h.namespace], Requester: s.byRequester[h.requester]}
	if s.others != nil {
		o := s.others(h)
		open.User, open.Namespace, open.Requester = open.User+o.User, open.Namespace+o.Namespace, open.Requester+o.Requester
	}
	switch {
	case open.User >= perUser:
		s.metrics.refused(RefusedUserLimit)
		return nil, apierrors.NewTooManyRequests(fmt.Sprintf("%s has %d open sessions, the most one user may: end one first", h.user, open.User), 5)
	case open.Namespace >= perNS:
		s.metrics.refused(RefusedNamespaceLimit)
		return nil, apierrors.NewTooManyRequests(fmt.Sprintf("namespace %s has %d open sessions, the most one namespace may: end one first", h.namespace, open.Namespace), 5)
	case h.requester != "" && open.Requester >= perRequester:
		s.metrics.refused(RefusedRequesterLimit)
		return nil, apierrors.NewTooManyRequests(fmt.Sprintf("the projects %s requested have %d open sessions, the most one requester's projects may "+
			"on a gateway that admits every namespace: end one first", h.requester, open.Requester), 5)
	case s.total >= most:
		s.metrics.refused(RefusedReplicaLimit)
		st := apierrors.NewServiceUnavailable(fmt.Sprintf("this relay replica has %d open sessions, the most it holds: run the command again to reach another replica (a platform admin can add replicas)", s.total))
		st.ErrStatus.Details = &metav1.StatusDetails{RetryAfterSeconds: 1}
		return nil, st
	}
	s.byUser[h.user]++
	s.byNS[h.namespace]++
	if h.requester != "" {
		s.byRequester[h.requester]++
	}
	s.total++
	s.signal()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			defer s.signal()
			s.total--
			decrement(s.byUser, h.user)
			decrement(s.byNS, h.namespace)
			if h.requester != "" {
				decrement(s.byRequester, h.requester)
			}
		})
	}, nil
}

// decrement counts one session less for key, forgetting it at zero.
func decrement(m map[string]int, key string) {
	if m[key]--; m[key] <= 0 {
		delete(m, key)
	}
}

func orDefault(n, def int) int {
	if n <= 0 {
		return def
	}
	return n
}

// commandBytes is the size of a command line.
func commandBytes(cmd []string) int {
	n := 0
	for _, c := range cmd {
		n += len(c) + 1
	}
	return n
}
