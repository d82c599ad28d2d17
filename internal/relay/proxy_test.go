package relay

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
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
		case hop.port != tc.port || hop.path != tc.want:
			t.Errorf("%s: port %d path %q, want %d %q", tc.path, hop.port, hop.path, tc.port, tc.want)
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
}

// TestFromSandboxGuardsTheAPIOrigin: a proxied response sets no cookie,
// grants no other site a read and runs no script on the cluster API's
// origin.
func TestFromSandboxGuardsTheAPIOrigin(t *testing.T) {
	h := http.Header{"Set-Cookie": {"a=1"}, "Set-Cookie2": {"b=1"}, "Access-Control-Allow-Origin": {"*"},
		"Access-Control-Allow-Credentials": {"true"}, "Content-Security-Policy": {"script-src *"}, "Content-Type": {"text/html"}}
	fromSandbox(h)
	want := http.Header{"Content-Type": {"text/html"}, "Content-Security-Policy": {"sandbox"}, "X-Content-Type-Options": {"nosniff"}}
	if len(h) != len(want) {
		t.Fatalf("headers %v, want %v", h, want)
	}
	for k, v := range want {
		if got := h.Values(k); len(got) != 1 || got[0] != v[0] {
			t.Errorf("%s: %v, want %v", k, got, v)
		}
	}
}

// TestRefusedBeforeAnyGateway: a proxy request without a usable port, one
// whose user may only get, and any request a web page makes (Origin) are
// refused before a gateway is opened, each saying why.
func TestRefusedBeforeAnyGateway(t *testing.T) {
	ready := &openshellv1alpha1.OpenShellSandbox{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "ready"}, Status: openshellv1alpha1.OpenShellSandboxStatus{
		Phase: openshellv1alpha1.SandboxPhaseReady, Gateway: "p/gw", GatewaySandboxName: "x"}}
	s := &Server{Authn: headerAuthn{}, Reader: fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(ready).Build(), Gateways: noGateways{},
		Audit: Auditor{Log: logr.Discard()}, Authz: allowList{
			"dave create team-a/ready/exec": true, "dave create team-a/ready/proxy": true, "vic get team-a/ready/proxy": true,
		}}
	base := "/apis/" + Group + "/" + Version + "/namespaces/team-a/openshellsandboxes/ready/"
	for _, tc := range []struct {
		name, method, path, user, origin string
		want                             int
		text                             string
	}{
		{"proxy without a port", http.MethodGet, base + "proxy", "dave", "", http.StatusBadRequest, "proxy needs a port"},
		{"proxy to no port", http.MethodGet, base + "proxy/web/", "dave", "", http.StatusBadRequest, "from 1 to 65535"},
		{"a GET through proxy needs create", http.MethodGet, base + "proxy/8000/", "vic", "", http.StatusForbidden, "cannot create openshellsandboxes/proxy"},
		{"a page's WebSocket exec", http.MethodGet, base + "exec?command=id&stdout=true", "dave", "https://evil.example", http.StatusForbidden, `a request from a web page (Origin \"https://evil.example\")`},
		{"a page's request through proxy", http.MethodPost, base + "proxy/8000/", "dave", "null", http.StatusForbidden, "web page"},
		{"a proxied request reaches the gateway", http.MethodGet, base + "proxy/8000/", "dave", "", http.StatusServiceUnavailable, "cannot be reached"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest(tc.method, tc.path, nil)
			req.Header.Set("X-Test-User", tc.user)
			req.Header.Set("X-Test-Proxy", "1")
			if tc.origin != "" {
				req.Header.Set("Origin", tc.origin)
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
// requests; each is a log line, none an Event, while an exec still is.
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
}
