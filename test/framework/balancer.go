package framework

import (
	"io"
	"net"
	"sync"
	"time"
)

// Balancer is a TCP load balancer in front of several backends, as a
// Service in front of an operator's replicas: each connection goes to the
// next backend that accepts it (a backend that is down is skipped).
type Balancer struct {
	lis      net.Listener
	backends []string
	mu       sync.Mutex
	next     int
	// cut refuses connections (Cut); live are the client sides open now.
	cut  bool
	live map[net.Conn]struct{}
}

// StartBalancer listens on a free loopback port.
func StartBalancer(backends ...string) (*Balancer, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	b := &Balancer{lis: lis, backends: backends, live: map[net.Conn]struct{}{}}
	go b.serve()
	return b, nil
}

// Add puts one more backend behind the balancer.
func (b *Balancer) Add(addr string) {
	b.mu.Lock()
	b.backends = append(b.backends, addr)
	b.mu.Unlock()
}

// Port is where the balancer listens.
func (b *Balancer) Port() int { return b.lis.Addr().(*net.TCPAddr).Port }

// Cut drops every connection through the balancer and refuses new ones
// until Restore: a network partition between clients and the backends.
func (b *Balancer) Cut() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.cut = true
	for c := range b.live {
		_ = c.Close()
	}
}

// Restore ends a Cut.
func (b *Balancer) Restore() {
	b.mu.Lock()
	b.cut = false
	b.mu.Unlock()
}

// Stop stops accepting.
func (b *Balancer) Stop() { _ = b.lis.Close() }

func (b *Balancer) serve() {
	for {
		in, err := b.lis.Accept()
		if err != nil {
			return
		}
		go b.forward(in)
	}
}

func (b *Balancer) forward(in net.Conn) {
	var out net.Conn
	b.mu.Lock()
	n, cut := len(b.backends), b.cut
	if !cut {
		b.live[in] = struct{}{}
	}
	b.mu.Unlock()
	if cut {
		_ = in.Close()
		return
	}
	defer func() {
		b.mu.Lock()
		delete(b.live, in)
		b.mu.Unlock()
	}()
	for range n {
		b.mu.Lock()
		addr := b.backends[b.next%len(b.backends)]
		b.next++
		b.mu.Unlock()
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			out = c
			break
		}
	}
	if out == nil {
		_ = in.Close()
		return
	}
	splice(in, in, out)
}

// splice copies in → out (reading from inReader, which may buffer what was
// read from in already) and out → in until either side closes, then closes
// both.
func splice(in net.Conn, inReader io.Reader, out net.Conn) {
	defer func() { _ = out.Close(); _ = in.Close() }()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(out, inReader); done <- struct{}{} }()
	go func() { _, _ = io.Copy(in, out); done <- struct{}{} }()
	<-done
}
