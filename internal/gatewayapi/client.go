// Package gatewayapi is the operator's client of the OpenShell gateway API:
// one pooled gRPC connection per gateway, TLS verified against the gateway
// CA with SNI, per-call deadlines, retries with backoff only for retryable
// codes, a circuit breaker per gateway, an x-request-id on every call, and
// a bearer token that is never logged.
package gatewayapi

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"sigs.k8s.io/controller-runtime/pkg/log"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	v01 "github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/openshellv1"
	"github.com/openshell/openshell-operator/internal/gatewayline"
)

// Defaults for calls.
const (
	DefaultCallTimeout = 10 * time.Second
	DefaultAttempts    = 3
	RequestIDHeader    = "x-request-id"
)

// TokenSource returns a bearer token for a gateway (empty: no token).
type TokenSource interface {
	Token(ctx context.Context) (string, error)
}

// Target describes how to reach one gateway.
type Target struct {
	// Endpoint is https://host:port.
	Endpoint string
	// ServerName overrides SNI and verification; defaults to the host.
	ServerName string
	// CAPEM is the CA bundle that signs the gateway's server certificate.
	CAPEM []byte
	// Tokens authenticates calls; nil sends none (Health needs none).
	Tokens TokenSource
	// Line is the release line the gateway speaks (empty: gatewayline.Legacy).
	// It does not change the connection, only how calls are encoded.
	Line gatewayline.Line
}

// key identifies a connection; a changed CA or endpoint gives a new one.
func (t Target) key() string {
	sum := sha256.Sum256(append([]byte(t.Endpoint+"\x00"+t.ServerName+"\x00"), t.CAPEM...))
	return hex.EncodeToString(sum[:])
}

// Pool keeps one connection per gateway.
type Pool struct {
	// CallTimeout bounds each attempt; Attempts bounds retries.
	CallTimeout time.Duration
	Attempts    int
	// MaxInFlight bounds the unary calls outstanding to one gateway (0: no
	// bound); the operator sets half its sandbox workers, so that one slow
	// gateway cannot hold them all.
	MaxInFlight int
	// Dial, when set, opens the connections instead of the network, by
	// the endpoint's host:port (no name resolution): the local test
	// cluster has no Service network, so it routes a Managed gateway's
	// Service address to the process that plays the gateway's pod, as its
	// pod network does for the API server.
	Dial func(ctx context.Context, addr string) (net.Conn, error)

	mu       sync.Mutex
	conns    map[string]*pooled  // by gateway name
	breakers map[string]*breaker // by gateway name
}

type pooled struct {
	key  string
	conn *grpc.ClientConn
}

// NewPool returns an empty pool.
func NewPool() *Pool { return &Pool{conns: map[string]*pooled{}, breakers: map[string]*breaker{}} }

// Client is a gateway API client bound to one connection. Callers speak
// the 0.1 messages whatever the gateway's line: a 0.0.x gateway is reached
// through their translation (NewLegacyClient).
type Client struct {
	v01.OpenShellClient
	// Line is the release line the calls are encoded for.
	Line gatewayline.Line
}

// newClient binds a connection to the encoding of the gateway's line.
func newClient(conn grpc.ClientConnInterface, line gatewayline.Line) *Client {
	if line == gatewayline.V01 {
		return &Client{OpenShellClient: v01.NewOpenShellClient(conn), Line: line}
	}
	return &Client{OpenShellClient: NewLegacyClient(conn), Line: gatewayline.Legacy}
}

// Get returns the client for gateway name (namespace/name), dialing or
// re-dialing when the target changed.
func (p *Pool) Get(name string, t Target) (*Client, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := t.key()
	if c, ok := p.conns[name]; ok {
		if c.key == k {
			return newClient(c.conn, t.Line), nil
		}
		_ = c.conn.Close()
		delete(p.conns, name)
	}
	conn, err := p.dial(name, t)
	if err != nil {
		return nil, err
	}
	p.conns[name] = &pooled{key: k, conn: conn}
	return newClient(conn, t.Line), nil
}

// Forget closes the connection of a deleted gateway.
func (p *Pool) Forget(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.breakers, name)
	if c, ok := p.conns[name]; ok {
		_ = c.conn.Close()
		delete(p.conns, name)
	}
}

// Close closes every connection.
func (p *Pool) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for name, c := range p.conns {
		_ = c.conn.Close()
		delete(p.conns, name)
	}
}

// dial connects to a gateway; the caller holds p.mu. The gateway's circuit
// breaker outlives re-dials (a new CA does not make a dead gateway live).
func (p *Pool) dial(name string, t Target) (*grpc.ClientConn, error) {
	b, ok := p.breakers[name]
	if !ok {
		b = newBreaker(p.MaxInFlight)
		p.breakers[name] = b
	}
	u, err := url.Parse(t.Endpoint)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("gateway endpoint %q must be an https:// URL", t.Endpoint)
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "443")
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(t.CAPEM) {
		return nil, errors.New("gateway CA bundle holds no PEM certificate")
	}
	serverName := t.ServerName
	if serverName == "" {
		serverName = u.Hostname()
	}
	tlsCfg := &tls.Config{RootCAs: pool, ServerName: serverName, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2"}}
	timeout, attempts := p.CallTimeout, p.Attempts
	if timeout == 0 {
		timeout = DefaultCallTimeout
	}
	if attempts == 0 {
		attempts = DefaultAttempts
	}
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)),
		// The gateway pings every 20 s; stay well above its minimum.
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 60 * time.Second, Timeout: 20 * time.Second}),
		// Retries wrap the deadline so that each attempt gets its own.
		// The breaker judges each attempt (inside the retries), outside the
		// per-attempt deadline: an attempt that times out counts against the
		// gateway; the caller's own deadline or cancellation does not.
		grpc.WithChainUnaryInterceptor(requestID, observe(host), retry(attempts), b.interceptor(name), deadline(timeout)),
		grpc.WithChainStreamInterceptor(streamRequestID),
	}
	if t.Tokens != nil {
		opts = append(opts, grpc.WithPerRPCCredentials(bearer{t.Tokens}))
	}
	target := host
	if p.Dial != nil {
		target = "passthrough:///" + host
		opts = append(opts, grpc.WithContextDialer(p.Dial))
	}
	conn, err := grpc.NewClient(target, opts...)
	if err != nil {
		return nil, fmt.Errorf("dial gateway %s: %w", t.Endpoint, err)
	}
	return conn, nil
}

// bearer adds the token; it requires TLS, so it never leaves in clear text.
type bearer struct{ src TokenSource }

type bearerKey struct{}

// WithBearer makes the calls made with ctx carry token instead of the
// connection's own (the relay acts as the consumer it authorized, so that
// the gateway authorizes, and audits, that user).
func WithBearer(ctx context.Context, token string) context.Context {
	return context.WithValue(ctx, bearerKey{}, token)
}

func (b bearer) GetRequestMetadata(ctx context.Context, _ ...string) (map[string]string, error) {
	if tok, ok := ctx.Value(bearerKey{}).(string); ok && tok != "" {
		return map[string]string{"authorization": "Bearer " + tok}, nil
	}
	tok, err := b.src.Token(ctx)
	if err != nil {
		return nil, fmt.Errorf("get gateway token: %w", err)
	}
	if tok == "" {
		return nil, nil
	}
	return map[string]string{"authorization": "Bearer " + tok}, nil
}

func (bearer) RequireTransportSecurity() bool { return true }

// NewRequestID returns a random UUIDv4 string.
func NewRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

func withRequestID(ctx context.Context) context.Context {
	if md, ok := metadata.FromOutgoingContext(ctx); ok && len(md.Get(RequestIDHeader)) > 0 {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, RequestIDHeader, NewRequestID())
}

func requestID(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	return invoker(withRequestID(ctx), method, req, reply, cc, opts...)
}

// requestsTotal counts gateway calls (after retries) by gateway address,
// method and gRPC code: a failing gateway shows here even while the
// reconcilers report it only in conditions.
var requestsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "openshell_operator_gateway_requests_total",
	Help: "Calls to OpenShell gateways by gateway address, method and gRPC status code.",
}, []string{"gateway", "method", "code"})

// requestDuration is the latency of gateway calls (after retries) by
// gateway address and method.
var requestDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
	Name:    "openshell_operator_gateway_request_duration_seconds",
	Help:    "Latency of calls to OpenShell gateways by gateway address and method, retries included.",
	Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
}, []string{"gateway", "method"})

func init() { ctrlmetrics.Registry.MustRegister(requestsTotal, requestDuration) }

// observe counts every call and logs a failed one with its x-request-id,
// which the gateway logs too: the two sides of one failure can be matched.
// The ID never reaches errors (conditions would change on every attempt).
func observe(gateway string) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		start := time.Now()
		err := invoker(ctx, method, req, reply, cc, opts...)
		requestDuration.WithLabelValues(gateway, method).Observe(time.Since(start).Seconds())
		code := status.Code(err)
		requestsTotal.WithLabelValues(gateway, method, code.String()).Inc()
		if err != nil && thirdParty(ctx) {
			// Its text may quote what the gateway sent the third party.
			log.FromContext(ctx).Info("Gateway call failed", "gateway", gateway, "method", method, "code", code.String())
		} else if err != nil {
			var id string
			if md, ok := metadata.FromOutgoingContext(ctx); ok && len(md.Get(RequestIDHeader)) > 0 {
				id = md.Get(RequestIDHeader)[0]
			}
			log.FromContext(ctx).Info("Gateway call failed", "gateway", gateway, "method", method, "code", code.String(),
				"message", status.Convert(err).Message(), "requestID", id)
		}
		return err
	}
}

func streamRequestID(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return streamer(withRequestID(ctx), desc, cc, method, opts...)
}

func deadline(d time.Duration) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if _, ok := ctx.Deadline(); !ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, d)
			defer cancel()
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}

// Retryable reports whether a call failed in a way a retry can fix: the
// gateway was unreachable or shed load. Everything else is a verdict.
func Retryable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.ResourceExhausted:
		return true
	}
	return false
}

func retry(attempts int) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		backoff := 100 * time.Millisecond
		var err error
		attempts := attempts
		if thirdParty(ctx) {
			attempts = 1 // a retry would call the third party again
		}
		for i := 0; i < attempts; i++ {
			if err = invoker(ctx, method, req, reply, cc, opts...); err == nil || !Retryable(err) {
				return err
			}
			if i == attempts-1 {
				break
			}
			select {
			case <-ctx.Done():
				return err
			case <-time.After(backoff):
			}
			backoff *= 2
		}
		return err
	}
}
