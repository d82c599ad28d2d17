package gatewayapi

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Breaker defaults: a gateway that failed this many attempts in a row is
// not called for a cool-down that starts at BreakerMinOpen and doubles,
// with jitter, up to BreakerMaxOpen while it keeps failing.
const (
	BreakerThreshold = 3
	BreakerMinOpen   = 5 * time.Second
	BreakerMaxOpen   = 30 * time.Second
)

// BusyError is the bulkhead's refusal: the gateway has as many of the
// operator's calls in flight as it may. It is not a failure of the gateway
// (callers retry soon without reporting one: at 10,000 sandboxes, treating
// it as one wrote two status patches per refusal and backed sandboxes off
// for seconds); as a gRPC status it is RESOURCE_EXHAUSTED.
type BusyError struct {
	Gateway  string
	InFlight int
}

func (e *BusyError) Error() string {
	return fmt.Sprintf("gateway %s already has %d calls in flight", e.Gateway, e.InFlight)
}

// GRPCStatus makes status.Code and status.Convert see RESOURCE_EXHAUSTED.
func (e *BusyError) GRPCStatus() *status.Status {
	return status.New(codes.ResourceExhausted, e.Error())
}

// OpenError is a call the breaker did not make: the gateway failed
// Failures calls in a row and is not called for another Wait. As a gRPC
// status it is UNAVAILABLE, but it is the memory of earlier failures, not
// a failure of its own: a decision that needs the gateway to be
// unreachable now (a force-release) waits for a call that was made.
type OpenError struct {
	Gateway  string
	Failures int
	Wait     time.Duration
}

func (e *OpenError) Error() string {
	return fmt.Sprintf("gateway %s failed %d calls in a row: not calling it for another %s", e.Gateway, e.Failures, e.Wait.Round(time.Second))
}

// GRPCStatus makes status.Code and status.Convert see UNAVAILABLE.
func (e *OpenError) GRPCStatus() *status.Status {
	return status.New(codes.Unavailable, e.Error())
}

type thirdPartyKey struct{}

// ThirdParty marks the calls made with ctx as reaching past the gateway
// before it answers (RotateProviderCredential calls a provider's token
// endpoint): each is made once, as a retry would call that party again;
// its failure does not count against the gateway's breaker, as
// UNAVAILABLE may be that party's; and its error text is not logged, as
// it may quote what the gateway sent there.
func ThirdParty(ctx context.Context) context.Context {
	return context.WithValue(ctx, thirdPartyKey{}, true)
}

func thirdParty(ctx context.Context) bool {
	v, _ := ctx.Value(thirdPartyKey{}).(bool)
	return v
}

type despiteBreakerKey struct{}

// DespiteBreaker makes the calls made with ctx go to the gateway even
// while its breaker is open: for the one decision that needs to know that
// the gateway is unreachable now (a force-release past its grace), not to
// remember that it was. Their outcomes count like any call's.
func DespiteBreaker(ctx context.Context) context.Context {
	return context.WithValue(ctx, despiteBreakerKey{}, true)
}

func despiteBreaker(ctx context.Context) bool {
	v, _ := ctx.Value(despiteBreakerKey{}).(bool)
	return v
}

// BreakerOpen says whether err (or an error it wraps) is an OpenError.
func BreakerOpen(err error) bool {
	var o *OpenError
	return errors.As(err, &o)
}

// breaker is one gateway connection's circuit breaker. A dead or
// blackholed gateway otherwise holds a reconcile worker for every attempt
// (up to the call timeout each) and starves the sandboxes of healthy
// gateways, which share the workers. While open, calls fail at once with
// UNAVAILABLE (the reconcilers report the gateway unreachable and back off);
// after the cool-down one call goes through (half-open): success closes the
// breaker, failure opens it for longer.
type breaker struct {
	threshold     int
	minOpen, max  time.Duration
	maxInFlight   int
	now           func() time.Time
	mu            sync.Mutex
	failures      int
	openUntil     time.Time
	open          time.Duration
	probeInFlight bool
	// slots holds a token per call in flight (nil: no limit).
	slots chan struct{}
}

func newBreaker(maxInFlight int) *breaker {
	b := &breaker{threshold: BreakerThreshold, minOpen: BreakerMinOpen, max: BreakerMaxOpen, maxInFlight: maxInFlight, now: time.Now}
	if maxInFlight > 0 {
		b.slots = make(chan struct{}, maxInFlight)
	}
	return b
}

// allow says whether a call may go out (and whether it is the half-open
// probe); a refusal says for how long.
func (b *breaker) allow() (ok, probe bool, wait time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.failures < b.threshold {
		return true, false, 0
	}
	now := b.now()
	if now.Before(b.openUntil) {
		return false, false, b.openUntil.Sub(now)
	}
	if b.probeInFlight {
		return false, false, b.minOpen
	}
	b.probeInFlight = true
	return true, true, 0
}

// record notes an attempt's outcome: only failures that say the gateway is
// unreachable count; a verdict (InvalidArgument, NotFound, ...) proves it
// answers. The breaker opens when the count reaches the threshold, and a
// failed probe reopens it for twice as long; attempts that were already in
// flight when it opened and fail later change nothing.
func (b *breaker) record(err error, probe bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if probe {
		b.probeInFlight = false
	}
	if !unreachable(err) {
		b.failures, b.open = 0, 0
		return
	}
	wasOpen := b.failures >= b.threshold
	b.failures++
	switch {
	case b.failures < b.threshold:
		return
	case !wasOpen:
		b.open = b.minOpen
	case probe:
		b.open = min(2*b.open, b.max)
	default:
		return
	}
	// Up to 20% jitter, so that the sandboxes of one gateway do not retry in
	// lockstep.
	b.openUntil = b.now().Add(b.open + time.Duration(rand.Int64N(int64(b.open)/5+1)))
}

// enter takes an in-flight slot if one is free; leave returns it. It never
// waits: a worker waiting for a slot is a worker that cannot report the
// sandboxes already Ready (at saturation a 250 ms wait cut the operator
// path's sustained rate from 15/s to 12/s), so a refusal goes back to the
// work queue instead (BusyError).
func (b *breaker) enter() bool {
	if b.slots == nil {
		return true
	}
	select {
	case b.slots <- struct{}{}:
		return true
	default:
		return false
	}
}

func (b *breaker) leave() {
	if b.slots != nil {
		<-b.slots
	}
}

// abandon ends a half-open probe without a verdict.
func (b *breaker) abandon() {
	b.mu.Lock()
	b.probeInFlight = false
	b.mu.Unlock()
}

func unreachable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded:
		return true
	}
	return false
}

// interceptor fails calls fast while the breaker is open.
func (b *breaker) interceptor(gateway string) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		ok, probe, wait := b.allow()
		if !ok && !despiteBreaker(ctx) {
			return &OpenError{Gateway: gateway, Failures: b.threshold, Wait: wait}
		}
		if !b.enter() {
			if probe {
				b.abandon()
			}
			// A bulkhead: a slow gateway may hold at most maxInFlight of the
			// reconcilers' shared workers. Not a failure of the gateway.
			return &BusyError{Gateway: gateway, InFlight: b.maxInFlight}
		}
		err := invoker(ctx, method, req, reply, cc, opts...)
		b.leave()
		if err != nil && (ctx.Err() != nil || thirdParty(ctx)) {
			// The caller gave up: that says nothing about the gateway.
			if probe {
				b.abandon()
			}
			return err
		}
		b.record(err, probe)
		return err
	}
}
