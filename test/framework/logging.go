package framework

import (
	"io"
	"os"
	"strings"
	"sync"

	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// SetupLogging routes controller logs to stderr when OPENSHELL_TEST_LOG is
// set, and keeps the most recent in memory either way (RecentLogs), so a
// failing assertion can say what the operator did about its object
// without a whole run's logs on the screen.
func SetupLogging() {
	var w io.Writer = recent
	if os.Getenv("OPENSHELL_TEST_LOG") != "" {
		w = io.MultiWriter(os.Stderr, recent)
	}
	log := zap.New(zap.WriteTo(w), zap.UseDevMode(true))
	ctrl.SetLogger(log)
	// The libraries that log through klog (the relay's front-proxy
	// controllers among them) follow the same switch.
	klog.SetLogger(log)
}

// recentLogBytes bounds what the ring keeps: a few minutes of a busy suite.
const recentLogBytes = 16 << 20

var recent = &logRing{max: recentLogBytes}

// RecentLogs returns the last (at most max) log entries that contain any
// of the given strings (a namespace, a gateway sandbox ID), oldest first.
func RecentLogs(max int, any ...string) string {
	return recent.grep(max, any)
}

// logRing keeps the most recent log entries (zap writes one per Write), up
// to max bytes.
type logRing struct {
	mu      sync.Mutex
	max     int
	size    int
	entries []string
}

func (r *logRing) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.entries = append(r.entries, string(p))
	r.size += len(p)
	if r.size <= r.max {
		return len(p), nil
	}
	// Past the bound, drop the oldest quarter at once: copying down on
	// every entry would cost the whole ring per log line.
	drop := 0
	for r.size > r.max*3/4 && drop < len(r.entries) {
		r.size -= len(r.entries[drop])
		drop++
	}
	// Copy down rather than re-slice, so the dropped entries are freed.
	r.entries = append(r.entries[:0:0], r.entries[drop:]...)
	return len(p), nil
}

func (r *logRing) grep(max int, any []string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for i := len(r.entries) - 1; i >= 0 && len(out) < max; i-- {
		for _, s := range any {
			if s != "" && strings.Contains(r.entries[i], s) {
				out = append(out, r.entries[i])
				break
			}
		}
	}
	var b strings.Builder
	for i := len(out) - 1; i >= 0; i-- {
		b.WriteString(out[i])
	}
	return b.String()
}
