package testgateway

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"github.com/openshell/openshell-operator/internal/gatewayapi"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// OIDC configures token validation as the gateway does it:
// discovery then JWKS over TLS, RS256 only, kid required (an unknown kid
// triggers one refresh), exact issuer, audience contained, exp with 60 s
// leeway, roles at RolesClaim, the key set cached for JWKSTTL (the
// gateway's jwks_ttl_secs, default one hour).
type OIDC struct {
	Issuer     string
	Audience   string
	CAPEM      []byte
	RolesClaim string
	AdminRole  string
	UserRole   string
	JWKSTTL    time.Duration
}

// unauthenticated methods take no token (Health). Every other method
// needs a valid token carrying the user or the admin role, and the
// platformAdmin methods the admin role.
var unauthenticated = map[string]bool{"/openshell.v1.OpenShell/Health": true}

// platformAdmin methods need the admin role (global_role platform_admin).
var platformAdmin = map[string]bool{
	"/openshell.v1.OpenShell/GetGatewayInfo":  true,
	"/openshell.v1.OpenShell/CreateWorkspace": true,
	"/openshell.v1.OpenShell/DeleteWorkspace": true,
}

type verifier struct {
	cfg  OIDC
	http *http.Client

	mu      sync.Mutex
	keys    jose.JSONWebKeySet
	fetched time.Time
}

func newVerifier(cfg OIDC) (*verifier, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(cfg.CAPEM) {
		return nil, fmt.Errorf("OIDC CA bundle holds no certificate")
	}
	if cfg.RolesClaim == "" {
		cfg.RolesClaim = "roles"
	}
	if cfg.AdminRole == "" {
		cfg.AdminRole = "openshell-admin"
	}
	if cfg.UserRole == "" {
		cfg.UserRole = "openshell-user"
	}
	if cfg.JWKSTTL <= 0 {
		cfg.JWKSTTL = time.Hour
	}
	return &verifier{cfg: cfg, http: &http.Client{Timeout: 10 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}}, nil
}

func (v *verifier) refresh(ctx context.Context) error {
	get := func(url string, out any) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := v.http.Do(req)
		if err != nil {
			return err
		}
		defer func() { _ = resp.Body.Close() }()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		return json.NewDecoder(resp.Body).Decode(out)
	}
	var disco struct {
		Issuer  string `json:"issuer"`
		JWKSURI string `json:"jwks_uri"`
	}
	if err := get(strings.TrimSuffix(v.cfg.Issuer, "/")+"/.well-known/openid-configuration", &disco); err != nil {
		return err
	}
	var set jose.JSONWebKeySet
	if err := get(disco.JWKSURI, &set); err != nil {
		return err
	}
	v.mu.Lock()
	v.keys, v.fetched = set, time.Now()
	v.mu.Unlock()
	return nil
}

func (v *verifier) key(ctx context.Context, kid string) (*jose.JSONWebKey, error) {
	v.mu.Lock()
	stale := time.Since(v.fetched) > v.cfg.JWKSTTL
	v.mu.Unlock()
	if stale {
		if err := v.refresh(ctx); err != nil {
			return nil, status.Error(codes.Internal, "OIDC key refresh failed")
		}
	}
	for attempt := 0; attempt < 2; attempt++ {
		v.mu.Lock()
		ks := v.keys.Key(kid)
		v.mu.Unlock()
		if len(ks) > 0 {
			return &ks[0], nil
		}
		if attempt == 0 && !stale {
			if err := v.refresh(ctx); err != nil {
				return nil, status.Error(codes.Internal, "OIDC key refresh failed")
			}
		}
	}
	return nil, status.Error(codes.Unauthenticated, "invalid token: unknown signing key")
}

type principal struct {
	Subject string
	Roles   []string
	admin   bool
}

func (v *verifier) verify(ctx context.Context, raw string) (*principal, error) {
	tok, err := jwt.ParseSigned(raw, []jose.SignatureAlgorithm{jose.RS256})
	if err != nil {
		return nil, status.Error(codes.Unauthenticated, "invalid token: "+err.Error())
	}
	kid := tok.Headers[0].KeyID
	if kid == "" {
		return nil, status.Error(codes.Unauthenticated, "invalid token: missing kid")
	}
	k, err := v.key(ctx, kid)
	if err != nil {
		return nil, err
	}
	var std jwt.Claims
	all := map[string]any{}
	if err := tok.Claims(k.Key, &std, &all); err != nil {
		return nil, status.Error(codes.Unauthenticated, "invalid token: bad signature")
	}
	if err := std.ValidateWithLeeway(jwt.Expected{Issuer: v.cfg.Issuer, AnyAudience: jwt.Audience{v.cfg.Audience}, Time: time.Now()}, 60*time.Second); err != nil {
		return nil, status.Error(codes.Unauthenticated, "invalid token: "+err.Error())
	}
	p := &principal{Subject: std.Subject}
	var cur any = all
	for _, part := range strings.Split(v.cfg.RolesClaim, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			cur = nil
			break
		}
		cur = m[part]
	}
	if list, ok := cur.([]any); ok {
		for _, r := range list {
			if s, ok := r.(string); ok {
				p.Roles = append(p.Roles, s)
			}
		}
	}
	return p, nil
}

// authorize authenticates the call and checks the method's role; it
// returns the caller (nil for the unauthenticated methods).
func (v *verifier) authorize(ctx context.Context, method string) (*principal, error) {
	if unauthenticated[method] {
		return nil, nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get("authorization")
	if len(vals) == 0 || !strings.HasPrefix(vals[0], "Bearer ") {
		return nil, status.Error(codes.Unauthenticated, "missing authorization header")
	}
	p, err := v.verify(ctx, strings.TrimPrefix(vals[0], "Bearer "))
	if err != nil {
		return nil, err
	}
	p.admin = slices.Contains(p.Roles, v.cfg.AdminRole)
	if platformAdmin[method] && !p.admin {
		return nil, status.Errorf(codes.PermissionDenied, "role '%s' required", v.cfg.AdminRole)
	}
	if !p.admin && !slices.Contains(p.Roles, v.cfg.UserRole) {
		return nil, status.Errorf(codes.PermissionDenied, "role '%s' required", v.cfg.UserRole)
	}
	return p, nil
}

type principalKey struct{}

// callerIsAdmin says whether the call's token holds the admin role.
func callerIsAdmin(ctx context.Context) bool {
	p, _ := ctx.Value(principalKey{}).(*principal)
	return p != nil && p.admin
}

// wireMethod is the path the call came in on: the generated handlers of
// the legacy messages name their renamed package in info.FullMethod
// (internal/gatewayapi.LegacyMethod).
func wireMethod(ctx context.Context, fullMethod string) string {
	if m, ok := grpc.Method(ctx); ok {
		return m
	}
	return gatewayapi.LegacyMethod(fullMethod)
}

func (g *Gateway) unaryAuth(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	method := wireMethod(ctx, info.FullMethod)
	ctx, err := g.before(ctx, method)
	if err != nil {
		return nil, err
	}
	if err := g.checkScope(ctx, req); err != nil {
		return nil, err
	}
	resp, err := handler(ctx, req)
	g.mu.Lock()
	h, held := g.holdNext[method]
	if held {
		delete(g.holdNext, method)
	}
	lose := g.loseNext[method]
	delete(g.loseNext, method)
	g.mu.Unlock()
	if lose && err == nil {
		// Done, but the caller never hears of it (a timeout on the way back).
		return nil, status.Error(codes.Unavailable, "response lost (injected)")
	}
	if held {
		// Done, but the caller does not know yet (a response in flight).
		close(h.reached)
		<-h.release
	}
	return resp, err
}

func (g *Gateway) streamAuth(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ctx, err := g.before(ss.Context(), wireMethod(ss.Context(), info.FullMethod))
	if err != nil {
		return err
	}
	return handler(srv, wrappedStream{ServerStream: ss, ctx: ctx})
}

// before counts the call, applies injected faults, then authenticates; the
// context it returns carries the caller.
func (g *Gateway) before(ctx context.Context, method string) (context.Context, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	g.mu.Lock()
	g.calls[method]++
	if ids := md.Get("x-request-id"); len(ids) > 0 {
		g.requestIDs = append(g.requestIDs, ids[0])
	}
	down, delay := g.unavailable, g.delay
	fail, ok := g.failNext[method]
	if ok {
		delete(g.failNext, method)
	}
	g.mu.Unlock()
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return ctx, status.FromContextError(ctx.Err()).Err()
		}
	}
	if down {
		return ctx, status.Error(codes.Unavailable, "gateway unavailable (injected)")
	}
	if ok {
		return ctx, status.Error(fail, "injected failure")
	}
	p, err := g.verifier.authorize(ctx, method)
	if err != nil {
		g.mu.Lock()
		g.authFailures++
		g.mu.Unlock()
		return ctx, err
	}
	return context.WithValue(ctx, principalKey{}, p), nil
}
