// Package relay lets a Sandbox Consumer use a sandbox with their own
// cluster identity: it serves an aggregated API (access.openshell.ai,
// registered with an APIService) whose subresources of OpenShellSandbox —
// exec, log, portforward and token — run against the sandbox's gateway,
// the way pods/exec reaches a kubelet. The kube-apiserver authenticates the user and
// forwards the request with the front-proxy client certificate and
// X-Remote-* headers; the relay trusts only that (k8s.io/apiserver's
// request-header authenticator, fed by the cluster's
// extension-apiserver-authentication ConfigMap) and authorizes every
// request again with a SubjectAccessReview on
// openshellsandboxes/<subresource> in the sandbox's namespace. The
// streaming protocol (SPDY and WebSocket, as kubectl exec speaks it) is
// k8s.io/cri-streaming's, the kubelet's own.
//
// The relay is written here rather than on k8s.io/apiserver's generic
// server because it serves a few connect-style subresources and
// discovery, none of the storage, admission or OpenAPI machinery that
// server brings.
package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"sigs.k8s.io/controller-runtime/pkg/client"

	accessv1alpha1 "github.com/openshell/openshell-operator/api/access/v1alpha1"
	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/groupmember"
	"github.com/openshell/openshell-operator/internal/rbacchange"
	"github.com/openshell/openshell-operator/internal/saexist"
	"github.com/openshell/openshell-operator/internal/status"
	"github.com/openshell/openshell-operator/internal/tracing"
)

// The API's names, from the API package (clients import only that).
const (
	Group                  = accessv1alpha1.Group
	Version                = accessv1alpha1.Version
	Resource               = accessv1alpha1.Resource
	SubresourceExec        = accessv1alpha1.SubresourceExec
	SubresourceLog         = accessv1alpha1.SubresourceLog
	SubresourceToken       = accessv1alpha1.SubresourceToken
	SubresourcePortForward = accessv1alpha1.SubresourcePortForward
	SubresourceProxy       = accessv1alpha1.SubresourceProxy
)

// Authorizer decides whether a user may use a subresource of a sandbox.
type Authorizer interface {
	Allowed(ctx context.Context, u user.Info, verb, namespace, name, subresource string) (allowed bool, reason string, err error)
}

// Server serves the aggregated API.
type Server struct {
	// Authn authenticates the front proxy's requests (FrontProxy).
	Authn authenticator.Request
	// Authz authorizes every request (SubjectAccessReviews).
	Authz Authorizer
	// RBAC says whether an open session's last answer still holds (nil:
	// none does, every check asks again).
	RBAC *rbacchange.Changes
	// Accounts ends the sessions of a ServiceAccount that was deleted
	// (nil: they run on while RBAC still names it).
	Accounts *saexist.Accounts
	// Groups ends the sessions of a user who left an OpenShift Group their
	// identity named (nil: they run on with the groups they began with).
	Groups *groupmember.Groups
	// Reader reads OpenShellSandboxes.
	Reader client.Reader
	// Gateways opens a sandbox's gateway.
	Gateways Gateways
	// Audit records each session (who, which sandbox, what, bytes).
	Audit Auditor
	// Tokens serves the token exchange (nil: not offered).
	Tokens *Tokens
	// External authenticates the external port listener's requests by
	// their bearer tokens (nil: ExternalHandler serves none).
	External *ExternalAuthenticator
	// MaxSessionsPerUser and MaxSessionsPerNamespace bound the open
	// sessions (0: 16 and 64), MaxSessions a replica's (0: 400), and
	// MaxSessionsPerRequester those in the projects one person requested
	// (0: 128), on gateways that admit every namespace.
	MaxSessionsPerUser, MaxSessionsPerNamespace, MaxSessions, MaxSessionsPerRequester int
	// Metrics counts sessions (nil: not counted).
	Metrics *Metrics
	// Share publishes this replica's sessions and adds the other
	// replicas' to the per-user and per-namespace counts (nil: this
	// replica counts alone). Its Run must be started beside the server.
	Share *LoadShare

	openOnce sync.Once
	open     sessions
	// sessionRecheck replaces the constant of that name (tests).
	sessionRecheck time.Duration
}

// sessions returns the session counter with the server's limits.
func (s *Server) sessions() *sessions {
	s.openOnce.Do(func() {
		s.open.perUser, s.open.perNS, s.open.max, s.open.metrics = s.MaxSessionsPerUser, s.MaxSessionsPerNamespace, s.MaxSessions, s.Metrics
		s.open.perRequester = s.MaxSessionsPerRequester
		if s.Share != nil {
			s.open.others, s.open.changed = s.Share.othersFor, make(chan struct{}, 1)
		}
	})
	return &s.open
}

// Drain is the relay's shutdown: new sessions are refused (503, reconnect
// to another replica); open execs, port-forwards and followed logs run on
// for grace, and those still open then end with a notice to their client;
// Drain returns once their handlers are done or ctx ends, with how many
// finished of their own and how many it ended. http.Server.Shutdown does
// not do this: it neither waits for nor closes the hijacked connections
// streams run on.
func (s *Server) Drain(ctx context.Context, grace time.Duration) (finished, ended int, err error) {
	return s.sessions().drain(ctx, grace)
}

// Handler routes the aggregated API's paths.
func (s *Server) Handler() http.Handler {
	return http.HandlerFunc(s.serve)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	resp, ok, err := s.Authn.AuthenticateRequest(r)
	if err != nil || !ok {
		// Not from the front proxy (or a forged identity header without
		// its certificate): nothing is served, discovery included.
		writeStatus(w, apierrors.NewUnauthorized("the relay serves only requests the kube-apiserver forwards (front-proxy client certificate required)"))
		return
	}
	s.dispatch(w, r, resp.User, nil)
}

// dispatch serves an authenticated request: discovery, or a subresource
// of a sandbox once the user is authorized. ext marks a request of the
// external port listener (nil: the kube-apiserver's), which serves proxy
// alone, to the ports the sandbox's template publishes.
func (s *Server) dispatch(w http.ResponseWriter, r *http.Request, u user.Info, ext *externalRequest) {
	external := ext != nil
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	switch {
	case external && (len(parts) <= 8 || parts[7] != SubresourceProxy):
		writeStatus(w, apierrors.NewNotFound(schema.GroupResource{Group: Group, Resource: Resource + "/" + SubresourceProxy}, r.URL.Path))
		return
	case len(parts) == 1 && parts[0] == "apis":
		writeJSON(w, discoveryGroups())
		return
	case len(parts) == 2 && parts[0] == "apis" && parts[1] == Group:
		writeJSON(w, discoveryGroup())
		return
	case len(parts) == 3 && parts[0] == "apis" && parts[1] == Group && parts[2] == Version:
		writeJSON(w, discoveryResources())
		return
	case len(parts) == 8 && parts[0] == "apis" && parts[1] == Group && parts[2] == Version && parts[3] == "namespaces" && parts[5] == Resource:
	case len(parts) > 8 && parts[0] == "apis" && parts[1] == Group && parts[2] == Version && parts[3] == "namespaces" && parts[5] == Resource &&
		parts[7] == SubresourceProxy:
		// proxy's path goes on: PORT/PATH, read by proxyTarget.
	default:
		writeStatus(w, apierrors.NewNotFound(schema.GroupResource{Group: Group, Resource: Resource}, r.URL.Path))
		return
	}
	ns, name, sub := parts[4], parts[6], parts[7]
	if sub != SubresourceExec && sub != SubresourceLog && sub != SubresourceToken && sub != SubresourcePortForward && sub != SubresourceProxy {
		writeStatus(w, apierrors.NewNotFound(schema.GroupResource{Group: Group, Resource: Resource + "/" + sub}, name))
		return
	}
	if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
		writeStatus(w, apierrors.NewBadRequest("invalid namespace "+ns))
		return
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		writeStatus(w, apierrors.NewBadRequest("invalid sandbox name "+name))
		return
	}
	var hop proxyHop
	var err error
	if sub == SubresourceProxy {
		if hop, err = proxyTarget(r.URL); err != nil {
			writeStatus(w, apierrors.NewBadRequest(err.Error()))
			return
		}
	}
	verb, err := verbOf(r.Method, sub)
	if err != nil {
		writeStatus(w, apierrors.NewMethodNotSupported(schema.GroupResource{Group: Group, Resource: Resource + "/" + sub}, r.Method))
		return
	}
	gr := schema.GroupResource{Group: Group, Resource: Resource}
	if err := fromAPage(r, gr, name, hop.prefix); err != nil {
		writeStatus(w, err)
		return
	}
	// The sandbox is read while the request is authorized, two requests
	// to the kube-apiserver side by side; what was read is looked at only
	// once the user is allowed, and a refusal does not wait for it.
	sb := &openshellv1alpha1.OpenShellSandbox{}
	read := make(chan error, 1)
	go func() { read <- s.Reader.Get(r.Context(), client.ObjectKey{Namespace: ns, Name: name}, sb) }()
	allowed, reason, err := s.Authz.Allowed(r.Context(), u, verb, ns, name, sub)
	switch {
	case err != nil:
		writeStatus(w, apierrors.NewInternalError(fmt.Errorf("authorize: %w", err)))
		return
	case !allowed:
		msg := fmt.Sprintf("user %q cannot %s %s/%s in namespace %q", u.GetName(), verb, Resource, sub, ns)
		if reason != "" {
			msg += ": " + reason
		}
		writeStatus(w, apierrors.NewForbidden(gr, name, errors.New(msg)))
		return
	}
	if err := <-read; err != nil {
		if apierrors.IsNotFound(err) {
			writeStatus(w, apierrors.NewNotFound(gr, name))
			return
		}
		writeStatus(w, apierrors.NewInternalError(fmt.Errorf("read sandbox: %w", err)))
		return
	}
	if err := usable(sb); err != nil {
		writeStatus(w, err)
		return
	}
	if external {
		if err := s.published(r.Context(), sb, hop.port, ext.Host); err != nil {
			writeStatus(w, err)
			return
		}
	}
	session := Session{User: u.GetName(), Namespace: ns, Sandbox: name, Subresource: sub, External: external}
	if tracing.Enabled() {
		// One span per session, once it is authorized, to its end (the
		// user's name stays in the audit log, not in traces).
		ctx, span := tracing.Tracer().Start(r.Context(), "relay "+sub, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(
			attribute.String("k8s.namespace.name", ns), attribute.String("openshell.sandbox", name), attribute.String("openshell.subresource", sub)))
		defer span.End()
		r = r.WithContext(ctx)
	}
	switch sub {
	case SubresourceExec:
		s.exec(w, r, sb, u, session)
	case SubresourceLog:
		s.logs(w, r, sb, u, session)
	case SubresourceToken:
		s.exchange(w, r, sb, u, session)
	case SubresourcePortForward:
		s.portForward(w, r, sb, u, session)
	case SubresourceProxy:
		s.proxy(w, r, sb, u, session, hop, ext)
	}
}

// verbOf is the RBAC verb the relay authorizes a request with. Exec is
// create whatever the method: over WebSocket it is a GET, which the
// kube-apiserver checks as get, and a read-only role (get on */*) must not
// run commands.
func verbOf(method, sub string) (string, error) {
	switch {
	case (sub == SubresourceExec || sub == SubresourcePortForward) && (method == http.MethodPost || method == http.MethodGet):
		return "create", nil
	case sub == SubresourceProxy:
		// Whatever the method: a GET to an agent's service may act as
		// much as a POST, so a read-only role (get on */*) reaches none.
		return "create", nil
	case sub == SubresourceToken && method == http.MethodPost:
		return "create", nil
	case sub == SubresourceLog && method == http.MethodGet:
		return "get", nil
	}
	return "", fmt.Errorf("%s %s not served", method, sub)
}

// fromAPage refuses a request a web page made on its own. The relay's
// clients (kubectl, client libraries, the SDK) send neither an Origin nor
// Fetch Metadata; a browser sends Sec-Fetch-Site on every request (none
// for the user's own navigation: typed, bookmarked), and an Origin on
// every request script or a form makes and on every WebSocket handshake,
// which no CORS rule holds back. Through `kubectl proxy`, which adds the
// user's credentials to whatever reaches it on localhost, any site the
// user visits could otherwise open an exec on their sandboxes (kubectl
// proxy's default --reject-paths names only pods/exec and pods/attach),
// or have an image tag send a request to an agent's service as the user;
// and a page one agent serves through proxy could do the latter to
// another agent. The one page request let through is a proxied page's
// own: same-origin, from a page under the same sandbox's port (its
// Referer; proxyCSP keeps such pages same-origin and free of script).
// proxyPrefix is a proxy request's proxyHop.prefix, empty for the other
// subresources, which let no page request through.
func fromAPage(r *http.Request, gr schema.GroupResource, name, proxyPrefix string) *apierrors.StatusError {
	refuse := func(what, value string) *apierrors.StatusError {
		return apierrors.NewForbidden(gr, name, fmt.Errorf("a request from a web page (%s %q) is refused: use kubectl, the kubectl openshell plugin or a client library, "+
			"or open the address yourself", what, status.Clip(value, 128, "…")))
	}
	if origin := r.Header.Get("Origin"); origin != "" {
		return refuse("Origin", origin)
	}
	switch site := r.Header.Get("Sec-Fetch-Site"); {
	case site == "" || site == "none":
		return nil
	case proxyPrefix != "" && site == "same-origin" && fromTheSamePort(r, proxyPrefix):
		return nil
	default:
		return refuse("Sec-Fetch-Site", site)
	}
}

// fromTheSamePort says whether a proxy request's Referer is a page of the
// same sandbox's port, read through the proxy. Paths are compared decoded,
// as the kube-apiserver routes them, and a Referer with an encoded slash,
// backslash or dot is refused: its literal and routed paths differ (a page
// of one sandbox whose address names another's). The Referer's path must
// start with this API's: a page the cluster API serves elsewhere on the
// origin, such as a pod's through pods/proxy (no CSP, its script runs),
// may carry this API's path inside its own.
func fromTheSamePort(r *http.Request, prefix string) bool {
	ref, err := url.Parse(r.Header.Get("Referer"))
	if err != nil {
		return false
	}
	if raw := strings.ToLower(ref.EscapedPath()); strings.Contains(raw, "%2f") || strings.Contains(raw, "%5c") || strings.Contains(raw, "%2e") {
		return false
	}
	return ref.Path == prefix || strings.HasPrefix(ref.Path, prefix+"/")
}

// usable refuses a sandbox that is not running or is going away: a shell
// must not outlive the sandbox's deletion or start before its policy is
// applied.
func usable(sb *openshellv1alpha1.OpenShellSandbox) *apierrors.StatusError {
	gr := schema.GroupResource{Group: Group, Resource: Resource}
	switch {
	case !sb.DeletionTimestamp.IsZero():
		return apierrors.NewConflict(gr, sb.Name, errors.New("the sandbox is being deleted"))
	case sb.Status.Phase != openshellv1alpha1.SandboxPhaseReady:
		return apierrors.NewConflict(gr, sb.Name, fmt.Errorf("the sandbox is not Ready (phase %q): wait for `kubectl wait --for=condition=Ready openshellsandbox/%s`", sb.Status.Phase, sb.Name))
	case sb.Status.Gateway == "" || sb.Status.GatewaySandboxName == "":
		return apierrors.NewConflict(gr, sb.Name, errors.New("the sandbox has no gateway sandbox yet"))
	}
	return nil
}

// SARAuthorizer asks the kube-apiserver, for every request, whether the
// user may use the subresource: no cache, so a revoked RoleBinding refuses
// the next request.
type SARAuthorizer struct{ Client client.Client }

// Allowed implements Authorizer.
func (a SARAuthorizer) Allowed(ctx context.Context, u user.Info, verb, namespace, name, subresource string) (bool, string, error) {
	extra := map[string]authorizationv1.ExtraValue{}
	for k, v := range u.GetExtra() {
		extra[k] = v
	}
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: u.GetName(), UID: u.GetUID(), Groups: u.GetGroups(), Extra: extra,
		ResourceAttributes: &authorizationv1.ResourceAttributes{Group: Group, Version: Version, Resource: Resource,
			Subresource: subresource, Verb: verb, Namespace: namespace, Name: name},
	}}
	if err := a.Client.Create(ctx, sar); err != nil {
		return false, "", err
	}
	return sar.Status.Allowed && !sar.Status.Denied, sar.Status.Reason, nil
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func writeStatus(w http.ResponseWriter, err *apierrors.StatusError) {
	st := err.ErrStatus
	st.Kind, st.APIVersion = "Status", "v1"
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(int(st.Code))
	_ = json.NewEncoder(w).Encode(st)
}

func discoveryGroups() *metav1.APIGroupList {
	return &metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"}, Groups: []metav1.APIGroup{*discoveryGroup()}}
}

func discoveryGroup() *metav1.APIGroup {
	gv := metav1.GroupVersionForDiscovery{GroupVersion: Group + "/" + Version, Version: Version}
	return &metav1.APIGroup{TypeMeta: metav1.TypeMeta{Kind: "APIGroup", APIVersion: "v1"}, Name: Group,
		Versions: []metav1.GroupVersionForDiscovery{gv}, PreferredVersion: gv}
}

func discoveryResources() *metav1.APIResourceList {
	return &metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}, GroupVersion: Group + "/" + Version,
		APIResources: []metav1.APIResource{
			{Name: Resource + "/" + SubresourceExec, Namespaced: true, Kind: "SandboxExecOptions", Verbs: metav1.Verbs{"create", "get"}},
			{Name: Resource + "/" + SubresourceLog, Namespaced: true, Kind: "SandboxLogOptions", Verbs: metav1.Verbs{"get"}},
			{Name: Resource + "/" + SubresourceToken, Namespaced: true, Kind: "SandboxToken", Verbs: metav1.Verbs{"create"}},
			{Name: Resource + "/" + SubresourcePortForward, Namespaced: true, Kind: "SandboxPortForwardOptions", Verbs: metav1.Verbs{"create", "get"}},
			{Name: Resource + "/" + SubresourceProxy, Namespaced: true, Kind: "SandboxProxyOptions", Verbs: metav1.Verbs{"create", "delete", "get", "patch", "update"}},
		}}
}
