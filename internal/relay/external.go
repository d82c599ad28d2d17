package relay

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	tokencache "k8s.io/apiserver/pkg/authentication/token/cache"
	"k8s.io/apiserver/pkg/authentication/user"
	webhooktoken "k8s.io/apiserver/plugin/pkg/authenticator/token/webhook"
	authenticationv1 "k8s.io/client-go/kubernetes/typed/authentication/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
)

// The external port listener serves what an OpenShift Route brings from
// outside the cluster (controllers/externalports): proxy requests alone,
// at the aggregated API's paths, to the ports a sandbox's template lists
// in spec.externalPorts, on gateways whose Platform Admin publishes them,
// through the gateway's own Route. Its callers hold no front-proxy
// certificate: each request carries a bearer token issued for
// ExternalAudience, which a TokenReview for that audience authenticates,
// and is then authorized as through the kube-apiserver: create on
// openshellsandboxes/proxy in the sandbox's namespace, by
// SubjectAccessReview. The token never reaches the sandbox (toSandbox
// drops Authorization), and a session ends when the token expires.
// Front-proxy identity headers mean nothing here: no request-header
// authenticator reads them.

// externalTokenCacheTTL is how long a TokenReview's answer is reused: a
// token revoked before its expiry (its ServiceAccount deleted: that ends
// open sessions too) works that much longer for new requests at most.
const externalTokenCacheTTL = 10 * time.Second

// ExternalAudience is the audience a token must be issued for to be
// accepted by the external port listener (oc create token SA
// --audience=openshell-external-ports). Such a token is refused by the
// kube-apiserver itself, so one sent to a host that is not the relay's (a
// squatted Route host, a typo) opens nothing else in the cluster; and a
// token for the kube-apiserver, or a user's OAuth token, is refused here.
const ExternalAudience = "openshell-external-ports"

// maxBearerToken bounds the token the listener looks at.
const maxBearerToken = 16 << 10

// Failed authentications a caller (its address, as the router forwards it)
// may make a second, and in a burst, before its requests are refused
// without a TokenReview (429): each new token that fails costs one.
const (
	failuresPerSecond = 5
	failureBurst      = 20
	// maxSources bounds the addresses remembered; past it they are
	// forgotten all at once (an attacker with that many addresses gets a
	// fresh burst each, as without the limit).
	maxSources = 10000
)

// ExternalAuthenticator authenticates the external port listener's
// requests. Built from k8s.io/apiserver's pieces (the TokenReview
// webhook authenticator and its cache, as kube-rbac-proxy and the metrics
// endpoints use them) rather than its delegating configuration, whose
// union also takes a token from a WebSocket subprotocol and asks for no
// audience of its own.
type ExternalAuthenticator struct {
	tokens   authenticator.Token
	failures *sourceLimits
}

// NewExternalAuthenticator reviews tokens through tokenReviews, which
// should be rate-limited (client-side QPS): anyone who reaches the Route
// can send tokens.
func NewExternalAuthenticator(tokenReviews authenticationv1.AuthenticationV1Interface) (*ExternalAuthenticator, error) {
	// No implicit audiences: a review answer that names none (an
	// authenticator that ignores audiences) does not pass.
	webhook, err := webhooktoken.NewFromInterface(tokenReviews, nil,
		wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 2}, 10*time.Second, webhooktoken.AuthenticatorMetrics{
			RecordRequestTotal:   func(context.Context, string) {},
			RecordRequestLatency: func(context.Context, string, float64) {},
		})
	if err != nil {
		return nil, fmt.Errorf("the external port listener's authenticator: %w", err)
	}
	return &ExternalAuthenticator{tokens: tokencache.New(webhook, false, externalTokenCacheTTL, externalTokenCacheTTL),
		failures: &sourceLimits{}}, nil
}

// authenticate returns the request's user and its token's expiry (zero:
// none), or why it is refused. A token that is not a JWT naming
// ExternalAudience costs no TokenReview.
func (a *ExternalAuthenticator) authenticate(r *http.Request) (user.Info, time.Time, *apierrors.StatusError) {
	src := source(r)
	if !a.failures.allowed(src) {
		return nil, time.Time{}, apierrors.NewTooManyRequests("too many failed authentications from "+src+": try again shortly", 1)
	}
	token := bearerToken(r)
	claims, ok := externalClaims(token)
	if ok {
		ctx := authenticator.WithAudiences(r.Context(), authenticator.Audiences{ExternalAudience})
		resp, authenticated, err := a.tokens.AuthenticateToken(ctx, token)
		if err == nil && authenticated {
			return resp.User, claims.expiry(), nil
		}
	}
	a.failures.failed(src)
	return nil, time.Time{}, apierrors.NewUnauthorized("a bearer token the cluster authenticates for the audience " + ExternalAudience +
		" is required: oc create token SERVICEACCOUNT --audience=" + ExternalAudience)
}

// bearerToken reads the Authorization header as k8s.io/apiserver's
// bearertoken authenticator does ("" for none).
func bearerToken(r *http.Request) string {
	parts := strings.SplitN(strings.TrimSpace(r.Header.Get("Authorization")), " ", 3)
	if len(parts) < 2 || !strings.EqualFold(parts[0], "bearer") {
		return ""
	}
	return parts[1]
}

// tokenClaims are the claims the listener reads of a token: unverified
// until its TokenReview passed.
type tokenClaims struct {
	Aud json.RawMessage `json:"aud"`
	Exp *int64          `json:"exp"`
}

func (c tokenClaims) expiry() time.Time {
	if c.Exp == nil {
		return time.Time{}
	}
	return time.Unix(*c.Exp, 0)
}

// externalClaims reads token's claims if it is a JWT whose aud claim
// names ExternalAudience. Its signature is not checked: the TokenReview
// does.
func externalClaims(token string) (tokenClaims, bool) {
	var claims tokenClaims
	if token == "" || len(token) > maxBearerToken {
		return claims, false
	}
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return claims, false
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil || json.Unmarshal(payload, &claims) != nil {
		return claims, false
	}
	var one string
	if json.Unmarshal(claims.Aud, &one) == nil {
		return claims, one == ExternalAudience
	}
	var many []string
	return claims, json.Unmarshal(claims.Aud, &many) == nil && slices.Contains(many, ExternalAudience)
}

// source is the caller's address: the last X-Forwarded-For entry, which
// the router appends (the NetworkPolicy admits only routers), or the peer.
func source(r *http.Request) string {
	if fwd := r.Header.Values("X-Forwarded-For"); len(fwd) > 0 {
		entries := strings.Split(fwd[len(fwd)-1], ",")
		if last := strings.TrimSpace(entries[len(entries)-1]); last != "" {
			return last
		}
	}
	return hostOnly(r.RemoteAddr)
}

// sourceLimits bounds failed authentications per caller.
type sourceLimits struct {
	mu     sync.Mutex
	limits map[string]*rate.Limiter
}

func (l *sourceLimits) limiter(src string) *rate.Limiter {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.limits == nil || len(l.limits) >= maxSources {
		l.limits = map[string]*rate.Limiter{}
	}
	lim, ok := l.limits[src]
	if !ok {
		lim = rate.NewLimiter(failuresPerSecond, failureBurst)
		l.limits[src] = lim
	}
	return lim
}

func (l *sourceLimits) allowed(src string) bool { return l.limiter(src).Tokens() >= 1 }
func (l *sourceLimits) failed(src string)       { l.limiter(src).Allow() }

// externalRequest is what the external port listener knows of a request
// beyond its user: the host it came through and when its token expires.
type externalRequest struct {
	Host    string
	Expires time.Time
}

// ExternalHandler serves the external port listener.
func (s *Server) ExternalHandler() http.Handler {
	return http.HandlerFunc(s.serveExternal)
}

func (s *Server) serveExternal(w http.ResponseWriter, r *http.Request) {
	if s.External == nil {
		writeStatus(w, apierrors.NewNotFound(schema.GroupResource{Group: Group, Resource: Resource + "/" + SubresourceProxy}, r.URL.Path))
		return
	}
	// An absolute-form request names a host of its own, which the router
	// did not route by: only the Host header is.
	if !strings.HasPrefix(r.RequestURI, "/") {
		writeStatus(w, apierrors.NewBadRequest("only origin-form request targets (a path) are served"))
		return
	}
	u, expires, err := s.External.authenticate(r)
	if err != nil {
		if err.ErrStatus.Code == http.StatusUnauthorized {
			w.Header().Set("WWW-Authenticate", `Bearer realm="openshell"`)
		}
		writeStatus(w, err)
		return
	}
	s.dispatch(w, r, u, &externalRequest{Host: r.Host, Expires: expires})
}

// published refuses a port the sandbox does not publish outside the
// cluster, or a request that came through another gateway's Route: the
// sandbox's gateway must expose external ports and report its Route
// published for the request's host (the router routes by Host, so a
// caller cannot reach one gateway's sandboxes through another's Route and
// past the controls on it), and its template (read now: a port removed
// there is closed at once) must list the port. The gateway and template
// are read with the relay's own rights, after the user was authorized.
func (s *Server) published(ctx context.Context, sb *openshellv1alpha1.OpenShellSandbox, port int, host string) *apierrors.StatusError {
	gr := schema.GroupResource{Group: Group, Resource: Resource + "/" + SubresourceProxy}
	refuse := func(why string) *apierrors.StatusError {
		return apierrors.NewForbidden(gr, sb.Name, fmt.Errorf("port %d is not published outside the cluster: %s", port, why))
	}
	gw := &openshellv1alpha1.OpenShellGateway{}
	if err := s.Reader.Get(ctx, sb.GatewayKey(), gw); err != nil {
		if apierrors.IsNotFound(err) {
			return refuse("the sandbox's gateway is gone")
		}
		return apierrors.NewInternalError(fmt.Errorf("read the sandbox's gateway: %w", err))
	}
	if gw.Spec.ExternalPorts == nil || (gw.Spec.ExternalPorts.Expose != openshellv1alpha1.ExternalPortsRoute &&
		gw.Spec.ExternalPorts.Expose != openshellv1alpha1.ExternalPortsHTTPRoute) {
		return refuse(fmt.Sprintf("gateway %s/%s does not publish external ports (spec.externalPorts.expose)", gw.Namespace, gw.Name))
	}
	if want := gw.Status.ExternalPorts.PublishedHost(); want == "" || !strings.EqualFold(want, hostOnly(host)) {
		return refuse(fmt.Sprintf("gateway %s/%s publishes its sandboxes' ports at its own Route's or HTTPRoute's host only (status.externalPorts.url)", gw.Namespace, gw.Name))
	}
	if sb.Spec.TemplateRef == nil {
		return refuse("only a sandbox created from an OpenShellSandboxTemplate that lists the port in spec.externalPorts publishes it")
	}
	tpl := &openshellv1alpha1.OpenShellSandboxTemplate{}
	err := s.Reader.Get(ctx, client.ObjectKey{Namespace: sb.Namespace, Name: sb.Spec.TemplateRef.Name}, tpl)
	switch {
	case apierrors.IsNotFound(err):
		return refuse(fmt.Sprintf("template %s is gone", sb.Spec.TemplateRef.Name))
	case err != nil:
		return apierrors.NewInternalError(fmt.Errorf("read the sandbox's template: %w", err))
	case !slices.ContainsFunc(tpl.Spec.ExternalPorts, func(p int32) bool { return int(p) == port }):
		return refuse(fmt.Sprintf("template %s does not list it in spec.externalPorts", tpl.Name))
	}
	return nil
}

// hostOnly is a Host header without its port.
func hostOnly(host string) string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		return h
	}
	return host
}

// watchPublished ends an external session once its port is no longer
// published to it (the template no longer lists it, the gateway stopped
// publishing or its Route's host changed): an open tunnel must not
// outlive the decision. A failed read is left to the session's own
// checks, which end it after repeated failures.
func (s *Server) watchPublished(ctx context.Context, end context.CancelCauseFunc, sb *openshellv1alpha1.OpenShellSandbox, port int, host string) {
	tick := time.NewTicker(cmp.Or(s.sessionRecheck, sessionRecheck))
	defer tick.Stop()
	failed := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		switch err := s.published(ctx, sb, port, host); {
		case err == nil:
			failed = 0
		case apierrors.IsInternalError(err):
			if failed++; failed >= maxFailedChecks {
				end(fmt.Errorf("the port's publication could not be read %d times in a row: %s", failed, err.ErrStatus.Message))
				return
			}
		default:
			end(errors.New(err.ErrStatus.Message))
			return
		}
	}
}
