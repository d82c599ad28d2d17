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
	"net/url"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	authenticationv1 "k8s.io/client-go/kubernetes/typed/authentication/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
)

// The external port listener serves what an OpenShift Route brings from
// outside the cluster (controllers/externalports): proxy requests alone,
// at the aggregated API's paths, to the ports a sandbox's template lists
// in spec.externalPorts, on gateways whose Platform Admin publishes them.
// Its callers hold no front-proxy certificate: each request carries a
// bearer token, which a TokenReview authenticates (a ServiceAccount's
// token, an OpenShift user's OAuth token), and is then authorized as
// through the kube-apiserver: create on openshellsandboxes/proxy in the
// sandbox's namespace, by SubjectAccessReview. The token never reaches
// the sandbox (toSandbox drops Authorization). Front-proxy identity
// headers mean nothing here: no request-header authenticator reads them.

// externalTokenCacheTTL is how long a TokenReview's answer is reused: a
// revoked token works that much longer at most (an open session is
// re-authorized like any other).
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

// BearerTokens is the external port listener's authenticator:
// TokenReviews for ExternalAudience through tokenReviews (k8s.io/apiserver's
// delegating authenticator, as kube-rbac-proxy and the metrics endpoints
// use), answers cached briefly, no anonymous requests. tokenReviews should
// be rate-limited (client-side QPS): anyone who reaches the Route can send
// tokens.
func BearerTokens(tokenReviews authenticationv1.AuthenticationV1Interface) (authenticator.Request, error) {
	authn, _, err := authenticatorfactory.DelegatingAuthenticatorConfig{
		TokenAccessReviewClient:  tokenReviews,
		TokenAccessReviewTimeout: 10 * time.Second,
		WebhookRetryBackoff:      &wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 2},
		CacheTTL:                 externalTokenCacheTTL,
		// No implicit audiences: a review that names none (an
		// authenticator that ignores audiences) does not pass.
	}.New()
	if err != nil {
		return nil, fmt.Errorf("the external port listener's authenticator: %w", err)
	}
	return forExternalAudience{authn}, nil
}

// forExternalAudience turns away, before any TokenReview, a request whose
// bearer token cannot be one for ExternalAudience: not a JWT, or one
// whose (unverified) aud claim does not name it. Random strings sent from
// the Internet then cost the cluster nothing; the TokenReview verifies
// what passes.
type forExternalAudience struct{ authenticator.Request }

func (f forExternalAudience) AuthenticateRequest(r *http.Request) (*authenticator.Response, bool, error) {
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || !namesExternalAudience(strings.TrimSpace(token)) {
		return nil, false, nil
	}
	// The TokenReview asks for this audience (the context's audiences are
	// what it sends, and what its answer must name).
	return f.Request.AuthenticateRequest(r.WithContext(authenticator.WithAudiences(r.Context(), authenticator.Audiences{ExternalAudience})))
}

// namesExternalAudience says whether token is a JWT whose aud claim names
// ExternalAudience. Its signature is not checked: the TokenReview does.
func namesExternalAudience(token string) bool {
	if len(token) > maxBearerToken {
		return false
	}
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return false
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return false
	}
	var claims struct {
		Aud json.RawMessage `json:"aud"`
	}
	if json.Unmarshal(payload, &claims) != nil {
		return false
	}
	var one string
	if json.Unmarshal(claims.Aud, &one) == nil {
		return one == ExternalAudience
	}
	var many []string
	return json.Unmarshal(claims.Aud, &many) == nil && slices.Contains(many, ExternalAudience)
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
	resp, ok, err := s.External.AuthenticateRequest(r)
	if err != nil || !ok {
		w.Header().Set("WWW-Authenticate", `Bearer realm="openshell"`)
		writeStatus(w, apierrors.NewUnauthorized("a bearer token the cluster authenticates for the audience "+ExternalAudience+
			" is required: oc create token SERVICEACCOUNT --audience="+ExternalAudience))
		return
	}
	s.dispatch(w, r, resp.User, true)
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
	if gw.Spec.ExternalPorts == nil || gw.Spec.ExternalPorts.Expose != openshellv1alpha1.ExternalPortsRoute {
		return refuse(fmt.Sprintf("gateway %s/%s does not publish external ports (spec.externalPorts.expose)", gw.Namespace, gw.Name))
	}
	if want := publishedHost(gw); want == "" || !strings.EqualFold(want, hostOnly(host)) {
		return refuse(fmt.Sprintf("gateway %s/%s publishes its sandboxes' ports at its own Route's host only (status.externalPorts.url)", gw.Namespace, gw.Name))
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

// publishedHost is the host of the gateway's admitted external ports
// Route, as the operator reports it ("" while none is published). Only
// the operator writes a gateway's status.
func publishedHost(gw *openshellv1alpha1.OpenShellGateway) string {
	st := gw.Status.ExternalPorts
	if st == nil || !meta.IsStatusConditionTrue(st.Conditions, openshellv1alpha1.ExternalPortsConditionPublished) {
		return ""
	}
	u, err := url.Parse(st.URL)
	if err != nil || u.Scheme != "https" {
		return ""
	}
	return u.Hostname()
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
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if err := s.published(ctx, sb, port, host); err != nil && !apierrors.IsInternalError(err) {
			end(errors.New(err.ErrStatus.Message))
			return
		}
	}
}
