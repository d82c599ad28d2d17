package oidc

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/openshell/openshell-operator/internal/scheme"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func newIssuer(t *testing.T, c client.Client, clk *clock) *Issuer {
	t.Helper()
	i := &Issuer{URL: "https://issuer.example", Client: c, SecretNamespace: "ops", SecretName: "oidc-keys", Clock: clk.now}
	if err := i.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	return i
}

func verify(t *testing.T, tok string, set jose.JSONWebKeySet, aud string, at time.Time) (Claims, error) {
	t.Helper()
	parsed, err := jwt.ParseSigned(tok, []jose.SignatureAlgorithm{jose.RS256})
	if err != nil {
		return Claims{}, err
	}
	keys := set.Key(parsed.Headers[0].KeyID)
	if len(keys) == 0 {
		return Claims{}, errors.New("unknown kid")
	}
	var c Claims
	if err := parsed.Claims(keys[0].Key, &c); err != nil {
		return Claims{}, err
	}
	return c, c.ValidateWithLeeway(jwt.Expected{Issuer: "https://issuer.example", AnyAudience: jwt.Audience{aud}, Time: at}, 0)
}

func TestTokensVerifyAgainstJWKS(t *testing.T) {
	clk := &clock{time.Now()}
	c := fake.NewClientBuilder().WithScheme(scheme.New()).Build()
	i := newIssuer(t, c, clk)
	tok, exp, err := i.Token(Audience("gw-ns", "gw"))
	if err != nil {
		t.Fatal(err)
	}
	if exp.Sub(clk.t) > TokenTTL {
		t.Fatalf("token lives %s, more than %s", exp.Sub(clk.t), TokenTTL)
	}
	claims, err := verify(t, tok, i.JWKS(), Audience("gw-ns", "gw"), clk.t)
	if err != nil {
		t.Fatalf("token does not verify: %v", err)
	}
	if len(claims.Roles) != 1 || claims.Roles[0] != AdminRole {
		t.Fatalf("roles = %v", claims.Roles)
	}
	if _, err := verify(t, tok, i.JWKS(), Audience("gw-ns", "other"), clk.t); err == nil {
		t.Fatal("a token for one gateway verified for another")
	}
	if _, err := verify(t, tok, i.JWKS(), Audience("gw-ns", "gw"), clk.t.Add(TokenTTL+time.Second)); err == nil {
		t.Fatal("an expired token verified")
	}
}

func TestKeyRotationKeepsPreviousKeyUntilTokensExpire(t *testing.T) {
	clk := &clock{time.Now()}
	c := fake.NewClientBuilder().WithScheme(scheme.New()).Build()
	i := newIssuer(t, c, clk)
	old, _, _ := i.Token("aud")
	if n := len(i.JWKS().Keys); n != 2 {
		t.Fatalf("JWKS has %d keys, want 2 (current and next)", n)
	}

	// A follower only loads (never writes) the same keys from the Secret.
	follower := &Issuer{URL: i.URL, Client: c, SecretNamespace: "ops", SecretName: "oidc-keys", Clock: clk.now}
	if err := follower.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := verify(t, old, follower.JWKS(), "aud", clk.t); err != nil {
		t.Fatalf("a follower does not share the key: %v", err)
	}

	clk.t = clk.t.Add(KeyRotation + time.Minute)
	if err := i.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := len(i.JWKS().Keys); n != 3 {
		t.Fatalf("JWKS right after rotation has %d keys, want 3 (current, next, previous)", n)
	}
	if _, err := verify(t, old, i.JWKS(), "aud", clk.t.Add(-KeyRotation)); err != nil {
		t.Fatalf("a token of the previous key no longer verifies: %v", err)
	}
	// The follower has not reloaded yet: its JWKS (published a rotation
	// ago) still verifies the leader's new tokens.
	fresh, _, _ := i.Token("aud")
	if _, err := verify(t, fresh, follower.JWKS(), "aud", clk.t); err != nil {
		t.Fatalf("a follower's stale JWKS does not verify the new signing key: %v", err)
	}
	clk.t = clk.t.Add(TokenTTL + 2*time.Minute)
	if n := len(i.JWKS().Keys); n != 2 {
		t.Fatalf("JWKS after the old tokens expired has %d keys, want 2", n)
	}
	s := &corev1.Secret{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "ops", Name: "oidc-keys"}, s); err != nil || len(s.Data[keySecretPrevious]) == 0 {
		t.Fatalf("rotated secret: %v", err)
	}
	// A follower never writes, and says when there is nothing to load yet.
	empty := &Issuer{Client: fake.NewClientBuilder().WithScheme(scheme.New()).Build(), SecretNamespace: "ops", SecretName: "oidc-keys"}
	if err := empty.Load(context.Background()); !errors.Is(err, ErrNoKeys) {
		t.Fatalf("Load without a Secret = %v, want ErrNoKeys", err)
	}
}

func TestTokenSourceRefreshesBeforeExpiry(t *testing.T) {
	clk := &clock{time.Now()}
	i := newIssuer(t, fake.NewClientBuilder().WithScheme(scheme.New()).Build(), clk)
	ts := &TokenSource{Issuer: i, Audience: "aud"}
	a, _ := ts.Token(context.Background())
	b, _ := ts.Token(context.Background())
	if a != b {
		t.Fatal("a fresh token was not reused")
	}
	clk.t = clk.t.Add(TokenTTL - RefreshBefore + time.Second)
	c, _ := ts.Token(context.Background())
	if c == a {
		t.Fatal("a token about to expire was reused")
	}
}

func TestDiscovery(t *testing.T) {
	clk := &clock{time.Now()}
	i := newIssuer(t, fake.NewClientBuilder().WithScheme(scheme.New()).Build(), clk)
	srv := httptest.NewServer(i.Handler())
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL + "/.well-known/openid-configuration")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var doc map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	if doc["issuer"] != i.URL || doc["jwks_uri"] != i.URL+"/jwks.json" {
		t.Fatalf("discovery = %v", doc)
	}
}

// TestForcedRotationsInQuickSuccession removes rotated-at twice within a
// token's life (the documented way to rotate now): the cached token is
// re-minted with each new signing key, so the token a gateway sees is
// always signed by a key the JWKS still publishes.
func TestForcedRotationsInQuickSuccession(t *testing.T) {
	clk := &clock{time.Now()}
	c := fake.NewClientBuilder().WithScheme(scheme.New()).Build()
	i := newIssuer(t, c, clk)
	ts := &TokenSource{Issuer: i, Audience: "aud"}
	first, _ := ts.Token(context.Background())
	for round := range 2 {
		s := &corev1.Secret{}
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: "ops", Name: "oidc-keys"}, s); err != nil {
			t.Fatal(err)
		}
		delete(s.Data, KeySecretRotatedAt)
		if err := c.Update(context.Background(), s); err != nil {
			t.Fatal(err)
		}
		clk.t = clk.t.Add(time.Second)
		if err := i.Sync(context.Background()); err != nil {
			t.Fatal(err)
		}
		tok, _ := ts.Token(context.Background())
		if tok == first {
			t.Fatalf("round %d: the token signed before the rotation was reused", round)
		}
		if _, err := verify(t, tok, i.JWKS(), "aud", clk.t); err != nil {
			t.Fatalf("round %d: the token does not verify against the JWKS: %v", round, err)
		}
	}
	if _, err := verify(t, first, i.JWKS(), "aud", clk.t); err == nil {
		t.Fatal("two rotations later the first key is still published: the test rotated nothing")
	}
}

// TestRecordSignatures: a record the issuer signed verifies, with any key
// it still holds after a rotation; a changed record, another issuer's
// signature and a token passed off as a record do not.
func TestRecordSignatures(t *testing.T) {
	c := fake.NewClientBuilder().WithScheme(scheme.New()).Build()
	clk := &clock{t: time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)}
	i := newIssuer(t, c, clk)
	payload := []byte(`{"subject":"kube:dave","workspace":"ws-1"}`)
	sig, err := i.SignRecord(payload)
	if err != nil {
		t.Fatal(err)
	}
	if err := i.VerifyRecord(payload, sig); err != nil {
		t.Fatalf("its own record: %v", err)
	}
	if err := i.VerifyRecord([]byte(`{"subject":"kube:eve","workspace":"ws-1"}`), sig); err == nil {
		t.Fatal("a changed record verified")
	}
	other := newIssuer(t, fake.NewClientBuilder().WithScheme(scheme.New()).Build(), clk)
	forged, err := other.SignRecord(payload)
	if err != nil {
		t.Fatal(err)
	}
	if err := i.VerifyRecord(payload, forged); err == nil {
		t.Fatal("another issuer's signature verified")
	}
	tok, _, err := i.Token("aud")
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(tok, ".")
	body, _ := base64.RawURLEncoding.DecodeString(parts[1])
	if err := i.VerifyRecord(body, parts[0]+".."+parts[2]); err == nil {
		t.Fatal("a token passed as a record")
	}
	// After a rotation the previous key still verifies.
	clk.t = clk.t.Add(KeyRotation + time.Minute)
	if err := i.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := i.VerifyRecord(payload, sig); err != nil {
		t.Fatalf("a record signed before the rotation: %v", err)
	}
}
