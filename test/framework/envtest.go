package framework

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	operatorsv1 "github.com/operator-framework/api/pkg/operators/v1"
	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/openshell/openshell-operator/internal/pki"
	"github.com/openshell/openshell-operator/internal/scheme"
)

// EnvOptions chooses which CRDs an envtest API server starts with. Our own
// CRDs are always installed.
type EnvOptions struct {
	// OpenShift installs Route, SecurityContextConstraints,
	// ImageDigestMirrorSet, ImageTagMirrorSet, ConsoleYAMLSample and the
	// cluster's Network, APIServer and Proxy configuration.
	OpenShift bool
	// CertManager installs the cert-manager.io CRDs.
	CertManager bool
	// OLM installs the operators.coreos.com CRDs.
	OLM bool
	// Monitoring installs the Prometheus Operator's PrometheusRule and
	// ServiceMonitor CRDs.
	Monitoring bool
	// GatewayAPI installs the Gateway API's Gateway, HTTPRoute and
	// BackendTLSPolicy CRDs (standard channel).
	GatewayAPI bool
	// AgentSandbox installs the CRDs of this Agent Sandbox release
	// (AgentSandboxAlphaOnly, AgentSandboxAlphaBeta, AgentSandboxBetaOnly);
	// empty installs none.
	AgentSandbox string
	// WithoutOwnCRDs skips our CRDs (only for tests of upstream pieces).
	WithoutOwnCRDs bool
	// Webhooks, when set, are installed and served by envtest's helper.
	Webhooks *envtest.WebhookInstallOptions
	// APIServerFlags are extra kube-apiserver flags (name without "--").
	APIServerFlags map[string]string
	// FrontProxy configures the API server's front proxy (its
	// --requestheader-* and --proxy-client-* flags) with a CA of its own,
	// as every cluster that serves aggregated APIs has: it then forwards
	// requests for an APIService with that client certificate and the
	// user in X-Remote-* headers (Env.FrontProxy).
	FrontProxy bool
}

// FrontProxyPKI is the front proxy's CA and the client certificate the API
// server presents to aggregated servers.
type FrontProxyPKI struct {
	CA, Client *pki.KeyPair
}

// Front-proxy settings, as kubeadm sets them.
const (
	FrontProxyClientName = "front-proxy-client"
	FrontProxyUserHeader = "X-Remote-User"
)

// frontProxyFlags writes the front proxy's PKI into a new folder and
// returns it with the API server flags that use it.
func frontProxyFlags() (*FrontProxyPKI, map[string]string, error) {
	now := time.Now()
	ca, err := pki.NewCA("front-proxy-ca", 24*time.Hour, now)
	if err != nil {
		return nil, nil, err
	}
	leaf, err := ca.Issue(pki.LeafRequest{CommonName: FrontProxyClientName, Client: true, Validity: 24 * time.Hour}, now)
	if err != nil {
		return nil, nil, err
	}
	dir, err := os.MkdirTemp("", "openshell-front-proxy-")
	if err != nil {
		return nil, nil, err
	}
	files := map[string][]byte{"ca.crt": ca.CertPEM, "client.crt": leaf.CertPEM, "client.key": leaf.KeyPEM}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			return nil, nil, err
		}
	}
	return &FrontProxyPKI{CA: ca, Client: leaf}, map[string]string{
		"requestheader-client-ca-file":       filepath.Join(dir, "ca.crt"),
		"requestheader-allowed-names":        FrontProxyClientName,
		"requestheader-username-headers":     FrontProxyUserHeader,
		"requestheader-group-headers":        "X-Remote-Group",
		"requestheader-extra-headers-prefix": "X-Remote-Extra-",
		"proxy-client-cert-file":             filepath.Join(dir, "client.crt"),
		"proxy-client-key-file":              filepath.Join(dir, "client.key"),
	}, nil
}

// Env is a running envtest control plane.
type Env struct {
	*envtest.Environment
	Config *rest.Config
	Client client.Client
	Scheme *runtime.Scheme
	// FrontProxy is the front proxy's PKI (EnvOptions.FrontProxy).
	FrontProxy *FrontProxyPKI
}

// Scheme is the operator's scheme plus the OLM types tests create.
func Scheme() *runtime.Scheme {
	s := scheme.New()
	utilruntime.Must(operatorsv1alpha1.AddToScheme(s))
	utilruntime.Must(operatorsv1.AddToScheme(s))
	return s
}

// CRDDirs lists the CRD folders that opts asks for, failing when one is
// missing (which means `make tools` has not run).
func CRDDirs(opts EnvOptions) ([]string, error) {
	var dirs []string
	if !opts.WithoutOwnCRDs {
		dirs = append(dirs, OwnCRDDir())
	}
	if opts.OpenShift {
		dirs = append(dirs, UpstreamDir("crds", CRDsOpenShift))
	}
	if opts.CertManager {
		dirs = append(dirs, UpstreamDir("crds", CRDsCertManager))
	}
	if opts.OLM {
		dirs = append(dirs, UpstreamDir("crds", CRDsOLM))
	}
	if opts.Monitoring {
		dirs = append(dirs, UpstreamDir("crds", CRDsMonitoring))
	}
	if opts.GatewayAPI {
		dirs = append(dirs, UpstreamDir("crds", CRDsGatewayAPI))
	}
	if opts.AgentSandbox != "" {
		dirs = append(dirs, AgentSandboxCRDDir(opts.AgentSandbox))
	}
	for _, d := range dirs {
		if _, err := os.Stat(d); err != nil {
			return nil, fmt.Errorf("CRD folder %s missing: run `make tools` first: %w", d, err)
		}
	}
	return dirs, nil
}

// StartEnv starts etcd and kube-apiserver from bin/ with the requested CRDs
// installed and established.
func StartEnv(opts EnvOptions) (*Env, error) {
	for _, b := range []string{"kube-apiserver", "etcd"} {
		if _, err := Binary(b); err != nil {
			return nil, err
		}
	}
	dirs, err := CRDDirs(opts)
	if err != nil {
		return nil, err
	}
	s := Scheme()
	te := &envtest.Environment{
		BinaryAssetsDirectory: BinDir(),
		CRDDirectoryPaths:     dirs,
		ErrorIfCRDPathMissing: true,
		Scheme:                s,
		CRDInstallOptions: envtest.CRDInstallOptions{
			Scheme: s,
		},
		ControlPlaneStartTimeout: 2 * time.Minute,
		ControlPlaneStopTimeout:  time.Minute,
	}
	if opts.Webhooks != nil {
		te.WebhookInstallOptions = *opts.Webhooks
	}
	args := te.ControlPlane.GetAPIServer().Configure()
	for k, v := range opts.APIServerFlags {
		args.Set(k, v)
	}
	var front *FrontProxyPKI
	if opts.FrontProxy {
		p, flags, err := frontProxyFlags()
		if err != nil {
			return nil, fmt.Errorf("front proxy: %w", err)
		}
		for k, v := range flags {
			args.Set(k, v)
		}
		front = p
	}
	cfg, err := te.Start()
	if err != nil {
		return nil, fmt.Errorf("start envtest control plane: %w", err)
	}
	if err := reapControlPlane(te); err != nil {
		_ = te.Stop()
		return nil, err
	}
	// Tests create many objects quickly; the default client limits would
	// throttle them and make timing-based Eventually checks flaky.
	cfg.QPS, cfg.Burst = 500, 1000
	c, err := client.New(cfg, client.Options{Scheme: s})
	if err != nil {
		_ = te.Stop()
		return nil, fmt.Errorf("build client: %w", err)
	}
	if opts.OpenShift {
		if err := createClusterNetwork(c); err != nil {
			_ = te.Stop()
			return nil, err
		}
	}
	return &Env{Environment: te, Config: cfg, Client: c, Scheme: s, FrontProxy: front}, nil
}

// reapControlPlane registers the etcd and kube-apiserver that envtest
// started with the reaper: envtest starts them without a parent-death
// signal, so a test binary killed by its -timeout would leave them running.
// Each is found by the folder envtest made for it, unique to this control
// plane.
func reapControlPlane(te *envtest.Environment) error {
	for name, flag := range map[string]string{
		"etcd":           "--data-dir=" + te.ControlPlane.Etcd.DataDir,
		"kube-apiserver": "--cert-dir=" + te.ControlPlane.APIServer.CertDir,
	} {
		pid := FindProcess(flag)
		if pid == 0 {
			return fmt.Errorf("find the %s envtest started (%s)", name, flag)
		}
		if err := Reap(pid); err != nil {
			return err
		}
	}
	return nil
}

// createClusterNetwork creates the cluster network configuration an
// OpenShift cluster has (config.openshift.io/v1 Network "cluster", which
// the Cluster Network Operator reports on), for the default plugin,
// OVN-Kubernetes, which enforces NetworkPolicy ingress and egress, and its
// Proxy "cluster" (no proxy): the local control plane stands in for that
// cluster, as it does with the SCC and Route APIs.
func createClusterNetwork(c client.Client) error {
	n := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "config.openshift.io/v1", "kind": "Network",
		"metadata": map[string]any{"name": "cluster"},
		"spec":     map[string]any{"networkType": "OVNKubernetes"},
		"status":   map[string]any{"networkType": "OVNKubernetes"},
	}}
	if err := c.Create(context.Background(), n); err != nil {
		return fmt.Errorf("create the cluster network configuration: %w", err)
	}
	// The cluster-wide egress proxy configuration every OpenShift cluster
	// has, empty when there is no proxy: OLM reads it (and injects what it
	// holds into the operators it installs).
	proxy := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "config.openshift.io/v1", "kind": "Proxy",
		"metadata": map[string]any{"name": "cluster"},
		"spec":     map[string]any{},
	}}
	if err := c.Create(context.Background(), proxy); err != nil {
		return fmt.Errorf("create the cluster proxy configuration: %w", err)
	}
	return nil
}

// Stop stops the control plane and removes its temporary files.
func (e *Env) Stop() error {
	if e == nil || e.Environment == nil {
		return nil
	}
	return e.Environment.Stop()
}

// WriteKubeconfig writes an admin kubeconfig for this control plane into dir.
func (e *Env) WriteKubeconfig(dir string) (string, error) {
	p := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(p, e.KubeConfig, 0o600); err != nil {
		return "", fmt.Errorf("write kubeconfig: %w", err)
	}
	return p, nil
}
