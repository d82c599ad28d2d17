// Package driftcheck bounds how often what a controller wrote at a
// gateway (a provider record, an imported profile, a workspace template)
// is read back and compared with what it holds: once a period per object
// and gateway. The reconciles that happen anyway look only when a
// comparison is due, and the controller requeues at the period, so a
// change made at the gateway directly lasts at most about one period
// while steady state costs one read per period and writes nothing.
package driftcheck

import (
	"sync"
	"time"
)

// DefaultPeriod is the bound when a controller is given none: the sandbox
// sweep's (--sweep-period).
const DefaultPeriod = 10 * time.Minute

// Schedule remembers when each key (an object at a gateway) was last
// compared or written. The zero value is ready; one controller owns it.
type Schedule struct {
	last sync.Map // key → time.Time
}

// Period is period, or DefaultPeriod when it is not positive.
func Period(period time.Duration) time.Duration {
	if period > 0 {
		return period
	}
	return DefaultPeriod
}

// Due says whether key's last comparison is older than period (or it has
// none).
func (s *Schedule) Due(key string, period time.Duration) bool {
	last, ok := s.last.Load(key)
	return !ok || time.Since(last.(time.Time)) >= Period(period)
}

// Done records that key was compared, or written, now.
func (s *Schedule) Done(key string) { s.last.Store(key, time.Now()) }

// Forget drops key (the object is gone from that gateway).
func (s *Schedule) Forget(key string) { s.last.Delete(key) }
