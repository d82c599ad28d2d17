package relay

import (
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"k8s.io/apiserver/pkg/authentication/authenticator"
)

func jwt(payload string) string {
	return "eyJhbGciOiJSUzI1NiJ9." + base64.RawURLEncoding.EncodeToString([]byte(payload)) + ".c2ln"
}

// TestOnlyTokensForTheAudienceAreReviewed: what the Internet sends the
// external port listener costs a TokenReview only when it is a JWT naming
// the listener's audience; the review itself asks for that audience.
func TestOnlyTokensForTheAudienceAreReviewed(t *testing.T) {
	for _, tc := range []struct {
		name, header string
		reviewed     bool
	}{
		{"no header", "", false},
		{"not a bearer", "Basic dXNlcjpwYXNz", false},
		{"an OAuth token", "Bearer sha256~abcdefghijklmnopqrstuvwxyz0123456789", false},
		{"random", "Bearer " + strings.Repeat("x", 40), false},
		{"a token for the kube-apiserver", "Bearer " + jwt(`{"aud":["https://kubernetes.default.svc"],"sub":"system:serviceaccount:a:b"}`), false},
		{"aud as a string", "Bearer " + jwt(`{"aud":"`+ExternalAudience+`"}`), true},
		{"aud among others", "Bearer " + jwt(`{"aud":["x","`+ExternalAudience+`"]}`), true},
		{"payload not base64", "Bearer a.%%%.c", false},
		{"payload not JSON", "Bearer " + jwt(`aud`), false},
		{"too long", "Bearer " + jwt(`{"aud":"`+ExternalAudience+`","pad":"`+strings.Repeat("p", maxBearerToken)+`"}`), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inner := &recordingAuthn{}
			r := httptest.NewRequest("GET", "https://ports.example/", nil)
			if tc.header != "" {
				r.Header.Set("Authorization", tc.header)
			}
			_, ok, err := forExternalAudience{inner}.AuthenticateRequest(r)
			if err != nil || ok {
				t.Fatalf("authenticated %v, err %v: the inner authenticator decides", ok, err)
			}
			if inner.called != tc.reviewed {
				t.Fatalf("reviewed %v, want %v", inner.called, tc.reviewed)
			}
			if inner.called && (len(inner.auds) != 1 || inner.auds[0] != ExternalAudience) {
				t.Fatalf("the review asks for audiences %v, want [%s]", inner.auds, ExternalAudience)
			}
		})
	}
}

type recordingAuthn struct {
	called bool
	auds   authenticator.Audiences
}

func (a *recordingAuthn) AuthenticateRequest(r *http.Request) (*authenticator.Response, bool, error) {
	a.called = true
	a.auds, _ = authenticator.AudiencesFrom(r.Context())
	return nil, false, nil
}
