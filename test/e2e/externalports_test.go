package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	routev1 "github.com/openshift/api/route/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	accessv1alpha1 "github.com/openshell/openshell-operator/api/access/v1alpha1"
	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/controllers/externalports"
	"github.com/openshell/openshell-operator/internal/relay"
	"github.com/openshell/openshell-operator/test/framework"
	"github.com/openshell/openshell-operator/test/stack"
	"github.com/openshell/openshell-operator/test/testgateway"
)

// externalPorts (#47 item 3, from outside the cluster): the Platform Admin
// publishes a gateway's external ports, the operator makes its Route, and
// the relay's external port listener, where that Route leads, serves a
// port a Tenant Admin's template lists to a caller whose bearer token the
// cluster authenticates and whose RBAC allows
// openshellsandboxes/proxy — and to no one else: no token, a forged
// front-proxy identity, a viewer's token, a stranger's, a port or sandbox
// the template does not publish, a gateway that does not publish, a
// subresource other than proxy. A namespace admin's own gateway asking for
// a Route gets none. Run inside TestConsumerAccess (its relay, gateway and
// personas).
func externalPorts(ctx context.Context, t *testing.T, st *stack.Stack, r *stack.Relay, tenant string) {
	g := NewWithT(t)
	c := cluster.Client
	opNS := st.GatewayObj.Namespace // the stack's operator namespace

	// The Platform Admin publishes the gateway's external ports; the test
	// plays openshift-apiserver (a host) and the router (admission).
	const host = routeHost
	setExpose(ctx, g, st.GatewayObj, &openshellv1alpha1.ExternalPorts{Expose: openshellv1alpha1.ExternalPortsRoute, Host: host})
	rtKey := client.ObjectKey{Namespace: opNS, Name: externalports.RouteName(client.ObjectKeyFromObject(st.GatewayObj))}
	rt := &routev1.Route{}
	g.Eventually(func(g Gomega) {
		g.Expect(c.Get(ctx, rtKey, rt)).To(Succeed())
	}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
	g.Expect(rt.Spec.To.Name).To(Equal(externalports.RelayService))
	g.Expect(rt.Spec.TLS).NotTo(BeNil())
	g.Expect(rt.Spec.TLS.Termination).To(Equal(routev1.TLSTerminationReencrypt))
	g.Expect(rt.Spec.TLS.InsecureEdgeTerminationPolicy).To(Equal(routev1.InsecureEdgeTerminationPolicyNone), "never plain HTTP")
	g.Expect(rt.Spec.Host).To(Equal(host))
	admitRoute(ctx, g, rtKey, host)
	g.Eventually(func(g Gomega) {
		cur := &openshellv1alpha1.OpenShellGateway{}
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(st.GatewayObj), cur)).To(Succeed())
		g.Expect(cur.Status.ExternalPorts).NotTo(BeNil())
		g.Expect(cur.Status.ExternalPorts.URL).To(Equal("https://" + host))
		g.Expect(meta.IsStatusConditionTrue(cur.Status.ExternalPorts.Conditions, openshellv1alpha1.ExternalPortsConditionPublished)).To(BeTrue())
	}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())

	// Drift: a cluster admin's edit of the Route opens plain HTTP; the
	// operator puts it back.
	g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &routev1.Route{}
		if err := c.Get(ctx, rtKey, cur); err != nil {
			return err
		}
		cur.Spec.TLS.InsecureEdgeTerminationPolicy = routev1.InsecureEdgeTerminationPolicyAllow
		return c.Update(ctx, cur)
	})).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(c.Get(ctx, rtKey, rt)).To(Succeed())
		g.Expect(rt.Spec.TLS.InsecureEdgeTerminationPolicy).To(Equal(routev1.InsecureEdgeTerminationPolicyNone))
	}).WithContext(ctx).WithTimeout(30*time.Second).Should(Succeed(), "the Route's drift was not repaired")

	// The Tenant Admin's template publishes the test sandbox's HTTP port.
	tpl := &openshellv1alpha1.OpenShellSandboxTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: "web"},
		Spec: openshellv1alpha1.OpenShellSandboxTemplateSpec{Image: "mirror.corp/agents/web:1", ExternalPorts: []int32{testgateway.HTTPPort}}}
	g.Expect(c.Create(ctx, tpl)).To(Succeed())
	sb := sandboxOn(tenant, "published", st.GatewayObj)
	sb.Spec.TemplateRef = &openshellv1alpha1.LocalObjectReference{Name: tpl.Name}
	g.Expect(c.Create(ctx, sb)).To(Succeed())
	waitPhase(ctx, g, client.ObjectKeyFromObject(sb), openshellv1alpha1.SandboxPhaseReady)

	// Callers: a workload's ServiceAccount allowed to use sandboxes, one
	// allowed to view them, and one with no role in the namespace.
	caller := serviceAccountWith(ctx, t, tenant, "webhook-caller", "openshell-sandbox-user")
	viewer := serviceAccountWith(ctx, t, tenant, "dashboard", "openshell-view")
	stranger := serviceAccountWith(ctx, t, tenant, "stranger", "")
	// The caller's ServiceAccount's token for the kube-apiserver, and a
	// JWT of no one's signing that names the audience.
	apiToken := framework.ServiceAccountToken(ctx, t, c, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: "webhook-caller"}})
	forged := "eyJhbGciOiJub25lIn0." + base64.RawURLEncoding.EncodeToString([]byte(`{"aud":["`+relay.ExternalAudience+`"],"sub":"system:admin"}`)) + ".c2ln"

	g.Eventually(func(g Gomega) {
		code, body := externalAs(ctx, g, r, caller, tenant, "published", testgateway.HTTPPort, "/hook?id=7", map[string]string{"X-Agent": "kept"})
		g.Expect(code).To(Equal(http.StatusOK), body)
		var seen testgateway.SandboxRequest
		g.Expect(json.Unmarshal([]byte(body), &seen)).To(Succeed(), body)
		g.Expect(seen.URI).To(Equal("/hook?id=7"))
		g.Expect(seen.Header).To(HaveKeyWithValue("X-Agent", []string{"kept"}))
		g.Expect(seen.Header).NotTo(HaveKey("Authorization"), "the caller's token reached the agent")
	}).WithContext(ctx).WithTimeout(30*time.Second).Should(Succeed(), "the RoleBinding is enforced once the API server's RBAC cache has it")

	refused := []struct {
		name, token, sandbox string
		port                 int
		header               map[string]string
		code                 int
		says                 string
	}{
		{"no token", "", "published", testgateway.HTTPPort, nil, http.StatusUnauthorized, "bearer token"},
		{"a token the cluster did not issue", "not-a-token", "published", testgateway.HTTPPort, nil, http.StatusUnauthorized, "bearer token"},
		{"front-proxy identity headers, no token", "", "published", testgateway.HTTPPort,
			map[string]string{framework.FrontProxyUserHeader: "system:admin", "X-Remote-Group": "system:masters"}, http.StatusUnauthorized, "bearer token"},
		{"a token for the kube-apiserver", apiToken, "published", testgateway.HTTPPort, nil, http.StatusUnauthorized, relay.ExternalAudience},
		{"a forged JWT naming the audience", forged, "published", testgateway.HTTPPort, nil, http.StatusUnauthorized, "bearer token"},
		{"another host than the gateway's Route", caller, "published", testgateway.HTTPPort, map[string]string{"Host": "other-ports.apps.example.test"},
			http.StatusForbidden, "its own Route's or HTTPRoute's host only"},
		{"a viewer's token", viewer, "published", testgateway.HTTPPort, nil, http.StatusForbidden, "cannot create openshellsandboxes/proxy"},
		{"a stranger's token", stranger, "published", testgateway.HTTPPort, nil, http.StatusForbidden, "cannot create openshellsandboxes/proxy"},
		{"a port the template does not list", caller, "published", 8001, nil, http.StatusForbidden, "does not list it in spec.externalPorts"},
		{"a sandbox created without a template", caller, "agent", testgateway.HTTPPort, nil, http.StatusForbidden, "OpenShellSandboxTemplate"},
		{"a request from a web page", caller, "published", testgateway.HTTPPort, map[string]string{"Origin": "https://evil.example"}, http.StatusForbidden, "web page"},
	}
	for _, tc := range refused {
		code, body := externalAs(ctx, g, r, tc.token, tenant, tc.sandbox, tc.port, "/", tc.header)
		g.Expect(code).To(Equal(tc.code), "%s: %s", tc.name, body)
		g.Expect(body).To(ContainSubstring(tc.says), tc.name)
	}
	// Only proxy is served there: no exec, token exchange or discovery.
	for _, path := range []string{
		fmt.Sprintf("/apis/%s/%s/namespaces/%s/openshellsandboxes/published/exec?command=id", accessv1alpha1.Group, accessv1alpha1.Version, tenant),
		fmt.Sprintf("/apis/%s/%s/namespaces/%s/openshellsandboxes/published/token", accessv1alpha1.Group, accessv1alpha1.Version, tenant),
		"/apis",
	} {
		code, body := externalAt(ctx, g, r, http.MethodPost, path, map[string]string{"Authorization": "Bearer " + caller})
		g.Expect(code).To(Equal(http.StatusNotFound), "%s: %s", path, body)
	}

	// An open tunnel through the Route (a WebSocket, say) to the port.
	tunnel, reader := openTunnel(ctx, g, r, caller, tenant)
	defer tunnel.Close()
	_, err := tunnel.Write([]byte("ping\n"))
	g.Expect(err).NotTo(HaveOccurred())
	line, err := reader.ReadString('\n')
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(line).To(Equal("ping\n"))

	// The Tenant Admin removes the port: closed at the next request, and
	// the open tunnel ends.
	g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &openshellv1alpha1.OpenShellSandboxTemplate{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(tpl), cur); err != nil {
			return err
		}
		cur.Spec.ExternalPorts = []int32{9000}
		return c.Update(ctx, cur)
	})).To(Succeed())
	code, body := externalAs(ctx, g, r, caller, tenant, "published", testgateway.HTTPPort, "/", nil)
	g.Expect(code).To(Equal(http.StatusForbidden), body)
	g.Expect(body).To(ContainSubstring("does not list it"))
	removed := time.Now()
	g.Expect(tunnel.SetReadDeadline(time.Now().Add(30 * time.Second))).To(Succeed())
	_, err = io.Copy(io.Discard, reader)
	g.Expect(err).NotTo(HaveOccurred(), "the tunnel outlived the port's removal")
	t.Logf("figure: an open tunnel through the external ports Route ended %s after its port was removed from the template",
		time.Since(removed).Round(10*time.Millisecond))

	// A namespace admin's own gateway asks for a Route: it is not served,
	// and gets none in the operator's namespace; nor does it delete the
	// Route that bears the name its own would have (a name collision: a
	// decoy here, annotated as the platform gateway's).
	bind(ctx, t, tenant, "adam", "admin")
	ownKey := client.ObjectKey{Namespace: tenant, Name: "mine"}
	published := st.GatewayObj.DeepCopy()
	published.Spec.ExternalPorts = &openshellv1alpha1.ExternalPorts{Expose: openshellv1alpha1.ExternalPortsRoute}
	decoy := externalports.Route(published, opNS)
	decoy.Name = externalports.RouteName(ownKey)
	g.Expect(c.Create(ctx, decoy)).To(Succeed())
	t.Cleanup(func() { _ = c.Delete(context.Background(), decoy) })
	own := &openshellv1alpha1.OpenShellGateway{ObjectMeta: metav1.ObjectMeta{Namespace: ownKey.Namespace, Name: ownKey.Name},
		Spec: openshellv1alpha1.OpenShellGatewaySpec{Mode: openshellv1alpha1.GatewayModeExternal,
			External:      &openshellv1alpha1.ExternalGatewaySpec{Endpoint: "https://gateway.example.test", CASecretRef: openshellv1alpha1.SecretKeyReference{Name: "ca", Key: "ca.crt"}},
			ExternalPorts: &openshellv1alpha1.ExternalPorts{Expose: openshellv1alpha1.ExternalPortsRoute}}}
	g.Expect(as(t, "adam").Create(ctx, own)).To(Succeed())
	t.Cleanup(func() { _ = c.Delete(context.Background(), own) })
	g.Eventually(func(g Gomega) {
		cur := &openshellv1alpha1.OpenShellGateway{}
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(own), cur)).To(Succeed())
		g.Expect(cur.Status.ExternalPorts).NotTo(BeNil())
		cond := meta.FindStatusCondition(cur.Status.ExternalPorts.Conditions, openshellv1alpha1.ExternalPortsConditionPublished)
		g.Expect(cond).NotTo(BeNil())
		g.Expect(cond.Reason).To(Equal(openshellv1alpha1.ExternalPortsReasonNamespaceNotServed))
	}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
	there := &routev1.Route{}
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: opNS, Name: decoy.Name}, there)).To(Succeed(), "the tenant's gateway deleted a Route not its own")
	g.Expect(there.UID).To(Equal(decoy.UID))
	g.Expect(there.Annotations).To(HaveKeyWithValue(externalports.AnnotationGateway, st.GatewayObj.Namespace+"/"+st.GatewayObj.Name),
		"a tenant's own gateway took over a Route in the operator's namespace")

	// The Platform Admin stops publishing: the Route goes, and the
	// listener refuses even a port the template lists.
	g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &openshellv1alpha1.OpenShellSandboxTemplate{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(tpl), cur); err != nil {
			return err
		}
		cur.Spec.ExternalPorts = []int32{testgateway.HTTPPort}
		return c.Update(ctx, cur)
	})).To(Succeed())
	setExpose(ctx, g, st.GatewayObj, &openshellv1alpha1.ExternalPorts{Expose: openshellv1alpha1.ExternalPortsNone})
	g.Eventually(func(g Gomega) {
		g.Expect(apierrors.IsNotFound(c.Get(ctx, rtKey, &routev1.Route{}))).To(BeTrue(), "the Route is still there")
		cur := &openshellv1alpha1.OpenShellGateway{}
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(st.GatewayObj), cur)).To(Succeed())
		g.Expect(cur.Status.ExternalPorts).To(BeNil())
	}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
	code, body = externalAs(ctx, g, r, caller, tenant, "published", testgateway.HTTPPort, "/", nil)
	g.Expect(code).To(Equal(http.StatusForbidden), body)
	g.Expect(body).To(ContainSubstring("does not publish external ports"))
}

// routeHost is the external ports Route's host in the test.
const routeHost = "sandbox-ports.apps.example.test"

// setExpose sets a gateway's spec.externalPorts.expose, as its Platform
// Admin.
func setExpose(ctx context.Context, g Gomega, gw *openshellv1alpha1.OpenShellGateway, ports *openshellv1alpha1.ExternalPorts) {
	editGateway(ctx, g, client.ObjectKeyFromObject(gw), func(cur *openshellv1alpha1.OpenShellGateway) { cur.Spec.ExternalPorts = ports })
}

// editGateway applies edit to the gateway key as its Platform Admin (an
// update, retried on conflicts).
func editGateway(ctx context.Context, g Gomega, key client.ObjectKey, edit func(*openshellv1alpha1.OpenShellGateway)) {
	g.ExpectWithOffset(2, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &openshellv1alpha1.OpenShellGateway{}
		if err := cluster.Client.Get(ctx, key, cur); err != nil {
			return err
		}
		edit(cur)
		return cluster.Client.Update(ctx, cur)
	})).To(Succeed())
}

// admitRoute plays the router, which admits the Route for host.
func admitRoute(ctx context.Context, g Gomega, key client.ObjectKey, host string) {
	g.ExpectWithOffset(1, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &routev1.Route{}
		if err := cluster.Client.Get(ctx, key, cur); err != nil {
			return err
		}
		cur.Status.Ingress = []routev1.RouteIngress{{Host: host, RouterName: "default", Conditions: []routev1.RouteIngressCondition{{
			Type: routev1.RouteAdmitted, Status: corev1.ConditionTrue, LastTransitionTime: &metav1.Time{Time: time.Now()}}}}}
		return cluster.Client.Status().Update(ctx, cur)
	})).To(Succeed())
}

// serviceAccountWith creates a ServiceAccount in ns bound to role there
// ("" for none) and returns a token of it for the external port
// listener's audience.
func serviceAccountWith(ctx context.Context, t *testing.T, ns, name, role string) string {
	t.Helper()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if err := cluster.Client.Create(ctx, sa); err != nil {
		t.Fatal(err)
	}
	if role != "" {
		if err := cluster.Client.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-" + role},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role}}); err != nil {
			t.Fatal(err)
		}
	}
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{Audiences: []string{relay.ExternalAudience},
		ExpirationSeconds: ptr.To[int64](600)}}
	if err := cluster.Client.SubResource("token").Create(ctx, sa, tr); err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// externalAs sends a GET to a sandbox's port through the relay's external
// port listener, as the external ports Route brings it, with token as the
// bearer ("" for none).
func externalAs(ctx context.Context, g Gomega, r *stack.Relay, token, ns, name string, port int, path string, header map[string]string) (int, string) {
	p := fmt.Sprintf("/apis/%s/%s/namespaces/%s/openshellsandboxes/%s/proxy/%d%s", accessv1alpha1.Group, accessv1alpha1.Version, ns, name, port, path)
	h := maps.Clone(header)
	if h == nil {
		h = map[string]string{}
	}
	if token != "" {
		h["Authorization"] = "Bearer " + token
	}
	return externalAt(ctx, g, r, http.MethodGet, p, h)
}

// externalAt sends method to path on the relay's external port listener.
func externalAt(ctx context.Context, g Gomega, r *stack.Relay, method, path string, header map[string]string) (int, string) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: r.RelayCA(), MinVersion: tls.VersionTLS12}}}
	defer hc.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, method, "https://"+r.ExternalAddr+path, nil)
	g.Expect(err).NotTo(HaveOccurred())
	// As the router forwards it: the Route's host.
	req.Host = routeHost
	for k, v := range header {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := hc.Do(req)
	g.Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	g.Expect(err).NotTo(HaveOccurred())
	return resp.StatusCode, strings.TrimSpace(string(b))
}

// openTunnel opens an Upgrade to the test sandbox's echo protocol through
// the external port listener, as the caller, and returns the connection
// once the 101 is read.
func openTunnel(ctx context.Context, g Gomega, r *stack.Relay, token, ns string) (*tls.Conn, *bufio.Reader) {
	d := &tls.Dialer{Config: &tls.Config{RootCAs: r.RelayCA(), MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}}}
	conn, err := d.DialContext(ctx, "tcp", r.ExternalAddr)
	g.ExpectWithOffset(1, err).NotTo(HaveOccurred())
	tc := conn.(*tls.Conn)
	path := fmt.Sprintf("/apis/%s/%s/namespaces/%s/openshellsandboxes/published/proxy/%d/echo", accessv1alpha1.Group, accessv1alpha1.Version, ns, testgateway.HTTPPort)
	_, err = fmt.Fprintf(tc, "GET %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nConnection: Upgrade\r\nUpgrade: %s\r\n\r\n",
		path, routeHost, token, testgateway.UpgradeProtocol)
	g.ExpectWithOffset(1, err).NotTo(HaveOccurred())
	br := bufio.NewReader(tc)
	resp, err := http.ReadResponse(br, nil)
	g.ExpectWithOffset(1, err).NotTo(HaveOccurred())
	g.ExpectWithOffset(1, resp.StatusCode).To(Equal(http.StatusSwitchingProtocols))
	return tc, br
}

// httpRouteHost is the external ports HTTPRoute's host in the test.
const httpRouteHost = "ports.gateway.example.test"

// externalPortsHTTPRoute (#47 item 3, vanilla Kubernetes): the Platform
// Admin publishes the gateway's external ports through a Gateway API
// HTTPRoute on a listener of their Gateway. The operator makes the
// HTTPRoute, the BackendTLSPolicy by which the Gateway verifies the relay,
// its CA bundle and (no OpenShift service CA here) the relay's
// certificate, which verifies against that bundle for the policy's
// hostname. Published follows what the Gateway's controller reports (the
// test plays it, as externalPorts plays the router): not while the
// listener admits routes from other namespaces, not before the route and
// the policy are both accepted, never on a plain HTTP listener. The relay
// serves the published host. Run inside TestConsumerAccess, after
// externalPorts (its template and sandbox).
func externalPortsHTTPRoute(ctx context.Context, t *testing.T, st *stack.Stack, r *stack.Relay, tenant string) {
	g := NewWithT(t)
	c := cluster.Client
	opNS := st.GatewayObj.Namespace

	// The cluster's Gateway: an HTTPS listener for the host, first
	// admitting routes from every namespace, and a plain HTTP one.
	gwNS := framework.CreateNamespace(ctx, t, c, "gateways")
	all := &gatewayv1.AllowedRoutes{Namespaces: &gatewayv1.RouteNamespaces{From: ptr.To(gatewayv1.NamespacesFromAll)}}
	parent := &gatewayv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: gwNS, Name: "public"}, Spec: gatewayv1.GatewaySpec{
		GatewayClassName: "example",
		Listeners: []gatewayv1.Listener{
			{Name: "https", Protocol: gatewayv1.HTTPSProtocolType, Port: 443, Hostname: ptr.To(gatewayv1.Hostname(httpRouteHost)),
				TLS: &gatewayv1.ListenerTLSConfig{Mode: ptr.To(gatewayv1.TLSModeTerminate),
					CertificateRefs: []gatewayv1.SecretObjectReference{{Name: "public-cert"}}}, AllowedRoutes: all},
			{Name: "http", Protocol: gatewayv1.HTTPProtocolType, Port: 80, AllowedRoutes: all}}}}
	g.Expect(c.Create(ctx, parent)).To(Succeed())

	ref := &openshellv1alpha1.ExternalPortsParentRef{Namespace: gwNS, Name: "public", SectionName: "https"}
	setExpose(ctx, g, st.GatewayObj, &openshellv1alpha1.ExternalPorts{Expose: openshellv1alpha1.ExternalPortsHTTPRoute, Host: httpRouteHost, ParentRef: ref})
	key := client.ObjectKey{Namespace: opNS, Name: externalports.RouteName(client.ObjectKeyFromObject(st.GatewayObj))}
	published := func(reason string) *openshellv1alpha1.OpenShellGateway {
		cur := &openshellv1alpha1.OpenShellGateway{}
		g.EventuallyWithOffset(1, func(g Gomega) {
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(st.GatewayObj), cur)).To(Succeed())
			g.Expect(cur.Status.ExternalPorts).NotTo(BeNil())
			p := meta.FindStatusCondition(cur.Status.ExternalPorts.Conditions, openshellv1alpha1.ExternalPortsConditionPublished)
			g.Expect(p).NotTo(BeNil())
			g.Expect(p.Reason).To(Equal(reason), p.Message)
			g.Expect(p.Status == metav1.ConditionTrue).To(Equal(reason == openshellv1alpha1.ExternalPortsReasonAccepted))
		}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
		return cur
	}
	// A listener that admits routes from every namespace could serve a
	// tenant's route for the host (a longer path wins) and so hand it the
	// callers' tokens: no route at all, and the relay refuses the host.
	published(openshellv1alpha1.ExternalPortsReasonListenerShared)
	g.Expect(apierrors.IsNotFound(c.Get(ctx, key, &gatewayv1.HTTPRoute{}))).To(BeTrue(), "an HTTPRoute on a shared listener")
	caller := serviceAccountWith(ctx, t, tenant, "gateway-caller", "openshell-sandbox-user")
	atHost := map[string]string{"Host": httpRouteHost}
	code, body := externalAs(ctx, g, r, caller, tenant, "published", testgateway.HTTPPort, "/", atHost)
	g.Expect(code).To(Equal(http.StatusForbidden), body)

	// The cluster admin gives the listener to the operator's namespace
	// alone. (The Gateway is read, not watched: the operator reads it again
	// within a minute, or at once on an edit of the OpenShellGateway, as
	// here.)
	g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &gatewayv1.Gateway{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(parent), cur); err != nil {
			return err
		}
		cur.Spec.Listeners[0].AllowedRoutes = &gatewayv1.AllowedRoutes{Namespaces: &gatewayv1.RouteNamespaces{From: ptr.To(gatewayv1.NamespacesFromSelector),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": opNS}}}}
		return c.Update(ctx, cur)
	})).To(Succeed())
	annotate(ctx, g, st.GatewayObj, "e2e.openshell.ai/gateway-listener", "narrowed")
	rt, policy, bundle := &gatewayv1.HTTPRoute{}, &gatewayv1.BackendTLSPolicy{}, &corev1.ConfigMap{}
	leaf := &corev1.Secret{}
	g.Eventually(func(g Gomega) {
		g.Expect(c.Get(ctx, key, rt)).To(Succeed())
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: opNS, Name: externalports.BackendTLSPolicyName}, policy)).To(Succeed())
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: opNS, Name: externalports.CABundleConfigMap}, bundle)).To(Succeed())
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: opNS, Name: externalports.RelayCertSecret}, leaf)).To(Succeed())
	}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
	g.Expect(rt.Spec.ParentRefs).To(HaveLen(1))
	g.Expect(rt.Spec.ParentRefs[0].SectionName).To(HaveValue(BeEquivalentTo("https")))
	g.Expect(rt.Spec.Hostnames).To(ConsistOf(gatewayv1.Hostname(httpRouteHost)))
	g.Expect(apierrors.IsNotFound(c.Get(ctx, key, &routev1.Route{}))).To(BeTrue(), "no OpenShift Route for an HTTPRoute exposure")

	// What the Gateway does with the policy: verify the relay's
	// certificate, for the policy's hostname, against the bundle's ca.crt.
	roots := x509.NewCertPool()
	g.Expect(roots.AppendCertsFromPEM([]byte(bundle.Data["ca.crt"]))).To(BeTrue(), "the CA bundle's ca.crt")
	block, _ := pem.Decode(leaf.Data[corev1.TLSCertKey])
	g.Expect(block).NotTo(BeNil())
	cert, err := x509.ParseCertificate(block.Bytes)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: string(policy.Spec.Validation.Hostname)})
	g.Expect(err).NotTo(HaveOccurred(), "the relay's certificate as the Gateway verifies it")
	g.Expect(leaf.Type).To(Equal(corev1.SecretTypeTLS))
	// Nothing reported on the route yet.
	published(openshellv1alpha1.ExternalPortsReasonRouteNotAccepted)

	// The Gateway's controller accepts the route: the policy is still to come.
	reportRoute(ctx, g, key, gwNS, "https")
	published(openshellv1alpha1.ExternalPortsReasonBackendTLSNotAccepted)
	reportPolicy(ctx, g, client.ObjectKeyFromObject(policy), gwNS)
	cur := published(openshellv1alpha1.ExternalPortsReasonAccepted)
	g.Expect(cur.Status.ExternalPorts.URL).To(Equal("https://" + httpRouteHost))
	code, body = externalAs(ctx, g, r, caller, tenant, "published", testgateway.HTTPPort, "/", atHost)
	g.Expect(code).To(Equal(http.StatusOK), body)
	code, body = externalAs(ctx, g, r, "", tenant, "published", testgateway.HTTPPort, "/", atHost)
	g.Expect(code).To(Equal(http.StatusUnauthorized), body)

	// A second Platform Admin's gateway asking for the same host gets no
	// route: the relay tells gateways apart by host, and the host is in
	// use by the first.
	second := &openshellv1alpha1.OpenShellGateway{ObjectMeta: metav1.ObjectMeta{Namespace: opNS, Name: "second"},
		Spec: *st.GatewayObj.Spec.DeepCopy()}
	second.Spec.ExternalPorts = &openshellv1alpha1.ExternalPorts{Expose: openshellv1alpha1.ExternalPortsHTTPRoute, Host: httpRouteHost,
		ParentRef: &openshellv1alpha1.ExternalPortsParentRef{Namespace: gwNS, Name: "public", SectionName: "https"}}
	g.Expect(c.Create(ctx, second)).To(Succeed())
	g.Eventually(func(g Gomega) {
		cur := &openshellv1alpha1.OpenShellGateway{}
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(second), cur)).To(Succeed())
		g.Expect(cur.Status.ExternalPorts).NotTo(BeNil())
		p := meta.FindStatusCondition(cur.Status.ExternalPorts.Conditions, openshellv1alpha1.ExternalPortsConditionPublished)
		g.Expect(p).NotTo(BeNil())
		g.Expect(p.Reason).To(Equal(openshellv1alpha1.ExternalPortsReasonHostConflict), p.Message)
		g.Expect(p.Message).To(ContainSubstring(st.GatewayObj.Namespace + "/" + st.GatewayObj.Name))
	}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
	secondKey := client.ObjectKey{Namespace: opNS, Name: externalports.RouteName(client.ObjectKeyFromObject(second))}
	g.Expect(apierrors.IsNotFound(c.Get(ctx, secondKey, &gatewayv1.HTTPRoute{}))).To(BeTrue(), "the second gateway got an HTTPRoute for a host in use")
	published(openshellv1alpha1.ExternalPortsReasonAccepted)
	g.Expect(c.Delete(ctx, second)).To(Succeed())
	g.Eventually(func() error { return c.Get(ctx, client.ObjectKeyFromObject(second), second) }).WithContext(ctx).WithTimeout(30 * time.Second).
		Should(Satisfy(apierrors.IsNotFound))

	// Drift: an edit of the HTTPRoute that points it at the whole Gateway
	// (its plain HTTP listener included) is put back.
	g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &gatewayv1.HTTPRoute{}
		if err := c.Get(ctx, key, cur); err != nil {
			return err
		}
		cur.Spec.ParentRefs[0].SectionName = nil
		return c.Update(ctx, cur)
	})).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(c.Get(ctx, key, rt)).To(Succeed())
		g.Expect(rt.Spec.ParentRefs[0].SectionName).To(HaveValue(BeEquivalentTo("https")))
	}).WithContext(ctx).WithTimeout(30*time.Second).Should(Succeed(), "the HTTPRoute's drift was not repaired")

	// A namespace admin's own gateway (adam is the tenant's admin, from
	// externalPorts) asks for an HTTPRoute on the same listener: it is not
	// served, so no HTTPRoute, and the platform's route and policy stay.
	ownKey := client.ObjectKey{Namespace: tenant, Name: "mine-httproute"}
	own := &openshellv1alpha1.OpenShellGateway{ObjectMeta: metav1.ObjectMeta{Namespace: ownKey.Namespace, Name: ownKey.Name},
		Spec: openshellv1alpha1.OpenShellGatewaySpec{Mode: openshellv1alpha1.GatewayModeExternal,
			External: &openshellv1alpha1.ExternalGatewaySpec{Endpoint: "https://gateway.example.test", CASecretRef: openshellv1alpha1.SecretKeyReference{Name: "ca", Key: "ca.crt"}},
			ExternalPorts: &openshellv1alpha1.ExternalPorts{Expose: openshellv1alpha1.ExternalPortsHTTPRoute, Host: "adam." + httpRouteHost,
				ParentRef: ref.DeepCopy()}}}
	g.Expect(as(t, "adam").Create(ctx, own)).To(Succeed())
	t.Cleanup(func() { _ = c.Delete(context.Background(), own) })
	g.Eventually(func(g Gomega) {
		cur := &openshellv1alpha1.OpenShellGateway{}
		g.Expect(c.Get(ctx, ownKey, cur)).To(Succeed())
		g.Expect(cur.Status.ExternalPorts).NotTo(BeNil())
		cond := meta.FindStatusCondition(cur.Status.ExternalPorts.Conditions, openshellv1alpha1.ExternalPortsConditionPublished)
		g.Expect(cond).NotTo(BeNil())
		g.Expect(cond.Reason).To(Equal(openshellv1alpha1.ExternalPortsReasonNamespaceNotServed))
	}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
	g.Expect(apierrors.IsNotFound(c.Get(ctx, client.ObjectKey{Namespace: opNS, Name: externalports.RouteName(ownKey)}, &gatewayv1.HTTPRoute{}))).
		To(BeTrue(), "a tenant's own gateway got an HTTPRoute in the operator's namespace")
	stillPolicy := &gatewayv1.BackendTLSPolicy{}
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(policy), stillPolicy)).To(Succeed())
	g.Expect(stillPolicy.UID).To(Equal(policy.UID))
	g.Expect(c.Get(ctx, key, &gatewayv1.HTTPRoute{})).To(Succeed(), "the platform's HTTPRoute went")

	// The Platform Admin names the plain HTTP listener: even accepted
	// there, nothing is published.
	ref.SectionName = "http"
	setExpose(ctx, g, st.GatewayObj, &openshellv1alpha1.ExternalPorts{Expose: openshellv1alpha1.ExternalPortsHTTPRoute, Host: httpRouteHost, ParentRef: ref})
	published(openshellv1alpha1.ExternalPortsReasonListenerNotHTTPS)
	g.Eventually(func() bool { return apierrors.IsNotFound(c.Get(ctx, key, &gatewayv1.HTTPRoute{})) }).WithContext(ctx).
		WithTimeout(30*time.Second).Should(BeTrue(), "the HTTPRoute on a plain HTTP listener")
	code, body = externalAs(ctx, g, r, caller, tenant, "published", testgateway.HTTPPort, "/", atHost)
	g.Expect(code).To(Equal(http.StatusForbidden), body)

	// Off: the HTTPRoute, the policy and the bundle go; the relay's
	// certificate stays (the relay mounts it).
	setExpose(ctx, g, st.GatewayObj, &openshellv1alpha1.ExternalPorts{Expose: openshellv1alpha1.ExternalPortsNone})
	g.Eventually(func(g Gomega) {
		g.Expect(apierrors.IsNotFound(c.Get(ctx, key, &gatewayv1.HTTPRoute{}))).To(BeTrue(), "the HTTPRoute is still there")
		g.Expect(apierrors.IsNotFound(c.Get(ctx, client.ObjectKeyFromObject(policy), &gatewayv1.BackendTLSPolicy{}))).To(BeTrue(), "the policy is still there")
		g.Expect(apierrors.IsNotFound(c.Get(ctx, client.ObjectKeyFromObject(bundle), &corev1.ConfigMap{}))).To(BeTrue(), "the CA bundle is still there")
	}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(leaf), &corev1.Secret{})).To(Succeed())
}

// reportRoute plays the Gateway's controller: the HTTPRoute accepted, its
// backend resolved, on the listener sectionName of Gateway gwNS/public.
func reportRoute(ctx context.Context, g Gomega, key client.ObjectKey, gwNS, sectionName string) {
	g.ExpectWithOffset(1, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &gatewayv1.HTTPRoute{}
		if err := cluster.Client.Get(ctx, key, cur); err != nil {
			return err
		}
		ref := publicGateway(gwNS)
		ref.SectionName = ptr.To(gatewayv1.SectionName(sectionName))
		cur.Status.Parents = []gatewayv1.RouteParentStatus{{ParentRef: ref, ControllerName: testGatewayController,
			Conditions: acceptedAndResolved(cur.Generation)}}
		return cluster.Client.Status().Update(ctx, cur)
	})).To(Succeed())
}

// reportPolicy plays the Gateway's controller: the BackendTLSPolicy
// accepted and its CA resolved for Gateway gwNS/public.
func reportPolicy(ctx context.Context, g Gomega, key client.ObjectKey, gwNS string) {
	g.ExpectWithOffset(1, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &gatewayv1.BackendTLSPolicy{}
		if err := cluster.Client.Get(ctx, key, cur); err != nil {
			return err
		}
		cur.Status.Ancestors = []gatewayv1.PolicyAncestorStatus{{AncestorRef: publicGateway(gwNS), ControllerName: testGatewayController,
			Conditions: acceptedAndResolved(cur.Generation)}}
		return cluster.Client.Status().Update(ctx, cur)
	})).To(Succeed())
}

// testGatewayController is the controller the test plays.
const testGatewayController = "example.com/gateway-controller"

// publicGateway refers to the test's Gateway gwNS/public.
func publicGateway(gwNS string) gatewayv1.ParentReference {
	return gatewayv1.ParentReference{Group: ptr.To(gatewayv1.Group(gatewayv1.GroupName)), Kind: ptr.To(gatewayv1.Kind("Gateway")),
		Namespace: ptr.To(gatewayv1.Namespace(gwNS)), Name: "public"}
}

// acceptedAndResolved are a Gateway controller's conditions for an object
// of generation gen it accepted and whose references it resolved.
func acceptedAndResolved(gen int64) []metav1.Condition {
	now := metav1.Now()
	return []metav1.Condition{
		{Type: "Accepted", Status: metav1.ConditionTrue, Reason: "Accepted", ObservedGeneration: gen, LastTransitionTime: now},
		{Type: "ResolvedRefs", Status: metav1.ConditionTrue, Reason: "ResolvedRefs", ObservedGeneration: gen, LastTransitionTime: now}}
}

// annotate sets an annotation on a gateway, as its Platform Admin editing
// it: an edit the operator reconciles at once.
func annotate(ctx context.Context, g Gomega, gw *openshellv1alpha1.OpenShellGateway, key, value string) {
	editGateway(ctx, g, client.ObjectKeyFromObject(gw), func(cur *openshellv1alpha1.OpenShellGateway) {
		metav1.SetMetaDataAnnotation(&cur.ObjectMeta, key, value)
	})
}
