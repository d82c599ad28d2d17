package relay

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/scheme"
)

// headerAuthn believes X-Test-User when X-Test-Proxy is set (the stand-in
// for a verified front-proxy certificate).
type headerAuthn struct{}

func (headerAuthn) AuthenticateRequest(r *http.Request) (*authenticator.Response, bool, error) {
	if r.Header.Get("X-Test-Proxy") == "" {
		return nil, false, nil
	}
	return &authenticator.Response{User: &user.DefaultInfo{Name: r.Header.Get("X-Test-User")}}, true, nil
}

// allowList allows "user verb ns/name/sub" entries.
type allowList map[string]bool

func (a allowList) Allowed(_ context.Context, u user.Info, verb, ns, name, sub string) (bool, string, error) {
	return a[u.GetName()+" "+verb+" "+ns+"/"+name+"/"+sub], "no RBAC rule", nil
}

type noGateways struct{}

func (noGateways) Open(context.Context, *openshellv1alpha1.OpenShellSandbox, string) (*Target, error) {
	return nil, errors.New("no gateway in this test")
}

// TestServeRefusals: every request is authenticated, authorized and
// checked against the sandbox's state before any gateway is opened, each
// refusal with the status a kubectl user recognises.
func TestServeRefusals(t *testing.T) {
	now := metav1.NewTime(time.Now())
	sandboxes := []*openshellv1alpha1.OpenShellSandbox{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "ready"}, Status: openshellv1alpha1.OpenShellSandboxStatus{
			Phase: openshellv1alpha1.SandboxPhaseReady, Gateway: "p/gw", GatewaySandboxName: "x"}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "pending"}, Status: openshellv1alpha1.OpenShellSandboxStatus{
			Phase: openshellv1alpha1.SandboxPhasePending}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "going", DeletionTimestamp: &now, Finalizers: []string{"x"}},
			Status: openshellv1alpha1.OpenShellSandboxStatus{Phase: openshellv1alpha1.SandboxPhaseReady, Gateway: "p/gw", GatewaySandboxName: "y"}},
	}
	b := fake.NewClientBuilder().WithScheme(scheme.New())
	for _, sb := range sandboxes {
		b = b.WithObjects(sb)
	}
	s := &Server{Authn: headerAuthn{}, Reader: b.Build(), Gateways: noGateways{}, Audit: Auditor{Log: logr.Discard()},
		Authz: allowList{
			"dave create team-a/ready/exec": true, "dave get team-a/ready/log": true, "dave create team-a/pending/exec": true,
			"dave create team-a/going/exec": true, "dave create team-a/gone/exec": true,
		}}
	base := "/apis/" + Group + "/" + Version + "/namespaces/"
	for _, tc := range []struct {
		name, method, path, user string
		proxy                    bool
		want                     int
		text                     string
	}{
		{"not through the front proxy", http.MethodGet, "/apis", "dave", false, http.StatusUnauthorized, "front-proxy"},
		{"discovery", http.MethodGet, "/apis/" + Group + "/" + Version, "dave", true, http.StatusOK, "openshellsandboxes/exec"},
		{"no RBAC", http.MethodPost, base + "team-a/openshellsandboxes/ready/exec?command=echo", "mallory", true, http.StatusForbidden, `cannot create openshellsandboxes/exec in namespace`},
		{"RBAC in another sandbox only", http.MethodGet, base + "team-a/openshellsandboxes/pending/log", "dave", true, http.StatusForbidden, "cannot get"},
		{"a method the subresource has not", http.MethodDelete, base + "team-a/openshellsandboxes/ready/exec", "dave", true, http.StatusMethodNotAllowed, ""},
		{"an unknown subresource", http.MethodGet, base + "team-a/openshellsandboxes/ready/attach", "dave", true, http.StatusNotFound, "not found"},
		{"a bad namespace", http.MethodPost, base + "Team_A/openshellsandboxes/ready/exec", "dave", true, http.StatusBadRequest, "invalid namespace"},
		{"no such sandbox", http.MethodPost, base + "team-a/openshellsandboxes/gone/exec?command=echo", "dave", true, http.StatusNotFound, "not found"},
		{"not Ready", http.MethodPost, base + "team-a/openshellsandboxes/pending/exec?command=echo", "dave", true, http.StatusConflict, "not Ready"},
		{"being deleted", http.MethodPost, base + "team-a/openshellsandboxes/going/exec?command=echo", "dave", true, http.StatusConflict, "being deleted"},
		{"no command", http.MethodPost, base + "team-a/openshellsandboxes/ready/exec?stdout=true", "dave", true, http.StatusBadRequest, "no command"},
		{"gateway down", http.MethodPost, base + "team-a/openshellsandboxes/ready/exec?command=echo&stdout=true", "dave", true, http.StatusServiceUnavailable, "cannot be reached"},
		{"bad tailLines", http.MethodGet, base + "team-a/openshellsandboxes/ready/log?tailLines=-1", "dave", true, http.StatusBadRequest, "tailLines"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest(tc.method, tc.path, nil)
			req.Header.Set("X-Test-User", tc.user)
			if tc.proxy {
				req.Header.Set("X-Test-Proxy", "1")
			}
			w := httptest.NewRecorder()
			s.Handler().ServeHTTP(w, req)
			if w.Code != tc.want {
				t.Fatalf("status %d, want %d: %s", w.Code, tc.want, w.Body.String())
			}
			if !strings.Contains(w.Body.String(), tc.text) {
				t.Fatalf("body %s does not say %q", w.Body.String(), tc.text)
			}
			if tc.want != http.StatusOK {
				var st metav1.Status
				if err := json.Unmarshal(w.Body.Bytes(), &st); err != nil || st.Kind != "Status" {
					t.Fatalf("a refusal is a metav1.Status (kubectl prints its message): %v %s", err, w.Body.String())
				}
			}
		})
	}
}
