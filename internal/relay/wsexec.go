package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	remotecommandconsts "k8s.io/apimachinery/pkg/util/remotecommand"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	utilexec "k8s.io/utils/exec"
)

// The WebSocket streaming protocol current kubectl and client-go prefer
// for exec (v5.channel.k8s.io): each binary message is a channel's byte
// and its data; v5 adds the close signal that half-closes stdin. The
// streaming library the relay serves SPDY with (k8s.io/cri-streaming)
// speaks WebSocket only up to v4, which cannot end stdin, and the
// kube-apiserver's own translator (k8s.io/apiserver) translates to SPDY
// for a backend: neither serves v5 to a client, so the relay does.
//
// It is also the cheap protocol: an idle SPDY session holds a zlib
// compressor per direction (most of the relay's memory at 1,000 idle
// sessions, docs/performance.md); a WebSocket session holds no
// compressor, and writes take their buffer from a pool shared by every
// session.
const (
	wsChannelStdin  byte = remotecommandconsts.StreamStdIn
	wsChannelStdout byte = remotecommandconsts.StreamStdOut
	wsChannelStderr byte = remotecommandconsts.StreamStdErr
	wsChannelError  byte = remotecommandconsts.StreamErr
	wsChannelResize byte = remotecommandconsts.StreamResize
	wsChannelClose  byte = remotecommandconsts.StreamClose
)

// wsWriteBuffers is every WebSocket session's write buffer: an idle
// session holds none.
var wsWriteBuffers sync.Pool

// wsUpgrader answers v5.channel.k8s.io only. The request came through the
// front proxy (authenticated, authorized): browsers' cross-origin checks
// do not apply to it. Reads reuse the buffer of the connection net/http
// already read with.
var wsUpgrader = websocket.Upgrader{
	Subprotocols:     []string{remotecommandconsts.StreamProtocolV5Name},
	HandshakeTimeout: streamCreationTimeout,
	WriteBufferPool:  &wsWriteBuffers,
	CheckOrigin:      func(*http.Request) bool { return true },
}

// wantsV5 reports a WebSocket request that offers v5.channel.k8s.io.
func wantsV5(r *http.Request) bool {
	return websocket.IsWebSocketUpgrade(r) && slices.Contains(websocket.Subprotocols(r), remotecommandconsts.StreamProtocolV5Name)
}

// serveExecV5 runs cmd with ex over a v5.channel.k8s.io WebSocket until
// the command exits or ctx (the session) ends, then reports the exit on
// the error channel as the v4 and v5 protocols do. w must be hijackable.
func serveExecV5(ctx context.Context, w http.ResponseWriter, r *http.Request, ex remotecommand.Executor, cmd []string,
	opts *remotecommand.Options) error {
	conn, err := wsUpgrader.Upgrade(w, r, nil)
	if err != nil {
		return fmt.Errorf("the WebSocket upgrade failed: %w", err) // the upgrader answered the client
	}
	defer conn.Close()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// The session's end closes the connection: a blocked read or write
	// returns at once.
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()
	out := &wsWriter{conn: conn}

	var stdin *io.PipeReader
	var stdinW *io.PipeWriter
	if opts.Stdin {
		stdin, stdinW = io.Pipe()
	}
	var resize chan remotecommand.TerminalSize
	if opts.TTY {
		resize = make(chan remotecommand.TerminalSize, 1)
	}
	go readChannels(conn, stdinW, resize, cancel)

	var stdout, stderr io.WriteCloser
	if opts.Stdout {
		stdout = out.channel(wsChannelStdout)
	}
	if opts.Stderr {
		stderr = out.channel(wsChannelStderr)
	}
	var in io.Reader
	if stdin != nil {
		in = stdin
	}
	runErr := ex.ExecInContainer(ctx, "", "", "", cmd, in, stdout, stderr, opts.TTY, resize, 0)
	if stdin != nil {
		_ = stdin.Close()
	}
	status := execStatus(runErr)
	b, err := json.Marshal(status)
	if err != nil {
		return err
	}
	if err := out.write(wsChannelError, b); err != nil {
		return fmt.Errorf("report the exit: %w", err)
	}
	_ = out.control(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""))
	return nil
}

// execStatus is what the error channel reports: success, the command's
// non-zero exit code, or why it did not run to its end.
func execStatus(err error) metav1.Status {
	var exit utilexec.ExitError
	switch {
	case err == nil:
		return metav1.Status{Status: metav1.StatusSuccess}
	case errors.As(err, &exit) && exit.Exited():
		return metav1.Status{Status: metav1.StatusFailure, Reason: remotecommandconsts.NonZeroExitCodeReason,
			Message: fmt.Sprintf("command terminated with non-zero exit code: %v", err),
			Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{{Type: remotecommandconsts.ExitCodeCauseType,
				Message: strconv.Itoa(exit.ExitStatus())}}}}
	}
	return apierrors.NewInternalError(err).ErrStatus
}

// readChannels reads the client's messages until the connection ends:
// stdin's data and its close signal, terminal sizes; pings are answered
// by the connection's default handler while it reads. A read that fails
// ends stdin and the session.
func readChannels(conn *websocket.Conn, stdin *io.PipeWriter, resize chan remotecommand.TerminalSize, end context.CancelCauseFunc) {
	var err error
	defer func() {
		if stdin != nil {
			_ = stdin.CloseWithError(err)
		}
		end(fmt.Errorf("%w: %v", errClientGone, err))
	}()
	for {
		var kind int
		var msg []byte
		if kind, msg, err = conn.ReadMessage(); err != nil {
			return
		}
		if kind != websocket.BinaryMessage || len(msg) == 0 {
			continue
		}
		switch msg[0] {
		case wsChannelStdin:
			if stdin != nil {
				if _, werr := stdin.Write(msg[1:]); werr != nil {
					stdin = nil // the command no longer reads its input
				}
			}
		case wsChannelClose:
			if len(msg) > 1 && msg[1] == wsChannelStdin && stdin != nil {
				_ = stdin.Close()
				stdin = nil
			}
		case wsChannelResize:
			var size remotecommand.TerminalSize
			if resize == nil || json.Unmarshal(msg[1:], &size) != nil {
				continue
			}
			select { // only the newest size matters
			case <-resize:
			default:
			}
			resize <- size
		}
	}
}

// wsWriter writes channel messages one at a time.
type wsWriter struct {
	mu   sync.Mutex
	conn *websocket.Conn
}

func (w *wsWriter) write(channel byte, p []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	// No deadline: a client that stops reading holds the write until the
	// session ends, which closes the connection.
	mw, err := w.conn.NextWriter(websocket.BinaryMessage)
	if err != nil {
		return err
	}
	if _, err := mw.Write([]byte{channel}); err != nil {
		return err
	}
	if _, err := mw.Write(p); err != nil {
		return err
	}
	return mw.Close()
}

func (w *wsWriter) control(kind int, data []byte) error {
	return w.conn.WriteControl(kind, data, time.Now().Add(time.Second))
}

// channel is an output channel as the executor writes it.
func (w *wsWriter) channel(id byte) io.WriteCloser { return wsChannel{w: w, id: id} }

type wsChannel struct {
	w  *wsWriter
	id byte
}

func (c wsChannel) Write(p []byte) (int, error) {
	if err := c.w.write(c.id, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (c wsChannel) Close() error { return nil }
