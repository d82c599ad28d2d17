package olmcluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openshell/openshell-operator/internal/pki"
	"github.com/openshell/openshell-operator/operator"
	"github.com/openshell/openshell-operator/test/framework"
)

// The bundle's Deployments, as its CSV names them.
const (
	OperatorDeployment = "openshell-operator-controller-manager"
	RelayDeployment    = "openshell-operator-relay"
)

// OperatorPod is how the operator's pod is run.
type OperatorPod struct {
	// Namespace is the operator's (the CSV's).
	Namespace string
	// Binary is the operator executable (framework.OperatorBinary).
	Binary string
	// CA issues the OIDC issuer's serving certificate (seeded into its
	// Secret, as the test gateways trust it).
	CA *pki.KeyPair
	// Issuer, when set, is the balancer the OIDC issuer is reached
	// through, as through its Service: a stable address across pods.
	Issuer *framework.Balancer
	// Env is further environment the pod network stands in for (a proxy
	// that resolves Service names, where cluster DNS would).
	Env []string
}

// RunOperator starts the operator as the pod of the Deployment OLM created
// would run: with a token of its ServiceAccount (so with exactly the RBAC
// OLM granted), the Deployment's environment and arguments, and the
// webhook certificate OLM issued; the API server reaches its webhook
// through the Service OLM created. Ports are free ones (every process
// shares this host's network), and the OIDC issuer's URL is a loopback
// address (no cluster DNS here). It returns a function stopping the
// process, as the pod's deletion does (also run when the test ends), and
// the issuer URL.
func RunOperator(ctx context.Context, t *testing.T, c *framework.Cluster, o OperatorPod) (func(), string) {
	t.Helper()
	dep := &appsv1.Deployment{}
	if err := c.Client.Get(ctx, client.ObjectKey{Namespace: o.Namespace, Name: OperatorDeployment}, dep); err != nil {
		t.Fatal(err)
	}
	pod := dep.Spec.Template.Spec
	ctr := pod.Containers[0]
	dir := t.TempDir()

	kubeconfig := ServiceAccountKubeconfig(ctx, t, c, o.Namespace, pod.ServiceAccountName, dir)

	// The pod as the Deployment's template makes it (the operator reads no
	// field of its own pod but its namespace and the template's annotations).
	env := append([]string{"KUBECONFIG=" + kubeconfig}, PodEnv(t, ctr.Env, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: o.Namespace, Annotations: dep.Spec.Template.Annotations}})...)
	env = append(env, o.Env...)

	// The webhook serving certificate OLM issued, as mounted.
	certDir := filepath.Join(dir, "certs")
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		t.Fatal(err)
	}
	var certSecret string
	for _, m := range ctr.VolumeMounts {
		if m.MountPath != "/tmp/k8s-webhook-server/serving-certs" {
			continue
		}
		for _, v := range pod.Volumes {
			if v.Name == m.Name && v.Secret != nil {
				certSecret = v.Secret.SecretName
			}
		}
	}
	if certSecret == "" {
		t.Fatal("OLM mounted no webhook certificate")
	}
	// After an upgrade OLM issues the new CSV's certificate anew, into the
	// same Secret and into the new CSV's webhook configurations: wait until
	// the Secret holds the certificate the API server will trust (a
	// kubelet would refresh the mounted files; this process reads them once).
	s := &corev1.Secret{}
	var notYet error
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	err := framework.WaitFor(wctx, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		notYet = webhookCertTrusted(ctx, c.Client, dep, certSecret, s)
		return notYet == nil, nil
	})
	cancel()
	if err != nil {
		t.Fatalf("the webhook certificate: %v (%v)", notYet, err)
	}
	if err := WriteCertPair(certDir, s, "tls.key", "tls.crt"); err != nil {
		t.Fatal(err)
	}
	// The OIDC issuer's serving CA, which the test gateways trust.
	err = c.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: operator.OIDCTLSSecret, Namespace: o.Namespace},
		Data: map[string][]byte{"ca.crt": o.CA.CertPEM, "ca.key": o.CA.KeyPEM}})
	if client.IgnoreAlreadyExists(err) != nil {
		t.Fatal(err)
	}

	var args []string
	for _, a := range ctr.Args {
		switch {
		case strings.HasPrefix(a, "--metrics-bind-address="), strings.HasPrefix(a, "--health-probe-bind-address="):
		default:
			args = append(args, a)
		}
	}
	// Free ports are picked, released, then bound by the process: another
	// process on this host (the suites run side by side) may take one in
	// between, and the manager then exits ("address already in use"), even
	// after it reported ready (a fresh-clone run lost its OIDC port so).
	// Such a start is retried with other ports; any other exit fails.
	var p *framework.Process
	var ports map[string]int
	issuerURL := ""
	for attempt := 1; ; attempt++ {
		ports = map[string]int{}
		for _, name := range []string{"webhook", "metrics", "health", "oidc"} {
			port, err := framework.FreePort()
			if err != nil {
				t.Fatal(err)
			}
			ports[name] = port
		}
		issuerURL = "https://127.0.0.1:" + strconv.Itoa(ports["oidc"])
		if o.Issuer != nil {
			issuerURL = IssuerURLOf(o.Issuer)
		}
		run := append(append([]string{}, args...), "--metrics-bind-address=127.0.0.1:"+strconv.Itoa(ports["metrics"]),
			"--health-probe-bind-address=127.0.0.1:"+strconv.Itoa(ports["health"]),
			"--webhook-port="+strconv.Itoa(ports["webhook"]), "--webhook-cert-dir="+certDir,
			"--oidc-issuer-url="+issuerURL, "--oidc-bind-address=127.0.0.1:"+strconv.Itoa(ports["oidc"]))
		var err error
		if p, err = framework.StartProcessEnv(dir, fmt.Sprintf("operator-%d", attempt), o.Binary, env, run...); err != nil {
			t.Fatal(err)
		}
		serving := waitServing(ctx, p, ports)
		if serving == nil {
			break
		}
		_ = p.Stop(10 * time.Second)
		if attempt == 3 || !strings.Contains(serving.Error(), "address already in use") {
			t.Fatal(serving)
		}
		t.Logf("the operator lost a port to another process (attempt %d); starting it on others", attempt)
	}
	if o.Issuer != nil {
		o.Issuer.Add("127.0.0.1:" + strconv.Itoa(ports["oidc"]))
	}
	// As a kubelet refreshes a mounted Secret: OLM may issue the webhook
	// certificate anew after the process started (it rotates it when the
	// Secret goes, as the garbage collector makes it go when the replaced
	// CSV that alone owns it is deleted), and the manager's certificate
	// watcher reloads the files.
	refresh, stopRefresh := context.WithCancel(context.Background())
	go RefreshSecret(refresh, t, c.Client, o.Namespace, certSecret, s.ResourceVersion, func(s *corev1.Secret) error { return WriteCertPair(certDir, s, "tls.key", "tls.crt") })
	var once sync.Once
	stop := func() {
		once.Do(func() {
			stopRefresh()
			if t.Failed() {
				t.Logf("operator log:\n%s", p.Tail(6000))
			}
			_ = p.Stop(30 * time.Second)
		})
	}
	t.Cleanup(stop)

	svc := &corev1.Service{}
	if err := c.Client.Get(ctx, client.ObjectKey{Namespace: o.Namespace, Name: OperatorDeployment + "-service"}, svc); err != nil {
		t.Fatal(err)
	}
	for _, sp := range svc.Spec.Ports {
		c.Network.Route(net.JoinHostPort(svc.Spec.ClusterIP, strconv.Itoa(int(sp.Port))), "127.0.0.1:"+strconv.Itoa(ports["webhook"]))
	}
	return stop, issuerURL
}

// webhookCertTrusted reads the webhook certificate Secret into s and says
// why the API server would not trust it yet, if it would not.
func webhookCertTrusted(ctx context.Context, c client.Client, dep *appsv1.Deployment, name string, s *corev1.Secret) error {
	if err := c.Get(ctx, client.ObjectKey{Namespace: dep.Namespace, Name: name}, s); err != nil {
		return err
	}
	vwcs := &admissionregistrationv1.ValidatingWebhookConfigurationList{}
	if err := c.List(ctx, vwcs, client.MatchingLabels{"olm.owner": dep.Labels["olm.owner"]}); err != nil {
		return err
	}
	if len(vwcs.Items) == 0 {
		return fmt.Errorf("OLM registered no validating webhook for %s", dep.Labels["olm.owner"])
	}
	leaf, err := pki.ParseCert(s.Data["tls.crt"])
	if err != nil {
		return err
	}
	for _, w := range vwcs.Items[0].Webhooks {
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM(w.ClientConfig.CABundle) {
			return fmt.Errorf("webhook %s has no CA bundle", w.Name)
		}
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots}); err != nil {
			return fmt.Errorf("the webhook certificate is not the one the API server trusts yet: %w", err)
		}
	}
	return nil
}

// waitServing waits until the operator process is ready and its OIDC
// issuer answers on its own port (a listener that fails after readiness
// ends the process), or says why not.
func waitServing(ctx context.Context, p *framework.Process, ports map[string]int) error {
	issuer := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // a liveness probe of a loopback port
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var exited error
	err := framework.WaitFor(wctx, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		if done, err := p.Exited(); done {
			exited = fmt.Errorf("operator exited: %v\n%s", err, p.Tail(3000))
			return false, exited
		}
		for _, u := range []string{"http://127.0.0.1:" + strconv.Itoa(ports["health"]) + "/readyz",
			"https://127.0.0.1:" + strconv.Itoa(ports["oidc"]) + "/.well-known/openid-configuration"} {
			resp, err := issuer.Get(u)
			if err != nil {
				return false, nil
			}
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return false, nil
			}
		}
		return true, nil
	})
	if exited != nil {
		return exited
	}
	return err
}

// RelayPod is how a relay pod is run.
type RelayPod struct {
	Namespace, Binary string
	// IssuerURL is the operator's OIDC issuer (the relay mints gateway
	// tokens under it).
	IssuerURL string
	// Env: as OperatorPod.Env.
	Env []string
}

// Relay is a running relay pod.
type Relay struct {
	Process    *framework.Process
	MetricsURL string
}

// RunRelay starts the relay as a pod of the Deployment OLM created would
// run it: with its ServiceAccount's token (exactly the RBAC the CSV grants
// it, and the front-proxy bindings OLM adds for an owned APIService), the
// Deployment's arguments, and the serving certificate OLM issued,
// rewritten when OLM issues it anew (as a kubelet refreshes a mounted
// Secret); the API server reaches it through the Service OLM created. OLM
// holds the CSV until the APIService is Available, so this runs while the
// install is in progress. It stops with the test.
func RunRelay(ctx context.Context, t *testing.T, c *framework.Cluster, o RelayPod) *Relay {
	t.Helper()
	dep := &appsv1.Deployment{}
	var certSecret string
	err := framework.WaitFor(ctx, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		if err := c.Client.Get(ctx, client.ObjectKey{Namespace: o.Namespace, Name: RelayDeployment}, dep); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		for _, v := range dep.Spec.Template.Spec.Volumes {
			if v.Name == "apiservice-cert" && v.Secret != nil {
				certSecret = v.Secret.SecretName
			}
		}
		return certSecret != "", nil
	})
	if err != nil {
		t.Fatalf("OLM created no relay Deployment with its APIService certificate: %v", err)
	}
	pod := dep.Spec.Template.Spec
	ctr := pod.Containers[0]
	dir := t.TempDir()
	kubeconfig := ServiceAccountKubeconfig(ctx, t, c, o.Namespace, pod.ServiceAccountName, dir)

	certDir := filepath.Join(dir, "certs")
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		t.Fatal(err)
	}
	s := &corev1.Secret{}
	err = framework.WaitFor(ctx, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		if err := c.Client.Get(ctx, client.ObjectKey{Namespace: o.Namespace, Name: certSecret}, s); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		return len(s.Data["tls.crt"]) > 0, nil
	})
	if err != nil {
		t.Fatalf("OLM issued no relay certificate: %v", err)
	}
	if err := WriteCertPair(certDir, s, "apiserver.key", "apiserver.crt"); err != nil {
		t.Fatal(err)
	}
	port, err := framework.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	metricsPort, err := framework.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	var args []string
	metrics, external := false, false
	for _, a := range ctr.Args {
		switch {
		case strings.HasPrefix(a, "--bind-address="):
		case strings.HasPrefix(a, "--metrics-bind-address="):
			metrics = true
		case strings.HasPrefix(a, "--external-bind-address="):
			// Replicas share this host: each its own port (no certificate is
			// issued here, as off OpenShift, so it completes no handshake).
			external = true
		default:
			args = append(args, a)
		}
	}
	if external {
		externalPort, err := framework.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		args = append(args, "--external-bind-address=127.0.0.1:"+strconv.Itoa(externalPort), "--external-cert-dir="+filepath.Join(dir, "external-ports"))
	}
	if len(args) == 0 || args[0] != "relay" {
		t.Fatalf("the relay Deployment runs %v, not the relay command", ctr.Args)
	}
	if !metrics {
		t.Fatalf("the relay Deployment serves no metrics: %v", ctr.Args)
	}
	r := &Relay{MetricsURL: "https://127.0.0.1:" + strconv.Itoa(metricsPort) + "/metrics"}
	args = append(args, "--bind-address=127.0.0.1:"+strconv.Itoa(port), "--metrics-bind-address=127.0.0.1:"+strconv.Itoa(metricsPort),
		"--cert-dir="+certDir, "--oidc-issuer-url="+o.IssuerURL)
	env := append([]string{"KUBECONFIG=" + kubeconfig}, relayPodEnv(ctx, t, c.Client, o.Namespace, dep)...)
	env = append(env, o.Env...)
	p, err := framework.StartProcessEnv(dir, "relay", o.Binary, env, args...)
	if err != nil {
		t.Fatal(err)
	}
	r.Process = p
	refresh, stopRefresh := context.WithCancel(context.Background())
	go RefreshSecret(refresh, t, c.Client, o.Namespace, certSecret, s.ResourceVersion, func(s *corev1.Secret) error {
		return WriteCertPair(certDir, s, "apiserver.key", "apiserver.crt")
	})
	t.Cleanup(func() {
		stopRefresh()
		if t.Failed() {
			as := &unstructured.Unstructured{}
			as.SetAPIVersion("apiregistration.k8s.io/v1")
			as.SetKind("APIService")
			err := c.Client.Get(context.Background(), client.ObjectKey{Name: "v1alpha1.access.openshell.ai"}, as)
			conds, _, _ := unstructured.NestedSlice(as.Object, "status", "conditions")
			t.Logf("relay log:\n%s\nAPIService: %v %v", p.Tail(4000), conds, err)
		}
		_ = p.Stop(30 * time.Second)
	})

	// The Service sends connections to a pod once it is ready: the
	// Deployment's probe is a TCP connect to its https port.
	err = framework.WaitFor(ctx, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		if done, err := p.Exited(); done {
			return false, fmt.Errorf("the relay exited: %v\n%s", err, p.Tail(3000))
		}
		conn, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), time.Second)
		if err != nil {
			return false, nil
		}
		_ = conn.Close()
		return true, nil
	})
	if err != nil {
		t.Fatalf("the relay never became ready: %v", err)
	}
	svc := &corev1.Service{}
	err = framework.WaitFor(ctx, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		err := c.Client.Get(ctx, client.ObjectKey{Namespace: o.Namespace, Name: RelayDeployment + "-service"}, svc)
		return err == nil, client.IgnoreNotFound(err)
	})
	if err != nil {
		t.Fatalf("OLM created no relay Service: %v", err)
	}
	for _, sp := range svc.Spec.Ports {
		c.Network.Route(net.JoinHostPort(svc.Spec.ClusterIP, strconv.Itoa(int(sp.Port))), "127.0.0.1:"+strconv.Itoa(port))
	}
	return r
}

// relayPodEnv is the relay container's environment as the kubelet gives it
// to a pod of dep's current template: the relay names that pod, by name
// and UID, as the owner of its load Lease.
func relayPodEnv(ctx context.Context, t *testing.T, c client.Client, ns string, dep *appsv1.Deployment) []string {
	t.Helper()
	var pod corev1.Pod
	err := framework.WaitFor(ctx, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		list := &corev1.PodList{}
		if err := c.List(ctx, list, client.InNamespace(ns), client.MatchingLabels(dep.Spec.Selector.MatchLabels)); err != nil {
			return false, err
		}
		for _, p := range list.Items {
			// A pod of the Deployment's current template: during an upgrade
			// the replaced ReplicaSet's pods are still listed.
			if p.DeletionTimestamp == nil && len(p.Spec.Containers) > 0 &&
				reflect.DeepEqual(p.Spec.Containers[0].Env, dep.Spec.Template.Spec.Containers[0].Env) {
				pod = p
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("the relay Deployment has no pod: %v", err)
	}
	return PodEnv(t, dep.Spec.Template.Spec.Containers[0].Env, &pod)
}

// ServiceAccountKubeconfig writes a kubeconfig with a token of the
// ServiceAccount, as a pod running under it gets.
func ServiceAccountKubeconfig(ctx context.Context, t *testing.T, c *framework.Cluster, ns, name, dir string) string {
	t.Helper()
	sa := &corev1.ServiceAccount{}
	if err := c.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, sa); err != nil {
		t.Fatal(err)
	}
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}
	if err := c.Client.SubResource("token").Create(ctx, sa, tr); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "kubeconfig-"+name)
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: c.Config.Host, CertificateAuthorityData: c.Config.CAData}
	kc.AuthInfos["sa"] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	kc.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "sa"}
	kc.CurrentContext = "c"
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// WriteCertPair writes the Secret's key and certificate into dir under
// the names a pod mounts them as, each by rename, the key first (a
// watcher reloads on the certificate).
func WriteCertPair(dir string, s *corev1.Secret, keyFile, certFile string) error {
	for _, f := range [][2]string{{"tls.key", keyFile}, {"tls.crt", certFile}} {
		tmp := filepath.Join(dir, "."+f[1]+".tmp")
		if err := os.WriteFile(tmp, s.Data[f[0]], 0o600); err != nil {
			return err
		}
		if err := os.Rename(tmp, filepath.Join(dir, f[1])); err != nil {
			return err
		}
	}
	return nil
}

// RefreshSecret calls write with the Secret whenever it changes and holds
// a certificate and key, until ctx ends: the kubelet's periodic sync of a
// Secret volume.
func RefreshSecret(ctx context.Context, t *testing.T, c client.Client, ns, name, seen string, write func(*corev1.Secret) error) {
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		s := &corev1.Secret{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, s); err != nil || s.ResourceVersion == seen ||
			len(s.Data["tls.crt"]) == 0 || len(s.Data["tls.key"]) == 0 {
			continue
		}
		if err := write(s); err != nil {
			t.Logf("refresh the certificate of Secret %s: %v", name, err)
			continue
		}
		seen = s.ResourceVersion
	}
}

// IssuerURLOf is the operator's OIDC issuer URL behind the balancer.
func IssuerURLOf(lb *framework.Balancer) string {
	return "https://127.0.0.1:" + strconv.Itoa(lb.Port())
}

// PodEnv is a container's environment as the kubelet gives it in pod,
// with the downward API's fields of the pod; resource fields are left out
// (a process here has no limits: GOMEMLIMIT unset, as an empty value
// leaves it).
func PodEnv(t *testing.T, vars []corev1.EnvVar, pod *corev1.Pod) []string {
	t.Helper()
	var env []string
	for _, e := range vars {
		v := e.Value
		switch f := e.ValueFrom; {
		case f == nil:
		case f.ResourceFieldRef != nil:
			continue
		case f.FieldRef != nil:
			v = podField(t, e.Name, pod, f.FieldRef.FieldPath)
		default:
			t.Fatalf("env %s: %+v not handled", e.Name, f)
		}
		env = append(env, e.Name+"="+v)
	}
	return env
}

// podField is a downward-API field of pod: its namespace, name, UID or an
// annotation.
func podField(t *testing.T, env string, pod *corev1.Pod, path string) string {
	t.Helper()
	if key, ok := strings.CutPrefix(path, "metadata.annotations['"); ok {
		return pod.Annotations[strings.TrimSuffix(key, "']")]
	}
	v := map[string]string{"metadata.namespace": pod.Namespace, "metadata.name": pod.Name, "metadata.uid": string(pod.UID)}[path]
	if v == "" {
		t.Fatalf("env %s: field %s not handled, or the pod has none", env, path)
	}
	return v
}
