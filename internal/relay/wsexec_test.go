package relay_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"

	accessv1alpha1 "github.com/openshell/openshell-operator/api/access/v1alpha1"
)

// execWebSocket runs cmd in the sample sandbox with client-go's WebSocket
// executor, which speaks only v5.channel.k8s.io (as kubectl does first).
func execWebSocket(ctx context.Context, cfg *rest.Config, stdin io.Reader, tty bool, sizes remotecommand.TerminalSizeQueue, cmd ...string) (string, string, error) {
	u, _ := url.Parse(cfg.Host + accessv1alpha1.Path("team-a", "agent", accessv1alpha1.SubresourceExec))
	q := url.Values{"command": cmd, "stdout": {"true"}, "stderr": {"true"}, "stdin": {strings.ToLower(strings.TrimSpace(fmtBool(stdin != nil)))}}
	if tty {
		q.Set("tty", "true")
		q.Set("stderr", "false")
	}
	u.RawQuery = q.Encode()
	ex, err := remotecommand.NewWebSocketExecutor(cfg, http.MethodGet, u.String())
	if err != nil {
		return "", "", err
	}
	var out, errOut bytes.Buffer
	opts := remotecommand.StreamOptions{Stdin: stdin, Stdout: &out, Tty: tty, TerminalSizeQueue: sizes}
	if !tty {
		opts.Stderr = &errOut
	}
	err = ex.StreamWithContext(ctx, opts)
	return out.String(), errOut.String(), err
}

func fmtBool(b bool) string {
	if b {
		return "true"
	}
	return "false"
}

type oneSize struct{ sent bool }

func (s *oneSize) Next() *remotecommand.TerminalSize {
	if s.sent {
		select {} // no more resizes: the executor stops asking when the stream ends
	}
	s.sent = true
	return &remotecommand.TerminalSize{Width: 120, Height: 40}
}

// TestExecOverWebSocketV5: kubectl's preferred protocol reaches the
// sandbox, directly and through the aggregator's proxy: output on its
// channels, stdin until the client closes it (v5's close signal), a
// terminal's size, and the exit code on the error channel.
func TestExecOverWebSocketV5(t *testing.T) {
	e := startBench(t)
	for name, cfg := range map[string]*rest.Config{"direct": e.cfg, "behind the aggregator": e.behindAggregator(t)} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			out, errOut, err := execWebSocket(ctx, cfg, nil, false, nil, "echo", "hello", "world")
			if err != nil || out != "hello world\n" || errOut != "" {
				t.Fatalf("echo: %q %q %v", out, errOut, err)
			}
			_, errOut, err = execWebSocket(ctx, cfg, nil, false, nil, "warn", "careful")
			if err != nil || errOut != "careful\n" {
				t.Fatalf("warn: %q %v", errOut, err)
			}
			// cat ends only when stdin ends: v5's close signal reaches it.
			out, _, err = execWebSocket(ctx, cfg, strings.NewReader("line one\nline two\n"), false, nil, "cat")
			if err != nil || out != "line one\nline two\n" {
				t.Fatalf("cat: %q %v", out, err)
			}
			stdin, typing := io.Pipe()
			defer typing.Close()
			out, _, err = execWebSocket(ctx, cfg, stdin, true, &oneSize{}, "size", "wait")
			if err != nil || out != "40 120\n" {
				t.Fatalf("size: %q %v", out, err)
			}
			for range 20 {
				_, _, err = execWebSocket(ctx, cfg, nil, false, nil, "exit", "7")
				var exit utilexec.ExitError
				if !errors.As(err, &exit) || exit.ExitStatus() != 7 {
					t.Fatalf("exit 7 ended with %v", err)
				}
			}
		})
	}
}

// TestExitCodeWithStdinStillOpen: a command that ends while the client's
// stdin is still open (a terminal nobody typed into) reports its exit
// code, over WebSocket v5 and SPDY. The relay closes its side of stdin
// when the command ends; that close is not the client going away, and
// must not end the session (and close the connection) before the exit
// status is written. (Before the fix about one v5 exec in fifty lost its
// status: client-go reported an abnormal closure.)
func TestExitCodeWithStdinStillOpen(t *testing.T) {
	e := startBench(t)
	for name, cfg := range map[string]*rest.Config{"direct": e.cfg, "behind the aggregator": e.behindAggregator(t)} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			for i := range 100 {
				stdin, typing := io.Pipe()
				_, _, err := execWebSocket(ctx, cfg, stdin, i%2 == 0, nil, "exit", "7")
				_ = typing.Close()
				var exit utilexec.ExitError
				if !errors.As(err, &exit) || exit.ExitStatus() != 7 {
					t.Fatalf("exec %d (tty %v) ended with %v, want exit code 7", i, i%2 == 0, err)
				}
			}
		})
	}
	t.Run("SPDY", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		for i := range 50 {
			stdin, typing := io.Pipe()
			_, err := e.execRelay(ctx, stdin, "exit", "7")
			_ = typing.Close()
			var exit utilexec.ExitError
			if !errors.As(err, &exit) || exit.ExitStatus() != 7 {
				t.Fatalf("exec %d ended with %v, want exit code 7", i, err)
			}
		}
	})
}
