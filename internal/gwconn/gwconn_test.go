package gwconn_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/gatewayapi"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/openshellv1"
	"github.com/openshell/openshell-operator/internal/gatewayline"
	"github.com/openshell/openshell-operator/internal/gwconn"
	"github.com/openshell/openshell-operator/internal/oidc"
	"github.com/openshell/openshell-operator/internal/pki"
	"github.com/openshell/openshell-operator/internal/scheme"
	"github.com/openshell/openshell-operator/test/gatewaytest"
	"github.com/openshell/openshell-operator/test/testgateway"
)

// TestExternalGatewayWithClientCredentials: an External gateway that names
// a credentials Secret is called with tokens from the OAuth2
// client-credentials grant at the Secret's token URL.
func TestExternalGatewayWithClientCredentials(t *testing.T) {
	ca, _, cert := gatewaytest.LoopbackCert(t)

	// An identity provider: OIDC discovery/JWKS plus a token endpoint that
	// checks the client's id and secret.
	idp := &oidc.Issuer{Client: fake.NewClientBuilder().WithScheme(scheme.New()).Build(), SecretNamespace: "idp", SecretName: "keys"}
	if err := idp.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	grants := 0
	validSecret := "s3cret"
	mux := http.NewServeMux()
	mux.Handle("/.well-known/", idp.Handler())
	mux.Handle("/jwks.json", idp.Handler())
	mux.HandleFunc("/token", func(w http.ResponseWriter, r *http.Request) {
		id, secret, ok := r.BasicAuth()
		if !ok || id != "operator" || secret != validSecret || r.FormValue("grant_type") != "client_credentials" {
			http.Error(w, `{"error":"invalid_client"}`, http.StatusUnauthorized)
			return
		}
		grants++
		tok, _, _ := idp.Token("external-aud")
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"access_token": tok, "token_type": "bearer", "expires_in": 900})
	})
	srv := httptest.NewUnstartedServer(mux)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	defer srv.Close()
	idp.URL = srv.URL

	obj, k, r, conn := externalWithClientCredentials(t, ca, cert, idp.URL, srv)
	for range 2 {
		if _, err := conn.GetGatewayInfo(context.Background(), &openshellv1.GetGatewayInfoRequest{}); err != nil {
			t.Fatalf("GetGatewayInfo with a client-credentials token: %v", err)
		}
	}
	if grants != 1 {
		t.Fatalf("token endpoint called %d times, want 1 (the token is reused until it nears expiry)", grants)
	}

	// The identity provider rotates the client secret and the admin updates
	// the Secret: the next connection uses it, without a restart, although
	// the previous token has not expired.
	validSecret = "n3w-s3cret"
	creds := &corev1.Secret{}
	if err := k.Get(context.Background(), client.ObjectKey{Namespace: "platform", Name: "gw-creds"}, creds); err != nil {
		t.Fatal(err)
	}
	creds.Data[gwconn.KeyClientSecret] = []byte(validSecret)
	if err := k.Update(context.Background(), creds); err != nil {
		t.Fatal(err)
	}
	conn, err := r.Connect(context.Background(), obj)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.GetGatewayInfo(context.Background(), &openshellv1.GetGatewayInfoRequest{}); err != nil {
		t.Fatalf("GetGatewayInfo after the credentials rotated: %v", err)
	}
	if grants != 2 {
		t.Fatalf("token endpoint called %d times, want 2 (a new grant with the rotated secret)", grants)
	}
	// Deleting the gateway forgets its credentials: nothing stale is reused.
	r.Forget(gwconn.Key(obj))

	// A token URL that would send the client secret in clear text (or with
	// credentials in the URL) is refused.
	for _, bad := range []string{"http://idp.example.com/token", "https://user:pw@idp.example.com/token", "idp.example.com/token"} {
		creds := &corev1.Secret{}
		if err := k.Get(context.Background(), client.ObjectKey{Namespace: "platform", Name: "gw-creds"}, creds); err != nil {
			t.Fatal(err)
		}
		creds.Data[gwconn.KeyTokenURL] = []byte(bad)
		if err := k.Update(context.Background(), creds); err != nil {
			t.Fatal(err)
		}
		if _, err := r.Connect(context.Background(), obj); err == nil || !strings.Contains(err.Error(), "must be an https:// URL") {
			t.Errorf("token URL %q: want a refusal, got %v", bad, err)
		}
	}

	// Without credentials and without an operator issuer there is no identity.
	obj.Spec.External.CredentialsSecretRef = nil
	obj.Name = "no-identity"
	if _, err := r.Connect(context.Background(), obj); err == nil {
		t.Fatal("connected without any identity")
	}
}

// externalWithClientCredentials starts a test gateway trusting issuer and
// connects to it as an External gateway whose credentials Secret names
// idp's /token endpoint.
func externalWithClientCredentials(t *testing.T, ca *pki.KeyPair, cert tls.Certificate, issuer string, idp *httptest.Server) (
	*openshellv1alpha1.OpenShellGateway, client.Client, *gwconn.Resolver, *gatewayapi.Client) {
	t.Helper()
	gw, err := testgateway.Start(context.Background(), testgateway.Options{Cert: cert,
		OIDC: testgateway.OIDC{Issuer: issuer, Audience: "external-aud", CAPEM: ca.CertPEM}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gw.Stop)
	obj := &openshellv1alpha1.OpenShellGateway{ObjectMeta: metav1.ObjectMeta{Name: "ext", Namespace: "platform"},
		Spec: openshellv1alpha1.OpenShellGatewaySpec{Mode: openshellv1alpha1.GatewayModeExternal,
			External: &openshellv1alpha1.ExternalGatewaySpec{Endpoint: gw.Endpoint(),
				CASecretRef:          openshellv1alpha1.SecretKeyReference{Name: "gw-ca", Key: "ca.crt"},
				CredentialsSecretRef: &openshellv1alpha1.LocalObjectReference{Name: "gw-creds"}}},
		// The version known: Connect asks none (the IdP may hang).
		Status: openshellv1alpha1.OpenShellGatewayStatus{Version: testgateway.Version}}
	k := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "gw-ca", Namespace: "platform"}, Data: map[string][]byte{"ca.crt": ca.CertPEM}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "gw-creds", Namespace: "platform"}, Data: map[string][]byte{
			gwconn.KeyClientID: []byte("operator"), gwconn.KeyClientSecret: []byte("s3cret"), gwconn.KeyTokenURL: []byte(idp.URL + "/token")}},
	).Build()
	r := &gwconn.Resolver{Client: k, APIReader: k, SecretMetadata: k, Pool: gatewayapi.NewPool(), TokenHTTPClient: idp.Client()}
	conn, err := r.Connect(context.Background(), obj)
	if err != nil {
		t.Fatal(err)
	}
	return obj, k, r, conn
}

// countingReader counts reads that reach the API server.
type countingReader struct {
	client.Reader
	gets int
}

func (c *countingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	c.gets++
	return c.Reader.Get(ctx, key, obj, opts...)
}

func TestExternalCAIsReadOncePerRefresh(t *testing.T) {
	ca, err := pki.NewCA("ca", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	k := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "gw-ca", Namespace: "platform"}, Data: map[string][]byte{"ca.crt": ca.CertPEM}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "gw-creds", Namespace: "platform"}, Data: map[string][]byte{
			gwconn.KeyClientID: []byte("operator"), gwconn.KeyClientSecret: []byte("s3cret"), gwconn.KeyTokenURL: []byte("https://idp.invalid/token")}},
	).Build()
	api := &countingReader{Reader: k}
	now := time.Unix(1_800_000_000, 0)
	r := &gwconn.Resolver{Client: k, APIReader: api, Pool: gatewayapi.NewPool(), CARefresh: time.Minute, Now: func() time.Time { return now }}
	obj := &openshellv1alpha1.OpenShellGateway{ObjectMeta: metav1.ObjectMeta{Name: "ext", Namespace: "platform"},
		Spec: openshellv1alpha1.OpenShellGatewaySpec{Mode: openshellv1alpha1.GatewayModeExternal,
			External: &openshellv1alpha1.ExternalGatewaySpec{Endpoint: "https://127.0.0.1:1",
				CASecretRef:          openshellv1alpha1.SecretKeyReference{Name: "gw-ca", Key: "ca.crt"},
				CredentialsSecretRef: &openshellv1alpha1.LocalObjectReference{Name: "gw-creds"}}},
		Status: openshellv1alpha1.OpenShellGatewayStatus{Version: "0.0.111"}} // nothing to ask the (absent) gateway
	connect := func() {
		t.Helper()
		if _, err := r.Connect(context.Background(), obj); err != nil {
			t.Fatal(err)
		}
	}
	connect() // reads the CA and the credentials
	first := api.gets
	for range 100 {
		connect()
	}
	if api.gets != first {
		t.Fatalf("100 connects within the refresh made %d more API reads, want 0", api.gets-first)
	}
	now = now.Add(time.Minute)
	connect()
	if api.gets != first+1 {
		t.Fatalf("a connect after the refresh made %d API reads, want 1 (the CA again)", api.gets-first)
	}

	// A missing CA Secret is an error each time, never a cached success.
	obj.Spec.External.CASecretRef.Name = "missing"
	for range 2 {
		if _, err := r.Connect(context.Background(), obj); err == nil {
			t.Fatal("connected with a missing CA Secret")
		}
	}
}

// TestAHangingIdentityProviderIsBoundedByTheCall (N10): a token endpoint
// that accepts the request and never answers holds a gateway call only
// until the call's deadline, not forever.
func TestAHangingIdentityProviderIsBoundedByTheCall(t *testing.T) {
	ca, _, cert := gatewaytest.LoopbackCert(t)
	hang := make(chan struct{})
	reached := make(chan struct{}, 16)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached <- struct{}{}
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	defer srv.Close()
	defer close(hang)
	_, _, _, conn := externalWithClientCredentials(t, ca, cert, srv.URL, srv)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := conn.Health(ctx, &openshellv1.HealthRequest{})
		done <- err
	}()
	<-reached // the grant is under way and will never be answered
	cancel()  // the caller's deadline passes
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a call answered without a token")
		}
	case <-time.After(time.Minute): // a bound on failure, not a synchronisation
		t.Fatal("the call still waits for the identity provider after its context ended")
	}
}

// TestIssuerNotReadyIsNotAGatewayFailure: just after a start, before the
// operator's issuer has its signing keys, a gateway that is called with its
// tokens is not dialled; the refusal is one callers retry without reporting
// (NotNow), unlike a real failure. A gateway with its own credentials
// Secret does not depend on the issuer.
func TestIssuerNotReadyIsNotAGatewayFailure(t *testing.T) {
	idp := &oidc.Issuer{Client: fake.NewClientBuilder().WithScheme(scheme.New()).Build(), SecretNamespace: "idp", SecretName: "keys"}
	k := fake.NewClientBuilder().WithScheme(scheme.New()).Build()
	r := &gwconn.Resolver{Client: k, APIReader: k, Issuer: idp}
	gw := &openshellv1alpha1.OpenShellGateway{ObjectMeta: metav1.ObjectMeta{Namespace: "platform", Name: "gw"},
		Spec: openshellv1alpha1.OpenShellGatewaySpec{Mode: openshellv1alpha1.GatewayModeExternal,
			External: &openshellv1alpha1.ExternalGatewaySpec{Endpoint: "https://gw.example:443"}}}
	_, err := r.Connect(context.Background(), gw)
	if !errors.Is(err, gwconn.ErrIssuerNotReady) || !gwconn.NotNow(err) {
		t.Fatalf("Connect before the issuer has keys: %v, want ErrIssuerNotReady", err)
	}
	if gwconn.NotNow(errors.New("connection refused")) {
		t.Fatal("NotNow of a real failure")
	}
	if !gwconn.NotNow(fmt.Errorf("health: %w", &gatewayapi.BusyError{Gateway: "platform/gw", InFlight: 4})) {
		t.Fatal("NotNow of a bulkhead refusal: false")
	}
	// The operator's leader makes the keys: this process (a relay that
	// started first) reads them when a call needs them, at most once a
	// second, not at its next periodic reload.
	now := time.Now()
	r.Now = func() time.Time { return now }
	maker := &oidc.Issuer{Client: idp.Client, SecretNamespace: "idp", SecretName: "keys"}
	if err := maker.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Connect(context.Background(), gw); !errors.Is(err, gwconn.ErrIssuerNotReady) {
		t.Fatalf("Connect within a second of the last read of the keys: %v, want ErrIssuerNotReady", err)
	}
	now = now.Add(time.Second)
	if _, err := r.Connect(context.Background(), gw); errors.Is(err, gwconn.ErrIssuerNotReady) {
		t.Fatalf("Connect once the keys exist: %v", err)
	}
	if !idp.HasKeys() {
		t.Fatal("the resolver did not load the issuer's keys")
	}
	gw.Spec.External.CredentialsSecretRef = &openshellv1alpha1.LocalObjectReference{Name: "creds"}
	idp = &oidc.Issuer{Client: idp.Client, SecretNamespace: "idp", SecretName: "none"}
	r = &gwconn.Resolver{Client: k, APIReader: k, Issuer: idp}
	if _, err := r.Connect(context.Background(), gw); errors.Is(err, gwconn.ErrIssuerNotReady) {
		t.Fatalf("a gateway with its own credentials waits for the operator's issuer: %v", err)
	}
}

// TestConnectSpeaksTheLineOfTheReportedVersion: a gateway that reported a
// 0.1 version gets the 0.1 messages, a 0.0.x one their translation, and a
// version on no line the operator speaks gets nothing (it would misread
// the messages); Probe, for the Health call every line shares, connects
// whatever the version.
func TestConnectSpeaksTheLineOfTheReportedVersion(t *testing.T) {
	ca, _, _ := gatewaytest.LoopbackCert(t)
	k := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "gw-ca", Namespace: "platform"}, Data: map[string][]byte{"ca.crt": ca.CertPEM}}).Build()
	idp := &oidc.Issuer{Client: k, SecretNamespace: "idp", SecretName: "keys"}
	if err := idp.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	r := &gwconn.Resolver{Client: k, APIReader: k, Issuer: idp, Pool: gatewayapi.NewPool()}
	gw := &openshellv1alpha1.OpenShellGateway{ObjectMeta: metav1.ObjectMeta{Namespace: "platform", Name: "gw"},
		Spec: openshellv1alpha1.OpenShellGatewaySpec{Mode: openshellv1alpha1.GatewayModeExternal,
			External: &openshellv1alpha1.ExternalGatewaySpec{Endpoint: "https://127.0.0.1:1",
				CASecretRef: openshellv1alpha1.SecretKeyReference{Name: "gw-ca", Key: "ca.crt"}}}}
	for version, want := range map[string]gatewayline.Line{"0.1.5": gatewayline.V01, "0.1.10": gatewayline.V01, "0.0.111": gatewayline.Legacy} {
		gw.Status.Version = version
		conn, err := r.Connect(context.Background(), gw)
		if err != nil || conn.Line != want {
			t.Errorf("Connect to a %s gateway: line %v, %v; want %s", version, conn, err, want)
		}
	}
	gw.Status.Version = "0.2.0"
	line := (*gwconn.LineError)(nil)
	if _, err := r.Connect(context.Background(), gw); !errors.As(err, &line) || !strings.Contains(err.Error(), "not one the operator speaks") {
		t.Fatalf("Connect to a 0.2 gateway: %v, want a LineError", err)
	}
	if _, err := r.Probe(context.Background(), gw); err != nil {
		t.Fatalf("Probe refused: %v", err)
	}
	// A Managed gateway speaks the line of the release all its pods run
	// (status.version): mid-upgrade, still the old one.
	managed := &openshellv1alpha1.OpenShellGateway{ObjectMeta: gw.ObjectMeta, Spec: openshellv1alpha1.OpenShellGatewaySpec{
		Managed: &openshellv1alpha1.ManagedGatewaySpec{Version: "0.1.5"}}}
	for version, want := range map[string]gatewayline.Line{"0.0.111": gatewayline.Legacy, "0.1.5": gatewayline.V01} {
		managed.Status.Version = version
		if line, err := r.Line(context.Background(), managed); err != nil || line != want {
			t.Errorf("a Managed gateway running %s: line %s, %v; want %s without asking it", version, line, err, want)
		}
	}
	// Nothing reported yet: Connect asks the gateway (here unreachable).
	gw.Status.Version = ""
	if _, err := r.Connect(context.Background(), gw); err == nil || errors.As(err, &line) {
		t.Fatalf("Connect to an unreachable gateway of unknown version: %v, want the Health call's failure", err)
	}
}
