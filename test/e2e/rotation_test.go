package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/gwconn"
	"github.com/openshell/openshell-operator/internal/oidc"
	"github.com/openshell/openshell-operator/internal/pki"
	"github.com/openshell/openshell-operator/operator"
	"github.com/openshell/openshell-operator/test/framework"
	"github.com/openshell/openshell-operator/test/gatewaytest"
	"github.com/openshell/openshell-operator/test/stack"
	"github.com/openshell/openshell-operator/test/testgateway"
)

// TestRotationsUnderLoad rotates every credential the operator holds while
// sandboxes are being created on two gateways through two replicas: an
// External gateway's client secret (its identity provider accepts the old
// and the new one while the Secret changes, then revokes the old), the
// OIDC signing keys twice in quick succession (so the second signing key is
// one the gateway had not seen), and the issuer's self-issued serving
// certificate (aged to its renewal point). Nothing restarts, every sandbox
// ends Ready exactly once, and not one gateway call fails.
func TestRotationsUnderLoad(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := cluster.Client
	gwNS := framework.CreateNamespace(ctx, t, c, "rotate-platform")
	sbNS := framework.CreateNamespace(ctx, t, c, "rotate-sandboxes")
	tenant := framework.CreateNamespace(ctx, t, c, "rotate-tenant")

	idp := startIdentityProvider(ctx, t, c, gwNS, "idp")
	// The gateways re-read the JWKS every second (an hour by default), so a
	// token signed by a key the issuer no longer publishes would fail.
	st, err := stack.Start(ctx, cluster.Config, c, stack.Options{GatewayNamespace: gwNS, SandboxNamespace: sbNS,
		BalancedIssuer: true, SelfIssuedIssuer: true, JWKSTTL: time.Second,
		Manager: operator.Options{LeaderElection: true, LeaderElectionNamespace: gwNS,
			OIDC:        &operator.OIDCOptions{KeyRefresh: time.Second, CertCheck: time.Second},
			Controllers: operator.ControllerOptions{TokenHTTPClient: idp.client}}})
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { g.Expect(st.Stop()).To(Succeed()) }()
	_, err = st.StartReplica(nil)
	g.Expect(err).NotTo(HaveOccurred())
	creds := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "idp-credentials", Namespace: gwNS},
		Data: map[string][]byte{gwconn.KeyClientID: []byte("operator"), gwconn.KeyClientSecret: []byte("first"), gwconn.KeyTokenURL: []byte(idp.url + "/token")}}
	g.Expect(c.Create(ctx, creds)).To(Succeed())
	idp.accept("first")
	idpGW, idpObj, err := st.AddGatewayWith(ctx, c, "idp", sbNS, func(o *testgateway.Options, gw *openshellv1alpha1.OpenShellGateway) {
		o.OIDC.Issuer, o.OIDC.CAPEM = idp.url, idp.caPEM
		gw.Spec.External.CredentialsSecretRef = &openshellv1alpha1.LocalObjectReference{Name: creds.Name}
	})
	g.Expect(err).NotTo(HaveOccurred())

	var sbs []*openshellv1alpha1.OpenShellSandbox
	batch := func(name string) {
		for i := range 4 {
			for _, gw := range []*openshellv1alpha1.OpenShellGateway{st.GatewayObj, idpObj} {
				sb := sandboxOn(tenant, fmt.Sprintf("%s-%s-%d", name, gw.Name, i), gw)
				g.Expect(c.Create(ctx, sb)).To(Succeed())
				sbs = append(sbs, sb)
			}
		}
	}
	// Warm up: both gateways have answered, and their JWKS caches are filled.
	batch("warm")
	for _, sb := range sbs {
		waitPhase(ctx, g, client.ObjectKeyFromObject(sb), openshellv1alpha1.SandboxPhaseReady)
	}
	failed := func() float64 {
		n := 0.0
		for _, ep := range []string{st.Gateway.Endpoint(), idpGW.Endpoint()} {
			for code, v := range framework.GatewayCalls(ep) {
				if code != "OK" {
					n += v
				}
			}
		}
		return n
	}
	failedBefore := failed()
	start := time.Now()

	// 1. The External gateway's client secret. Each rotation is followed by
	// more creates, which carry the gateway calls through it.
	idp.accept("first", "second")
	creds.Data[gwconn.KeyClientSecret] = []byte("second")
	g.Expect(c.Update(ctx, creds)).To(Succeed())
	batch("secret")
	g.Eventually(func() int { return idp.grants("second") }).WithContext(ctx).WithTimeout(time.Minute).Should(BeNumerically(">", 0),
		"the operator never asked for a token with the rotated client secret")
	idp.accept("second")
	revoked := idp.grants("first")
	t.Logf("figure: client secret rotated: the new secret in use %s after the Secret changed", time.Since(start).Round(100*time.Millisecond))

	// 2. The OIDC signing keys, twice: the second signing key was only
	// ever published as "next", a rotation ahead.
	for round := range 2 {
		before := signingKeys(ctx, g, gwNS)
		keys := &corev1.Secret{}
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: gwNS, Name: operator.OIDCKeySecret}, keys)).To(Succeed())
		delete(keys.Data, oidc.KeySecretRotatedAt)
		g.Expect(c.Update(ctx, keys)).To(Succeed())
		g.Eventually(func(g Gomega) { g.Expect(signingKeys(ctx, g, gwNS)).NotTo(Equal(before)) }).
			WithContext(ctx).WithTimeout(time.Minute).Should(Succeed(), "the leader did not rotate")
		batch(fmt.Sprintf("key%d", round))
	}

	// 3. The issuer's serving certificate, aged to its renewal point: both
	// replicas renew it under the same CA without restarting.
	served := servedSerials(ctx, g, st)
	aged := agedLeaf(g, st.CA)
	tlsSecret := &corev1.Secret{}
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: gwNS, Name: operator.OIDCTLSSecret}, tlsSecret)).To(Succeed())
	tlsSecret.Data[pki.KeyCert], tlsSecret.Data[pki.KeyKey] = aged.CertPEM, aged.KeyPEM
	g.Expect(c.Update(ctx, tlsSecret)).To(Succeed())
	g.Eventually(func(g Gomega) {
		now := servedSerials(ctx, g, st)
		g.Expect(now).To(HaveLen(1), "the replicas serve different certificates")
		for s := range now {
			g.Expect(served).NotTo(HaveKey(s), "the serving certificate was not renewed")
			g.Expect(s).NotTo(Equal(aged.Cert.SerialNumber.String()), "the aged certificate is served")
		}
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
	batch("cert")

	expectReadyOnceOn(ctx, t, tenant, sbNS, map[*testgateway.Gateway][]*openshellv1alpha1.OpenShellSandbox{
		st.Gateway: gatewaySandboxes(sbs, st.GatewayObj.Name), idpGW: gatewaySandboxes(sbs, idpObj.Name)})
	g.Expect(failed()-failedBefore).To(BeZero(), "gateway calls failed during the rotations")
	g.Expect(idp.grants("first")).To(Equal(revoked), "the revoked client secret was used again")
	t.Logf("figure: %d sandboxes on 2 gateways, client secret + 2 signing keys + serving certificate rotated under load with 2 replicas: all Ready once %s after the first rotation, 0 failed gateway calls",
		len(sbs), time.Since(start).Round(100*time.Millisecond))
}

// gatewaySandboxes are the sandboxes of one gateway.
func gatewaySandboxes(sbs []*openshellv1alpha1.OpenShellSandbox, gateway string) []*openshellv1alpha1.OpenShellSandbox {
	var out []*openshellv1alpha1.OpenShellSandbox
	for _, sb := range sbs {
		if sb.Spec.GatewayRef.Name == gateway {
			out = append(out, sb)
		}
	}
	return out
}

// signingKeys is the key Secret's current and next keys.
func signingKeys(ctx context.Context, g Gomega, ns string) string {
	s := &corev1.Secret{}
	g.Expect(cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: operator.OIDCKeySecret}, s)).To(Succeed())
	return string(s.Data["current.pem"]) + string(s.Data["next.pem"])
}

// servedSerials dials the issuer's address a few times (the balancer
// spreads the connections over the replicas) and returns the serial
// numbers of the certificates served, each verified against the CA the
// gateways trust.
func servedSerials(ctx context.Context, g Gomega, st *stack.Stack) map[string]bool {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(st.CA.CertPEM)
	out := map[string]bool{}
	for range 4 {
		d := tls.Dialer{Config: &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}}
		conn, err := d.DialContext(ctx, "tcp", st.IssuerAddress())
		g.Expect(err).NotTo(HaveOccurred())
		out[conn.(*tls.Conn).ConnectionState().PeerCertificates[0].SerialNumber.String()] = true
		_ = conn.Close()
	}
	return out
}

// agedLeaf is an issuer certificate from the serving CA that is past two
// thirds of its life: what a replica finds in the Secret after eight
// months.
func agedLeaf(g Gomega, ca *pki.KeyPair) *pki.KeyPair {
	const life = 365 * 24 * time.Hour
	leaf, err := ca.Issue(pki.LeafRequest{CommonName: "openshell-operator-oidc", IPs: []net.IP{net.ParseIP("127.0.0.1")}, Server: true, Validity: life},
		time.Now().Add(-life*3/4))
	g.Expect(err).NotTo(HaveOccurred())
	return leaf
}

// identityProvider is an External gateway's OAuth2 identity provider: a
// client-credentials token endpoint that accepts the client secrets it is
// told to, and OIDC discovery and JWKS for the gateway.
type identityProvider struct {
	url    string
	caPEM  []byte
	client *http.Client

	mu      sync.Mutex
	secrets map[string]bool
	used    map[string]int
}

func startIdentityProvider(ctx context.Context, t *testing.T, c client.Client, ns, gatewayName string) *identityProvider {
	t.Helper()
	ca, _, cert := gatewaytest.LoopbackCert(t)
	srv := httptest.NewUnstartedServer(nil)
	idp := &identityProvider{url: "https://" + srv.Listener.Addr().String(), caPEM: ca.CertPEM, used: map[string]int{}}
	issuer := &oidc.Issuer{URL: idp.url, Client: c, SecretNamespace: ns, SecretName: "idp-signing-keys"}
	if err := issuer.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	tokens := &oidc.TokenSource{Issuer: issuer, Audience: oidc.Audience(ns, gatewayName)}
	mux := http.NewServeMux()
	mux.Handle("/", issuer.Handler())
	mux.HandleFunc("/token", func(w http.ResponseWriter, r *http.Request) {
		id, secret, ok := r.BasicAuth()
		if !ok {
			id, secret = r.FormValue("client_id"), r.FormValue("client_secret")
		}
		idp.mu.Lock()
		valid := id == "operator" && idp.secrets[secret] && r.FormValue("grant_type") == "client_credentials"
		if valid {
			idp.used[secret]++
		}
		idp.mu.Unlock()
		if !valid {
			http.Error(w, `{"error":"invalid_client"}`, http.StatusUnauthorized)
			return
		}
		tok, err := tokens.Token(r.Context())
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		// A short expires_in makes the operator come back often, so a
		// revoked secret would show.
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"access_token": tok, "token_type": "Bearer", "expires_in": 15})
	})
	srv.Config.Handler = mux
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.CertPEM)
	idp.client = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	return idp
}

// accept replaces the client secrets the provider accepts.
func (p *identityProvider) accept(secrets ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.secrets = map[string]bool{}
	for _, s := range secrets {
		p.secrets[s] = true
	}
}

// grants counts the tokens granted for one client secret.
func (p *identityProvider) grants(secret string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.used[secret]
}
