package relay

import (
	"context"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
)

func jwt(payload string) string {
	return "eyJhbGciOiJSUzI1NiJ9." + base64.RawURLEncoding.EncodeToString([]byte(payload)) + ".c2ln"
}

// reviews plays the cached TokenReview: it accepts the token good and
// records what it was asked.
type reviews struct {
	good   string
	calls  int
	asked  string
	wanted authenticator.Audiences
}

func (r *reviews) AuthenticateToken(ctx context.Context, token string) (*authenticator.Response, bool, error) {
	r.calls++
	r.asked = token
	r.wanted, _ = authenticator.AudiencesFrom(ctx)
	if token != r.good {
		return nil, false, nil
	}
	return &authenticator.Response{User: &user.DefaultInfo{Name: "system:serviceaccount:team-a:caller"}}, true, nil
}

// TestOnlyTokensForTheAudienceAreReviewed: what the Internet sends the
// external port listener costs a TokenReview only when it is a JWT naming
// the listener's audience, read from the header as the kube-apiserver
// reads it; the review asks for that audience, and the token's expiry
// comes back with its user.
func TestOnlyTokensForTheAudienceAreReviewed(t *testing.T) {
	good := jwt(`{"aud":["` + ExternalAudience + `"],"exp":1893456000}`)
	for _, tc := range []struct {
		name, header string
		reviewed     bool
		ok           bool
	}{
		{"no header", "", false, false},
		{"not a bearer", "Basic dXNlcjpwYXNz", false, false},
		{"an OAuth token", "Bearer sha256~abcdefghijklmnopqrstuvwxyz0123456789", false, false},
		{"random", "Bearer " + strings.Repeat("x", 40), false, false},
		{"a token for the kube-apiserver", "Bearer " + jwt(`{"aud":["https://kubernetes.default.svc"],"sub":"system:serviceaccount:a:b"}`), false, false},
		{"aud as a string, not the cluster's", "Bearer " + jwt(`{"aud":"`+ExternalAudience+`"}`), true, false},
		{"aud among others, not the cluster's", "Bearer " + jwt(`{"aud":["x","`+ExternalAudience+`"]}`), true, false},
		{"the cluster's token", "Bearer " + good, true, true},
		{"lower-case scheme", "bearer " + good, true, true},
		{"the claims checked are the token reviewed", "Bearer junk " + good, false, false},
		{"payload not base64", "Bearer a.%%%.c", false, false},
		{"payload not JSON", "Bearer " + jwt(`aud`), false, false},
		{"too long", "Bearer " + jwt(`{"aud":"`+ExternalAudience+`","pad":"`+strings.Repeat("p", maxBearerToken)+`"}`), false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rv := &reviews{good: good}
			a := &ExternalAuthenticator{tokens: rv, failures: &sourceLimits{}}
			r := httptest.NewRequest(http.MethodGet, "https://ports.example/", nil)
			if tc.header != "" {
				r.Header.Set("Authorization", tc.header)
			}
			u, exp, err := a.authenticate(r)
			if (rv.calls > 0) != tc.reviewed {
				t.Fatalf("reviewed %v, want %v", rv.calls > 0, tc.reviewed)
			}
			if rv.calls > 0 && (len(rv.wanted) != 1 || rv.wanted[0] != ExternalAudience) {
				t.Fatalf("the review asks for audiences %v, want [%s]", rv.wanted, ExternalAudience)
			}
			if (err == nil) != tc.ok {
				t.Fatalf("authenticated %v (%v), want %v", err == nil, err, tc.ok)
			}
			if tc.ok && (u.GetName() != "system:serviceaccount:team-a:caller" || !exp.Equal(time.Unix(1893456000, 0))) {
				t.Fatalf("user %v expiring %v", u, exp)
			}
			if !tc.ok && err.ErrStatus.Code != http.StatusUnauthorized {
				t.Fatalf("refused with %d, want 401", err.ErrStatus.Code)
			}
		})
	}
}

// TestFailuresAreBoundedPerCaller: a caller (the address the router
// forwards) whose tokens keep failing is refused without a TokenReview;
// another caller is not.
func TestFailuresAreBoundedPerCaller(t *testing.T) {
	rv := &reviews{good: jwt(`{"aud":"` + ExternalAudience + `"}`)}
	a := &ExternalAuthenticator{tokens: rv, failures: &sourceLimits{}}
	from := func(addr string, n int) *http.Request {
		r := httptest.NewRequest(http.MethodGet, "https://ports.example/", nil)
		r.Header.Set("Authorization", "Bearer "+jwt(`{"aud":"`+ExternalAudience+`","jti":"`+strings.Repeat("n", n)+`"}`))
		r.Header.Add("X-Forwarded-For", "203.0.113.9") // what the caller sent
		r.Header.Add("X-Forwarded-For", addr)          // what the router appended
		return r
	}
	for i := range failureBurst {
		if _, _, err := a.authenticate(from("198.51.100.7", i)); err == nil || err.ErrStatus.Code != http.StatusUnauthorized {
			t.Fatalf("failure %d: %v", i, err)
		}
	}
	reviewed := rv.calls
	_, _, err := a.authenticate(from("198.51.100.7", 99))
	if err == nil || err.ErrStatus.Code != http.StatusTooManyRequests || rv.calls != reviewed {
		t.Fatalf("after %d failures: %v, %d reviews (want 429 without one)", failureBurst, err, rv.calls-reviewed)
	}
	if _, _, err := a.authenticate(from("198.51.100.8", 0)); err == nil || err.ErrStatus.Code != http.StatusUnauthorized {
		t.Fatalf("another caller: %v, want 401", err)
	}
}
