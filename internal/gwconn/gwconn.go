// Package gwconn resolves how the operator reaches and authenticates to an
// OpenShellGateway: endpoint, CA and token source, for Managed gateways
// (in-cluster Service, the gateway CA, tokens from the operator's OIDC
// issuer) and External ones (spec.external, the given CA Secret, the
// client-credentials grant or the operator's issuer).
package gwconn

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"
	"golang.org/x/sync/singleflight"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/gatewayapi"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/openshellv1"
	"github.com/openshell/openshell-operator/internal/gatewayline"
	"github.com/openshell/openshell-operator/internal/index"
	"github.com/openshell/openshell-operator/internal/oidc"
	render "github.com/openshell/openshell-operator/internal/render/gateway"
)

// Keys of an External gateway's credentials Secret.
const (
	KeyClientID     = "client-id"
	KeyClientSecret = "client-secret"
	KeyTokenURL     = "token-url"
)

// Resolver builds gateway clients.
type Resolver struct {
	// Client is the cached client (gateways, the operator's own Secrets).
	Client client.Client
	// APIReader reads Secrets the operator does not label (External CA and
	// credentials) without caching them.
	APIReader client.Reader
	Pool      *gatewayapi.Pool
	// Issuer is the operator's OIDC issuer; nil when not configured.
	Issuer *oidc.Issuer
	// TokenHTTPClient calls External identity providers' token endpoints
	// (nil: the default client and system roots).
	TokenHTTPClient *http.Client

	// CARefresh is how long an External gateway's CA, read from a Secret
	// the operator does not cache, is reused before it is read again
	// (default one minute). Without it every sandbox reconcile would GET
	// the Secret from the API server.
	CARefresh time.Duration
	// Now is the clock (tests); nil means time.Now.
	Now func() time.Time

	// SecretMetadata reads Secrets by metadata only (a cache); it tells
	// when an External gateway's credentials Secret changed. Nil: the
	// credentials are read once per gateway.
	SecretMetadata client.Reader

	mu     sync.Mutex
	tokens map[string]*swappable
	cas    map[string]cachedCA
	// probed is the version an External gateway's Health reported, until
	// its status has one.
	probed map[string]string
	// workspaces are the workspaces verified at each gateway.
	workspaces workspaces
	// follow streams the phase of sandboxes that are still moving.
	followOnce sync.Once
	follow     *Followers
	// issuerLoadedAt is when issuerReady last read the issuer's keys
	// (Unix nanoseconds).
	issuerLoadedAt atomic.Int64
}

// Followers returns the WatchSandbox streams of this resolver's gateways.
func (r *Resolver) Followers() *Followers {
	r.followOnce.Do(func() { r.follow = NewFollowers() })
	return r.follow
}

// Start makes the resolver a manager Runnable: it owns every gateway
// session (connections, token sources, CA and workspace caches, streams)
// and releases them all when the manager stops.
func (r *Resolver) Start(ctx context.Context) error {
	<-ctx.Done()
	r.Followers().stopAll()
	r.Pool.Close()
	return nil
}

type cachedCA struct {
	pem  []byte
	read time.Time
}

// Key names a gateway in the pool.
func Key(gw *openshellv1alpha1.OpenShellGateway) string { return gw.Namespace + "/" + gw.Name }

// Connect returns a client for the gateway that encodes calls for its
// release line (Line). A version on no line the operator speaks is a
// *LineError: its messages would be misread, silently.
func (r *Resolver) Connect(ctx context.Context, gw *openshellv1alpha1.OpenShellGateway) (*gatewayapi.Client, error) {
	line, err := r.Line(ctx, gw)
	if err != nil {
		return nil, err
	}
	return r.connect(ctx, gw, line)
}

// Line is the release line a gateway speaks: that of the version in its
// status. A Managed gateway's is the release all its pods run (written by
// the gateway reconciler once a roll completes, so during an upgrade the
// old line is spoken until no old pod is left); an External gateway's is
// what it last reported. Before either is written, the gateway's Health
// RPC (the same wire on every line) is asked once and remembered until
// status has a version. A gateway that reports no version is taken for
// 0.0.x, as before lines existed.
func (r *Resolver) Line(ctx context.Context, gw *openshellv1alpha1.OpenShellGateway) (gatewayline.Line, error) {
	version, err := r.reportedVersion(ctx, gw)
	if err != nil || version == "" {
		return gatewayline.Legacy, err
	}
	line, err := gatewayline.Of(version)
	if err == nil && !gatewayline.Spoken(line) {
		err = errors.New(gatewayline.Check(version))
	}
	if err != nil {
		return "", &LineError{Gateway: Key(gw), Message: err.Error()}
	}
	return line, nil
}

// reportedVersion is status.version, else what Health reports (asked once
// per gateway until status has a version).
func (r *Resolver) reportedVersion(ctx context.Context, gw *openshellv1alpha1.OpenShellGateway) (string, error) {
	key := Key(gw)
	if gw.Status.Version != "" {
		r.mu.Lock()
		delete(r.probed, key)
		r.mu.Unlock()
		return gw.Status.Version, nil
	}
	r.mu.Lock()
	v, ok := r.probed[key]
	r.mu.Unlock()
	if ok {
		return v, nil
	}
	probe, err := r.Probe(ctx, gw)
	if err != nil {
		return "", err
	}
	resp, err := probe.Health(ctx, &openshellv1.HealthRequest{})
	if err != nil {
		return "", fmt.Errorf("ask the gateway its version: %w", err)
	}
	r.mu.Lock()
	if r.probed == nil {
		r.probed = map[string]string{}
	}
	r.probed[key] = resp.GetVersion()
	r.mu.Unlock()
	return resp.GetVersion(), nil
}

// LineError refuses a gateway whose reported version is on a line this
// operator does not speak: its messages would be misread, silently.
type LineError struct{ Gateway, Message string }

func (e *LineError) Error() string { return "gateway " + e.Gateway + ": " + e.Message }

// Probe connects whatever line the gateway is on, for the calls whose wire
// every line shares (Health, GetGatewayInfo): how the gateway reconciler
// learns the version Connect decides by.
func (r *Resolver) Probe(ctx context.Context, gw *openshellv1alpha1.OpenShellGateway) (*gatewayapi.Client, error) {
	return r.connect(ctx, gw, gatewayline.V01)
}

func (r *Resolver) connect(ctx context.Context, gw *openshellv1alpha1.OpenShellGateway, line gatewayline.Line) (*gatewayapi.Client, error) {
	if UsesIssuer(gw) && r.Issuer != nil && !r.issuerReady(ctx) {
		return nil, ErrIssuerNotReady
	}
	t, err := r.target(ctx, gw)
	if err != nil {
		return nil, err
	}
	t.Line = line
	return r.Pool.Get(Key(gw), t)
}

// Forget drops everything held for a gateway (connection, token source,
// CA, verified workspaces, streams) when it is deleted, by its
// "namespace/name" key.
func (r *Resolver) Forget(key string) {
	r.Pool.Forget(key)
	r.Followers().stopGateway(key)
	r.mu.Lock()
	delete(r.tokens, key)
	delete(r.probed, key)
	for id := range r.cas {
		if strings.HasPrefix(id, key+"/") {
			delete(r.cas, id)
		}
	}
	r.mu.Unlock()
	r.workspaces.known.Range(func(k, _ any) bool {
		if strings.HasPrefix(k.(string), key+"/") {
			r.workspaces.known.Delete(k)
		}
		return true
	})
}

func (r *Resolver) target(ctx context.Context, gw *openshellv1alpha1.OpenShellGateway) (gatewayapi.Target, error) {
	if gw.Spec.Mode == openshellv1alpha1.GatewayModeExternal {
		ext := gw.Spec.External
		if ext == nil {
			return gatewayapi.Target{}, fmt.Errorf("spec.external is not set")
		}
		ca, err := r.externalCA(ctx, gw, ext.CASecretRef.Name, ext.CASecretRef.Key)
		if err != nil {
			return gatewayapi.Target{}, err
		}
		ts, err := r.tokenSource(ctx, gw)
		if err != nil {
			return gatewayapi.Target{}, err
		}
		return gatewayapi.Target{Endpoint: ext.Endpoint, ServerName: ext.ServerName, CAPEM: ca, Tokens: ts}, nil
	}
	ca, err := r.secretKey(ctx, r.Client, gw.Namespace, render.NamesFor(gw).ServerTLS, "ca.crt")
	if err != nil {
		return gatewayapi.Target{}, err
	}
	ts, err := r.tokenSource(ctx, gw)
	if err != nil {
		return gatewayapi.Target{}, err
	}
	return gatewayapi.Target{Endpoint: render.InternalEndpoint(gw), CAPEM: ca, Tokens: ts}, nil
}

func (r *Resolver) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// externalCA reads an External gateway's CA Secret at most once per
// CARefresh: a rotated CA takes effect within that time, and a failed read
// is never cached.
func (r *Resolver) externalCA(ctx context.Context, gw *openshellv1alpha1.OpenShellGateway, name, key string) ([]byte, error) {
	now := r.now
	refresh := r.CARefresh
	if refresh <= 0 {
		refresh = time.Minute
	}
	id := Key(gw) + "/" + name + "/" + key
	r.mu.Lock()
	c, ok := r.cas[id]
	r.mu.Unlock()
	if ok && now().Sub(c.read) < refresh {
		return c.pem, nil
	}
	pem, err := r.secretKey(ctx, r.APIReader, gw.Namespace, name, key)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	if r.cas == nil {
		r.cas = map[string]cachedCA{}
	}
	r.cas[id] = cachedCA{pem: pem, read: now()}
	r.mu.Unlock()
	return pem, nil
}

func (r *Resolver) secretKey(ctx context.Context, reader client.Reader, ns, name, key string) ([]byte, error) {
	s := &corev1.Secret{}
	if err := reader.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, s); err != nil {
		return nil, fmt.Errorf("read Secret %s/%s: %w", ns, name, err)
	}
	v, ok := s.Data[key]
	if !ok || len(v) == 0 {
		return nil, fmt.Errorf("secret %s/%s has no key %q", ns, name, key)
	}
	return v, nil
}

// tokenSource is the client-credentials grant when an External gateway
// names a credentials Secret, and the operator's own issuer otherwise. The
// source handed to the connection pool is stable per gateway (it is bound
// into the pooled connection) and swaps its inner source when the
// credentials Secret changes, so a rotated client secret takes effect
// without a restart or a new connection.
func (r *Resolver) tokenSource(ctx context.Context, gw *openshellv1alpha1.OpenShellGateway) (gatewayapi.TokenSource, error) {
	version, err := r.credentialsVersion(ctx, gw)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.tokens == nil {
		r.tokens = map[string]*swappable{}
	}
	cur, ok := r.tokens[Key(gw)]
	if ok && cur.version() == version {
		return cur, nil
	}
	src, err := r.newTokenSource(ctx, gw)
	if err != nil {
		return nil, err
	}
	if !ok {
		cur = &swappable{}
		r.tokens[Key(gw)] = cur
	}
	cur.set(src, version)
	return cur, nil
}

// credentialsVersion names the credentials a gateway's token source was
// built from: the credentials Secret's name and resourceVersion (read from
// the metadata-only Secret cache, so it costs no API call), or "issuer".
func (r *Resolver) credentialsVersion(ctx context.Context, gw *openshellv1alpha1.OpenShellGateway) (string, error) {
	ext := gw.Spec.External
	if UsesIssuer(gw) {
		return "issuer", nil
	}
	if r.SecretMetadata == nil {
		return "secret:" + ext.CredentialsSecretRef.Name, nil
	}
	m := index.SecretMetadata()
	if err := r.SecretMetadata.Get(ctx, client.ObjectKey{Namespace: gw.Namespace, Name: ext.CredentialsSecretRef.Name}, m); err != nil {
		return "", fmt.Errorf("read credentials Secret %s: %w", ext.CredentialsSecretRef.Name, err)
	}
	return "secret:" + m.Name + "@" + m.ResourceVersion, nil
}

// issuerLoadEvery spaces the reads of the issuer's key Secret while it
// has no keys: a burst of calls after a start reads it once.
const issuerLoadEvery = time.Second

// issuerReady says whether the issuer can sign. Without keys it reads them
// (at most once per issuerLoadEvery) rather than waiting for its owner's
// periodic reload: a relay started before the operator made the keys
// serves the first exec a user tries seconds later, instead of refusing
// it until the next reload.
func (r *Resolver) issuerReady(ctx context.Context) bool {
	if r.Issuer.HasKeys() {
		return true
	}
	now := r.now().UnixNano()
	last := r.issuerLoadedAt.Load()
	if now-last < int64(issuerLoadEvery) || !r.issuerLoadedAt.CompareAndSwap(last, now) {
		return false
	}
	_ = r.Issuer.Load(ctx) // no keys yet (ErrNoKeys), or a read that failed: the caller looks again shortly
	return r.Issuer.HasKeys()
}

// ErrIssuerNotReady says a gateway call cannot be authenticated yet: the
// operator's OIDC issuer has not loaded its signing keys (just after a
// start). It is the operator's state, not the gateway's: callers look again
// shortly and report nothing (reporting it flipped every gateway to Degraded
// and back after each operator restart).
var ErrIssuerNotReady = errors.New("the operator's OIDC issuer has not loaded its signing keys yet")

// NotNow says a gateway call was not made for a reason of the operator's
// own: its bulkhead for the gateway is full (gatewayapi.BusyError) or its
// issuer cannot sign yet (ErrIssuerNotReady). Nothing about the gateway is
// known from it: callers look again shortly and write nothing.
func NotNow(err error) bool {
	busy := (*gatewayapi.BusyError)(nil)
	return errors.As(err, &busy) || errors.Is(err, ErrIssuerNotReady)
}

// UsesIssuer says whether calls to a gateway carry the operator's own
// tokens (every gateway that names no client-credentials Secret).
func UsesIssuer(gw *openshellv1alpha1.OpenShellGateway) bool {
	return gw.Spec.External == nil || gw.Spec.External.CredentialsSecretRef == nil
}

func (r *Resolver) newTokenSource(ctx context.Context, gw *openshellv1alpha1.OpenShellGateway) (gatewayapi.TokenSource, error) {
	ext := gw.Spec.External
	if UsesIssuer(gw) {
		if r.Issuer == nil {
			return nil, fmt.Errorf("the operator's OIDC issuer is not configured (--oidc-issuer-url) and the gateway names no credentials Secret")
		}
		return &oidc.TokenSource{Issuer: r.Issuer, Audience: oidc.Audience(gw.Namespace, gw.Name)}, nil
	}
	s := &corev1.Secret{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: gw.Namespace, Name: ext.CredentialsSecretRef.Name}, s); err != nil {
		return nil, fmt.Errorf("read credentials Secret %s: %w", ext.CredentialsSecretRef.Name, err)
	}
	for _, k := range []string{KeyClientID, KeyClientSecret, KeyTokenURL} {
		if len(s.Data[k]) == 0 {
			return nil, fmt.Errorf("credentials Secret %s has no key %q", ext.CredentialsSecretRef.Name, k)
		}
	}
	tokenURL, err := url.Parse(string(s.Data[KeyTokenURL]))
	if err != nil || tokenURL.Scheme != "https" || tokenURL.Host == "" || tokenURL.User != nil {
		// The client secret is POSTed to it: never in clear text, never with
		// credentials of its own in the URL.
		return nil, fmt.Errorf("credentials Secret %s: %s must be an https:// URL without user information", ext.CredentialsSecretRef.Name, KeyTokenURL)
	}
	cc := clientcredentials.Config{ClientID: string(s.Data[KeyClientID]), ClientSecret: string(s.Data[KeyClientSecret]),
		TokenURL: tokenURL.String()}
	return &clientCredentials{cfg: cc, http: tokenClient(r.TokenHTTPClient)}, nil
}

// tokenTimeout bounds one client-credentials grant: a token endpoint that
// accepts the connection and never answers must not hold the gateway's
// calls (and the workers waiting on them) for longer.
const tokenTimeout = 10 * time.Second

// tokenClient is the HTTP client of client-credentials grants: base (nil:
// one honouring the proxy environment and the system roots) with a
// response timeout, refusing redirects away from https (the client secret
// is POSTed again on a redirect of a 307/308).
func tokenClient(base *http.Client) *http.Client {
	c := &http.Client{}
	if base != nil {
		c = &http.Client{Transport: base.Transport, Jar: base.Jar, Timeout: base.Timeout}
	}
	if c.Timeout == 0 || c.Timeout > tokenTimeout {
		c.Timeout = tokenTimeout
	}
	c.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if req.URL.Scheme != "https" {
			return fmt.Errorf("token endpoint redirected to %s: only https is followed", req.URL.Redacted())
		}
		if len(via) >= 3 {
			return fmt.Errorf("token endpoint redirected %d times", len(via))
		}
		return nil
	}
	return c
}

// clientCredentials fetches and caches an OAuth2 client-credentials token.
// Unlike oauth2's own token source it takes the caller's context: the
// gRPC call asking for credentials waits at most until its deadline, and
// callers share one fetch, itself bounded by tokenTimeout.
type clientCredentials struct {
	cfg   clientcredentials.Config
	http  *http.Client
	mu    sync.Mutex
	tok   *oauth2.Token
	fetch singleflight.Group
}

func (c *clientCredentials) Token(ctx context.Context) (string, error) {
	c.mu.Lock()
	t := c.tok
	c.mu.Unlock()
	if t.Valid() {
		return t.AccessToken, nil
	}
	ch := c.fetch.DoChan("token", func() (any, error) {
		// Detached from any one caller: a caller giving up must not fail
		// the fetch the others wait for.
		fctx, cancel := context.WithTimeout(context.WithValue(context.Background(), oauth2.HTTPClient, c.http), tokenTimeout)
		defer cancel()
		t, err := c.cfg.Token(fctx)
		if err != nil {
			return nil, err
		}
		c.mu.Lock()
		c.tok = t
		c.mu.Unlock()
		return t, nil
	})
	select {
	case r := <-ch:
		if r.Err != nil {
			return "", fmt.Errorf("client-credentials grant: %w", r.Err)
		}
		return r.Val.(*oauth2.Token).AccessToken, nil
	case <-ctx.Done():
		return "", fmt.Errorf("client-credentials grant: %w", ctx.Err())
	}
}

// swappable is a token source whose inner source can be replaced while
// connections hold it.
type swappable struct {
	mu  sync.Mutex
	src gatewayapi.TokenSource
	ver string
}

func (s *swappable) Token(ctx context.Context) (string, error) {
	s.mu.Lock()
	src := s.src
	s.mu.Unlock()
	return src.Token(ctx)
}

func (s *swappable) set(src gatewayapi.TokenSource, version string) {
	s.mu.Lock()
	s.src, s.ver = src, version
	s.mu.Unlock()
}

func (s *swappable) version() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ver
}
