package relay

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/authentication/user"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
)

// proxyHop is where one proxy request goes inside the sandbox.
type proxyHop struct {
	port int
	// path is the request's path after PORT, escaped as it was sent.
	path string
}

// proxyTarget reads PORT/PATH from a proxy request's URL
// (/apis/G/V/namespaces/NS/openshellsandboxes/NAME/proxy/PORT/PATH). The
// escaped path is kept, so that the service sees what its client sent.
// Pure.
func proxyTarget(u *url.URL) (proxyHop, error) {
	parts := strings.SplitN(strings.TrimPrefix(u.EscapedPath(), "/"), "/", 9)
	if len(parts) < 9 || parts[7] != SubresourceProxy {
		return proxyHop{}, fmt.Errorf("proxy needs a port: .../%s/NAME/%s/PORT/PATH", Resource, SubresourceProxy)
	}
	portText, path, _ := strings.Cut(parts[8], "/")
	port, err := strconv.Atoi(portText)
	if err != nil || port < 1 || port > 65535 {
		return proxyHop{}, fmt.Errorf("proxy's port must be a number from 1 to 65535 (.../%s/NAME/%s/PORT/PATH), not %q", Resource, SubresourceProxy, portText)
	}
	return proxyHop{port: port, path: "/" + path}, nil
}

// maxProxyHeaderBytes bounds the response headers a sandbox's service may
// send: they are held in the relay's memory whole.
const maxProxyHeaderBytes = 64 << 10

// proxyCSP is the Content-Security-Policy of every proxied response. The
// response is served from the cluster API's origin (the kube-apiserver's,
// or `kubectl proxy`'s on the user's machine, which adds the user's
// credentials to every request). A page the agent serves must not run
// script there: it could open a WebSocket exec on the user's other
// sandboxes, or send requests as the user. `sandbox` without allow-scripts
// gives the page an opaque origin and no script; an application that needs
// script is used through `kubectl openshell port-forward`, on an origin
// of its own.
const proxyCSP = "sandbox"

// proxy serves openshellsandboxes/proxy: one HTTP request (or WebSocket
// upgrade) to a port inside the sandbox, over one ForwardTcp stream.
// Each request is a session of its own, authorized, counted and logged
// as one, and ends with the session (revocation, deletion, drain).
func (s *Server) proxy(w http.ResponseWriter, r *http.Request, sb *openshellv1alpha1.OpenShellSandbox, u user.Info, session Session, hop proxyHop) {
	// The log names the method, port and path; not the query, which
	// may carry a token of the service's own.
	session.Command = []string{r.Method, strconv.Itoa(hop.port) + hop.path}
	st := s.startStream(w, r, sb, u, "create", SubresourceProxy, session)
	if st == nil {
		return
	}
	defer st.close()
	f := newForwarder(st.target, st.rec, st.ctx)
	// The request's one connection is covered by the owner check made as
	// the stream opened; a second read of the sandbox would add nothing.
	f.check = st.target.Verified
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) { toSandbox(pr.Out, hop) },
		Transport: &http.Transport{
			DialContext: func(context.Context, string, string) (net.Conn, error) {
				relaySide, serviceSide := net.Pipe()
				go func() { _ = f.PortForward(st.ctx, "", "", int32(hop.port), serviceSide) }()
				return relaySide, nil
			},
			DisableKeepAlives:      true,
			DisableCompression:     true,
			MaxResponseHeaderBytes: maxProxyHeaderBytes,
		},
		ModifyResponse: func(resp *http.Response) error {
			fromSandbox(resp.Header)
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			if ferr := f.firstErr(); ferr != nil {
				err = ferr // the gateway's answer says more than a closed pipe
			}
			writeStatus(w, apierrors.NewServiceUnavailable(fmt.Sprintf("port %d in sandbox %s: %v", hop.port, sb.Name, err)))
		},
	}
	rp.ServeHTTP(streamWriter{w, st.ctx}, r.WithContext(st.ctx))
	st.rec.End(0, f.firstErr())
}

// toSandbox makes out the request the sandbox's service receives: to its
// loopback port, without anything that speaks for the caller at the
// cluster (credentials, the front proxy's identity headers, impersonation)
// or that the caller's browser holds for other sites on the same host
// (cookies: the cluster API's host may be localhost, shared by every
// local service). Pure.
func toSandbox(out *http.Request, hop proxyHop) {
	out.URL.Scheme = "http"
	out.URL.Host = net.JoinHostPort("127.0.0.1", strconv.Itoa(hop.port))
	out.Host = out.URL.Host
	out.URL.RawPath = hop.path
	if p, err := url.PathUnescape(hop.path); err == nil {
		out.URL.Path = p
	} else {
		out.URL.Path, out.URL.RawPath = hop.path, ""
	}
	for name := range out.Header {
		canonical := http.CanonicalHeaderKey(name)
		switch {
		case canonical == "Authorization", canonical == "Proxy-Authorization", canonical == "Cookie",
			strings.HasPrefix(canonical, "X-Remote-"), strings.HasPrefix(canonical, "Impersonate-"),
			strings.HasPrefix(canonical, "X-Forwarded-"), canonical == "Forwarded":
			out.Header.Del(name)
		}
	}
}

// fromSandbox guards a proxied response for the cluster API's origin: no
// cookies set there, no script run there (proxyCSP), no content sniffed
// into something runnable, and no CORS grant letting another site's
// script read it. Pure.
func fromSandbox(h http.Header) {
	for name := range h {
		if c := http.CanonicalHeaderKey(name); c == "Set-Cookie" || c == "Set-Cookie2" || strings.HasPrefix(c, "Access-Control-") {
			h.Del(name)
		}
	}
	h.Set("Content-Security-Policy", proxyCSP)
	h.Set("X-Content-Type-Options", "nosniff")
}
