package relay

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
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

// BearerTokens is the external port listener's authenticator:
// TokenReviews through tokenReviews (k8s.io/apiserver's delegating
// authenticator, as kube-rbac-proxy and the metrics endpoints use),
// answers cached briefly, no anonymous requests.
func BearerTokens(tokenReviews authenticationv1.AuthenticationV1Interface) (authenticator.Request, error) {
	authn, _, err := authenticatorfactory.DelegatingAuthenticatorConfig{
		TokenAccessReviewClient:  tokenReviews,
		TokenAccessReviewTimeout: 10 * time.Second,
		WebhookRetryBackoff:      &wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5},
		CacheTTL:                 externalTokenCacheTTL,
	}.New()
	if err != nil {
		return nil, fmt.Errorf("the external port listener's authenticator: %w", err)
	}
	return authn, nil
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
		writeStatus(w, apierrors.NewUnauthorized("a bearer token the cluster authenticates is required (a ServiceAccount's token, or an OpenShift user's: oc whoami -t)"))
		return
	}
	s.dispatch(w, r, resp.User, true)
}

// published refuses a port the sandbox does not publish outside the
// cluster: its gateway must expose external ports and its template
// (read now: a port removed there is closed at once) must list the port.
// The gateway and template are read with the relay's own rights, after
// the user was authorized.
func (s *Server) published(ctx context.Context, sb *openshellv1alpha1.OpenShellSandbox, port int) *apierrors.StatusError {
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
