package relay

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

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
// [source] message".
func (s *Server) logs(w http.ResponseWriter, r *http.Request, sb *openshellv1alpha1.OpenShellSandbox, session Session) {
	q := r.URL.Query()
	lines := defaultTailLines
	if v := q.Get("tailLines"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > maxTailLines {
			writeStatus(w, apierrors.NewBadRequest(fmt.Sprintf("tailLines must be a whole number from 0 to %d", maxTailLines)))
			return
		}
		lines = n
	}
	follow := q.Get("follow") == "true"
	target, err := s.Gateways.Open(r.Context(), sb, session.User)
	if err != nil {
		writeStatus(w, apierrors.NewServiceUnavailable(fmt.Sprintf("the sandbox's gateway cannot be reached: %v", err)))
		return
	}
	rec := s.Audit.Start(r.Context(), sb, session)
	req := &openshellv1.GetSandboxLogsRequest{Sandbox: target.Sandbox, Lines: uint32(lines), WorkspaceScope: gatewayapi.Workspace(target.Workspace)}
	resp, err := target.Client.GetSandboxLogs(r.Context(), req)
	if err != nil {
		rec.End(0, err)
		writeStatus(w, apierrors.NewServiceUnavailable(fmt.Sprintf("read the sandbox's logs: %v", err)))
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	var last time.Time
	write := func(ls []*openshellv1.SandboxLogLine) {
		for _, l := range ls {
			t := l.GetEventTime().AsTime()
			if !t.After(last) && !last.IsZero() {
				continue // seen in the previous poll
			}
			last = t
			src := ""
			if l.GetSource() != "" {
				src = "[" + l.GetSource() + "] "
			}
			n, _ := fmt.Fprintf(w, "%s %s %s%s\n", t.UTC().Format(time.RFC3339Nano), l.GetLevel(), src, l.GetMessage())
			rec.Out(n)
		}
		if flusher != nil {
			flusher.Flush()
		}
	}
	write(resp.GetLogs())
	for follow {
		select {
		case <-r.Context().Done():
			rec.End(0, nil)
			return
		case <-time.After(followPoll):
		}
		req.Lines, req.SinceTime = maxTailLines, timestamppb.New(last)
		resp, err := target.Client.GetSandboxLogs(r.Context(), req)
		if err != nil {
			rec.End(0, err)
			return
		}
		write(resp.GetLogs())
	}
	rec.End(0, nil)
}
