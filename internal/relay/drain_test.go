package relay_test

import (
	"context"
	"fmt"
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
	if _, ended, err := e.srv.Drain(dctx, 0); err != nil || ended != 1 {
		t.Fatalf("drain: %d ended, %v", ended, err)
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
	if _, _, err := e.srv.Drain(dctx, 0); err != nil {
		t.Fatalf("drain: %v (the port-forward session did not end)", err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := conn.Read(got); err == nil {
		t.Fatalf("the forwarded connection still carries data after the drain (%d bytes)", n)
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("the forwarded connection stayed open after the drain")
	}
}

// TestDrainLetsOpenSessionsFinish: during its grace a stopping relay (an
// operator upgrade replacing it) refuses new sessions but lets the open
// ones run: a session that ends then keeps its whole output and its exit
// code, and Drain returns as soon as the last one is done, ending none.
func TestDrainLetsOpenSessionsFinish(t *testing.T) {
	e := startBench(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stdin, feed := io.Pipe()
	type result struct {
		out []byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := e.execRelay(ctx, stdin, "cat")
		done <- result{out, err}
	}()
	waitGatewayExecs(t, e, 1)

	type drained struct {
		finished, ended int
		err             error
	}
	drainDone := make(chan drained, 1)
	go func() {
		f, n, err := e.srv.Drain(ctx, 50*time.Second)
		drainDone <- drained{f, n, err}
	}()
	// New sessions are refused from the moment the drain begins.
	if err := eventuallyRefused(ctx, e); err != nil {
		t.Fatal(err)
	}
	// The open one still carries data, and ends of its own.
	if _, err := feed.Write([]byte("still here\n")); err != nil {
		t.Fatalf("the open session took no more input during the grace: %v", err)
	}
	_ = feed.Close()
	select {
	case r := <-done:
		if r.err != nil || string(r.out) != "still here\n" {
			t.Fatalf("the session that finished during the grace: %q, %v", r.out, r.err)
		}
	case <-ctx.Done():
		t.Fatal("the open exec did not finish")
	}
	select {
	case d := <-drainDone:
		if d.err != nil || d.finished != 1 || d.ended != 0 {
			t.Fatalf("drain = %d finished, %d ended, %v; want 1, 0, nil", d.finished, d.ended, d.err)
		}
	case <-ctx.Done():
		t.Fatal("the drain waited out its grace after the last session ended")
	}
}

// TestDrainEndsWhatOutlivesTheGrace: a session still open when the grace
// runs out is told to reconnect.
func TestDrainEndsWhatOutlivesTheGrace(t *testing.T) {
	e := startBench(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stdin, feed := io.Pipe()
	defer feed.Close()
	done := make(chan error, 1)
	go func() {
		_, err := e.execRelay(ctx, stdin, "cat")
		done <- err
	}()
	waitGatewayExecs(t, e, 1)
	finished, ended, err := e.srv.Drain(ctx, 100*time.Millisecond)
	if err != nil || finished != 0 || ended != 1 {
		t.Fatalf("drain = %d finished, %d ended, %v; want 0, 1, nil", finished, ended, err)
	}
	if err := <-done; err == nil || !strings.Contains(err.Error(), "shutting down: run the command again to reconnect") {
		t.Fatalf("the session that outlived the grace ended with %v, want the notice", err)
	}
}

// eventuallyRefused waits until an exec is refused as the drain's.
func eventuallyRefused(ctx context.Context, e *benchEnv) error {
	for {
		_, err := e.execRelay(ctx, nil, "echo", "hi")
		if err != nil && strings.Contains(err.Error(), "this relay is shutting down") {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("no exec was refused while draining (last: %v)", err)
		}
	}
}
