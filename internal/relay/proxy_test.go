package relay

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/scheme"
)

func TestProxyTarget(t *testing.T) {
	base := "/apis/" + Group + "/" + Version + "/namespaces/team-a/openshellsandboxes/agent/proxy"
	for _, tc := range []struct {
		path, want string
		port       int
		err        string
	}{
		{path: base + "/8000", port: 8000, want: "/"},
		{path: base + "/8000/", port: 8000, want: "/"},
		{path: base + "/1/a/b/", port: 1, want: "/a/b/"},
		{path: base + "/65535/a%2Fb%20c", port: 65535, want: "/a%2Fb%20c"},
		{path: base, err: "proxy needs a port"},
		{path: base + "/http/x", err: `not "http"`},
		{path: base + "/0", err: `not "0"`},
		{path: base + "/65536", err: `not "65536"`},
		{path: base + "/-1", err: `not "-1"`},
		{path: base + "/%38000", err: `not "%38000"`},
		{path: base + "/+80/x", err: `not "+80"`},
		{path: base + "/0080/x", err: `not "0080"`},
	} {
		u, err := url.Parse(tc.path)
		if err != nil {
			t.Fatal(err)
		}
		hop, err := proxyTarget(u)
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: error %v, want one saying %s", tc.path, err, tc.err)
			}
		case err != nil:
			t.Errorf("%s: %v", tc.path, err)
		case hop.port != tc.port || hop.path != tc.want || hop.prefix != base+"/"+strconv.Itoa(tc.port):
			t.Errorf("%s: port %d path %q prefix %q, want %d %q under %s", tc.path, hop.port, hop.path, hop.prefix, tc.port, tc.want, base)
		}
	}
}

// TestToSandboxSpeaksForNoOne: nothing that speaks for the caller at the
// cluster, nor the browser's cookies for other services on the same host,
// reaches the agent's service; the request goes to the sandbox's loopback
// port with its path as sent.
func TestToSandboxSpeaksForNoOne(t *testing.T) {
	in := httptest.NewRequest(http.MethodPost, "https://api.example:6443/apis/x/proxy/8000/a%2Fb?q=1", nil)
	for k, v := range map[string]string{
		"Authorization": "Bearer cluster-token", "Proxy-Authorization": "Basic eA==", "Cookie": "console=1",
		"X-Remote-User": "dave", "X-Remote-Group": "system:masters", "X-Remote-Extra-Scopes": "all",
		"Impersonate-User": "admin", "X-Forwarded-For": "10.0.0.1", "Forwarded": "for=10.0.0.1",
		"Accept": "application/json", "X-Agent-Header": "kept",
	} {
		in.Header.Set(k, v)
	}
	out := in.Clone(in.Context())
	toSandbox(out, proxyHop{port: 8000, path: "/a%2Fb"})
	if out.URL.String() != "http://127.0.0.1:8000/a%2Fb?q=1" || out.Host != "127.0.0.1:8000" {
		t.Errorf("to %s (Host %s), want http://127.0.0.1:8000/a%%2Fb?q=1", out.URL, out.Host)
	}
	for k := range out.Header {
		if k != "Accept" && k != "X-Agent-Header" {
			t.Errorf("header %s reaches the sandbox", k)
		}
	}
	if len(out.Header) != 2 {
		t.Errorf("headers %v, want Accept and X-Agent-Header", out.Header)
	}
	// A WebSocket handshake's token-bearing subprotocol goes; the
	// application's own stay.
	ws := httptest.NewRequest(http.MethodGet, "https://api.example:6443/apis/x/proxy/8000/ws", nil)
	ws.Header.Add("Sec-WebSocket-Protocol", "chat.v1, "+bearerProtocolPrefix+"Y2x1c3Rlci10b2tlbg")
	ws.Header.Add("Sec-WebSocket-Protocol", "v2.chat")
	toSandbox(ws, proxyHop{port: 8000, path: "/ws"})
	if got := ws.Header.Values("Sec-WebSocket-Protocol"); len(got) != 1 || got[0] != "chat.v1, v2.chat" {
		t.Errorf("subprotocols %q reach the sandbox, want chat.v1, v2.chat", got)
	}
	only := httptest.NewRequest(http.MethodGet, "https://api.example:6443/apis/x/proxy/8000/ws", nil)
	only.Header.Set("Sec-WebSocket-Protocol", bearerProtocolPrefix+"Y2x1c3Rlci10b2tlbg")
	toSandbox(only, proxyHop{port: 8000, path: "/ws"})
	if _, ok := only.Header["Sec-Websocket-Protocol"]; ok {
		t.Errorf("a handshake whose one subprotocol carried a token still names one: %q", only.Header.Values("Sec-WebSocket-Protocol"))
	}
}

// TestFromSandboxGuardsTheAPIOrigin: a proxied response keeps only what a
// client needs to read and cache it: it sets no cookie, clears no site
// data, grants no other site a read, announces no trailer and runs no
// script on the cluster API's origin; a 101 keeps the switch.
func TestFromSandboxGuardsTheAPIOrigin(t *testing.T) {
	in, _ := url.Parse("/apis/" + Group + "/" + Version + "/namespaces/team-a/openshellsandboxes/agent/proxy/8000/a/b")
	hop, err := proxyTarget(in)
	if err != nil {
		t.Fatal(err)
	}
	prefix := hop.prefix
	resp := &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Set-Cookie": {"a=1"}, "Set-Cookie2": {"b=1"},
		"Access-Control-Allow-Origin": {"*"}, "Access-Control-Allow-Credentials": {"true"}, "Content-Security-Policy": {"script-src *"},
		"Clear-Site-Data": {`"*"`}, "Strict-Transport-Security": {"max-age=1"}, "Refresh": {"0; url=/x"}, "Link": {"</x>; rel=preload"},
		"Referrer-Policy": {"no-referrer"}, "Trailer": {"X-T"}, "Upgrade": {"evil"}, "Content-Type": {"text/html"}, "Etag": {`"1"`}},
		Trailer: http.Header{"X-T": nil}}
	fromSandbox(resp, in, prefix)
	want := http.Header{"Content-Type": {"text/html"}, "Etag": {`"1"`}, "Content-Security-Policy": {proxyCSP}, "X-Content-Type-Options": {"nosniff"}}
	if len(resp.Header) != len(want) || resp.Trailer != nil {
		t.Fatalf("headers %v trailers %v, want %v and none", resp.Header, resp.Trailer, want)
	}
	for k, v := range want {
		if got := resp.Header.Values(k); len(got) != 1 || got[0] != v[0] {
			t.Errorf("%s: %v, want %v", k, got, v)
		}
	}
	up := &http.Response{StatusCode: http.StatusSwitchingProtocols, Header: http.Header{"Upgrade": {"websocket"}, "Connection": {"Upgrade"},
		"Sec-Websocket-Accept": {"x"}, "Set-Cookie": {"a=1"}}}
	fromSandbox(up, in, prefix)
	if up.Header.Get("Upgrade") != "websocket" || up.Header.Get("Sec-Websocket-Accept") != "x" || up.Header.Get("Set-Cookie") != "" {
		t.Errorf("a 101's headers: %v", up.Header)
	}
}

// TestConfineLocation: a redirect stays within the sandbox's port, or is
// not followed.
func TestConfineLocation(t *testing.T) {
	in, _ := url.Parse("/apis/" + Group + "/" + Version + "/namespaces/team-a/openshellsandboxes/agent/proxy/8000/app/page")
	hop, err := proxyTarget(in)
	if err != nil {
		t.Fatal(err)
	}
	prefix := hop.prefix
	for loc, want := range map[string]string{
		"/login?next=%2F":            prefix + "/login?next=%2F",
		"/":                          prefix + "/",
		"":                           prefix + "/app/page",
		"?q=1":                       prefix + "/app/page?q=1",
		"other#top":                  prefix + "/app/other#top",
		"./":                         prefix + "/app/",
		"../up":                      prefix + "/up",
		"..":                         prefix + "/",
		"/a%2Fb":                     prefix + "/a/b",
		"../../../../b/proxy/8000/x": "",
		"../../../b/proxy/8000/x":    "",
		"/../../../b/proxy/8000/act": "",
		"%2e%2e/%2e%2e/%2e%2e/%2e%2e/b/proxy/8000/act":           "",
		"/..%2f..%2f..%2fb/proxy/8000/act":                       "",
		"/..\\..\\..\\b/proxy/8000/act":                          "",
		"http://localhost:8001/api/v1/namespaces/team-a/secrets": "",
		"//evil.example/":                                        "",
		"http:/x":                                                "",
		"https://idp.example/authorize":                          "",
		"mailto:a@b":                                             "",
	} {
		got, ok := confineLocation(loc, in, prefix)
		if want == "" && ok || want != "" && got != want {
			t.Errorf("%q: %q %v, want %q", loc, got, ok, want)
		}
	}
}

// TestRefusedBeforeAnyGateway: a proxy request without a usable port, one
// whose user may only get, and a request a web page made on its own
// (Origin; Fetch Metadata other than the user's own navigation or a
// proxied page's request for its own port) are refused before a gateway
// is opened, each saying why.
func TestRefusedBeforeAnyGateway(t *testing.T) {
	ready := &openshellv1alpha1.OpenShellSandbox{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "ready"}, Status: openshellv1alpha1.OpenShellSandboxStatus{
		Phase: openshellv1alpha1.SandboxPhaseReady, Gateway: "p/gw", GatewaySandboxName: "x"}}
	s := &Server{Authn: headerAuthn{}, Reader: fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(ready).Build(), Gateways: noGateways{},
		Audit: Auditor{Log: logr.Discard()}, Authz: allowList{
			"dave create team-a/ready/exec": true, "dave create team-a/ready/proxy": true, "vic get team-a/ready/proxy": true,
		}}
	api := "/apis/" + Group + "/" + Version + "/namespaces/team-a/openshellsandboxes/"
	base := api + "ready/"
	page := func(path string) string { return "http://localhost:8001" + path }
	const reached, refused = http.StatusServiceUnavailable, http.StatusForbidden
	for _, tc := range []struct {
		name, method, path, user string
		header                   map[string]string
		want                     int
		text                     string
	}{
		{"proxy without a port", http.MethodGet, base + "proxy", "dave", nil, http.StatusBadRequest, "proxy needs a port"},
		{"proxy to no port", http.MethodGet, base + "proxy/web/", "dave", nil, http.StatusBadRequest, "from 1 to 65535"},
		{"a GET through proxy needs create", http.MethodGet, base + "proxy/8000/", "vic", nil, refused, "cannot create openshellsandboxes/proxy"},
		{"a page's WebSocket exec", http.MethodGet, base + "exec?command=id&stdout=true", "dave", map[string]string{"Origin": "https://evil.example"},
			refused, `a request from a web page (Origin \"https://evil.example\")`},
		{"a page's request through proxy", http.MethodPost, base + "proxy/8000/", "dave", map[string]string{"Origin": "null"}, refused, "web page"},
		{"another site's image", http.MethodGet, base + "proxy/8000/act", "dave", map[string]string{"Sec-Fetch-Site": "cross-site"}, refused,
			`Sec-Fetch-Site \"cross-site\"`},
		{"a sibling site's image", http.MethodGet, base + "proxy/8000/act", "dave", map[string]string{"Sec-Fetch-Site": "same-site"}, refused, "web page"},
		{"another sandbox's page", http.MethodGet, base + "proxy/8000/act", "dave",
			map[string]string{"Sec-Fetch-Site": "same-origin", "Referer": page(api + "other/proxy/8000/")}, refused, "web page"},
		{"another port's page", http.MethodGet, base + "proxy/8000/act", "dave",
			map[string]string{"Sec-Fetch-Site": "same-origin", "Referer": page(base + "proxy/80001/")}, refused, "web page"},
		{"a page whose path names this port", http.MethodGet, base + "proxy/8000/act", "dave",
			map[string]string{"Sec-Fetch-Site": "same-origin", "Referer": page(api + "other/proxy/8000" + base + "proxy/8000/")}, refused, "web page"},
		{"another sandbox's page with an encoded slash in its address", http.MethodGet, base + "proxy/8000/act", "dave",
			map[string]string{"Sec-Fetch-Site": "same-origin", "Referer": page("/apis%2F" + Group + "/" + Version + "/namespaces/team-a/openshellsandboxes/other/proxy/8000" +
				base + "proxy/8000/")}, refused, "web page"},
		{"a same-origin request without a Referer", http.MethodGet, base + "proxy/8000/act", "dave", map[string]string{"Sec-Fetch-Site": "same-origin"},
			refused, "web page"},
		{"an exec from a proxied page", http.MethodGet, base + "exec?command=id&stdout=true", "dave",
			map[string]string{"Sec-Fetch-Site": "same-origin", "Referer": page(base + "proxy/8000/")}, refused, "web page"},
		{"the page's own image", http.MethodGet, base + "proxy/8000/logo.png", "dave",
			map[string]string{"Sec-Fetch-Site": "same-origin", "Referer": page(base + "proxy/8000/index.html")}, reached, "cannot be reached"},
		{"a pod's page through pods/proxy whose path names this port", http.MethodGet, base + "proxy/8000/act", "dave",
			map[string]string{"Sec-Fetch-Site": "same-origin", "Referer": page("/api/v1/namespaces/x/pods/evil/proxy" + base + "proxy/8000/")}, refused, "web page"},
		{"the page itself, without its trailing slash", http.MethodGet, base + "proxy/8000/logo.png", "dave",
			map[string]string{"Sec-Fetch-Site": "same-origin", "Referer": page(base + "proxy/8000")}, reached, "cannot be reached"},
		{"the user's own navigation", http.MethodGet, base + "proxy/8000/", "dave", map[string]string{"Sec-Fetch-Site": "none"}, reached, "cannot be reached"},
		{"a client that is not a browser", http.MethodGet, base + "proxy/8000/", "dave", nil, reached, "cannot be reached"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest(tc.method, tc.path, nil)
			req.Header.Set("X-Test-User", tc.user)
			req.Header.Set("X-Test-Proxy", "1")
			for k, v := range tc.header {
				req.Header.Set(k, v)
			}
			w := httptest.NewRecorder()
			s.Handler().ServeHTTP(w, req)
			if w.Code != tc.want || !strings.Contains(w.Body.String(), tc.text) {
				t.Fatalf("status %d %s, want %d saying %q", w.Code, w.Body.String(), tc.want, tc.text)
			}
		})
	}
}

// TestProxyRequestsAreLoggedNotEvented: a page load is dozens of proxy
// requests; each is a log line, none an Event, while an exec still is,
// and so is a proxy request that switches protocols (a tunnel).
func TestProxyRequestsAreLoggedNotEvented(t *testing.T) {
	rec := events.NewFakeRecorder(10)
	var logged []string
	a := Auditor{Log: funcr.New(func(_, args string) { logged = append(logged, args) }, funcr.Options{}), Recorder: rec}
	sb := &openshellv1alpha1.OpenShellSandbox{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "agent"}}
	a.Start(context.Background(), sb, Session{User: "dave", Subresource: SubresourceProxy, Command: []string{"GET", "8000/"}}).End(0, nil)
	if len(rec.Events) != 0 || len(logged) != 2 {
		t.Fatalf("a proxy request made %d Events and %d log lines, want 0 and 2", len(rec.Events), len(logged))
	}
	a.Start(context.Background(), sb, Session{User: "dave", Subresource: SubresourceExec, Command: []string{"id"}}).End(0, nil)
	if len(rec.Events) != 2 {
		t.Fatalf("an exec made %d Events, want 2", len(rec.Events))
	}
	a.Start(context.Background(), sb, Session{User: "dave", Subresource: SubresourceProxy, Command: []string{"GET", "8000/ws"}, Tunnel: true}).End(0, nil)
	if len(rec.Events) != 4 {
		t.Fatalf("a proxy tunnel made %d Events, want 2 as a port-forward", len(rec.Events)-2)
	}
}
