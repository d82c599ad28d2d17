package gateway_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	cmv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	. "github.com/onsi/gomega"
	routev1 "github.com/openshift/api/route/v1"
	securityv1 "github.com/openshift/api/security/v1"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/controllers/gateway"
	"github.com/openshell/openshell-operator/internal/gatewayline"
	"github.com/openshell/openshell-operator/internal/pki"
	render "github.com/openshell/openshell-operator/internal/render/gateway"
	"github.com/openshell/openshell-operator/internal/scc"
	"github.com/openshell/openshell-operator/operator"
	"github.com/openshell/openshell-operator/test/framework"
)

// Two control planes: OpenShift with cert-manager, and vanilla Kubernetes.
var openshift, vanilla *framework.Env

func TestMain(m *testing.M) {
	flag.Parse()
	framework.SetupLogging()
	if testing.Short() {
		// The pure tests (status) run; the integration tests skip themselves.
		os.Exit(m.Run())
	}
	var err error
	if openshift, err = framework.StartEnv(framework.EnvOptions{OpenShift: true, CertManager: true, Monitoring: true, AgentSandbox: framework.AgentSandboxBetaOnly}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if vanilla, err = framework.StartEnv(framework.EnvOptions{AgentSandbox: framework.AgentSandboxBetaOnly}); err != nil {
		_ = openshift.Stop()
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = openshift.Stop()
	_ = vanilla.Stop()
	os.Exit(code)
}

func newGateway(ns string, mutate func(*openshellv1alpha1.ManagedGatewaySpec)) *openshellv1alpha1.OpenShellGateway {
	// The vanilla control plane has no network plugin to read: its
	// platform admin states enforcement, as a real one would after
	// checking theirs, so that the default (0.1) release installs.
	gw := &openshellv1alpha1.OpenShellGateway{ObjectMeta: metav1.ObjectMeta{Name: "openshell", Namespace: ns},
		Spec: openshellv1alpha1.OpenShellGatewaySpec{Managed: &openshellv1alpha1.ManagedGatewaySpec{},
			NetworkPolicyEnforcement: openshellv1alpha1.NetworkPolicyEnforcement{Acknowledged: true}}}
	if mutate != nil {
		mutate(gw.Spec.Managed)
	}
	return gw
}

func cond(g Gomega, c client.Client, gw *openshellv1alpha1.OpenShellGateway, typ string) metav1.Condition {
	cur := &openshellv1alpha1.OpenShellGateway{}
	g.Expect(c.Get(context.Background(), client.ObjectKeyFromObject(gw), cur)).To(Succeed())
	found := meta.FindStatusCondition(cur.Status.Conditions, typ)
	g.Expect(found).NotTo(BeNil(), "condition %s missing", typ)
	return *found
}

// children are the namespaced objects of the OpenShift variant.
func children(ns string) []client.Object {
	key := func(o client.Object, name string) client.Object { o.SetNamespace(ns); o.SetName(name); return o }
	return []client.Object{
		key(&corev1.ServiceAccount{}, "openshell"), key(&corev1.ServiceAccount{}, "openshell-sandbox"),
		key(&rbacv1.RoleBinding{}, "openshell-gateway"),
		key(&corev1.ConfigMap{}, "openshell-config"), key(&corev1.Service{}, "openshell"),
		key(&corev1.ConfigMap{}, "openshell-trust-bundle"), key(&corev1.ConfigMap{}, "openshell-trusted-ca"),
		key(&appsv1.StatefulSet{}, "openshell"), key(&policyv1.PodDisruptionBudget{}, "openshell"),
		key(&networkingv1.NetworkPolicy{}, "openshell-gateway"), key(&networkingv1.NetworkPolicy{}, "openshell-sandboxes"),
		key(&routev1.Route{}, "openshell"), key(&monitoringv1.ServiceMonitor{}, "openshell"),
		key(&cmv1.Issuer{}, "openshell-selfsigned"), key(&cmv1.Issuer{}, "openshell-ca-issuer"),
		key(&cmv1.Certificate{}, "openshell-ca"), key(&cmv1.Certificate{}, "openshell-server"), key(&cmv1.Certificate{}, "openshell-client"),
		key(&rbacv1.RoleBinding{}, scc.RoleBindingName+"-openshell-sandbox"),
		key(&corev1.Secret{}, "openshell-jwt-keys"), key(&corev1.Secret{}, "openshell-credential-kek"),
	}
}

func clusterChildren(ns string) []client.Object {
	name := render.NamesFor(newGateway(ns, nil)).ClusterScoped
	return []client.Object{&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name}}}
}

// applyConfigSCC applies config/scc/scc.yaml as a cluster admin would.
func applyConfigSCC(ctx context.Context, g Gomega, c client.Client) *securityv1.SecurityContextConstraints {
	raw, err := os.ReadFile(filepath.Join(framework.RepoRoot(), "config", "scc", "scc.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	s := &securityv1.SecurityContextConstraints{}
	g.Expect(yaml.Unmarshal(raw, s)).To(Succeed())
	g.Expect(c.Create(ctx, s)).To(Succeed())
	return s
}

// startCertManager starts cert-manager's real controllers against the
// OpenShift control plane, as installing cert-manager does, and waits until
// the gateway's server and client Certificates are issued: it returns the
// CA that signed them (the per-gateway CA cert-manager issued itself).
func startCertManager(ctx context.Context, t *testing.T, g Gomega, c client.Client, gw *openshellv1alpha1.OpenShellGateway) *x509.Certificate {
	t.Helper()
	p, err := framework.StartCertManager(ctx, openshift, t.TempDir())
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("cert-manager log:\n%s", p.Tail(4000))
		}
		_ = p.Stop(10 * time.Second)
	})
	var ca *x509.Certificate
	g.Eventually(func(g Gomega) {
		leaves := map[string]*x509.Certificate{}
		for _, crt := range []string{"openshell-server", "openshell-client"} {
			cert := &cmv1.Certificate{}
			g.Expect(c.Get(ctx, client.ObjectKey{Namespace: gw.Namespace, Name: crt}, cert)).To(Succeed())
			s := &corev1.Secret{}
			g.Expect(c.Get(ctx, client.ObjectKey{Namespace: gw.Namespace, Name: cert.Spec.SecretName}, s)).To(Succeed())
			g.Expect(s.Labels).To(HaveKeyWithValue("app.kubernetes.io/managed-by", "openshell-operator"), "cert-manager did not apply the secretTemplate")
			leaves[crt] = parseCert(g, s.Data["tls.crt"])
			ca = parseCert(g, s.Data["ca.crt"])
		}
		g.Expect(leaves["openshell-server"].CheckSignatureFrom(ca)).To(Succeed())
		g.Expect(leaves["openshell-client"].CheckSignatureFrom(ca)).To(Succeed())
		g.Expect(leaves["openshell-server"].ExtKeyUsage).To(ContainElement(x509.ExtKeyUsageServerAuth))
		g.Expect(leaves["openshell-client"].ExtKeyUsage).To(ContainElement(x509.ExtKeyUsageClientAuth))
	}).WithTimeout(time.Minute).Should(Succeed())
	return ca
}

// expectMutualTLS serves with the server Secret's pair, requiring client
// certificates signed by its ca.crt, and connects with the client Secret's
// pair, trusting the client Secret's ca.crt and checking serverName, both
// sides at the time now (nil: the real time).
func expectMutualTLS(g Gomega, server, client *corev1.Secret, serverName string, now func() time.Time) {
	serverPair, err := tls.X509KeyPair(server.Data["tls.crt"], server.Data["tls.key"])
	g.Expect(err).NotTo(HaveOccurred())
	clientPair, err := tls.X509KeyPair(client.Data["tls.crt"], client.Data["tls.key"])
	g.Expect(err).NotTo(HaveOccurred())
	clientCAs, rootCAs := x509.NewCertPool(), x509.NewCertPool()
	g.Expect(clientCAs.AppendCertsFromPEM(server.Data["ca.crt"])).To(BeTrue())
	g.Expect(rootCAs.AppendCertsFromPEM(client.Data["ca.crt"])).To(BeTrue())
	lis, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{serverPair}, ClientCAs: clientCAs,
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12, Time: now})
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = lis.Close() }()
	accepted := make(chan error, 1)
	go func() {
		conn, err := lis.Accept()
		if err == nil {
			err = conn.(*tls.Conn).Handshake()
			_ = conn.Close()
		}
		accepted <- err
	}()
	conn, err := tls.Dial("tcp", lis.Addr().String(), &tls.Config{Certificates: []tls.Certificate{clientPair}, RootCAs: rootCAs,
		ServerName: serverName, MinVersion: tls.VersionTLS12, Time: now})
	g.Expect(err).NotTo(HaveOccurred(), "a sandbox cannot verify the gateway")
	_ = conn.Close()
	g.Expect(<-accepted).To(Succeed(), "the gateway refuses the sandbox's client certificate")
}

func poolOf(certs ...*x509.Certificate) *x509.CertPool {
	p := x509.NewCertPool()
	for _, c := range certs {
		p.AddCert(c)
	}
	return p
}

func parseCert(g Gomega, pemBytes []byte) *x509.Certificate {
	block, _ := pem.Decode(pemBytes)
	g.Expect(block).NotTo(BeNil(), "no PEM certificate")
	cert, err := x509.ParseCertificate(block.Bytes)
	g.Expect(err).NotTo(HaveOccurred())
	return cert
}

func resourceVersions(ctx context.Context, g Gomega, c client.Client, objs []client.Object) map[string]string {
	out := map[string]string{}
	for _, o := range objs {
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(o), o)).To(Succeed(), "%T %s", o, o.GetName())
		out[fmt.Sprintf("%T/%s", o, o.GetName())] = o.GetResourceVersion()
	}
	return out
}

// TestManagedGatewayOnOpenShift installs a gateway with cert-manager, a
// Route and the narrow SCC, and walks it to Available, through drift,
// configuration changes, an operator restart and deletion.
type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestManagedGatewayOnOpenShift(t *testing.T) {
	framework.RequireControlPlane(t)
	outer := t
	g := NewWithT(t)
	ctx := context.Background()
	c := openshift.Client
	ns := framework.CreatePlatformNamespace(ctx, t, c, "gw")
	opts := operator.Options{WatchNamespaces: []string{ns}, Controllers: operator.ControllerOptions{SCCRecheck: time.Second}}
	// As installed by OLM in OwnNamespace mode: exactly the CSV's RBAC,
	// every request recorded (the cert-manager rules are checked at the end).
	csv, err := framework.LoadCSV()
	g.Expect(err).NotTo(HaveOccurred())
	asOperator, _, err := framework.GrantLikeOLM(ctx, c, openshift.Config, csv, ns, []string{ns})
	g.Expect(err).NotTo(HaveOccurred())
	usage := &framework.APIUsage{}
	asOperator.Wrap(usage.Wrap)
	var writes atomic.Int64
	asOperator.Wrap(func(next http.RoundTripper) http.RoundTripper {
		return roundTripper(func(r *http.Request) (*http.Response, error) {
			if r.Method != http.MethodGet {
				writes.Add(1)
			}
			return next.RoundTrip(r)
		})
	})
	stop := framework.StartManager(t, asOperator, opts)

	// 0.0.111, whose sidecar topology needs the operator's narrow SCC
	// (0.1 needs none: test/e2e TestManagedGatewayUpgradesTo01).
	gw := newGateway(ns, func(m *openshellv1alpha1.ManagedGatewaySpec) {
		m.Route.Host = "openshell.apps.example.com"
		m.Version = gatewayline.LegacyManaged
	})
	g.Expect(c.Create(ctx, gw)).To(Succeed())

	// The operator never creates the SCC: until a cluster admin applies
	// config/scc the gateway says so, and then it notices by itself.
	g.Eventually(func(g Gomega) {
		sccReady := cond(g, c, gw, openshellv1alpha1.GatewayConditionSCCReady)
		g.Expect(sccReady.Reason).To(Equal(openshellv1alpha1.GatewayReasonSCCMissing))
		g.Expect(sccReady.Message).To(ContainSubstring("oc apply -k config/scc"))
	}).WithTimeout(20 * time.Second).Should(Succeed())
	g.Expect(apierrors.IsNotFound(c.Get(ctx, client.ObjectKey{Name: scc.Name}, &securityv1.SecurityContextConstraints{}))).To(BeTrue())
	live := applyConfigSCC(ctx, g, c)
	defer func() { g.Expect(client.IgnoreNotFound(c.Delete(ctx, live))).To(Succeed()) }()

	all := append(children(ns), clusterChildren(ns)...)
	g.Eventually(func(g Gomega) {
		for _, o := range all {
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(o), o)).To(Succeed(), "%T %s", o, o.GetName())
		}
	}).WithTimeout(20 * time.Second).Should(Succeed())
	for _, o := range children(ns) {
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(o), o)).To(Succeed())
		g.Expect(metav1.IsControlledBy(o, &openshellv1alpha1.OpenShellGateway{ObjectMeta: metav1.ObjectMeta{UID: currentUID(ctx, g, c, gw)}})).
			To(BeTrue(), "%T %s has no controller reference to the gateway: %+v", o, o.GetName(), o.GetOwnerReferences())
	}

	// Waiting for certificates, a router and pods.
	g.Eventually(func(g Gomega) {
		g.Expect(cond(g, c, gw, openshellv1alpha1.GatewayConditionTLSReady).Reason).To(Equal(openshellv1alpha1.GatewayReasonCertificatesPending))
		g.Expect(cond(g, c, gw, openshellv1alpha1.GatewayConditionSCCReady).Status).To(Equal(metav1.ConditionTrue))
		g.Expect(cond(g, c, gw, openshellv1alpha1.GatewayConditionRouteAdmitted).Reason).To(Equal("NotAdmitted"))
		g.Expect(cond(g, c, gw, openshellv1alpha1.ConditionAvailable).Status).To(Equal(metav1.ConditionFalse))
	}).WithTimeout(10 * time.Second).Should(Succeed())

	// cert-manager comes up and issues; play the router and the
	// StatefulSet controller.
	ca := startCertManager(ctx, t, g, c, gw)
	rt := &routev1.Route{}
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "openshell"}, rt)).To(Succeed())
	g.Expect(rt.Spec.TLS.Termination).To(Equal(routev1.TLSTerminationPassthrough))
	g.Expect(rt.Spec.TLS.InsecureEdgeTerminationPolicy).To(Equal(routev1.InsecureEdgeTerminationPolicyNone))
	rt.Status.Ingress = []routev1.RouteIngress{{Host: "openshell.apps.example.com", RouterName: "default",
		Conditions: []routev1.RouteIngressCondition{{Type: routev1.RouteAdmitted, Status: corev1.ConditionTrue}}}}
	g.Expect(c.Status().Update(ctx, rt)).To(Succeed())
	markStatefulSetReady(ctx, g, c, ns)

	g.Eventually(func(g Gomega) {
		tls := cond(g, c, gw, openshellv1alpha1.GatewayConditionTLSReady)
		g.Expect(tls.Status).To(Equal(metav1.ConditionTrue))
		g.Expect(tls.Message).To(ContainSubstring("issued by cert-manager; the earliest expires at"))
		g.Expect(cond(g, c, gw, openshellv1alpha1.GatewayConditionRouteAdmitted).Status).To(Equal(metav1.ConditionTrue))
		g.Expect(cond(g, c, gw, openshellv1alpha1.ConditionAvailable).Status).To(Equal(metav1.ConditionTrue))
		cur := &openshellv1alpha1.OpenShellGateway{}
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(gw), cur)).To(Succeed())
		g.Expect(cur.Status.Phase).To(Equal(openshellv1alpha1.GatewayPhaseAvailable))
		g.Expect(cur.Status.Endpoint).To(Equal("https://openshell.apps.example.com:443"))
	}).WithTimeout(10 * time.Second).Should(Succeed())
	// The server certificate cert-manager issued names the Route host and
	// the Service, so sandboxes and clients outside both verify it.
	server := &corev1.Secret{}
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "openshell-server-tls"}, server)).To(Succeed())
	_, err = parseCert(g, server.Data["tls.crt"]).Verify(x509.VerifyOptions{Roots: poolOf(ca), DNSName: "openshell.apps.example.com"})
	g.Expect(err).NotTo(HaveOccurred())
	// And they work as the gateway and its sandboxes use them: the server
	// pair with client certificates required, the sandbox's client pair and
	// the CA from its own Secret, over a real mutual-TLS handshake.
	clientTLS := &corev1.Secret{}
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "openshell-client-tls"}, clientTLS)).To(Succeed())
	expectMutualTLS(g, server, clientTLS, "openshell."+ns+".svc", nil)

	t.Run("cert-manager renewing the CA keeps sandboxes connected", func(t *testing.T) {
		g := NewWithT(t)
		// As `cmctl renew` asks for a re-issuance.
		crt := &cmv1.Certificate{}
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "openshell-ca"}, crt)).To(Succeed())
		crt.Status.Conditions = append(crt.Status.Conditions, cmv1.CertificateCondition{Type: cmv1.CertificateConditionIssuing,
			Status: cmmeta.ConditionTrue, Reason: "ManuallyTriggered", Message: "Certificate re-issuance manually triggered"})
		g.Expect(c.Status().Update(ctx, crt)).To(Succeed())
		var renewed *x509.Certificate
		g.Eventually(func(g Gomega) {
			s := &corev1.Secret{}
			g.Expect(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "openshell-ca-tls"}, s)).To(Succeed())
			renewed = parseCert(g, s.Data["tls.crt"])
			g.Expect(renewed.SerialNumber).NotTo(Equal(ca.SerialNumber))
		}).WithTimeout(time.Minute).Should(Succeed(), "cert-manager did not renew the CA")
		// The leaves signed before the renewal verify under the renewed CA
		// (the key is kept), so a sandbox that got the new ca.crt still
		// trusts the gateway, and the other way round.
		g.Expect(renewed.PublicKey).To(Equal(ca.PublicKey), "the renewed CA has a new key: sandboxes holding the old ca.crt would be cut off")
		_, err := parseCert(g, server.Data["tls.crt"]).Verify(x509.VerifyOptions{Roots: poolOf(renewed), DNSName: "openshell.apps.example.com"})
		g.Expect(err).NotTo(HaveOccurred())
	})

	t.Run("drift is corrected", func(t *testing.T) {
		g := NewWithT(t)
		svc := &corev1.Service{}
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "openshell"}, svc)).To(Succeed())
		svc.Spec.Ports = svc.Spec.Ports[:1]
		g.Expect(c.Update(ctx, svc)).To(Succeed())
		cm := &corev1.ConfigMap{}
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "openshell-config"}, cm)).To(Succeed())
		cm.Data["gateway.toml"] = "disable_tls = true\n"
		g.Expect(c.Update(ctx, cm)).To(Succeed())
		g.Eventually(func(g Gomega) {
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(svc), svc)).To(Succeed())
			g.Expect(svc.Spec.Ports).To(HaveLen(2))
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(cm), cm)).To(Succeed())
			g.Expect(cm.Data["gateway.toml"]).NotTo(ContainSubstring("disable_tls"))
			g.Expect(cm.Data["gateway.toml"]).To(ContainSubstring("[openshell.gateway.tls]"))
		}).WithTimeout(10 * time.Second).Should(Succeed())
	})

	t.Run("a config change rolls the gateway, other changes do not", func(t *testing.T) {
		g := NewWithT(t)
		hash := func(g Gomega) string { return configHash(ctx, g, c, ns) }
		before := hash(g)
		reconciles := framework.ReconcileCount("openshellgateway")
		updateGateway(ctx, g, c, gw, func(gw *openshellv1alpha1.OpenShellGateway) {
			gw.Spec.ImagePolicy.Mode = openshellv1alpha1.ImagePolicyWarn
		})
		// The change was reconciled (and its status written), and the pods did not roll.
		g.Eventually(func(g Gomega) {
			g.Expect(framework.ReconcileCount("openshellgateway")).To(BeNumerically(">", reconciles))
			cur := &openshellv1alpha1.OpenShellGateway{}
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(gw), cur)).To(Succeed())
			g.Expect(cur.Status.ObservedGeneration).To(Equal(cur.Generation))
		}).WithTimeout(10 * time.Second).Should(Succeed())
		g.Expect(hash(g)).To(Equal(before))
		// Every status written from here on is watched: none may say the
		// change is rolled out before anything rolled it out.
		wc, err := client.NewWithWatch(openshift.Config, client.Options{Scheme: c.Scheme()})
		g.Expect(err).NotTo(HaveOccurred())
		list := &openshellv1alpha1.OpenShellGatewayList{}
		g.Expect(c.List(ctx, list, client.InNamespace(ns))).To(Succeed())
		w, err := wc.Watch(ctx, list, client.InNamespace(ns), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.ResourceVersion}})
		g.Expect(err).NotTo(HaveOccurred())
		defer w.Stop()
		updateGateway(ctx, g, c, gw, func(gw *openshellv1alpha1.OpenShellGateway) { gw.Spec.Managed.LogLevel = "debug" })
		g.Eventually(hash).WithTimeout(10 * time.Second).ShouldNot(Equal(before))
		cm := &corev1.ConfigMap{}
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "openshell-config"}, cm)).To(Succeed())
		g.Expect(cm.Data["gateway.toml"]).To(ContainSubstring("log_level = 'debug'"))
		// The new template is not rolled out (nothing played the
		// StatefulSet controller yet), and the first status written for
		// the change says so. Under load, the reconcile that applied it
		// once read the previous, ready, StatefulSet from its cache and
		// wrote Available (TestACachedWorkloadBehindTheApplyIsRollingOut
		// plays that moment without a race).
		g.Eventually(w.ResultChan()).WithTimeout(10 * time.Second).Should(Receive(Satisfy(func(e watch.Event) bool {
			cur, ok := e.Object.(*openshellv1alpha1.OpenShellGateway)
			if !ok || cur.Name != gw.Name || cur.Status.ObservedGeneration != cur.Generation {
				return false
			}
			g.Expect(cur.Status.Phase).To(Equal(openshellv1alpha1.GatewayPhaseInstalling), "the change is reported rolled out before it was")
			g.Expect(meta.IsStatusConditionTrue(cur.Status.Conditions, openshellv1alpha1.ConditionProgressing)).To(BeTrue())
			return true
		})))
		markStatefulSetReady(ctx, g, c, ns)
	})

	t.Run("restarting the operator writes nothing", func(t *testing.T) {
		g := NewWithT(t)
		// Steady state first: the latest spec acted on and the rollout seen
		// to its end. A spec change of an earlier step not yet reconciled
		// when the operator stops is rightly written after the restart (a
		// fresh-clone run once failed so: observedGeneration 2, then 3), and
		// so is the end of a rollout the operator had not yet observed
		// (another: phase Installing, "1/1 gateway replicas ready (rolling
		// out)", then Available once the restarted operator read the
		// StatefulSet the previous step marked ready).
		g.Eventually(func(g Gomega) {
			cur := &openshellv1alpha1.OpenShellGateway{}
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(gw), cur)).To(Succeed())
			g.Expect(cur.Status.ObservedGeneration).To(Equal(cur.Generation))
			g.Expect(cur.Status.Phase).To(Equal(openshellv1alpha1.GatewayPhaseAvailable))
			g.Expect(meta.IsStatusConditionFalse(cur.Status.Conditions, openshellv1alpha1.ConditionProgressing)).To(BeTrue(), "still rolling out")
		}).WithTimeout(10 * time.Second).Should(Succeed())
		objs := append(append(children(ns), clusterChildren(ns)...), &openshellv1alpha1.OpenShellGateway{ObjectMeta: gw.ObjectMeta})
		stop()
		before := resourceVersions(ctx, g, c, objs)
		beforeStatus := gatewayStatusJSON(ctx, c, gw)
		count := framework.ReconcileCount("openshellgateway")
		written := writes.Load()
		framework.StartManager(outer, asOperator, opts)
		g.Eventually(func() float64 { return framework.ReconcileCount("openshellgateway") }).WithTimeout(10 * time.Second).Should(BeNumerically(">", count))
		// Until the reconciles stop moving: not even a no-op apply (an API
		// write request, which changes no resourceVersion) is sent.
		last := -1.0
		g.Eventually(func() bool {
			now := framework.ReconcileCount("")
			settled := now == last
			last = now
			return settled
		}).WithTimeout(20 * time.Second).WithPolling(time.Second).Should(BeTrue())
		// A write to the gateway is most likely its status: say which field.
		g.Expect(resourceVersions(ctx, g, c, objs)).To(Equal(before), "gateway status before the restart:\n%s\nafter:\n%s",
			beforeStatus, gatewayStatusJSON(ctx, c, gw))
		g.Expect(writes.Load()-written).To(BeZero(), "API write requests after the restart")
	})

	t.Run("the cluster's trusted CA bundle joins the trust store", func(t *testing.T) {
		g := NewWithT(t)
		hash := func(g Gomega) string { return configHash(ctx, g, c, ns) }
		before := hash(g)
		proxyCA, err := pki.NewCA("corporate proxy CA", time.Hour, time.Now())
		g.Expect(err).NotTo(HaveOccurred())
		// Play the Cluster Network Operator, which fills the labelled ConfigMap.
		injected := &corev1.ConfigMap{}
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "openshell-trusted-ca"}, injected)).To(Succeed())
		g.Expect(injected.Labels).To(HaveKeyWithValue("config.openshift.io/inject-trusted-cabundle", "true"))
		injected.Data = map[string]string{"ca-bundle.crt": string(proxyCA.CertPEM)}
		g.Expect(c.Update(ctx, injected)).To(Succeed())
		g.Eventually(func(g Gomega) {
			bundle := &corev1.ConfigMap{}
			g.Expect(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "openshell-trust-bundle"}, bundle)).To(Succeed())
			g.Expect(bundle.Data["ca-bundle.crt"]).To(ContainSubstring(string(proxyCA.CertPEM)))
			g.Expect(hash(g)).NotTo(Equal(before), "the gateway rolls to read the new bundle")
		}).WithTimeout(10 * time.Second).Should(Succeed())
		// The operator never owns the injected data.
		g.Consistently(func(g Gomega) {
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(injected), injected)).To(Succeed())
			g.Expect(injected.Data).To(HaveKey("ca-bundle.crt"))
		}).WithTimeout(2 * time.Second).Should(Succeed())
		markStatefulSetReady(ctx, g, c, ns)
	})

	t.Run("an external issuer adds a Certificate, pruned when removed", func(t *testing.T) {
		g := NewWithT(t)
		external := client.ObjectKey{Namespace: ns, Name: "openshell-server-external"}
		updateGateway(ctx, g, c, gw, func(gw *openshellv1alpha1.OpenShellGateway) {
			gw.Spec.Managed.TLS.IssuerRef = &openshellv1alpha1.IssuerReference{Name: "letsencrypt", Kind: "ClusterIssuer", Group: "cert-manager.io"}
		})
		g.Eventually(func() error { return c.Get(ctx, external, &cmv1.Certificate{}) }).WithTimeout(10 * time.Second).Should(Succeed())
		updateGateway(ctx, g, c, gw, func(gw *openshellv1alpha1.OpenShellGateway) { gw.Spec.Managed.TLS.IssuerRef = nil })
		g.Eventually(func() error { return c.Get(ctx, external, &cmv1.Certificate{}) }).WithTimeout(10 * time.Second).Should(Satisfy(apierrors.IsNotFound))
	})

	t.Run("a modified SCC is reported, field by field", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(live), live)).To(Succeed())
		live.Users = []string{"system:serviceaccount:" + ns + ":default"}
		g.Expect(c.Update(ctx, live)).To(Succeed())
		g.Eventually(func(g Gomega) {
			sccReady := cond(g, c, gw, openshellv1alpha1.GatewayConditionSCCReady)
			g.Expect(sccReady.Reason).To(Equal(openshellv1alpha1.GatewayReasonSCCModified))
			g.Expect(sccReady.Message).To(ContainSubstring("differs from the reviewed config/scc in users"))
			g.Expect(cond(g, c, gw, openshellv1alpha1.ConditionDegraded).Status).To(Equal(metav1.ConditionTrue))
		}).WithTimeout(20 * time.Second).Should(Succeed())
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(live), live)).To(Succeed())
		live.Users = nil
		g.Expect(c.Update(ctx, live)).To(Succeed())
		g.Eventually(func(g Gomega) {
			g.Expect(cond(g, c, gw, openshellv1alpha1.GatewayConditionSCCReady).Reason).To(Equal(openshellv1alpha1.GatewayReasonSCCApplied))
		}).WithTimeout(20 * time.Second).Should(Succeed())
	})

	t.Run("deletion removes cluster-scoped objects", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(c.Delete(ctx, gw)).To(Succeed())
		g.Eventually(func() error { return c.Get(ctx, client.ObjectKeyFromObject(gw), &openshellv1alpha1.OpenShellGateway{}) }).
			WithTimeout(10 * time.Second).Should(Satisfy(apierrors.IsNotFound))
		for _, o := range clusterChildren(ns) {
			g.Expect(apierrors.IsNotFound(c.Get(ctx, client.ObjectKeyFromObject(o), o))).To(BeTrue(), "%T %s left behind", o, o.GetName())
		}
		for _, name := range []string{"openshell-server-tls", "openshell-client-tls"} {
			g.Expect(apierrors.IsNotFound(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &corev1.Secret{}))).To(BeTrue(), name)
		}
		// The SCC is the cluster admin's: it stays.
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(live), live)).To(Succeed())
	})

	// The e2e cluster has no cert-manager and no Prometheus Operator: its
	// least-privilege test leaves those rules to this one, which must have
	// used each (but the operator's own PrometheusRule, which
	// controllers/platform's test covers).
	t.Run("every cert-manager and ServiceMonitor rule of the CSV was used", func(t *testing.T) {
		var rules []rbacv1.PolicyRule
		for _, r := range framework.CSVRules(csv) {
			if slices.Contains(r.APIGroups, cmv1.SchemeGroupVersion.Group) ||
				(slices.Contains(r.APIGroups, monitoringv1.SchemeGroupVersion.Group) && slices.Contains(r.Resources, "servicemonitors")) {
				rules = append(rules, r)
			}
		}
		if len(rules) < 2 {
			t.Fatal("the CSV has no cert-manager or ServiceMonitor rules")
		}
		for _, unused := range usage.Unused(rules, map[string]string{"monitoring.coreos.com/prometheusrules create": "controllers/platform",
			"monitoring.coreos.com/prometheusrules patch": "controllers/platform", "monitoring.coreos.com/prometheusrules get": "controllers/platform",
			// The platform controller reads its own ServiceMonitor before applying it.
			"monitoring.coreos.com/servicemonitors get": "controllers/platform"}) {
			t.Errorf("the CSV grants %s, which no code path used", unused)
		}
	})
}

func currentUID(ctx context.Context, g Gomega, c client.Client, gw *openshellv1alpha1.OpenShellGateway) types.UID {
	cur := &openshellv1alpha1.OpenShellGateway{}
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(gw), cur)).To(Succeed())
	return cur.UID
}

func updateGateway(ctx context.Context, g Gomega, c client.Client, gw *openshellv1alpha1.OpenShellGateway, mutate func(*openshellv1alpha1.OpenShellGateway)) {
	g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &openshellv1alpha1.OpenShellGateway{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(gw), cur); err != nil {
			return err
		}
		mutate(cur)
		return c.Update(ctx, cur)
	})).To(Succeed())
}

// configHash is the config hash on the gateway's pod template (a change rolls the pods).
func configHash(ctx context.Context, g Gomega, c client.Client, ns string) string {
	sts := &appsv1.StatefulSet{}
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "openshell"}, sts)).To(Succeed())
	return sts.Spec.Template.Annotations[render.AnnotationConfigHash]
}

// markStatefulSetReady plays the StatefulSet controller and kubelet, which
// envtest does not run.
func markStatefulSetReady(ctx context.Context, g Gomega, c client.Client, ns string) {
	g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		sts := &appsv1.StatefulSet{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "openshell"}, sts); err != nil {
			return err
		}
		sts.Status = appsv1.StatefulSetStatus{ObservedGeneration: sts.Generation, Replicas: 1, ReadyReplicas: 1,
			UpdatedReplicas: 1, CurrentReplicas: 1, AvailableReplicas: 1}
		return c.Status().Update(ctx, sts)
	})).To(Succeed())
}

// TestBuiltinPKIOnVanillaKubernetes: without cert-manager the operator
// issues the certificates, renews leaves before expiry and rotates its CA;
// without OpenShift there is no Route and no SCC, and conditions say so.
func TestBuiltinPKIOnVanillaKubernetes(t *testing.T) {
	framework.RequireControlPlane(t)
	g := NewWithT(t)
	ctx := context.Background()
	c := vanilla.Client
	ns := framework.CreatePlatformNamespace(ctx, t, c, "pki")
	clock := &fakeClock{now: time.Now()}
	framework.StartManager(t, vanilla.Config, operator.Options{WatchNamespaces: []string{ns},
		Controllers: operator.ControllerOptions{Clock: clock.Now, PKI: gateway.PKIOptions{CAValidity: 30 * 24 * time.Hour, LeafValidity: 3 * 24 * time.Hour}}})
	// 0.0.111 first: its sidecar capabilities need Pod Security's privileged level.
	gw := newGateway(ns, func(m *openshellv1alpha1.ManagedGatewaySpec) { m.Version = gatewayline.LegacyManaged })
	errorsBefore := framework.ReconcileErrors("openshellgateway")
	g.Expect(c.Create(ctx, gw)).To(Succeed())

	read := func(g Gomega, name string) *x509.Certificate {
		s := &corev1.Secret{}
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, s)).To(Succeed())
		cert, err := pki.ParseCert(s.Data["tls.crt"])
		g.Expect(err).NotTo(HaveOccurred())
		return cert
	}
	var ca, server, client1 *x509.Certificate
	g.Eventually(func(g Gomega) {
		ca, server, client1 = read(g, "openshell-ca-tls"), read(g, "openshell-server-tls"), read(g, "openshell-client-tls")
		tls := cond(g, c, gw, openshellv1alpha1.GatewayConditionTLSReady)
		g.Expect(tls.Status).To(Equal(metav1.ConditionTrue))
		g.Expect(tls.Message).To(ContainSubstring("issued by built-in PKI"))
		g.Expect(cond(g, c, gw, openshellv1alpha1.GatewayConditionRouteAdmitted).Reason).To(Equal("RouteAPIUnavailable"))
		g.Expect(cond(g, c, gw, openshellv1alpha1.GatewayConditionSCCReady).Reason).To(Equal("NotApplicable"))
		// No SCCs: Pod Security admission decides, and the namespace says nothing.
		ps := cond(g, c, gw, openshellv1alpha1.GatewayConditionPodSecurityAdmitted)
		g.Expect(ps.Reason).To(Equal(openshellv1alpha1.GatewayReasonPodSecurityUnset))
		g.Expect(ps.Message).To(ContainSubstring("kubectl label namespace " + ns + " pod-security.kubernetes.io/enforce=privileged"))
	}).WithTimeout(15 * time.Second).Should(Succeed())
	// A cluster admin sets the level explicitly: the condition follows.
	nsObj := &corev1.Namespace{}
	g.Expect(c.Get(ctx, client.ObjectKey{Name: ns}, nsObj)).To(Succeed())
	nsObj.Labels["pod-security.kubernetes.io/enforce"] = "privileged"
	g.Expect(c.Update(ctx, nsObj)).To(Succeed())
	poke(ctx, g, c, gw)
	g.Eventually(func(g Gomega) {
		g.Expect(cond(g, c, gw, openshellv1alpha1.GatewayConditionPodSecurityAdmitted).Status).To(Equal(metav1.ConditionTrue))
	}).WithTimeout(15 * time.Second).Should(Succeed())
	// OpenShell 0.1's pods meet the restricted level: whatever the
	// namespace enforces admits them.
	g.Eventually(func() error {
		cur := &openshellv1alpha1.OpenShellGateway{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(gw), cur); err != nil {
			return err
		}
		cur.Spec.Managed.Version = gatewayline.DefaultManaged
		return c.Update(ctx, cur)
	}).WithTimeout(10 * time.Second).Should(Succeed())
	g.Eventually(func(g Gomega) {
		ps := cond(g, c, gw, openshellv1alpha1.GatewayConditionPodSecurityAdmitted)
		g.Expect(ps.Status).To(Equal(metav1.ConditionTrue))
		g.Expect(ps.Reason).To(Equal(openshellv1alpha1.GatewayReasonPodSecurityAnyLevel))
	}).WithTimeout(15 * time.Second).Should(Succeed())
	// Installing fails no reconcile: a status patch from a stale read is
	// retried, not an error (status.RetryStale), and the finalizer write
	// does not make the first one conflict (internal/status
	// TestAddFinalizerKeepsTheStatusPatchUnconflicted).
	g.Expect(framework.ReconcileErrors("openshellgateway")).To(Equal(errorsBefore), "reconcile errors while installing a new gateway")
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	_, err := server.Verify(x509.VerifyOptions{Roots: pool, DNSName: "openshell." + ns + ".svc", CurrentTime: clock.Now()})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "openshell"}, &routev1.Route{})).NotTo(Succeed())

	// Past two thirds of the leaf lifetime both leaves are reissued by the
	// same CA.
	clock.Advance(2*24*time.Hour + time.Hour)
	poke(ctx, g, c, gw)
	g.Eventually(func(g Gomega) {
		s2 := read(g, "openshell-server-tls")
		g.Expect(s2.SerialNumber).NotTo(Equal(server.SerialNumber))
		g.Expect(read(g, "openshell-client-tls").SerialNumber).NotTo(Equal(client1.SerialNumber))
		g.Expect(read(g, "openshell-ca-tls").SerialNumber).To(Equal(ca.SerialNumber))
		g.Expect(s2.CheckSignatureFrom(ca)).To(Succeed())
	}).WithTimeout(10 * time.Second).Should(Succeed())

	// Past two thirds of the CA lifetime the CA rotates in three steps, one
	// overlap apart (introduce, promote, retire). At every step a sandbox
	// or a gateway still holding the Secrets of the step before (its
	// mounted Secret not refreshed yet) completes a mutual-TLS handshake
	// with one holding the new ones: nobody is disconnected.
	secrets := func(g Gomega) (*corev1.Secret, *corev1.Secret) {
		server, clientTLS := &corev1.Secret{}, &corev1.Secret{}
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "openshell-server-tls"}, server)).To(Succeed())
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "openshell-client-tls"}, clientTLS)).To(Succeed())
		return server, clientTLS
	}
	// Up to an hour before the CA is due, the leaves are renewed as usual.
	serverBefore, clientBefore := read(g, "openshell-server-tls"), read(g, "openshell-client-tls")
	clock.Advance(pki.RenewAt(ca).Add(-time.Hour).Sub(clock.Now()))
	poke(ctx, g, c, gw)
	g.Eventually(func(g Gomega) {
		g.Expect(read(g, "openshell-server-tls").SerialNumber).NotTo(Equal(serverBefore.SerialNumber))
		g.Expect(read(g, "openshell-client-tls").SerialNumber).NotTo(Equal(clientBefore.SerialNumber))
		g.Expect(cond(g, c, gw, openshellv1alpha1.GatewayConditionTLSReady).Reason).To(Equal(openshellv1alpha1.GatewayReasonCertificatesReady))
	}).WithTimeout(10 * time.Second).Should(Succeed())
	oldServer, oldClient := secrets(g)
	steps := []struct {
		advance time.Duration
		reason  string
		check   func(g Gomega, caNow *x509.Certificate, server, clientTLS *corev1.Secret)
	}{
		{2 * time.Hour, openshellv1alpha1.GatewayReasonCARotating, func(g Gomega, caNow *x509.Certificate, server, _ *corev1.Secret) {
			g.Expect(caNow.SerialNumber).To(Equal(ca.SerialNumber), "the next CA signs before everyone trusts it")
			g.Expect(bytes.Count(server.Data["ca.crt"], []byte("BEGIN CERTIFICATE"))).To(Equal(2), "the next CA is not trusted yet")
		}},
		{gateway.DefaultCAOverlap, openshellv1alpha1.GatewayReasonCARotating, func(g Gomega, caNow *x509.Certificate, server, clientTLS *corev1.Secret) {
			g.Expect(caNow.SerialNumber).NotTo(Equal(ca.SerialNumber), "the next CA was not promoted")
			// Both leaves: the operator writes them one after the other,
			// and the next step's check pairs this step's client leaf with
			// a server that trusts only the new CA.
			g.Expect(parseCert(g, server.Data["tls.crt"]).CheckSignatureFrom(caNow)).To(Succeed(), "the server leaf was not reissued")
			g.Expect(parseCert(g, clientTLS.Data["tls.crt"]).CheckSignatureFrom(caNow)).To(Succeed(), "the client leaf was not reissued")
			g.Expect(bytes.Count(server.Data["ca.crt"], []byte("BEGIN CERTIFICATE"))).To(Equal(2), "the previous CA is no longer trusted")
		}},
		{gateway.DefaultCAOverlap, openshellv1alpha1.GatewayReasonCertificatesReady, func(g Gomega, caNow *x509.Certificate, server, _ *corev1.Secret) {
			g.Expect(bytes.Count(server.Data["ca.crt"], []byte("BEGIN CERTIFICATE"))).To(Equal(1), "the previous CA is still trusted")
		}},
	}
	for i, step := range steps {
		clock.Advance(step.advance)
		poke(ctx, g, c, gw)
		g.Eventually(func(g Gomega) {
			g.Expect(cond(g, c, gw, openshellv1alpha1.GatewayConditionTLSReady).Reason).To(Equal(step.reason))
			server, clientTLS := secrets(g)
			step.check(g, read(g, "openshell-ca-tls"), server, clientTLS)
		}).WithTimeout(10*time.Second).Should(Succeed(), "CA rotation step %d", i+1)
		newServer, newClient := secrets(g)
		expectMutualTLS(g, newServer, oldClient, "openshell."+ns+".svc", clock.Now)
		expectMutualTLS(g, oldServer, newClient, "openshell."+ns+".svc", clock.Now)
		oldServer, oldClient = newServer, newClient
	}

	// An external issuer needs cert-manager: said plainly.
	updateGateway(ctx, g, c, gw, func(gw *openshellv1alpha1.OpenShellGateway) {
		gw.Spec.Managed.TLS.IssuerRef = &openshellv1alpha1.IssuerReference{Name: "letsencrypt", Kind: "ClusterIssuer", Group: "cert-manager.io"}
	})
	g.Eventually(func(g Gomega) {
		tls := cond(g, c, gw, openshellv1alpha1.GatewayConditionTLSReady)
		g.Expect(tls.Reason).To(Equal(openshellv1alpha1.GatewayReasonCertManagerRequired))
		g.Expect(cond(g, c, gw, openshellv1alpha1.ConditionDegraded).Status).To(Equal(metav1.ConditionTrue))
	}).WithTimeout(10 * time.Second).Should(Succeed())
}

// poke changes an annotation to make the operator reconcile now.
func poke(ctx context.Context, g Gomega, c client.Client, gw *openshellv1alpha1.OpenShellGateway) {
	updateGateway(ctx, g, c, gw, func(gw *openshellv1alpha1.OpenShellGateway) {
		if gw.Annotations == nil {
			gw.Annotations = map[string]string{}
		}
		gw.Annotations["test/poke"] = time.Now().String()
	})
}

// fakeClock drives the built-in PKI's notion of now.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (f *fakeClock) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *fakeClock) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
}

// TestManagedGatewayTrustsTheOperatorIssuer: with the operator as OIDC
// issuer (self-issued serving certificate), a managed gateway's
// gateway.toml names the issuer and a per-gateway audience, and the trust
// bundle it is given verifies the issuer's TLS endpoint, which serves
// discovery, while keeping the public roots (SSL_CERT_FILE replaces the
// gateway's store).
func TestManagedGatewayTrustsTheOperatorIssuer(t *testing.T) {
	framework.RequireControlPlane(t)
	g := NewWithT(t)
	ctx := context.Background()
	c := vanilla.Client
	ns := framework.CreatePlatformNamespace(ctx, t, c, "oidc")
	port, err := framework.FreePort()
	g.Expect(err).NotTo(HaveOccurred())
	issuerURL := fmt.Sprintf("https://127.0.0.1:%d", port)
	public, err := pki.NewCA("a public root", time.Hour, time.Now())
	g.Expect(err).NotTo(HaveOccurred())
	framework.StartManager(t, vanilla.Config, operator.Options{WatchNamespaces: []string{ns},
		Controllers: operator.ControllerOptions{TrustRoots: public.CertPEM},
		OIDC: &operator.OIDCOptions{IssuerURL: issuerURL, BindAddress: fmt.Sprintf("127.0.0.1:%d", port), Namespace: ns,
			KeySecret: "oidc-keys", TLSSecret: "oidc-tls"}})
	gw := newGateway(ns, nil)
	g.Expect(c.Create(ctx, gw)).To(Succeed())

	cm := &corev1.ConfigMap{}
	ca := &corev1.ConfigMap{}
	g.Eventually(func(g Gomega) {
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "openshell-config"}, cm)).To(Succeed())
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "openshell-trust-bundle"}, ca)).To(Succeed())
	}).WithTimeout(20 * time.Second).Should(Succeed())
	g.Expect(cm.Data["gateway.toml"]).To(ContainSubstring("[openshell.gateway.oidc]"))
	g.Expect(cm.Data["gateway.toml"]).To(ContainSubstring("issuer = '" + issuerURL + "'"))
	g.Expect(cm.Data["gateway.toml"]).To(ContainSubstring("audience = 'openshell-gateway/" + ns + "/openshell'"))

	g.Expect(ca.Data["ca-bundle.crt"]).To(ContainSubstring(string(public.CertPEM)), "the public roots are kept")
	pool := x509.NewCertPool()
	g.Expect(pool.AppendCertsFromPEM([]byte(ca.Data["ca-bundle.crt"]))).To(BeTrue())
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := hc.Get(issuerURL + "/.well-known/openid-configuration")
	g.Expect(err).NotTo(HaveOccurred(), "the CA given to the gateway must verify the issuer")
	defer func() { _ = resp.Body.Close() }()
	var disco map[string]any
	g.Expect(json.NewDecoder(resp.Body).Decode(&disco)).To(Succeed())
	g.Expect(disco["issuer"]).To(Equal(issuerURL))

	g.Eventually(func(g Gomega) {
		sts := &appsv1.StatefulSet{}
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "openshell"}, sts)).To(Succeed())
		g.Expect(sts.Spec.Template.Spec.Containers[0].Env).To(ContainElement(corev1.EnvVar{Name: "SSL_CERT_FILE", Value: "/etc/openshell-tls/trust/ca-bundle.crt"}))
	}).WithTimeout(10 * time.Second).Should(Succeed())
}

// gatewayStatusJSON is the gateway's status, for a failure message.
func gatewayStatusJSON(ctx context.Context, c client.Client, gw *openshellv1alpha1.OpenShellGateway) string {
	cur := &openshellv1alpha1.OpenShellGateway{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(gw), cur); err != nil {
		return err.Error()
	}
	b, _ := json.MarshalIndent(cur.Status, "", " ")
	return string(b)
}
