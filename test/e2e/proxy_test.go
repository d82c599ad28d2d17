package e2e

import (
	"context"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	render "github.com/openshell/openshell-operator/internal/render/gateway"
	"github.com/openshell/openshell-operator/internal/tenancy"
	"github.com/openshell/openshell-operator/operator"
	"github.com/openshell/openshell-operator/test/framework"
	"github.com/openshell/openshell-operator/test/stack"
	"github.com/openshell/openshell-operator/test/testgateway"
)

// proxiedHost is a name only the test's egress proxy resolves.
const proxiedHost = "gateway.proxy.test"

// TestClusterProxy runs the operator as a process with the environment OLM
// gives it on a cluster with an egress proxy (HTTPS_PROXY, HTTP_PROXY,
// NO_PROXY). An External gateway named by a host only the proxy resolves is
// reached through the proxy and runs a sandbox; a Managed gateway gets the
// proxy for its own process and, as the upstream proxy of its sandboxes'
// network supervisors, in gateway.toml.
func TestClusterProxy(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := cluster.Client
	gwNS := framework.CreateNamespace(ctx, t, c, "proxy-platform")
	sbNS := framework.CreatePlatformNamespace(ctx, t, c, "proxy-sandboxes")
	tenant := framework.CreateNamespace(ctx, t, c, "proxy-tenant")

	proxy, err := framework.StartHTTPProxy()
	g.Expect(err).NotTo(HaveOccurred())
	defer proxy.Stop()
	bin, err := framework.OperatorBinary()
	g.Expect(err).NotTo(HaveOccurred())
	noProxy := ".cluster.local,.svc,10.128.0.0/14"
	st, err := stack.Start(ctx, cluster.Config, c, stack.Options{GatewayNamespace: gwNS, SandboxNamespace: sbNS,
		Manager: operator.Options{Controllers: operator.ControllerOptions{Platform: tenancy.Platform{GatewayNamespaces: []string{gwNS, sbNS}}}},
		Process: &stack.ProcessOptions{Binary: bin, Kubeconfig: cluster.KubeconfigPath, Dir: t.TempDir(),
			Env: []string{"HTTPS_PROXY=" + proxy.URL(), "HTTP_PROXY=" + proxy.URL(), "NO_PROXY=" + noProxy}}})
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { g.Expect(st.Stop()).To(Succeed()) }()

	// The External gateway: its certificate names localhost, its endpoint
	// a host that does not resolve here.
	_, obj, err := st.AddGatewayWith(ctx, c, "proxied", sbNS, func(_ *testgateway.Options, gw *openshellv1alpha1.OpenShellGateway) {
		gw.Spec.External.Endpoint = "https://" + proxiedHost
		gw.Spec.External.ServerName = "localhost"
	})
	g.Expect(err).NotTo(HaveOccurred())
	u, err := url.Parse(obj.Spec.External.Endpoint)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(u.Hostname()).To(Equal(proxiedHost))
	_, err = net.DefaultResolver.LookupHost(ctx, proxiedHost)
	g.Expect(err).To(HaveOccurred(), "%s must not resolve without the proxy", proxiedHost)
	proxy.Route(u.Host, "127.0.0.1:"+u.Port())

	sb := sandboxOn(tenant, "through-proxy", obj)
	g.Expect(c.Create(ctx, sb)).To(Succeed())
	g.Eventually(func(g Gomega) {
		cur := sandboxStatus(ctx, g, client.ObjectKeyFromObject(sb))
		g.Expect(cur.Status.Phase).To(Equal(openshellv1alpha1.SandboxPhaseReady), "%+v", cur.Status.Conditions)
	}).WithContext(ctx).WithTimeout(90*time.Second).WithPolling(500*time.Millisecond).Should(Succeed(), cluster.CheckProcessesMessage)
	g.Expect(proxy.Tunnels(u.Host)).To(BeNumerically(">", 0), "the operator reached the gateway without the proxy")
	t.Logf("figure: %d CONNECT tunnels to %s through the cluster proxy", proxy.Tunnels(u.Host), u.Host)

	// A Managed gateway gets the proxy passed on.
	managed := &openshellv1alpha1.OpenShellGateway{ObjectMeta: metav1.ObjectMeta{Name: "managed", Namespace: gwNS},
		Spec: openshellv1alpha1.OpenShellGatewaySpec{Mode: openshellv1alpha1.GatewayModeManaged, Managed: &openshellv1alpha1.ManagedGatewaySpec{
			Sandboxes: openshellv1alpha1.SandboxPlacement{Namespace: sbNS}}}}
	g.Expect(c.Create(ctx, managed)).To(Succeed())
	n := render.NamesFor(managed)
	g.Eventually(func(g Gomega) {
		cur := &openshellv1alpha1.OpenShellGateway{}
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(managed), cur)).To(Succeed())
		cm := &corev1.ConfigMap{}
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: gwNS, Name: n.Fullname + "-config"}, cm)).To(Succeed(), "%+v", cur.Status.Conditions)
		toml := cm.Data["gateway.toml"]
		g.Expect(toml).To(ContainSubstring("https_proxy = '" + proxy.URL() + "'"))
		g.Expect(toml).To(ContainSubstring("no_proxy = '" + noProxy + "'"))
		sts := &appsv1.StatefulSet{}
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: gwNS, Name: n.Fullname}, sts)).To(Succeed())
		env := map[string]string{}
		for _, e := range sts.Spec.Template.Spec.Containers[0].Env {
			env[e.Name] = e.Value
		}
		g.Expect(env).To(HaveKeyWithValue("HTTPS_PROXY", proxy.URL()))
		g.Expect(env).To(HaveKeyWithValue("HTTP_PROXY", proxy.URL()))
		g.Expect(strings.Split(env["NO_PROXY"], ",")).To(ContainElements(".svc", n.Fullname+"."+gwNS+".svc"))
		g.Expect(strings.HasPrefix(env["NO_PROXY"], noProxy)).To(BeTrue(), "the cluster's NO_PROXY comes first: %s", env["NO_PROXY"])
	}).WithContext(ctx).WithTimeout(60 * time.Second).Should(Succeed())
}
