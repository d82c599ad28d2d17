package relay_test

import (
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// TestDrainEndsSessionsWithANotice: a stopping relay (a rolling update, a
// drained node) ends its open sessions with a notice that tells the client
// to reconnect, waits for them to close, and refuses new ones so that they
// reach another replica.
func TestDrainEndsSessionsWithANotice(t *testing.T) {
	e := startBench(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stdin, feed := io.Pipe() // never closed: cat runs until the session ends
	defer feed.Close()
	done := make(chan error, 1)
	go func() {
		_, err := e.execRelay(ctx, stdin, "cat")
		done <- err
	}()
	waitGatewayExecs(t, e, 1)

	dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
	defer dcancel()
	if err := e.srv.Drain(dctx); err != nil {
		t.Fatalf("drain: %v", err)
	}
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "shutting down: run the command again to reconnect") {
			t.Fatalf("the open exec ended with %v, want the drain's notice", err)
		}
	case <-ctx.Done():
		t.Fatal("the open exec outlived the drain")
	}
	_, err := e.execRelay(ctx, nil, "echo", "hi")
	if err == nil || !strings.Contains(err.Error(), "this relay is shutting down") {
		t.Fatalf("an exec after the drain: %v, want a refusal naming the shutdown", err)
	}
}

// TestDrainEndsPortForwards: a forwarded connection is a session too. The
// streaming library gives port-forwards no context, so without the
// relay's own wiring a drain (or a revocation) would leave them open and
// wait out its whole timeout.
func TestDrainEndsPortForwards(t *testing.T) {
	e := startBench(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := net.Dial("tcp", e.forwardPort(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 5)
	if _, err := io.ReadFull(conn, got); err != nil || string(got) != "hello" {
		t.Fatalf("echo through the forward: %q, %v", got, err)
	}
	dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
	defer dcancel()
	if err := e.srv.Drain(dctx); err != nil {
		t.Fatalf("drain: %v (the port-forward session did not end)", err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := conn.Read(got); err == nil {
		t.Fatalf("the forwarded connection still carries data after the drain (%d bytes)", n)
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("the forwarded connection stayed open after the drain")
	}
}
