package operator_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	configv1 "github.com/openshift/api/config/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openshell/openshell-operator/internal/pki"
	"github.com/openshell/openshell-operator/operator"
	"github.com/openshell/openshell-operator/test/framework"
)

// TestServersFollowTheClusterTLSProfile changes OpenShift's cluster TLS
// security profile (apiserver.config.openshift.io/cluster) under a running
// operator and watches the handshakes of its three servers — metrics,
// admission webhooks, OIDC issuer — change with it, without a restart.
func TestServersFollowTheClusterTLSProfile(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	oc, err := framework.StartEnv(framework.EnvOptions{OpenShift: true})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = oc.Stop() })
	ns := framework.CreatePlatformNamespace(ctx, t, oc.Client, "tls")

	metrics, hook, issuer := port(t), port(t), port(t)
	mgr, err := operator.New(oc.Config, operator.Options{SkipControllerNameValidation: true, ProbeAddr: "0",
		WatchNamespaces: []string{ns}, MetricsAddr: "127.0.0.1:" + metrics, SecureMetrics: true,
		WebhookHost: "127.0.0.1", WebhookPort: atoi(t, hook), WebhookCertDir: servingCertDir(t),
		OIDC: &operator.OIDCOptions{IssuerURL: "https://127.0.0.1:" + issuer, BindAddress: "127.0.0.1:" + issuer,
			Namespace: ns, KeySecret: "oidc-keys", TLSSecret: "oidc-tls"}})
	g.Expect(err).NotTo(HaveOccurred())
	_ = mgr.GetWebhookServer() // served even with no webhook registered
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager exited with error: %v", err)
		}
	})
	servers := map[string]string{"metrics": metrics, "webhook": hook, "oidc-issuer": issuer}

	// A client offering only these TLS 1.2 suites (ECDSA and RSA forms, so
	// the server's key type does not matter), or only TLS 1.3.
	offer := func(suites ...uint16) *tls.Config {
		return &tls.Config{InsecureSkipVerify: true, MaxVersion: tls.VersionTLS12, CipherSuites: suites}
	}
	gcm128 := offer(tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256)
	gcm256 := offer(tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384, tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384)
	cbc := offer(tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA, tls.TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA)
	tls13 := &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13}
	expect := func(step string, accepted map[string]bool, clients map[string]*tls.Config) {
		t.Helper()
		for name, addr := range servers {
			for client, cfg := range clients {
				g.Eventually(func() bool { return handshake("127.0.0.1:"+addr, cfg) == nil }).
					WithTimeout(20*time.Second).WithPolling(100*time.Millisecond).
					Should(Equal(accepted[client]), "%s: %s server, client %s", step, name, client)
			}
		}
	}
	clients := map[string]*tls.Config{"TLS1.2 AES128-GCM": gcm128, "TLS1.2 AES256-GCM": gcm256, "TLS1.2 AES128-CBC": cbc, "TLS1.3": tls13}

	// No APIServer object: Intermediate, OpenShift's default.
	expect("default (Intermediate)", map[string]bool{"TLS1.2 AES128-GCM": true, "TLS1.2 AES256-GCM": true, "TLS1.3": true}, clients)

	apiServer := &configv1.APIServer{}
	apiServer.Name = "cluster"
	apiServer.Spec.TLSSecurityProfile = &configv1.TLSSecurityProfile{Type: configv1.TLSProfileModernType, Modern: &configv1.ModernTLSProfile{}}
	g.Expect(oc.Client.Create(ctx, apiServer)).To(Succeed())
	expect("Modern", map[string]bool{"TLS1.3": true}, clients)

	setProfile := func(p *configv1.TLSSecurityProfile) {
		t.Helper()
		g.Expect(oc.Client.Get(ctx, client.ObjectKeyFromObject(apiServer), apiServer)).To(Succeed())
		apiServer.Spec.TLSSecurityProfile = p
		g.Expect(oc.Client.Update(ctx, apiServer)).To(Succeed())
	}
	setProfile(&configv1.TLSSecurityProfile{Type: configv1.TLSProfileOldType, Old: &configv1.OldTLSProfile{}})
	expect("Old", map[string]bool{"TLS1.2 AES128-GCM": true, "TLS1.2 AES256-GCM": true, "TLS1.2 AES128-CBC": true, "TLS1.3": true}, clients)

	custom := func(ciphers ...string) *configv1.TLSSecurityProfile {
		return &configv1.TLSSecurityProfile{Type: configv1.TLSProfileCustomType, Custom: &configv1.CustomTLSProfile{
			TLSProfileSpec: configv1.TLSProfileSpec{MinTLSVersion: configv1.VersionTLS12, Ciphers: ciphers}}}
	}
	setProfile(custom("ECDHE-ECDSA-AES256-GCM-SHA384", "ECDHE-RSA-AES256-GCM-SHA384"))
	expect("Custom AES256-GCM only", map[string]bool{"TLS1.2 AES256-GCM": true, "TLS1.3": true}, clients)

	// A profile Go cannot serve (TLS 1.2 allowed, no TLS 1.2 cipher it
	// implements) is refused: the last good one stays in force.
	setProfile(custom("TLS_AES_128_GCM_SHA256", "DES-CBC3-SHA"))
	g.Consistently(func() bool { return handshake("127.0.0.1:"+hook, gcm256) == nil }).
		WithTimeout(2 * time.Second).WithPolling(200 * time.Millisecond).Should(BeTrue())

	g.Expect(oc.Client.Delete(ctx, apiServer)).To(Succeed())
	expect("deleted (Intermediate)", map[string]bool{"TLS1.2 AES128-GCM": true, "TLS1.2 AES256-GCM": true, "TLS1.3": true}, clients)
}

func handshake(addr string, cfg *tls.Config) error {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return err
	}
	return conn.Close()
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	var n int
	if _, err := fmt.Sscan(s, &n); err != nil {
		t.Fatal(err)
	}
	return n
}

// servingCertDir writes a webhook serving certificate for 127.0.0.1.
func servingCertDir(t *testing.T) string {
	t.Helper()
	now := time.Now()
	ca, err := pki.NewCA("webhook test CA", time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Issue(pki.LeafRequest{CommonName: "127.0.0.1", IPs: []net.IP{net.ParseIP("127.0.0.1")}, Server: true, Validity: time.Hour}, now)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name, b := range map[string][]byte{"tls.crt": leaf.CertPEM, "tls.key": leaf.KeyPEM} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
