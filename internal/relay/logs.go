package relay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/authentication/user"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/gatewayapi"
	openshellv1 "github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/openshellv1"
)

// Log reading: the gateway keeps a bounded buffer per sandbox and answers
// GetSandboxLogs without streaming, so following polls it.
const (
	defaultTailLines = 100
	maxTailLines     = 10000
	followPoll       = time.Second
)

// logs serves openshellsandboxes/log with kubectl logs' parameters
// (tailLines, follow): one line per gateway log line, "time level
// [source] message", newlines in a message escaped so that a sandbox
// cannot forge lines.
func (s *Server) logs(w http.ResponseWriter, r *http.Request, sb *openshellv1alpha1.OpenShellSandbox, u user.Info, session Session) {
	q := r.URL.Query()
	lines := defaultTailLines
	if v := q.Get("tailLines"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxTailLines {
			writeStatus(w, apierrors.NewBadRequest(fmt.Sprintf("tailLines must be a whole number from 1 to %d", maxTailLines)))
			return
		}
		lines = n
	}
	follow := q.Get("follow") == "true"
	st := s.startStream(w, r, sb, u, "get", SubresourceLog, session)
	if st == nil {
		return
	}
	defer st.close()
	target, ctx, end, rec := st.target, st.ctx, st.end, st.rec
	if err := target.Verified(ctx); err != nil {
		rec.End(0, err)
		writeStatus(w, apierrors.NewServiceUnavailable(fmt.Sprintf("the sandbox's gateway cannot be used: %v", err)))
		return
	}
	callCtx := target.callContext(ctx)
	req := &openshellv1.GetSandboxLogsRequest{Sandbox: target.Sandbox, Lines: uint32(lines), WorkspaceScope: gatewayapi.Workspace(target.Workspace)}
	resp, err := target.Client.GetSandboxLogs(callCtx, req)
	if err != nil {
		rec.End(0, err)
		writeStatus(w, apierrors.NewServiceUnavailable(fmt.Sprintf("read the sandbox's logs: %v", err)))
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	defer unblockWritesAtEnd(ctx, w)()
	p := &logPrinter{w: w, rec: rec}
	p.print(resp.GetLogs())
	for follow && p.err == nil {
		select {
		case <-ctx.Done():
		case <-r.Context().Done():
			end(errClientGone)
		case <-time.After(followPoll):
		}
		if ctx.Err() != nil {
			break
		}
		req.Lines, req.SinceTime = maxTailLines, timestamppb.New(p.last)
		resp, err := target.Client.GetSandboxLogs(callCtx, req)
		if err != nil {
			p.err = err
			break
		}
		p.print(resp.GetLogs())
	}
	if p.err == nil {
		p.err = context.Cause(ctx)
	}
	if errors.Is(p.err, errClientGone) {
		p.err = nil // the usual end of a follow (Ctrl-C)
	}
	rec.End(0, p.err)
}

// unblockWritesAtEnd makes a write to w that is blocked when ctx ends
// fail at once. A client that stops reading blocks the response's writes
// (the kube-apiserver sets no timeout on a long-running log, and the
// relay's server no write timeout), and a blocked write looks at no
// context: without this, a session revoked, drained or past its limit
// would hold its slot, and the replica's, for as long as the client
// kept the connection. The returned func stops watching ctx.
func unblockWritesAtEnd(ctx context.Context, w http.ResponseWriter) (stop func() bool) {
	rc := http.NewResponseController(w)
	return context.AfterFunc(ctx, func() { _ = rc.SetWriteDeadline(time.Now()) })
}

// logPrinter writes log lines once each. Lines are asked for since the
// last one's time, which repeats that instant's lines: those already
// printed at it are skipped.
type logPrinter struct {
	w      http.ResponseWriter
	rec    *Record
	last   time.Time
	atLast map[string]bool // lines printed with time == last
	err    error
}

func (p *logPrinter) print(ls []*openshellv1.SandboxLogLine) {
	for _, l := range ls {
		t := l.GetEventTime().AsTime()
		line := formatLogLine(l)
		switch {
		case t.Before(p.last):
			continue
		case t.Equal(p.last):
			if p.atLast[line] {
				continue
			}
		default:
			p.last, p.atLast = t, map[string]bool{}
		}
		p.atLast[line] = true
		n, err := io.WriteString(p.w, line)
		if err != nil {
			p.err = fmt.Errorf("%w: %v", errClientGone, err)
			return
		}
		p.rec.Out(n)
	}
	if f, ok := p.w.(http.Flusher); ok {
		f.Flush()
	}
}

func formatLogLine(l *openshellv1.SandboxLogLine) string {
	src := ""
	if l.GetSource() != "" {
		src = "[" + l.GetSource() + "] "
	}
	msg := strings.NewReplacer("\r", `\r`, "\n", `\n`).Replace(l.GetMessage())
	return fmt.Sprintf("%s %s %s%s\n", l.GetEventTime().AsTime().UTC().Format(time.RFC3339Nano), l.GetLevel(), src, msg)
}
