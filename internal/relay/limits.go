package relay

import (
	"fmt"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// Session limits (defaults of Server.MaxSessionsPerUser and
// MaxSessionsPerNamespace): one user, or one namespace, cannot hold the
// relay's streams (and the gateway's) for everyone else. A refusal is 429
// with what to do.
const (
	maxSessionsPerUser      = 16
	maxSessionsPerNamespace = 64
	// maxCommandBytes bounds an exec's command line (it travels in the
	// URL and in the gateway's start message).
	maxCommandBytes = 32 << 10
)

// sessions counts the open sessions per user and per namespace.
type sessions struct {
	mu             sync.Mutex
	perUser, perNS int
	byUser         map[string]int
	byNS           map[string]int
}

// acquire takes a session slot for user in namespace, or says why not;
// release gives it back.
func (s *sessions) acquire(user, namespace string) (release func(), refused *apierrors.StatusError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byUser == nil {
		s.byUser, s.byNS = map[string]int{}, map[string]int{}
	}
	perUser, perNS := s.perUser, s.perNS
	if perUser <= 0 {
		perUser = maxSessionsPerUser
	}
	if perNS <= 0 {
		perNS = maxSessionsPerNamespace
	}
	switch {
	case s.byUser[user] >= perUser:
		return nil, apierrors.NewTooManyRequests(fmt.Sprintf("%s has %d open sessions, the most one user may: end one first", user, s.byUser[user]), 5)
	case s.byNS[namespace] >= perNS:
		return nil, apierrors.NewTooManyRequests(fmt.Sprintf("namespace %s has %d open sessions, the most one namespace may: end one first", namespace, s.byNS[namespace]), 5)
	}
	s.byUser[user]++
	s.byNS[namespace]++
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.byUser[user]--; s.byUser[user] == 0 {
				delete(s.byUser, user)
			}
			if s.byNS[namespace]--; s.byNS[namespace] == 0 {
				delete(s.byNS, namespace)
			}
		})
	}, nil
}

// commandBytes is the size of a command line.
func commandBytes(cmd []string) int {
	n := 0
	for _, c := range cmd {
		n += len(c) + 1
	}
	return n
}
