package gatewayapi

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestBreaker(t *testing.T) {
	now := time.Unix(0, 0)
	b := newBreaker(0)
	b.now = func() time.Time { return now }
	down := status.Error(codes.Unavailable, "down")
	verdict := status.Error(codes.InvalidArgument, "no")

	for i := 0; i < BreakerThreshold-1; i++ {
		b.record(down, false)
		if ok, _, _ := b.allow(); !ok {
			t.Fatalf("open after %d failures, want %d", i+1, BreakerThreshold)
		}
	}
	b.record(verdict, false) // a verdict proves the gateway answers
	for i := 0; i < BreakerThreshold; i++ {
		if ok, _, _ := b.allow(); !ok {
			t.Fatal("a verdict did not reset the count")
		}
		b.record(down, false)
	}
	// Attempts already in flight that fail later do not extend it.
	b.record(down, false)
	b.record(down, false)
	ok, _, wait := b.allow()
	if ok || wait < BreakerMinOpen || wait > BreakerMinOpen*6/5 {
		t.Fatalf("after %d failures: allowed=%v wait=%s, want refused for %s..+20%%", BreakerThreshold, ok, wait, BreakerMinOpen)
	}
	// Half-open: one probe at a time after the cool-down.
	now = now.Add(2 * BreakerMinOpen)
	if ok, probe, _ := b.allow(); !ok || !probe {
		t.Fatal("no probe after the cool-down")
	}
	if ok, _, _ := b.allow(); ok {
		t.Fatal("a second call went out while the probe was in flight")
	}
	// A failed probe opens it for longer, doubling up to the cap.
	b.record(down, true)
	_, _, wait = b.allow()
	if wait < 2*BreakerMinOpen {
		t.Fatalf("after a failed probe: wait %s, want at least %s", wait, 2*BreakerMinOpen)
	}
	for i := 0; i < 10; i++ {
		now = now.Add(BreakerMaxOpen * 2)
		_, probe, _ := b.allow()
		b.record(down, probe)
	}
	if _, _, wait = b.allow(); wait < BreakerMaxOpen || wait > BreakerMaxOpen*6/5 {
		t.Fatalf("wait %s exceeds the cap %s (+20%% jitter)", wait, BreakerMaxOpen)
	}
	// An abandoned probe (the caller gave up) does not wedge it.
	now = now.Add(BreakerMaxOpen * 2)
	if ok, _, _ := b.allow(); !ok {
		t.Fatal("no probe")
	}
	b.abandon()
	ok, probe, _ := b.allow()
	if !ok {
		t.Fatal("an abandoned probe blocked the next one")
	}
	// A successful probe closes it.
	b.record(nil, probe)
	if ok, _, _ := b.allow(); !ok {
		t.Fatal("still open after a success")
	}
}

func TestBulkhead(t *testing.T) {
	b := newBreaker(2)
	for i := range 2 {
		if !b.enter() {
			t.Fatalf("call %d of 2 did not go out", i+1)
		}
	}
	if b.enter() {
		t.Fatal("a third call went out with two in flight")
	}
	b.leave()
	if !b.enter() {
		t.Fatal("a slot was not returned")
	}
}

// TestDespiteBreaker: an open breaker answers OpenError without a call,
// except for a context that needs a call made now; that call's outcome
// counts like any other (a success closes the breaker).
func TestDespiteBreaker(t *testing.T) {
	b := newBreaker(0)
	for range BreakerThreshold {
		b.record(status.Error(codes.Unavailable, "down"), false)
	}
	icpt := b.interceptor("p/gw")
	calls := 0
	invoke := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
		calls++
		return nil
	}
	err := icpt(context.Background(), "/m", nil, nil, nil, invoke)
	if !BreakerOpen(err) || calls != 0 {
		t.Fatalf("open breaker: err %v after %d calls, want OpenError and no call", err, calls)
	}
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("OpenError is %s as a gRPC status, want UNAVAILABLE", status.Code(err))
	}
	if err := icpt(DespiteBreaker(context.Background()), "/m", nil, nil, nil, invoke); err != nil || calls != 1 {
		t.Fatalf("despite the breaker: err %v after %d calls, want the call made", err, calls)
	}
	if ok, _, _ := b.allow(); !ok {
		t.Fatal("the call's success did not close the breaker")
	}
}
