package relay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	utilexec "k8s.io/utils/exec"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/gatewayapi"
	openshellv1 "github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/openshellv1"
)

// Stream limits. The idle timeout ends a session nobody types in or reads
// from.
const (
	idleTimeout           = 30 * time.Minute
	streamCreationTimeout = 30 * time.Second
)

// Target is where a sandbox's commands run: its gateway's client and the
// sandbox's name and workspace there.
type Target struct {
	Client    openshellv1.OpenShellClient
	Workspace string
	Sandbox   string
	// Token, when set, is the user's own gateway token: the calls carry it
	// (gatewayapi.WithBearer) instead of the operator's, so that the
	// gateway authorizes and audits the user.
	Token string
	// owner, when set, is the check that the sandbox at the gateway is
	// the object's, still under way when Open returns.
	owner *ownerCheck
}

// Verified waits until the sandbox at the gateway is known to be the
// object's: nothing may reach it before. Gateways.Open starts the check
// and does not wait for it, so that its round trip to the gateway
// overlaps the client's stream set-up.
func (t *Target) Verified(ctx context.Context) error {
	if t.owner == nil {
		return nil
	}
	select {
	case <-t.owner.done:
		return t.owner.err
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// CheckOwnerAgain reads the sandbox at the gateway again and checks that
// it is still the object's: whoever holds a gateway token for the
// workspace could replace it while a session is open.
func (t *Target) CheckOwnerAgain(ctx context.Context) error {
	if t.owner == nil || t.owner.again == nil {
		return nil
	}
	return t.owner.again(ctx)
}

// Gateways opens the gateway of a Ready sandbox for a user the relay has
// authorized to verb the subresource.
type Gateways interface {
	Open(ctx context.Context, sb *openshellv1alpha1.OpenShellSandbox, p Place, u user.Info, verb, sub string) (*Target, error)
}

// callContext is ctx carrying the target's user token, if any.
func (t *Target) callContext(ctx context.Context) context.Context {
	if t.Token == "" {
		return ctx
	}
	return gatewayapi.WithBearer(ctx, t.Token)
}

// exec serves openshellsandboxes/exec with kubectl exec's parameters
// (command, stdin, stdout, stderr, tty) and streaming protocols.
func (s *Server) exec(w http.ResponseWriter, r *http.Request, sb *openshellv1alpha1.OpenShellSandbox, u user.Info, session Session) {
	q := r.URL.Query()
	opts := &remotecommand.Options{Stdin: q.Get("stdin") == "true", Stdout: q.Get("stdout") == "true",
		Stderr: q.Get("stderr") == "true", TTY: q.Get("tty") == "true"}
	if opts.TTY {
		opts.Stderr = false // a terminal has one output stream
	}
	cmd := q["command"]
	if len(cmd) == 0 {
		writeStatus(w, apierrors.NewBadRequest("no command: name one, e.g. `kubectl openshell exec SANDBOX -- sh`"))
		return
	}
	if !opts.Stdin && !opts.Stdout && !opts.Stderr {
		writeStatus(w, apierrors.NewBadRequest("at least one of stdin, stdout and stderr is required"))
		return
	}
	if n := commandBytes(cmd); n > maxCommandBytes {
		writeStatus(w, apierrors.NewBadRequest(fmt.Sprintf("the command line is %d bytes, more than the %d one exec may carry: pass data on stdin", n, maxCommandBytes)))
		return
	}
	session.Command = cmd
	st := s.startStream(w, r, sb, u, "create", SubresourceExec, session)
	if st == nil {
		return
	}
	defer st.close()
	ex := &executor{target: st.target, rec: st.rec, exitCode: -1, end: st.end}
	if wantsV5(r) {
		// WebSocket v5 (wsexec.go); the session's end closes it.
		if err := serveExecV5(st.ctx, streamWriter{ResponseWriter: w}, r, ex, cmd, opts); err != nil && ex.err == nil {
			ex.err = err
		}
	} else {
		remotecommand.ServeExec(streamWriter{ResponseWriter: w}, r.WithContext(st.ctx), ex, sb.Name, string(sb.UID), "", cmd, opts, idleTimeout, streamCreationTimeout,
			remotecommand.SupportedStreamingProtocols)
	}
	if !ex.ran {
		ex.err = errors.New("the stream was not established")
	}
	st.rec.End(ex.exitCode, ex.err)
}

// executor runs one command through ExecSandboxInteractive.
type executor struct {
	target *Target
	rec    *Record
	end    context.CancelCauseFunc
	ran    bool
	// finished is set when ExecInContainer returns: the protocol then
	// closes its side of stdin, which is not the client going away.
	finished atomic.Bool
	exitCode int
	err      error
}

// ExecInContainer implements remotecommand.Executor: stdin and terminal
// resizes go to the gateway as they come; output and the exit come back.
// A non-zero exit is a utilexec.ExitError, which the protocol reports as
// the command's exit code.
func (e *executor) ExecInContainer(ctx context.Context, _, _, _ string, cmd []string, in io.Reader, out, errw io.WriteCloser,
	tty bool, resize <-chan remotecommand.TerminalSize, _ time.Duration) error {
	e.ran = true
	defer e.finished.Store(true)
	if err := e.target.Verified(ctx); err != nil {
		e.err = err
		return err
	}
	stream, err := e.target.Client.ExecSandboxInteractive(e.target.callContext(ctx))
	if err != nil {
		e.err = err
		return fmt.Errorf("open the exec stream: %w", err)
	}
	// One sender at a time; after the half-close (stdin's EOF) nothing
	// more may be sent: gRPC would end the whole stream. A resize then is
	// dropped (the command has no input left to size a terminal for).
	var sendMu sync.Mutex
	halfClosed := false
	send := func(m *openshellv1.ExecSandboxInput) error {
		sendMu.Lock()
		defer sendMu.Unlock()
		if halfClosed {
			return nil
		}
		return stream.Send(m)
	}
	closeSend := func() {
		sendMu.Lock()
		defer sendMu.Unlock()
		if !halfClosed {
			halfClosed = true
			_ = stream.CloseSend()
		}
	}
	start := &openshellv1.ExecSandboxRequest{Sandbox: e.target.Sandbox, Command: cmd, Tty: tty,
		WorkspaceScope: gatewayapi.Workspace(e.target.Workspace)}
	if err := send(&openshellv1.ExecSandboxInput{Payload: &openshellv1.ExecSandboxInput_Start{Start: start}}); err != nil {
		e.err = err
		return fmt.Errorf("start the command: %w", err)
	}
	go e.forwardResizes(ctx, resize, send)
	if in != nil {
		go e.forwardStdin(in, send, closeSend)
	} else {
		closeSend()
	}
	for {
		ev, err := stream.Recv()
		if err != nil {
			switch {
			case context.Cause(ctx) != nil:
				err = fmt.Errorf("session ended: %w", context.Cause(ctx))
			case errors.Is(err, io.EOF):
				err = errors.New("the gateway ended the stream without an exit code")
			}
			e.err = err
			return err
		}
		switch p := ev.Payload.(type) {
		case *openshellv1.ExecSandboxEvent_Stdout:
			e.write(out, p.Stdout.GetData())
		case *openshellv1.ExecSandboxEvent_Stderr:
			e.write(errw, p.Stderr.GetData())
		case *openshellv1.ExecSandboxEvent_Exit:
			e.exitCode = int(p.Exit.GetExitCode())
			if e.exitCode != 0 {
				return utilexec.CodeExitError{Err: fmt.Errorf("command terminated with exit code %d", e.exitCode), Code: e.exitCode}
			}
			return nil
		}
	}
}

// write passes output to the client; a client that cannot take it any
// more ends the session (its stream, and the command at the gateway).
func (e *executor) write(w io.Writer, b []byte) {
	if w == nil {
		return
	}
	if _, err := w.Write(b); err != nil {
		e.end(fmt.Errorf("%w: %v", errClientGone, err))
		return
	}
	e.rec.Out(len(b))
}

func (e *executor) forwardStdin(in io.Reader, send func(*openshellv1.ExecSandboxInput) error, closeSend func()) {
	buf := make([]byte, chunk)
	for {
		n, err := in.Read(buf)
		if n > 0 {
			e.rec.In(n)
			if send(&openshellv1.ExecSandboxInput{Payload: &openshellv1.ExecSandboxInput_Stdin{Stdin: append([]byte(nil), buf[:n]...)}}) != nil {
				return
			}
		}
		switch {
		case errors.Is(err, io.EOF):
			// End of input: half-close, as a pipe's EOF.
			closeSend()
			return
		case err != nil:
			// After the command's end the protocol closes stdin before it
			// writes the exit status: ending the session then would close
			// the connection under that write.
			if !e.finished.Load() {
				e.end(fmt.Errorf("%w: %v", errClientGone, err))
			}
			return
		}
	}
}

func (e *executor) forwardResizes(ctx context.Context, resize <-chan remotecommand.TerminalSize, send func(*openshellv1.ExecSandboxInput) error) {
	if resize == nil {
		return
	}
	for {
		select {
		case <-ctx.Done():
			return
		case sz, ok := <-resize:
			if !ok {
				return
			}
			if send(&openshellv1.ExecSandboxInput{Payload: &openshellv1.ExecSandboxInput_Resize{
				Resize: &openshellv1.ExecSandboxWindowResize{Cols: uint32(sz.Width), Rows: uint32(sz.Height)}}}) != nil {
				return
			}
		}
	}
}
