package relay_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"sigs.k8s.io/controller-runtime/pkg/client"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/relay"
	"github.com/openshell/openshell-operator/test/testgateway"
)

// anyToken accepts every token it is asked about.
type anyToken struct{}

func (anyToken) AuthenticateToken(context.Context, string) (*authenticator.Response, bool, error) {
	return &authenticator.Response{User: &user.DefaultInfo{Name: "system:serviceaccount:team-a:caller"}}, true, nil
}

// TestAnExternalTunnelEndsWithItsToken: a tunnel opened through the
// external port listener ends when the token it was opened with expires,
// though everything else still allows it.
func TestAnExternalTunnelEndsWithItsToken(t *testing.T) {
	g := NewWithT(t)
	e := startBench(t)
	ctx := context.Background()
	const host = "ports.apps.example.test"
	publish(ctx, g, e.env.Client, client.ObjectKeyFromObject(e.env.Object), host)

	e.srv.External = relay.ExternalAuthenticatorFor(anyToken{})
	hs := httptest.NewUnstartedServer(e.srv.ExternalHandler())
	hs.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
	hs.StartTLS()
	t.Cleanup(hs.Close)

	expires := time.Unix(time.Now().Add(3*time.Second).Unix(), 0) // a JWT says seconds
	token := "eyJhbGciOiJSUzI1NiJ9." + base64.RawURLEncoding.EncodeToString(
		fmt.Appendf(nil, `{"aud":[%q],"exp":%d}`, relay.ExternalAudience, expires.Unix())) + ".c2ln"
	conn, err := tls.Dial("tcp", hs.Listener.Addr().String(), &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // the test's own certificate
	g.Expect(err).NotTo(HaveOccurred())
	defer conn.Close()
	_, err = io.WriteString(conn, "GET /apis/access.openshell.ai/v1alpha1/namespaces/team-a/openshellsandboxes/agent/proxy/"+
		strconv.Itoa(testgateway.HTTPPort)+"/stream HTTP/1.1\r\nHost: "+host+"\r\nAuthorization: Bearer "+token+
		"\r\nConnection: Upgrade\r\nUpgrade: "+testgateway.UpgradeProtocol+"\r\n\r\n")
	g.Expect(err).NotTo(HaveOccurred())
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(resp.StatusCode).To(Equal(http.StatusSwitchingProtocols))
	_, err = io.WriteString(conn, "ping")
	g.Expect(err).NotTo(HaveOccurred())
	got := make([]byte, 4)
	_, err = io.ReadFull(br, got)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(got)).To(Equal("ping"))

	// The session's own checks (every 5 s) would let it run for hours.
	g.Expect(conn.SetReadDeadline(expires.Add(20 * time.Second))).To(Succeed())
	_, err = io.Copy(io.Discard, br)
	g.Expect(err).NotTo(HaveOccurred(), "the tunnel outlived its token")
	g.Expect(time.Now()).To(BeTemporally(">=", expires), "the tunnel ended before its token expired")
}

// publish makes the bench's gateway publish external ports at host and
// its sandbox one created from a template that lists the HTTP port.
func publish(ctx context.Context, g Gomega, c client.Client, gwKey client.ObjectKey, host string) {
	gw := &openshellv1alpha1.OpenShellGateway{}
	g.Expect(c.Get(ctx, gwKey, gw)).To(Succeed())
	gw.Spec.ExternalPorts = &openshellv1alpha1.ExternalPorts{Expose: openshellv1alpha1.ExternalPortsRoute}
	g.Expect(c.Update(ctx, gw)).To(Succeed())
	gw.Status.ExternalPorts = &openshellv1alpha1.ExternalPortsStatus{URL: "https://" + host, Conditions: []metav1.Condition{{
		Type: openshellv1alpha1.ExternalPortsConditionPublished, Status: metav1.ConditionTrue, Reason: openshellv1alpha1.ExternalPortsReasonAdmitted,
		LastTransitionTime: metav1.Now()}}}
	g.Expect(c.Status().Update(ctx, gw)).To(Succeed())
	g.Expect(c.Create(ctx, &openshellv1alpha1.OpenShellSandboxTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "web"},
		Spec: openshellv1alpha1.OpenShellSandboxTemplateSpec{Image: "mirror.corp/web:1", ExternalPorts: []int32{testgateway.HTTPPort}}})).To(Succeed())
	sb := &openshellv1alpha1.OpenShellSandbox{}
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "agent"}, sb)).To(Succeed())
	sb.Spec.TemplateRef = &openshellv1alpha1.LocalObjectReference{Name: "web"}
	sb.Spec.GatewayRef = openshellv1alpha1.GatewayReference{Namespace: gwKey.Namespace, Name: gwKey.Name}
	g.Expect(c.Update(ctx, sb)).To(Succeed())
}

// TestAnAbsoluteFormRequestIsRefused: a request line naming a host of
// its own (GET https://other/…) is not routed by that host, so the
// listener does not read it as the request's.
func TestAnAbsoluteFormRequestIsRefused(t *testing.T) {
	g := NewWithT(t)
	e := startBench(t)
	e.srv.External = relay.ExternalAuthenticatorFor(anyToken{})
	hs := httptest.NewUnstartedServer(e.srv.ExternalHandler())
	hs.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
	hs.StartTLS()
	t.Cleanup(hs.Close)
	conn, err := tls.Dial("tcp", hs.Listener.Addr().String(), &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // the test's own certificate
	g.Expect(err).NotTo(HaveOccurred())
	defer conn.Close()
	_, err = io.WriteString(conn, "GET https://other-ports.apps.example.test/apis/access.openshell.ai/v1alpha1/namespaces/team-a/openshellsandboxes/agent/proxy/"+
		strconv.Itoa(testgateway.HTTPPort)+"/ HTTP/1.1\r\nHost: ports.apps.example.test\r\nAuthorization: Bearer x.y.z\r\n\r\n")
	g.Expect(err).NotTo(HaveOccurred())
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	g.Expect(err).NotTo(HaveOccurred())
	body, _ := io.ReadAll(resp.Body)
	g.Expect(resp.StatusCode).To(Equal(http.StatusBadRequest), string(body))
	g.Expect(string(body)).To(ContainSubstring("origin-form"))
}
