package relay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http/httpguts"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/authentication/user"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
)

// proxyHop is where one proxy request goes inside the sandbox.
type proxyHop struct {
	port int
	// path is the request's path after PORT, escaped as the relay
	// received it.
	path string
	// prefix is the request's path up to and including PORT:
	// /apis/G/V/namespaces/NS/openshellsandboxes/NAME/proxy/PORT. Its
	// names are DNS labels and its port is written as ports are, so it
	// reads the same escaped or decoded.
	prefix string
}

// proxyTarget reads PORT/PATH from a proxy request's URL
// (/apis/G/V/namespaces/NS/openshellsandboxes/NAME/proxy/PORT/PATH). The
// escaped path is kept, so that the service sees what reached the relay;
// through the kube-apiserver that is the decoded path (its aggregator
// forwards no other), with the query re-encoded. Pure.
func proxyTarget(u *url.URL) (proxyHop, error) {
	parts := strings.SplitN(strings.TrimPrefix(u.EscapedPath(), "/"), "/", 9)
	if len(parts) < 9 || parts[7] != SubresourceProxy {
		return proxyHop{}, fmt.Errorf("proxy needs a port: .../%s/NAME/%s/PORT/PATH", Resource, SubresourceProxy)
	}
	portText, path, _ := strings.Cut(parts[8], "/")
	port, err := strconv.Atoi(portText)
	// Written as a port is written: "+80" or "0080" would make the path's
	// port (the Referer check's, the log's) differ from the one reached.
	if err != nil || port < 1 || port > 65535 || strconv.Itoa(port) != portText {
		return proxyHop{}, fmt.Errorf("proxy's port must be a number from 1 to 65535 (.../%s/NAME/%s/PORT/PATH), not %q", Resource, SubresourceProxy, portText)
	}
	return proxyHop{port: port, path: "/" + path, prefix: "/" + strings.Join(parts[:8], "/") + "/" + portText}, nil
}

// maxProxyHeaderBytes bounds the response headers a sandbox's service may
// send: they are held in the relay's memory whole.
const maxProxyHeaderBytes = 64 << 10

// proxyAnswerTimeout bounds how long the agent's service may take to
// start its answer. A proxy request is a session, holding one of the
// user's (and the namespace's) session slots; a service that never
// answers must not hold them for the session's 8 hours.
const proxyAnswerTimeout = 2 * time.Minute

// proxyCSP is the Content-Security-Policy of every proxied response. The
// response is served from the cluster API's origin (the kube-apiserver's,
// or `kubectl proxy`'s on the user's machine, which adds the user's
// credentials to every request). A page the agent serves must not run
// script there: it could open a WebSocket exec on the user's other
// sandboxes, or send requests as the user. `sandbox` without allow-scripts
// runs no script and submits no form; allow-same-origin keeps the page's
// own links and images same-origin, so that fromAPage can tell them,
// by their Referer, from requests another sandbox's page makes. An
// application that needs script is used through `kubectl openshell
// port-forward`, on an origin of its own.
const proxyCSP = "sandbox allow-same-origin"

// proxy serves openshellsandboxes/proxy: one HTTP request (or WebSocket
// upgrade) to a port inside the sandbox, over one ForwardTcp stream.
// Each request is a session of its own, authorized, counted and logged
// as one, and ends with the session (revocation, deletion, drain) or
// when its client goes.
func (s *Server) proxy(w http.ResponseWriter, r *http.Request, sb *openshellv1alpha1.OpenShellSandbox, u user.Info, session Session, hop proxyHop, ext *externalRequest) {
	// The log names the method, port and path; not the query, which
	// may carry a token of the service's own.
	session.Command = []string{r.Method, strconv.Itoa(hop.port) + hop.path}
	// As ReverseProxy judges an upgrade: both headers.
	session.Tunnel = r.Header.Get("Upgrade") != "" && httpguts.HeaderValuesContainsToken(r.Header["Connection"], "upgrade")
	st := s.startStream(w, r, sb, u, "create", SubresourceProxy, session)
	if st == nil {
		return
	}
	defer st.close()
	if ext != nil {
		// Through a Route: the session ends with its port's publication
		// and with its token.
		go s.watchPublished(st.ctx, st.end, sb, hop.port, ext.Host)
		if !ext.Expires.IsZero() {
			expire := time.AfterFunc(time.Until(ext.Expires), func() { st.end(errTokenExpired) })
			defer expire.Stop()
		}
	}
	c := &proxyCall{st: st, f: newForwarder(st.target, st.rec, st.ctx), hop: hop, sandbox: sb.Name}
	// The request's one connection is covered by the owner check made as
	// the stream opened; a second read of the sandbox would add nothing.
	c.f.check = st.target.Verified
	// Deferred, so that an abort (ReverseProxy panics with
	// http.ErrAbortHandler when a body copy fails) is recorded too.
	defer c.finish()
	// The session's context outlives the request's on purpose (a hijacked
	// connection's does not end); a proxy request's session ends with it,
	// so that a browser that closed its tab, which does not say so, frees
	// its slot at once.
	stop := context.AfterFunc(r.Context(), func() { st.end(errClientGone) })
	defer stop()
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) { toSandbox(pr.Out, hop) },
		Transport: &http.Transport{DialContext: c.dial, DisableKeepAlives: true, DisableCompression: true,
			MaxResponseHeaderBytes: maxProxyHeaderBytes, ResponseHeaderTimeout: proxyAnswerTimeout},
		ModifyResponse: func(resp *http.Response) error {
			fromSandbox(resp, r.URL, hop.prefix)
			return nil
		},
		ErrorHandler: c.fail,
	}
	rp.ServeHTTP(proxyWriter{streamWriter{w, st.ctx}}, r.WithContext(st.ctx))
	c.answered = !c.failed && !session.Tunnel
}

// The causes a proxy session ends with when nothing else ended it first.
var (
	errTokenExpired = errors.New("the bearer token expired")
	errAnswered     = errors.New("the answer was sent")
	errNotAnswered  = errors.New("the request ended without the service's whole answer")
)

// proxyCall is one proxy request's forwarding: its connections to the
// sandbox's port (ForwardTcp streams) and how it ended.
type proxyCall struct {
	st       *stream
	f        *forwarder
	hop      proxyHop
	sandbox  string
	forwards sync.WaitGroup
	// failed: the ErrorHandler answered; answered: ServeHTTP returned
	// with the service's whole answer sent (not for a tunnel, whose end
	// may be a failure worth the log).
	failed, answered bool
}

// dial opens a connection to the sandbox's port: one end of a pipe whose
// other end a ForwardTcp stream carries.
func (c *proxyCall) dial(context.Context, string, string) (net.Conn, error) {
	relaySide, serviceSide := net.Pipe()
	c.forwards.Add(1)
	go func() {
		defer c.forwards.Done()
		_ = c.f.PortForward(c.st.ctx, "", "", int32(c.hop.port), serviceSide)
	}()
	return relaySide, nil
}

// fail answers a request the sandbox's port did not: 503, with the
// session's end or the gateway's answer as the reason where there is one
// (either says more than a closed pipe).
func (c *proxyCall) fail(w http.ResponseWriter, _ *http.Request, err error) {
	c.failed = true
	if cause := context.Cause(c.st.ctx); cause != nil {
		err = cause
	} else if ferr := c.f.firstErr(); ferr != nil {
		err = ferr
	}
	writeStatus(w, apierrors.NewServiceUnavailable(fmt.Sprintf("port %d in sandbox %s: %v", c.hop.port, c.sandbox, err)))
}

// finish ends the session's forwarding and records it once its streams
// are done, so that their bytes and errors are in the record. An error a
// stream reports after the whole answer went out is the end's own.
func (c *proxyCall) finish() {
	cause := errAnswered
	if !c.answered {
		cause = errNotAnswered
	}
	c.st.end(cause) // no-op for a session already ended (its cause stays)
	c.forwards.Wait()
	err := c.f.firstErr()
	if c.answered {
		err = nil
	}
	c.st.rec.End(0, err)
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
	// A bearer token may ride in a WebSocket handshake's subprotocols, as
	// the kube-apiserver takes it from browsers; it is not the agent's.
	if protos := out.Header.Values("Sec-Websocket-Protocol"); len(protos) > 0 {
		var kept []string
		for _, line := range protos {
			for _, p := range strings.Split(line, ",") {
				if p = strings.TrimSpace(p); p != "" && !strings.HasPrefix(p, bearerProtocolPrefix) {
					kept = append(kept, p)
				}
			}
		}
		out.Header.Del("Sec-Websocket-Protocol")
		if len(kept) > 0 {
			out.Header.Set("Sec-Websocket-Protocol", strings.Join(kept, ", "))
		}
	}
}

// bearerProtocolPrefix marks a WebSocket subprotocol that carries a bearer
// token (the kube-apiserver's convention).
const bearerProtocolPrefix = "base64url.bearer.authorization.k8s.io."

// passedHeaders are the response headers a proxied answer keeps: what a
// client needs to read the body and cache it. Anything else a service may
// send acts on the cluster API's origin as a whole (Clear-Site-Data,
// Strict-Transport-Security, Set-Cookie, Refresh, Link preloads, CORS
// grants, a Content-Security-Policy or Referrer-Policy of its own), so an
// allow-list, not a deny-list.
var passedHeaders = map[string]bool{
	"Content-Type": true, "Content-Length": true, "Content-Encoding": true, "Content-Language": true, "Content-Range": true,
	"Accept-Ranges": true, "Cache-Control": true, "Etag": true, "Last-Modified": true, "Expires": true, "Vary": true, "Date": true,
	"Age": true, "Pragma": true, "Retry-After": true, "Location": true,
}

// upgradeHeaders are kept on a 101 as well: the switch itself.
var upgradeHeaders = map[string]bool{
	"Upgrade": true, "Connection": true, "Sec-Websocket-Accept": true, "Sec-Websocket-Protocol": true, "Sec-Websocket-Extensions": true,
}

// fromSandbox guards a proxied response for the cluster API's origin: only
// passedHeaders, a Location only within the proxy's own path, no
// trailers, no script run there (proxyCSP) and no content sniffed into
// something runnable. in is the request's URL as the relay received it.
// Pure.
func fromSandbox(resp *http.Response, in *url.URL, prefix string) {
	h := resp.Header
	for name := range h {
		c := http.CanonicalHeaderKey(name)
		if !passedHeaders[c] && (resp.StatusCode != http.StatusSwitchingProtocols || !upgradeHeaders[c]) {
			h.Del(name)
		}
	}
	if loc := h.Get("Location"); loc != "" {
		if confined, ok := confineLocation(loc, in, prefix); ok {
			h.Set("Location", confined)
		} else {
			h.Del("Location")
		}
	}
	// ReverseProxy announces the trailers it finds here, and copies those
	// the transport adds to this field as the body ends, once the body is
	// closed: none are announced, and none are left to copy.
	resp.Trailer = nil
	if resp.Body != nil && resp.StatusCode != http.StatusSwitchingProtocols {
		// (A 101's body is the switched connection, which ReverseProxy
		// needs writable, and has no trailers.)
		resp.Body = trailerless{ReadCloser: resp.Body, resp: resp}
	}
	if mt, _, err := mime.ParseMediaType(h.Get("Content-Type")); err == nil && strings.HasPrefix(mt, "multipart/") {
		// A multipart/x-mixed-replace body replaces the page part by part:
		// a download, not a document, here.
		h.Set("Content-Type", "application/octet-stream")
	}
	h.Set("Content-Security-Policy", proxyCSP)
	h.Set("X-Content-Type-Options", "nosniff")
}

// confineLocation keeps a redirect within the sandbox's port: a path
// from the service's root is put under the proxy's prefix, a relative one
// is resolved against the request's path, and the result (dot segments
// removed as a browser removes them, "%2e" included, since url.Parse
// decodes it) must stay under the prefix. The resolved path is what the
// browser gets, never the service's own string. A Location naming a
// scheme or host, or holding a backslash (which browsers read as a
// slash), is not followed: it could send the user's browser, with the
// user's credentials, to another sandbox's service or another API. in is
// the request's URL as the relay received it (decoded). Pure.
func confineLocation(loc string, in *url.URL, prefix string) (string, bool) {
	u, err := url.Parse(loc)
	if err != nil || u.Scheme != "" || u.Host != "" || u.Opaque != "" || strings.Contains(u.Path, "\\") {
		return "", false
	}
	var target string
	switch {
	case strings.HasPrefix(u.Path, "/"):
		target = prefix + u.Path
	case u.Path == "":
		target = in.Path
	default:
		target = in.Path[:strings.LastIndex(in.Path, "/")+1] + u.Path
	}
	resolved := path.Clean(target)
	last := u.Path
	if i := strings.LastIndex(last, "/"); i >= 0 {
		last = last[i+1:]
	}
	if (strings.HasSuffix(target, "/") || last == "." || last == "..") && resolved != "/" {
		resolved += "/" // a browser keeps the directory form
	}
	if resolved != prefix && !strings.HasPrefix(resolved, prefix+"/") {
		return "", false
	}
	out := url.URL{Path: resolved, RawQuery: u.RawQuery, Fragment: u.Fragment}
	return out.String(), true
}

// trailerless drops the trailers the transport adds to its response as
// the body ends.
type trailerless struct {
	io.ReadCloser
	resp *http.Response
}

func (t trailerless) Close() error {
	err := t.ReadCloser.Close()
	t.resp.Trailer = nil
	return err
}

// proxyWriter is the proxy's response writer. Informational answers (a
// 103 Early Hints) are dropped: ReverseProxy copies their headers to the
// client without ModifyResponse, so a service could preload what it likes
// on the cluster API's origin. A 101 goes through Hijack, not here. Unwrap
// lets ReverseProxy flush streamed answers (server-sent events).
type proxyWriter struct{ streamWriter }

func (w proxyWriter) WriteHeader(code int) {
	if code >= 100 && code < 200 {
		return
	}
	w.streamWriter.WriteHeader(code)
}

func (w proxyWriter) Unwrap() http.ResponseWriter { return w.streamWriter.ResponseWriter }
