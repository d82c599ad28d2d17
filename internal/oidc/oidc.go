// Package oidc makes the operator the OIDC issuer for its managed gateways,
// so that it holds a platform-admin identity without a long-lived secret:
// RS256 signing keys live in a Secret in the operator's namespace and rotate
// (the previous key stays in the JWKS until every token it signed has
// expired), discovery and JWKS are served over TLS, and access tokens live
// at most 15 minutes with an audience unique to each gateway.
package oidc

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Token and key lifetimes.
const (
	// TokenTTL bounds every token the operator mints.
	TokenTTL = 15 * time.Minute
	// RefreshBefore renews a cached token this long before it expires.
	RefreshBefore = 3 * time.Minute
	// KeyRotation is how long a signing key signs before it is replaced.
	KeyRotation = 24 * time.Hour
	// Subject identifies the operator in gateway audit logs.
	Subject = "system:openshell-operator"
	// AdminRole is the role the gateway maps to platform admin.
	AdminRole = "openshell-admin"
	// UserRole is the role the gateway maps to a workspace user (its
	// access to a workspace is then its membership there).
	UserRole = "openshell-user"
	// RolesClaim carries the roles (the gateway's roles_claim).
	RolesClaim = "roles"

	keySecretCurrent  = "current.pem"
	keySecretPrevious = "previous.pem"
	keySecretNext     = "next.pem"
)

// KeySecretRotatedAt is the key Secret's record of the last rotation
// (RFC 3339). Removing it makes the leader rotate at its next check: the
// way to rotate now (the previous key stays published until its tokens
// expire).
const KeySecretRotatedAt = "rotated-at"

// Audience is the audience of tokens for one gateway: unique, so a token
// for one gateway is useless at another.
func Audience(namespace, name string) string {
	return "openshell-gateway/" + namespace + "/" + name
}

type signingKey struct {
	key *rsa.PrivateKey
	kid string
}

// Issuer mints tokens and serves discovery and JWKS.
type Issuer struct {
	// URL is the issuer identifier, https://host[:port].
	URL string
	// Client reads and writes the key Secret (namespace SecretNamespace).
	Client          client.Client
	SecretNamespace string
	SecretName      string
	Clock           func() time.Time

	mu       sync.RWMutex
	caPEM    []byte
	current  *signingKey
	previous *signingKey
	next     *signingKey
	rotated  time.Time
}

func (i *Issuer) now() time.Time {
	if i.Clock != nil {
		return i.Clock()
	}
	return time.Now()
}

// ErrNoKeys says the key Secret does not exist yet (the leader creates it).
var ErrNoKeys = errors.New("the OIDC signing keys do not exist yet")

// Load reads the keys from the Secret without ever writing: what every
// replica does. Only the leader rotates (Sync); because the key it will
// sign with next is published a whole rotation period ahead, a replica
// that loads a minute late still serves a JWKS that verifies every token.
func (i *Issuer) Load(ctx context.Context) error {
	s := &corev1.Secret{}
	if err := i.Client.Get(ctx, client.ObjectKey{Namespace: i.SecretNamespace, Name: i.SecretName}, s); err != nil {
		if apierrors.IsNotFound(err) {
			return ErrNoKeys
		}
		return fmt.Errorf("read OIDC key secret: %w", err)
	}
	cur, prev, next, rotated := parseKeys(s)
	if cur == nil {
		return ErrNoKeys
	}
	i.set(cur, prev, next, rotated)
	return nil
}

// Sync loads the keys and, when due, rotates them: the next key (published
// since the last rotation) becomes the signing key, the signing key stays
// published as previous until its tokens expire, and a new next key is
// generated. It creates the Secret on first use and writes only when it
// rotates. Only the leader calls it (two writers would race; the loser's
// optimistically locked update fails and it loads the winner's keys).
func (i *Issuer) Sync(ctx context.Context) error {
	s := &corev1.Secret{}
	err := i.Client.Get(ctx, client.ObjectKey{Namespace: i.SecretNamespace, Name: i.SecretName}, s)
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("read OIDC key secret: %w", err)
	}
	exists := err == nil
	cur, prev, next, rotated := parseKeys(s)
	if cur != nil && next != nil && i.now().Sub(rotated) < KeyRotation {
		i.set(cur, prev, next, rotated)
		return nil
	}
	generate := func() (*signingKey, error) {
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			return nil, fmt.Errorf("generate OIDC signing key: %w", err)
		}
		return &signingKey{key: k, kid: kid(&k.PublicKey)}, nil
	}
	now := i.now()
	switch {
	case cur == nil: // first start
		if cur, err = generate(); err != nil {
			return err
		}
	case next == nil: // keys written before the next key was published: publish it first
		now = rotated
	default: // due
		prev, cur = cur, next
	}
	if next, err = generate(); err != nil {
		return err
	}
	data := map[string][]byte{keySecretCurrent: encodeKey(cur.key), keySecretNext: encodeKey(next.key),
		KeySecretRotatedAt: []byte(now.UTC().Format(time.RFC3339))}
	if prev != nil {
		data[keySecretPrevious] = encodeKey(prev.key)
	}
	s.Data = data
	s.Type = corev1.SecretTypeOpaque
	if exists {
		err = i.Client.Update(ctx, s)
	} else {
		s.ObjectMeta = metav1.ObjectMeta{Name: i.SecretName, Namespace: i.SecretNamespace,
			Labels: map[string]string{"app.kubernetes.io/managed-by": "openshell-operator", "app.kubernetes.io/component": "oidc"}}
		err = i.Client.Create(ctx, s)
	}
	if err != nil {
		return fmt.Errorf("store OIDC signing key: %w", err)
	}
	i.set(cur, prev, next, now)
	return nil
}

// RotatedAt is when the signing key last changed (zero before keys exist).
func (i *Issuer) RotatedAt() time.Time {
	i.mu.RLock()
	defer i.mu.RUnlock()
	return i.rotated
}

// HasKeys reports whether the issuer can sign.
func (i *Issuer) HasKeys() bool {
	i.mu.RLock()
	defer i.mu.RUnlock()
	return i.current != nil
}

// SetCA records the CA that signs the issuer's serving certificate.
func (i *Issuer) SetCA(pem []byte) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.caPEM = pem
}

// CA is the PEM CA gateways must trust to fetch discovery and JWKS; nil
// until the issuer serves.
func (i *Issuer) CA() []byte {
	i.mu.RLock()
	defer i.mu.RUnlock()
	return i.caPEM
}

func (i *Issuer) set(cur, prev, next *signingKey, rotated time.Time) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.current, i.previous, i.next, i.rotated = cur, prev, next, rotated
}

func parseKeys(s *corev1.Secret) (cur, prev, next *signingKey, rotated time.Time) {
	load := func(b []byte) *signingKey {
		blk, _ := pem.Decode(b)
		if blk == nil {
			return nil
		}
		k, err := x509.ParsePKCS1PrivateKey(blk.Bytes)
		if err != nil {
			return nil
		}
		return &signingKey{key: k, kid: kid(&k.PublicKey)}
	}
	cur, prev, next = load(s.Data[keySecretCurrent]), load(s.Data[keySecretPrevious]), load(s.Data[keySecretNext])
	rotated, _ = time.Parse(time.RFC3339, string(s.Data[KeySecretRotatedAt]))
	return cur, prev, next, rotated
}

func encodeKey(k *rsa.PrivateKey) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)})
}

func kid(pub *rsa.PublicKey) string {
	der, _ := x509.MarshalPKIXPublicKey(pub)
	sum := sha256.Sum256(der)
	return hex.EncodeToString(sum[:8])
}

// Claims are the token claims the gateway reads.
type Claims struct {
	jwt.Claims
	Roles []string `json:"roles"`
}

// Token mints the operator's own token for one audience (platform admin).
func (i *Issuer) Token(audience string) (string, time.Time, error) {
	tok, exp, _, err := i.token(audience, Subject, AdminRole)
	return tok, exp, err
}

// UserToken mints a workspace user's token for one audience: subject is
// whom the gateway's audit log names, and the role only UserRole. It never
// speaks for the operator itself.
func (i *Issuer) UserToken(audience, subject string) (string, time.Time, error) {
	if subject == "" || subject == Subject {
		return "", time.Time{}, fmt.Errorf("a user token needs a subject other than the operator's own (%q)", Subject)
	}
	tok, exp, _, err := i.token(audience, subject, UserRole)
	return tok, exp, err
}

// signingKID is the key ID tokens are signed with now.
func (i *Issuer) signingKID() string {
	i.mu.RLock()
	defer i.mu.RUnlock()
	if i.current == nil {
		return ""
	}
	return i.current.kid
}

func (i *Issuer) token(audience, subject string, roles ...string) (string, time.Time, string, error) {
	i.mu.RLock()
	k := i.current
	i.mu.RUnlock()
	if k == nil {
		return "", time.Time{}, "", errors.New("OIDC issuer has no signing key yet")
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: k.key},
		(&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", k.kid))
	if err != nil {
		return "", time.Time{}, "", fmt.Errorf("create signer: %w", err)
	}
	now := i.now()
	exp := now.Add(TokenTTL)
	c := Claims{Claims: jwt.Claims{
		Issuer: i.URL, Subject: subject, Audience: jwt.Audience{audience},
		IssuedAt: jwt.NewNumericDate(now), NotBefore: jwt.NewNumericDate(now.Add(-time.Minute)), Expiry: jwt.NewNumericDate(exp),
		ID: hex.EncodeToString(randBytes(12)),
	}, Roles: roles}
	tok, err := jwt.Signed(signer).Claims(c).Serialize()
	if err != nil {
		return "", time.Time{}, "", fmt.Errorf("sign token: %w", err)
	}
	return tok, exp, k.kid, nil
}

// recordType is the JWS type of SignRecord's signatures: never "JWT", so
// a signed record cannot pass as a token anywhere a token is checked.
const recordType = "openshell-record+jws"

// SignRecord signs payload with the current key, for records the operator
// keeps in objects others may be able to write (the relay's membership
// Leases): VerifyRecord then tells its own records from forged ones.
func (i *Issuer) SignRecord(payload []byte) (string, error) {
	i.mu.RLock()
	k := i.current
	i.mu.RUnlock()
	if k == nil {
		return "", errors.New("OIDC issuer has no signing key yet")
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: k.key},
		(&jose.SignerOptions{}).WithType(recordType).WithHeader("kid", k.kid))
	if err != nil {
		return "", fmt.Errorf("create signer: %w", err)
	}
	jws, err := signer.Sign(payload)
	if err != nil {
		return "", fmt.Errorf("sign record: %w", err)
	}
	return jws.DetachedCompactSerialize()
}

// VerifyRecord checks a SignRecord signature of payload against every key
// the issuer holds (current, next, previous), so a record signed just
// before a rotation still verifies.
func (i *Issuer) VerifyRecord(payload []byte, signature string) error {
	jws, err := jose.ParseDetached(signature, payload, []jose.SignatureAlgorithm{jose.RS256})
	if err != nil {
		return fmt.Errorf("parse record signature: %w", err)
	}
	if len(jws.Signatures) != 1 || jws.Signatures[0].Header.ExtraHeaders[jose.HeaderType] != recordType {
		return errors.New("not a record signature")
	}
	kid := jws.Signatures[0].Header.KeyID
	i.mu.RLock()
	keys := []*signingKey{i.current, i.next, i.previous}
	i.mu.RUnlock()
	for _, k := range keys {
		if k != nil && k.kid == kid {
			if _, err := jws.Verify(&k.key.PublicKey); err != nil {
				return fmt.Errorf("record signature: %w", err)
			}
			return nil
		}
	}
	return fmt.Errorf("record signed with key %q, which the issuer does not hold", kid)
}

func randBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

// JWKS is the public key set: the current key, the next one (published a
// rotation ahead, so every replica and every gateway's JWKS cache knows it
// before it signs) and, until its tokens expire, the previous one.
func (i *Issuer) JWKS() jose.JSONWebKeySet {
	i.mu.RLock()
	defer i.mu.RUnlock()
	var set jose.JSONWebKeySet
	for _, k := range []*signingKey{i.current, i.next, i.previous} {
		if k == nil {
			continue
		}
		if k == i.previous && i.now().Sub(i.rotated) > TokenTTL+time.Minute {
			continue
		}
		set.Keys = append(set.Keys, jose.JSONWebKey{Key: &k.key.PublicKey, KeyID: k.kid, Algorithm: string(jose.RS256), Use: "sig"})
	}
	return set
}

// Handler serves /.well-known/openid-configuration and /jwks.json.
func (i *Issuer) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/.well-known/openid-configuration", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, map[string]any{
			"issuer":                                i.URL,
			"jwks_uri":                              i.URL + "/jwks.json",
			"id_token_signing_alg_values_supported": []string{"RS256"},
			"response_types_supported":              []string{"token"},
			"subject_types_supported":               []string{"public"},
		})
	})
	mux.HandleFunc("/jwks.json", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, i.JWKS()) })
	return mux
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "max-age=60")
	_ = json.NewEncoder(w).Encode(v)
}

// TokenSource caches one token per audience and refreshes it before expiry.
type TokenSource struct {
	Issuer   *Issuer
	Audience string

	mu  sync.Mutex
	tok string
	exp time.Time
	kid string
}

// Token returns a valid token, minting a new one when the cached one is
// within RefreshBefore of expiring or was signed by a key that no longer
// signs: a token outlives at most one rotation, so even rotations forced
// in quick succession never leave one signed by a key the JWKS dropped.
func (t *TokenSource) Token(context.Context) (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.tok != "" && t.Issuer.now().Add(RefreshBefore).Before(t.exp) && t.kid == t.Issuer.signingKID() {
		return t.tok, nil
	}
	tok, exp, kid, err := t.Issuer.token(t.Audience, Subject, AdminRole)
	if err != nil {
		return "", err
	}
	t.tok, t.exp, t.kid = tok, exp, kid
	return tok, nil
}
