package relay

import (
	"context"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"google.golang.org/grpc"

	openshellv1 "github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/openshellv1"
)

// holdingGateway answers ForwardTcp with streams that carry nothing until
// their call ends, and counts the streams open at once.
type holdingGateway struct {
	openshellv1.OpenShellClient
	open, most atomic.Int32
}

func (g *holdingGateway) ForwardTcp(ctx context.Context, _ ...grpc.CallOption) (grpc.BidiStreamingClient[openshellv1.TcpForwardFrame, openshellv1.TcpForwardFrame], error) {
	n := g.open.Add(1)
	for {
		m := g.most.Load()
		if n <= m || g.most.CompareAndSwap(m, n) {
			break
		}
	}
	return &heldStream{ctx: ctx, halfClosed: make(chan struct{}), done: func() { g.open.Add(-1) }}, nil
}

// heldStream is a sandbox port that closes its side once the client has
// closed its own.
type heldStream struct {
	grpc.ClientStream
	ctx        context.Context
	halfClosed chan struct{}
	once       sync.Once
	done       func()
}

func (s *heldStream) Send(*openshellv1.TcpForwardFrame) error { return s.ctx.Err() }
func (s *heldStream) CloseSend() error                        { close(s.halfClosed); return nil }
func (s *heldStream) Recv() (*openshellv1.TcpForwardFrame, error) {
	defer s.once.Do(s.done)
	select {
	case <-s.ctx.Done():
		return nil, s.ctx.Err()
	case <-s.halfClosed:
		return nil, io.EOF
	}
}

// TestPortForwardConnectionsPerSessionAreBounded: one session's stream
// pairs beyond maxForwardsPerSession are refused, naming the bound, and
// never reach the gateway; a connection that ends frees its slot.
func TestPortForwardConnectionsPerSessionAreBounded(t *testing.T) {
	session, end := context.WithCancel(context.Background())
	defer end()
	gw := &holdingGateway{}
	f := newForwarder(&Target{Client: gw, Workspace: "ws", Sandbox: "sb"}, &Record{}, session)

	var wg sync.WaitGroup
	var clients []net.Conn
	for range maxForwardsPerSession {
		relaySide, client := net.Pipe()
		clients = append(clients, client)
		wg.Add(1)
		go func() { defer wg.Done(); _ = f.PortForward(context.Background(), "", "", 8080, relaySide) }()
	}
	g := NewWithT(t)
	g.Eventually(gw.open.Load).WithTimeout(10*time.Second).Should(BeEquivalentTo(maxForwardsPerSession), "connections at the gateway")
	for range 1000 {
		relaySide, client := net.Pipe()
		err := f.PortForward(context.Background(), "", "", 8080, relaySide)
		_ = client.Close()
		if err == nil || !strings.Contains(err.Error(), "already forwards 32 connections") {
			t.Fatalf("connection past the bound: %v", err)
		}
	}
	if most := gw.most.Load(); most != maxForwardsPerSession {
		t.Fatalf("the gateway saw %d forwarding streams at once, want %d", most, maxForwardsPerSession)
	}
	// One connection ends (its client closes, then the sandbox side): the
	// next is forwarded.
	_ = clients[0].Close()
	g.Eventually(gw.open.Load).WithTimeout(10*time.Second).Should(BeEquivalentTo(maxForwardsPerSession-1), "connections at the gateway")
	relaySide, client := net.Pipe()
	defer client.Close()
	wg.Add(1)
	go func() { defer wg.Done(); _ = f.PortForward(context.Background(), "", "", 8080, relaySide) }()
	g.Eventually(gw.open.Load).WithTimeout(10*time.Second).Should(BeEquivalentTo(maxForwardsPerSession), "a freed slot is used again")
	end() // the session ends: every forwarded connection with it
	wg.Wait()
	g.Expect(gw.open.Load()).To(BeZero())
}
