package relay

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/events"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
)

// Session is what one request does: who, on which sandbox, what.
type Session struct {
	User, Namespace, Sandbox, Subresource string
	// Command is the command an exec runs, or a proxy request's method
	// and PORT/PATH (never input, output or a query).
	Command []string
	// Tunnel marks a proxy request that asked to switch protocols.
	Tunnel bool
	// External marks a proxy request that came through the external port
	// listener (a Route), not the kube-apiserver.
	External bool
}

// evented says whether the session's start and end are Events on the
// sandbox as well as log lines. Not a plain proxy request's: one page
// load is dozens of them, each its own Event series, which would bury the
// namespace's other Events; the relay's log keeps every one. A proxy
// request that asks to switch protocols is a tunnel as long-lived as a
// port-forward, and recorded as one.
func (s Session) evented() bool { return s.Subresource != SubresourceProxy || s.Tunnel }

// Auditor records sessions: a structured log line and an Event on the
// sandbox when one starts and when it ends. No Secret value or token is
// ever part of a record: only names, the command line and byte counts.
type Auditor struct {
	Log      logr.Logger
	Recorder events.EventRecorder
}

// Record is one session under way.
type Record struct {
	a       Auditor
	sb      *openshellv1alpha1.OpenShellSandbox
	session Session
	started time.Time
	id      string
	in, out atomic.Int64
}

// Start records a session's start. Each session has an ID of its own,
// which is also its Events' action: events.k8s.io merges Events of equal
// regarding, reason and action into a series that keeps the first note
// only, and an audit record must not lose the others.
func (a Auditor) Start(_ context.Context, sb *openshellv1alpha1.OpenShellSandbox, s Session) *Record {
	r := &Record{a: a, sb: sb, session: s, started: time.Now(), id: sessionID()}
	a.Log.Info("session started", "session", r.id, "user", s.User, "namespace", s.Namespace, "sandbox", s.Sandbox, "subresource", s.Subresource, "command", s.Command, "external", s.External)
	if a.Recorder != nil && s.evented() {
		a.Recorder.Eventf(sb, nil, corev1.EventTypeNormal, openshellv1alpha1.SandboxReasonSessionStarted, r.action(), "%s",
			capNote(fmt.Sprintf("%s started %s%s (session %s)", s.User, s.Subresource, commandSuffix(s.Command), r.id)))
	}
	return r
}

// action is the session's Events' action.
func (r *Record) action() string { return r.session.Subresource + "/" + r.id }

func sessionID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// In counts bytes the user sent.
func (r *Record) In(n int) { r.in.Add(int64(n)) }

// Out counts bytes sent to the user.
func (r *Record) Out(n int) { r.out.Add(int64(n)) }

// End records the session's end, its exit code and its error.
func (r *Record) End(exitCode int, err error) {
	s := r.session
	kv := []any{"session", r.id, "user", s.User, "namespace", s.Namespace, "sandbox", s.Sandbox, "subresource", s.Subresource, "command", s.Command,
		"duration", time.Since(r.started).Round(time.Millisecond).String(), "bytesIn", r.in.Load(), "bytesOut", r.out.Load(), "exitCode", exitCode}
	if err != nil {
		kv = append(kv, "error", err.Error())
	}
	r.a.Log.Info("session ended", kv...)
	if r.a.Recorder != nil && s.evented() {
		r.a.Recorder.Eventf(r.sb, nil, corev1.EventTypeNormal, openshellv1alpha1.SandboxReasonSessionEnded, r.action(), "%s",
			capNote(fmt.Sprintf("%s ended %s%s after %s: exit code %d, %d bytes in, %d bytes out (session %s)", s.User, s.Subresource,
				commandSuffix(s.Command), time.Since(r.started).Round(time.Second), exitCode, r.in.Load(), r.out.Load(), r.id)))
	}
}

// commandSuffix names the program an exec ran, for Events: anyone who may
// view the namespace reads Events, and a command line can carry a secret
// (a password flag, a header), so the arguments stay in the relay's own
// log, which tenants cannot read.
func commandSuffix(cmd []string) string {
	if len(cmd) == 0 {
		return ""
	}
	prog := cmd[0]
	if len(prog) > maxProgramInEvent {
		prog = prog[:maxProgramInEvent] + "…"
	}
	return " of " + prog
}

// Event notes are capped by the API (1 KiB); a user name is the only other
// input in them.
const (
	maxProgramInEvent = 64
	maxNote           = 1000
)

func capNote(s string) string {
	if len(s) > maxNote {
		return s[:maxNote] + "…"
	}
	return s
}
