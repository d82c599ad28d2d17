package gatewayapi_test

import (
	"context"
	"crypto/tls"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/log"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/openshell/openshell-operator/internal/gatewayapi"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/openshellv1"
	"github.com/openshell/openshell-operator/internal/oidc"
	"github.com/openshell/openshell-operator/internal/pki"
	"github.com/openshell/openshell-operator/internal/scheme"
	"github.com/openshell/openshell-operator/test/gatewaytest"
	"github.com/openshell/openshell-operator/test/testgateway"
)

type fixture struct {
	gw     *testgateway.Gateway
	ca     *pki.KeyPair
	issuer *oidc.Issuer
}

// start runs a test gateway whose TLS certificate and token issuer the
// client must trust, without a cluster (no compute driver).
func start(t *testing.T) fixture {
	t.Helper()
	ca, _, cert := gatewaytest.LoopbackCert(t, "gateway.test")
	issuer := &oidc.Issuer{Client: fake.NewClientBuilder().WithScheme(scheme.New()).Build(), SecretNamespace: "ns", SecretName: "keys"}
	if err := issuer.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(issuer.Handler())
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	issuer.URL = srv.URL
	gw, err := testgateway.Start(context.Background(), testgateway.Options{Cert: cert,
		OIDC: testgateway.OIDC{Issuer: issuer.URL, Audience: "aud", CAPEM: ca.CertPEM}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gw.Stop)
	return fixture{gw: gw, ca: ca, issuer: issuer}
}

func TestHealthOverVerifiedTLSWithRequestIDs(t *testing.T) {
	f := start(t)
	pool := gatewayapi.NewPool()
	defer pool.Close()
	c, err := pool.Get("ns/gw", gatewayapi.Target{Endpoint: f.gw.Endpoint(), CAPEM: f.ca.CertPEM})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		resp, err := c.Health(context.Background(), &openshellv1.HealthRequest{})
		if err != nil || resp.Status != openshellv1.ServiceStatus_SERVICE_STATUS_HEALTHY {
			t.Fatalf("Health = %v, %v", resp, err)
		}
	}
	ids := f.gw.RequestIDs()
	if len(ids) != 2 || ids[0] == ids[1] || len(ids[0]) != 36 {
		t.Fatalf("request IDs = %v: want one distinct UUID per call", ids)
	}
	// The same target reuses the pooled connection.
	again, _ := pool.Get("ns/gw", gatewayapi.Target{Endpoint: f.gw.Endpoint(), CAPEM: f.ca.CertPEM})
	if again == nil {
		t.Fatal("no client")
	}
}

func TestWrongCAIsRefused(t *testing.T) {
	f := start(t)
	other, _ := pki.NewCA("other", time.Hour, time.Now())
	pool := gatewayapi.NewPool()
	defer pool.Close()
	pool.Attempts = 1
	c, err := pool.Get("ns/gw", gatewayapi.Target{Endpoint: f.gw.Endpoint(), CAPEM: other.CertPEM})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.Health(ctx, &openshellv1.HealthRequest{}); status.Code(err) != codes.Unavailable {
		t.Fatalf("Health with an untrusted gateway certificate = %v, want Unavailable (TLS failure)", err)
	}
	if n := f.gw.Calls()["Health"]; n != 0 {
		t.Fatalf("the gateway received %d calls over an unverified connection", n)
	}
}

func TestRetriesOnlyRetryableCodes(t *testing.T) {
	f := start(t)
	pool := gatewayapi.NewPool()
	defer pool.Close()
	c, _ := pool.Get("ns/gw", gatewayapi.Target{Endpoint: f.gw.Endpoint(), CAPEM: f.ca.CertPEM,
		Tokens: &oidc.TokenSource{Issuer: f.issuer, Audience: "aud"}})
	f.gw.FailNext("Health", codes.Unavailable)
	if _, err := c.Health(context.Background(), &openshellv1.HealthRequest{}); err != nil {
		t.Fatalf("an Unavailable call was not retried: %v", err)
	}
	if n := f.gw.Calls()["Health"]; n != 2 {
		t.Fatalf("Health calls = %d, want 2 (one failure, one retry)", n)
	}
	f.gw.FailNext("Health", codes.InvalidArgument)
	if _, err := c.Health(context.Background(), &openshellv1.HealthRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("InvalidArgument = %v", err)
	}
	if n := f.gw.Calls()["Health"]; n != 3 {
		t.Fatalf("Health calls = %d, want 3: a verdict is not retried", n)
	}
}

func TestTokensAreRequiredAndChecked(t *testing.T) {
	f := start(t)
	pool := gatewayapi.NewPool()
	defer pool.Close()
	anon, _ := pool.Get("anon", gatewayapi.Target{Endpoint: f.gw.Endpoint(), CAPEM: f.ca.CertPEM})
	if _, err := anon.GetGatewayInfo(context.Background(), &openshellv1.GetGatewayInfoRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("no token: %v, want Unauthenticated", err)
	}
	wrongAud, _ := pool.Get("wrong", gatewayapi.Target{Endpoint: f.gw.Endpoint(), CAPEM: f.ca.CertPEM,
		Tokens: &oidc.TokenSource{Issuer: f.issuer, Audience: "another-gateway"}})
	if _, err := wrongAud.GetGatewayInfo(context.Background(), &openshellv1.GetGatewayInfoRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("wrong audience: %v, want Unauthenticated", err)
	}
}

// TestFailedCallsAreCountedAndLoggedWithTheirRequestID: a failure shows in
// the operator's metrics and in its log with the x-request-id the gateway
// received, so both sides of one failure can be matched.
func TestFailedCallsAreCountedAndLoggedWithTheirRequestID(t *testing.T) {
	f := start(t)
	pool := gatewayapi.NewPool()
	defer pool.Close()
	c, _ := pool.Get("ns/gw", gatewayapi.Target{Endpoint: f.gw.Endpoint(), CAPEM: f.ca.CertPEM})
	var lines []string
	logger := funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{})
	ctx := log.IntoContext(context.Background(), logger)
	before := countCalls(t, "/openshell.v1.OpenShell/Health", "InvalidArgument")
	f.gw.FailNext("Health", codes.InvalidArgument)
	if _, err := c.Health(ctx, &openshellv1.HealthRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("Health = %v", err)
	}
	if got := countCalls(t, "/openshell.v1.OpenShell/Health", "InvalidArgument"); got != before+1 {
		t.Fatalf("openshell_operator_gateway_requests_total{code=InvalidArgument} = %v, want %v", got, before+1)
	}
	ids := f.gw.RequestIDs()
	if len(ids) == 0 || len(lines) != 1 || !strings.Contains(lines[0], ids[len(ids)-1]) || !strings.Contains(lines[0], "Gateway call failed") {
		t.Fatalf("log %q does not name the request ID the gateway saw (%v)", lines, ids)
	}
}

func countCalls(t *testing.T, method, code string) float64 {
	t.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range families {
		if mf.GetName() != "openshell_operator_gateway_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["method"] == method && labels["code"] == code {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// TestLegacyMethodIsTheWireName: the renamed legacy messages are called
// and served under the service's real name; other paths pass unchanged.
func TestLegacyMethodIsTheWireName(t *testing.T) {
	for in, want := range map[string]string{
		"/openshell.legacy.v1.OpenShell/CreateSandbox": "/openshell.v1.OpenShell/CreateSandbox",
		"/openshell.v1.OpenShell/CreateSandbox":        "/openshell.v1.OpenShell/CreateSandbox",
		"/grpc.health.v1.Health/Check":                 "/grpc.health.v1.Health/Check",
	} {
		if got := gatewayapi.LegacyMethod(in); got != want {
			t.Errorf("LegacyMethod(%s) = %s, want %s", in, got, want)
		}
	}
	if d := gatewayapi.LegacyServiceDesc(); d.ServiceName != "openshell.v1.OpenShell" || len(d.Methods) == 0 {
		t.Fatalf("legacy service served as %s with %d methods", d.ServiceName, len(d.Methods))
	}
}
