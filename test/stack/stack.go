// Package stack runs the operator with its OIDC issuer and a test gateway
// (the stand-in for the OpenShell gateway) against a cluster, and registers
// the gateway as an External OpenShellGateway. The e2e tests and `make demo`
// share it.
package stack

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/oidc"
	"github.com/openshell/openshell-operator/internal/pki"
	"github.com/openshell/openshell-operator/internal/sandboxspec"
	"github.com/openshell/openshell-operator/operator"
	"github.com/openshell/openshell-operator/test/framework"
	"github.com/openshell/openshell-operator/test/testgateway"
)

// Options configure a stack.
type Options struct {
	// GatewayNamespace holds the OpenShellGateway and its CA Secret.
	GatewayNamespace string
	// GatewayName defaults to "openshell".
	GatewayName string
	// SandboxNamespace is where the test gateway creates agents.x-k8s.io
	// Sandboxes (shared workspace mode).
	SandboxNamespace string
	// Manager options (WATCH_NAMESPACE, ...); OIDC is filled in.
	Manager operator.Options
	// BalancedIssuer puts the OIDC issuer behind a balancer, as its Service
	// is, so that replicas (StartReplica) serve it too.
	BalancedIssuer bool
	// JWKSTTL is how long the test gateways cache the issuer's key set
	// (default: the gateway's one hour).
	JWKSTTL time.Duration
	// SelfIssuedIssuer lets the operator issue (and renew) the issuer's
	// serving certificate itself, as deployed, from the stack's CA.
	SelfIssuedIssuer bool
	// GatewayConfig is the test gateway's own Kubernetes credentials
	// (default: the operator's config).
	GatewayConfig *rest.Config
	// ImagePolicy is the gateway's enforcement.
	ImagePolicy openshellv1alpha1.ImagePolicyEnforcement
	// GatewayVersion is the release the test gateways report (and whose
	// wire they speak) from the start ("": 0.0.111).
	GatewayVersion string
	// Tenancy is the gateway's access control; nil admits every namespace
	// (the e2e tests' and the demo's tenants).
	Tenancy *openshellv1alpha1.GatewayTenancy
	// NoExternalGateway starts no test gateway of the stack's own: a test
	// whose gateways all come from elsewhere (a page's YAML).
	NoExternalGateway bool
	// PlayManagedGateways routes the operator's connections to Managed
	// gateways' Services to the test gateways that play their pods
	// (AddManagedGateway). Only for an operator run in this process; the
	// routes bypass a proxy from the environment.
	PlayManagedGateways bool
	// Process runs the operator as its own process, as deployed (cmd/,
	// with its flags and client settings), so the kernel accounts its
	// memory and CPU apart from the test; metrics then come from its
	// metrics endpoint. Empty runs the manager in this process.
	Process *ProcessOptions
}

// ProcessOptions run the operator binary.
type ProcessOptions struct {
	// Binary is the operator executable (go build ./cmd).
	Binary string
	// Kubeconfig is the admin kubeconfig it connects with.
	Kubeconfig string
	// Dir receives its log (operator.log).
	Dir string
	// Args are further flags, e.g. --kube-api-qps=100.
	Args []string
	// Env is further environment, e.g. the HTTPS_PROXY OLM injects.
	Env []string
}

// Stack is a running operator plus test gateway.
type Stack struct {
	Gateway    *testgateway.Gateway
	GatewayObj *openshellv1alpha1.OpenShellGateway
	CA         *pki.KeyPair
	// Requests counts the operator's API requests (all managers of this stack).
	Requests *RequestCounter
	stopMgr  context.CancelFunc
	mgrDone  chan error
	mgrCfg   *rest.Config
	mgrOpts  operator.Options

	extra    []*testgateway.Gateway
	replicas []func() error
	gateways []client.ObjectKey
	issuerLB *framework.Balancer
	// What AddGateway needs to start more test gateways like the first.
	issuerURL string
	opts      Options
	kube      client.WithWatch
	gwCfg     *rest.Config

	// routes send gateway connections by Service address to the local
	// processes playing Managed gateways' pods (dialGateway).
	routesMu sync.Mutex
	routes   map[string]string

	// Process mode.
	procOpts   *ProcessOptions
	proc       *framework.Process
	metricsURL string
}

// RequestCounter counts API requests by kind: watch, GET, POST, PUT,
// PATCH, DELETE.
type RequestCounter struct {
	mu     sync.Mutex
	counts map[string]int
	writes []string // the last writes, "METHOD path", for a failure to name
}

// maxWritesKept bounds the write log: a failure needs the recent ones.
const maxWritesKept = 64

// Wrap is a rest.Config WrapTransport.
func (rc *RequestCounter) Wrap(next http.RoundTripper) http.RoundTripper {
	return roundTripper(func(r *http.Request) (*http.Response, error) {
		key := r.Method
		if r.Method == http.MethodGet && r.URL.Query().Get("watch") == "true" {
			key = "WATCH"
		}
		rc.mu.Lock()
		if rc.counts == nil {
			rc.counts = map[string]int{}
		}
		rc.counts[key]++
		if r.Method != http.MethodGet {
			rc.writes = append(rc.writes, r.Method+" "+r.URL.Path)
			if len(rc.writes) > maxWritesKept {
				rc.writes = rc.writes[len(rc.writes)-maxWritesKept:]
			}
		}
		rc.mu.Unlock()
		return next.RoundTrip(r)
	})
}

// Snapshot returns the counts so far.
func (rc *RequestCounter) Snapshot() map[string]int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	out := map[string]int{}
	for k, v := range rc.counts {
		out[k] = v
	}
	return out
}

// Writes returns the most recent writes (method and path), oldest first.
func (rc *RequestCounter) Writes() []string {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]string(nil), rc.writes...)
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// RestartManagerWith stops the operator and starts a new one, as a pod
// restart would, with options changed by edit (nil: the same options).
func (s *Stack) RestartManagerWith(edit func(*operator.Options)) error {
	if edit != nil {
		edit(&s.mgrOpts)
	}
	if err := s.stopManager(); err != nil {
		return err
	}
	return s.startManager()
}

// StopManager stops the stack's operator (its replicas from StartReplica
// keep running), as a rolling update deletes a pod.
func (s *Stack) StopManager() error { return s.stopManager() }

// StartReplica starts another in-process replica of the operator with the
// stack's options as edited (a webhook or OIDC port of its own, say); it
// stops with the stack or with the returned function.
func (s *Stack) StartReplica(edit func(*operator.Options)) (stop func() error, err error) {
	opts := s.mgrOpts
	if opts.OIDC != nil {
		// A port of its own for the replica's issuer, behind the balancer.
		port, err := framework.FreePort()
		if err != nil {
			return nil, err
		}
		issuer := *opts.OIDC
		issuer.BindAddress = "127.0.0.1:" + strconv.Itoa(port)
		opts.OIDC = &issuer
		if s.issuerLB != nil {
			s.issuerLB.Add(issuer.BindAddress)
		}
	}
	if edit != nil {
		edit(&opts)
	}
	mgr, err := operator.New(s.mgrCfg, opts)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	var once sync.Once
	var stopErr error
	stop = func() error {
		once.Do(func() { cancel(); stopErr = <-done })
		return stopErr
	}
	s.replicas = append(s.replicas, stop)
	return stop, nil
}

// KillManager SIGKILLs the operator process (process mode) wherever it is,
// and starts it again, as a crashed pod would restart.
func (s *Stack) KillManager() error {
	if s.proc == nil {
		return errors.New("KillManager needs the operator as a process (Options.Process)")
	}
	if err := s.proc.Kill(); err != nil {
		return err
	}
	s.proc = nil
	return s.startManager()
}

// UserToken mints, with the operator's issuer keys, the token of a
// workspace user (oidc.UserRole) named subject for the stack's gateway, as
// an identity provider the gateway trusts would issue it.
func (s *Stack) UserToken(ctx context.Context, subject string) (string, error) {
	issuer, err := s.issuer(ctx)
	if err != nil {
		return "", err
	}
	tok, _, err := issuer.UserToken(oidc.Audience(s.GatewayObj.Namespace, s.GatewayObj.Name), subject)
	return tok, err
}

// issuer is the operator's OIDC issuer as another process holding its key
// Secret sees it: the keys the operator signs with, at its URL.
func (s *Stack) issuer(ctx context.Context) (*oidc.Issuer, error) {
	issuer := &oidc.Issuer{Client: s.kube, SecretNamespace: s.opts.GatewayNamespace, SecretName: operator.OIDCKeySecret, URL: s.issuerURL}
	if err := issuer.Load(ctx); err != nil {
		return nil, fmt.Errorf("load the issuer's keys: %w", err)
	}
	return issuer, nil
}

// IssuerAddress is the host:port gateways reach the OIDC issuer at.
func (s *Stack) IssuerAddress() string { return strings.TrimPrefix(s.issuerURL, "https://") }

// Crash SIGKILLs the operator process (process mode) and leaves it down,
// as when its node dies: nothing is released, not even the leader Lease.
func (s *Stack) Crash() error {
	if s.proc == nil {
		return errors.New("Crash needs the operator as a process (Options.Process)")
	}
	err := s.proc.Kill()
	s.proc = nil
	return err
}

func (s *Stack) stopManager() error {
	if s.proc != nil {
		err := s.proc.Stop(30 * time.Second)
		s.proc = nil
		return err
	}
	if s.stopMgr == nil {
		return nil
	}
	s.stopMgr()
	s.stopMgr = nil
	err := <-s.mgrDone
	if err != nil && strings.Contains(err.Error(), "grace period") {
		// The runnables that did not stop are still running: name them.
		var buf bytes.Buffer
		_ = pprof.Lookup("goroutine").WriteTo(&buf, 1)
		return &StopGraceError{Err: err, Goroutines: buf.String()}
	}
	return err
}

// StopGraceError is a manager that did not stop within its grace period,
// with the goroutines that were still running.
type StopGraceError struct {
	Err        error
	Goroutines string
}

func (e *StopGraceError) Error() string {
	return fmt.Sprintf("%v; the goroutines still running:\n%s", e.Err, e.Goroutines)
}

func (e *StopGraceError) Unwrap() error { return e.Err }

// StuckInHTTP2Write says whether a goroutine was blocked writing to an
// HTTP/2 connection: a TLS write that no context can interrupt, which
// client-go's connection health check (30 s without a frame read, then a
// 15 s ping) is the only thing to end. A kube-apiserver that was frozen
// can leave its clients so.
func (e *StopGraceError) StuckInHTTP2Write() bool {
	return strings.Contains(e.Goroutines, "golang.org/x/net/http2.stickyErrWriter.Write")
}

func (s *Stack) startManager() error {
	if s.procOpts != nil {
		return s.startProcess()
	}
	mgr, err := operator.New(s.mgrCfg, s.mgrOpts)
	if err != nil {
		return err
	}
	mctx, cancel := context.WithCancel(context.Background())
	s.stopMgr, s.mgrDone = cancel, make(chan error, 1)
	go func() { s.mgrDone <- mgr.Start(mctx) }()
	return nil
}

// Start brings everything up; Stop tears it down.
func Start(ctx context.Context, cfg *rest.Config, c client.Client, opts Options) (_ *Stack, retErr error) {
	if opts.GatewayName == "" {
		opts.GatewayName = "openshell"
	}
	ca, err := pki.NewCA("openshell-test-ca", 24*time.Hour, time.Now())
	if err != nil {
		return nil, err
	}
	issuerCert, err := loopbackLeaf(ca, "openshell-operator-oidc")
	if err != nil {
		return nil, err
	}
	port, err := framework.FreePort()
	if err != nil {
		return nil, err
	}
	issuerURL := "https://127.0.0.1:" + strconv.Itoa(port)
	var issuerLB *framework.Balancer
	if opts.BalancedIssuer {
		if issuerLB, err = framework.StartBalancer("127.0.0.1:" + strconv.Itoa(port)); err != nil {
			return nil, err
		}
		issuerURL = "https://127.0.0.1:" + strconv.Itoa(issuerLB.Port())
	}

	s := &Stack{CA: ca, Requests: &RequestCounter{}, procOpts: opts.Process, issuerURL: issuerURL, opts: opts, issuerLB: issuerLB}
	defer func() {
		if retErr != nil {
			s.Stop()
		}
	}()
	mopts := opts.Manager
	if mopts.MetricsAddr == "" {
		mopts.MetricsAddr = "0"
	}
	if mopts.ProbeAddr == "" {
		mopts.ProbeAddr = "0"
	}
	if mopts.Controllers.Images.Default.Gateway == "" {
		mopts.Controllers.Images = framework.TestImages
	}
	// The gateway's namespace plays the operator's own: gateways are served there.
	if mopts.Controllers.Platform.OperatorNamespace == "" {
		mopts.Controllers.Platform.OperatorNamespace = opts.GatewayNamespace
	}
	if !slices.Contains(mopts.Controllers.Platform.GatewayNamespaces, opts.GatewayNamespace) {
		mopts.Controllers.Platform.GatewayNamespaces = append(slices.Clone(mopts.Controllers.Platform.GatewayNamespaces), opts.GatewayNamespace)
	}
	mopts.SkipControllerNameValidation = true
	if opts.PlayManagedGateways && mopts.Controllers.DialGateway == nil {
		mopts.Controllers.DialGateway = s.dialGateway
	}
	issuer := operator.OIDCOptions{}
	if opts.Manager.OIDC != nil {
		issuer = *opts.Manager.OIDC // its intervals
	}
	issuer.IssuerURL, issuer.BindAddress = issuerURL, "127.0.0.1:"+strconv.Itoa(port)
	issuer.TLS = &tls.Config{Certificates: []tls.Certificate{issuerCert}, MinVersion: tls.VersionTLS12}
	issuer.CAPEM, issuer.Namespace, issuer.KeySecret = ca.CertPEM, opts.GatewayNamespace, operator.OIDCKeySecret
	mopts.OIDC = &issuer
	if opts.SelfIssuedIssuer {
		mopts.OIDC.TLS, mopts.OIDC.TLSSecret = nil, operator.OIDCTLSSecret
	}
	s.mgrCfg = rest.CopyConfig(cfg)
	s.mgrCfg.Wrap(s.Requests.Wrap)
	s.mgrOpts = mopts
	if s.procOpts != nil || opts.SelfIssuedIssuer {
		// The binary issues its own OIDC serving certificate from the CA in
		// this Secret when the Secret holds one: seeding it with the
		// stack's CA lets the test gateway trust either mode alike.
		if err := c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: operator.OIDCTLSSecret, Namespace: opts.GatewayNamespace},
			Data: map[string][]byte{"ca.crt": ca.CertPEM, "ca.key": ca.KeyPEM}}); err != nil {
			return nil, fmt.Errorf("seed the OIDC serving CA: %w", err)
		}
	}
	if err := s.startManager(); err != nil {
		return nil, err
	}

	gwCfg := cfg
	if opts.GatewayConfig != nil {
		gwCfg = opts.GatewayConfig
	}
	kube, err := client.NewWithWatch(gwCfg, client.Options{Scheme: c.Scheme()})
	if err != nil {
		return nil, err
	}
	s.kube, s.gwCfg = kube, gwCfg
	if opts.NoExternalGateway {
		return s, nil
	}
	s.Gateway, s.GatewayObj, err = s.startGateway(ctx, c, opts.GatewayName, opts.SandboxNamespace, nil)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// AddGateway starts one more test gateway, registered as External
// OpenShellGateway name in the stack's gateway namespace and creating its
// Sandboxes in sandboxNS; Stop stops it with the rest.
func (s *Stack) AddGateway(ctx context.Context, c client.Client, name, sandboxNS string) (*testgateway.Gateway, *openshellv1alpha1.OpenShellGateway, error) {
	return s.AddGatewayWith(ctx, c, name, sandboxNS, nil)
}

// GatewayEdit changes a test gateway's options and its OpenShellGateway
// before they are used (another identity provider, credentials).
type GatewayEdit func(*testgateway.Options, *openshellv1alpha1.OpenShellGateway)

// AddGatewayWith is AddGateway with the gateway edited first.
func (s *Stack) AddGatewayWith(ctx context.Context, c client.Client, name, sandboxNS string, edit GatewayEdit) (*testgateway.Gateway, *openshellv1alpha1.OpenShellGateway, error) {
	gw, obj, err := s.startGateway(ctx, c, name, sandboxNS, edit)
	if err == nil {
		s.extra = append(s.extra, gw)
	}
	return gw, obj, err
}

func (s *Stack) startGateway(ctx context.Context, c client.Client, name, sandboxNS string, edit GatewayEdit) (*testgateway.Gateway, *openshellv1alpha1.OpenShellGateway, error) {
	gw, obj, err := StartExternalGateway(ctx, c, s.kube, ExternalGateway{Namespace: s.opts.GatewayNamespace, Name: name, SandboxNamespace: sandboxNS,
		IssuerURL: s.issuerURL, CA: s.CA, Tenancy: s.opts.Tenancy, ImagePolicy: s.opts.ImagePolicy, JWKSTTL: s.opts.JWKSTTL, Edit: edit,
		Version: s.opts.GatewayVersion})
	if err == nil {
		s.gateways = append(s.gateways, client.ObjectKeyFromObject(obj))
	}
	return gw, obj, err
}

// ExternalGateway describes a test gateway registered as an External
// OpenShellGateway.
type ExternalGateway struct {
	// Namespace and Name of the OpenShellGateway (and its CA Secret).
	Namespace, Name string
	// SandboxNamespace is where the gateway creates agents.x-k8s.io Sandboxes.
	SandboxNamespace string
	// IssuerURL is the operator's OIDC issuer, served under a certificate
	// from CA, which also signs the gateway's own certificate.
	IssuerURL string
	CA        *pki.KeyPair
	// Tenancy defaults to every namespace.
	Tenancy     *openshellv1alpha1.GatewayTenancy
	ImagePolicy openshellv1alpha1.ImagePolicyEnforcement
	JWKSTTL     time.Duration
	Edit        GatewayEdit
	// Version is what the gateway reports ("": 0.0.111).
	Version string
}

// StartExternalGateway starts a test gateway that creates Sandboxes with
// kube and registers it with c; stop the gateway when done.
func StartExternalGateway(ctx context.Context, c client.Client, kube client.WithWatch, e ExternalGateway) (*testgateway.Gateway, *openshellv1alpha1.OpenShellGateway, error) {
	cert, err := loopbackLeaf(e.CA, "openshell-test-gateway")
	if err != nil {
		return nil, nil, err
	}
	// The issuer must serve before the gateway fetches its JWKS; the
	// gateway fetches lazily, on the first token it sees.
	gwOpts := testgateway.Options{
		Cert: cert,
		OIDC: testgateway.OIDC{Issuer: e.IssuerURL, Audience: oidc.Audience(e.Namespace, e.Name), CAPEM: e.CA.CertPEM,
			RolesClaim: oidc.RolesClaim, AdminRole: oidc.AdminRole, JWKSTTL: e.JWKSTTL},
		Kube: kube, Namespace: e.SandboxNamespace, GatewayID: e.Name + "-test",
		DefaultImage: framework.TestImages.Default.Sandbox, SupervisorImage: framework.TestImages.Default.Supervisor,
		ClientTLSSecret: e.Name + "-client-tls", ServiceAccount: e.Name + "-sandbox",
		// As the platform admin of a 0.1.5 or later gateway is told to
		// (docs/gateway-lines.md): the operator's pod labels are allowed.
		AllowedPodLabels: sandboxspec.OperatorPodLabels,
		Version:          e.Version,
	}
	tenancy := openshellv1alpha1.GatewayTenancy{AllowedNamespaces: openshellv1alpha1.AllowedNamespaces{From: openshellv1alpha1.NamespacesFromAll}}
	if e.Tenancy != nil {
		tenancy = *e.Tenancy
	}
	obj := &openshellv1alpha1.OpenShellGateway{
		ObjectMeta: metav1.ObjectMeta{Name: e.Name, Namespace: e.Namespace},
		Spec: openshellv1alpha1.OpenShellGatewaySpec{Mode: openshellv1alpha1.GatewayModeExternal,
			External: &openshellv1alpha1.ExternalGatewaySpec{
				CASecretRef: openshellv1alpha1.SecretKeyReference{Name: e.Name + "-gateway-ca", Key: "ca.crt"}},
			ImagePolicy: e.ImagePolicy, Tenancy: tenancy,
			// The tests' sandboxes name a policy only where the policy is
			// the point; an Edit turns the requirement back on.
			SandboxControls: openshellv1alpha1.SandboxControls{RequirePolicy: ptr.To(false)}},
	}
	if e.Edit != nil {
		e.Edit(&gwOpts, obj)
	}
	gw, err := testgateway.Start(ctx, gwOpts)
	if err != nil {
		return nil, nil, fmt.Errorf("start test gateway: %w", err)
	}
	// An Edit may name the gateway by another host (one only a proxy
	// resolves): the gateway's port is kept.
	if preset := obj.Spec.External.Endpoint; preset != "" {
		u, err := url.Parse(preset)
		if err != nil {
			gw.Stop()
			return nil, nil, fmt.Errorf("preset endpoint %q: %w", preset, err)
		}
		served, _ := url.Parse(gw.Endpoint())
		obj.Spec.External.Endpoint = "https://" + net.JoinHostPort(u.Hostname(), served.Port())
	} else {
		obj.Spec.External.Endpoint = gw.Endpoint()
	}
	caSecret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: obj.Spec.External.CASecretRef.Name, Namespace: e.Namespace},
		Data: map[string][]byte{"ca.crt": e.CA.CertPEM}}
	if err := c.Create(ctx, caSecret); err != nil {
		gw.Stop()
		return nil, nil, fmt.Errorf("create gateway CA secret: %w", err)
	}
	if err := c.Create(ctx, obj); err != nil {
		gw.Stop()
		return nil, nil, fmt.Errorf("create gateway: %w", err)
	}
	return gw, obj, nil
}

// loopbackLeaf is a serving certificate from ca for localhost and
// 127.0.0.1, where every test server listens.
func loopbackLeaf(ca *pki.KeyPair, cn string) (tls.Certificate, error) {
	kp, err := ca.Issue(pki.LeafRequest{CommonName: cn, DNSNames: []string{"localhost"}, IPs: []net.IP{net.ParseIP("127.0.0.1")},
		Server: true, Validity: 12 * time.Hour}, time.Now())
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.X509KeyPair(kp.CertPEM, kp.KeyPEM)
}

// releaseFinalizers removes every finalizer of a gateway that is still there.
func releaseFinalizers(c client.Client, key client.ObjectKey) error {
	gw := &openshellv1alpha1.OpenShellGateway{}
	if err := c.Get(context.Background(), key, gw); err != nil {
		return client.IgnoreNotFound(err)
	}
	if len(gw.Finalizers) == 0 {
		return nil
	}
	patch := client.MergeFrom(gw.DeepCopy())
	gw.Finalizers = nil
	return client.IgnoreNotFound(c.Patch(context.Background(), gw, patch))
}

// Stop stops the manager and the test gateway.
func (s *Stack) Stop() error {
	var errs []error
	for _, stop := range s.replicas {
		errs = append(errs, stop())
	}
	errs = append(errs, s.stopManager())
	// Test hygiene on a shared cluster: the stopped operator would leave its
	// finalizer on the gateways (and their namespaces terminating for ever,
	// where the next test's operator would find them).
	for _, gw := range s.gateways {
		errs = append(errs, releaseFinalizers(s.kube, gw))
	}
	if s.issuerLB != nil {
		s.issuerLB.Stop()
	}
	if s.Gateway != nil {
		s.Gateway.Stop()
		s.Gateway = nil
	}
	for _, gw := range s.extra {
		gw.Stop()
	}
	s.extra = nil
	return errors.Join(errs...)
}
