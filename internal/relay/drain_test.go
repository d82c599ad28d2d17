package relay_test

import (
	"context"
	"io"
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
