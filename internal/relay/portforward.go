package relay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/cri-streaming/pkg/streaming/portforward"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	openshellv1 "github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/openshellv1"
)

// chunk is the most data one message to the gateway carries (a
// forwarded connection's or an exec's stdin): 32 KiB less room for the
// message's own framing, so that gRPC's buffer pool hands out (and
// clears) 32 KiB buffers for it, not 64 KiB ones. Both ways, since the
// gateway answers in the sizes it is sent.
const chunk = 32<<10 - 64

// maxForwardsPerSession bounds the connections one port-forward session
// forwards at once. Each is a goroutine, a chunk buffer and a ForwardTcp
// stream on the gateway connection the relay shares with every user, and
// k8s.io/cri-streaming accepts any number of stream pairs on a session: one
// session could otherwise fill the replica's memory (ending everyone's
// sessions without the drain notice) or the gateway connection's
// concurrent streams. A browser opens at most a few connections per host;
// a connection past the bound is refused, naming it.
const maxForwardsPerSession = 32

// portForward serves openshellsandboxes/portforward with kubectl
// port-forward's protocol (portforward.k8s.io over SPDY): each connection
// the client opens to a port becomes one ForwardTcp stream to that port
// inside the sandbox, for as long as the session may go on.
func (s *Server) portForward(w http.ResponseWriter, r *http.Request, sb *openshellv1alpha1.OpenShellSandbox, u user.Info, session Session) {
	st := s.startStream(w, r, sb, u, "create", SubresourcePortForward, session)
	if st == nil {
		return
	}
	defer st.close()
	f := newForwarder(st.target, st.rec, st.ctx)
	// k8s.io/cri-streaming's port-forward hands PortForward a background
	// context and never looks at the request's: the session's end
	// (revocation, deletion, drain, its time limit) reaches the forwarded
	// connections only through f.session and by closing the connection.
	portforward.ServePortForward(streamWriter{w, st.ctx}, r.WithContext(st.ctx), f, sb.Name, string(sb.UID), nil, idleTimeout, streamCreationTimeout,
		portforward.SupportedProtocols)
	st.rec.End(0, f.firstErr())
}

// forwarder copies one client connection at a time to a port in the
// sandbox over ForwardTcp.
type forwarder struct {
	target *Target
	// check is made before each connection: the sandbox at the gateway
	// is still the object's.
	check   func(context.Context) error
	rec     *Record
	session context.Context
	// slots holds a token per connection being forwarded.
	slots chan struct{}
	mu    sync.Mutex
	err   error
}

func newForwarder(target *Target, rec *Record, session context.Context) *forwarder {
	return &forwarder{target: target, check: target.CheckOwnerAgain, rec: rec, session: session, slots: make(chan struct{}, maxForwardsPerSession)}
}

func (f *forwarder) firstErr() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// PortForward implements portforward.PortForwarder.
func (f *forwarder) PortForward(_ context.Context, _, _ string, port int32, conn io.ReadWriteCloser) error {
	defer conn.Close()
	if port < 1 || port > 65535 {
		return fmt.Errorf("port %d is not a TCP port", port)
	}
	select {
	case f.slots <- struct{}{}:
		defer func() { <-f.slots }()
	default:
		return fmt.Errorf("this port-forward session already forwards %d connections, the most one session may at once: close some, or start another session", maxForwardsPerSession)
	}
	// Each connection is a new use of the sandbox, maybe long after the
	// session's first check: it may have been replaced at the gateway
	// since (the session's own recheck reads only the Kubernetes object),
	// so each reads it afresh rather than waiting for that check too.
	if err := f.check(f.session); err != nil {
		return f.fail(err)
	}
	ctx, cancel := context.WithCancel(f.target.callContext(f.session))
	defer cancel()
	// The session's end closes this connection too (a blocked read on it
	// would otherwise keep the goroutine below).
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()
	stream, err := f.target.Client.ForwardTcp(ctx)
	if err != nil {
		return f.fail(fmt.Errorf("open the forwarding stream: %w", err))
	}
	init := &openshellv1.TcpForwardInit{Sandbox: f.target.Sandbox, Workspace: f.target.Workspace,
		Target: &openshellv1.TcpForwardInit_Tcp{Tcp: &openshellv1.TcpRelayTarget{Host: "127.0.0.1", Port: uint32(port)}}}
	if err := stream.Send(&openshellv1.TcpForwardFrame{Payload: &openshellv1.TcpForwardFrame_Init{Init: init}}); err != nil {
		return f.fail(fmt.Errorf("start forwarding to port %d: %w", port, err))
	}
	// Client → sandbox: half-close at the client's EOF.
	go func() {
		buf := make([]byte, chunk)
		for {
			n, err := conn.Read(buf)
			if n > 0 {
				f.rec.In(n)
				if stream.Send(&openshellv1.TcpForwardFrame{Payload: &openshellv1.TcpForwardFrame_Data{Data: append([]byte(nil), buf[:n]...)}}) != nil {
					cancel()
					return
				}
			}
			if err != nil {
				if errors.Is(err, io.EOF) {
					_ = stream.CloseSend()
				} else {
					cancel()
				}
				return
			}
		}
	}()
	// Sandbox → client, until the sandbox side closes.
	for {
		frame, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return f.fail(fmt.Errorf("forwarding to port %d: %w", port, err))
		}
		if data := frame.GetData(); len(data) > 0 {
			if _, err := conn.Write(data); err != nil {
				return nil // the client closed its connection
			}
			f.rec.Out(len(data))
		}
	}
}

func (f *forwarder) fail(err error) error {
	f.mu.Lock()
	if f.err == nil {
		f.err = err
	}
	f.mu.Unlock()
	return err
}
