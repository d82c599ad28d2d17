// Package operator is the operator's composition root: it builds the
// controller-runtime manager from its options — clients, caches, the shared
// stores, the indexes, the controllers in a fixed order, the admission
// webhooks and the OIDC issuer — so that cmd/ and the tests (install modes,
// e2e, benchmarks) run the very same wiring. controllers/ holds reconcilers
// only; nothing below this package imports it.
package operator

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"time"

	configv1client "github.com/openshift/client-go/config/clientset/versioned/typed/config/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/openshell/openshell-operator/internal/oidc"
	"github.com/openshell/openshell-operator/internal/scheme"
	"github.com/openshell/openshell-operator/internal/tlsprofile"
)

// LeaderElectionID is the Lease name that elects the active operator replica.
const LeaderElectionID = "openshell-operator.openshell.ai"

// Options configure the manager.
type Options struct {
	// WatchNamespaces limits the namespaced caches; nil means all namespaces.
	WatchNamespaces []string
	// MetricsAddr serves /metrics; "0" disables it.
	MetricsAddr string
	// SecureMetrics serves metrics over HTTPS with authentication and
	// authorization (TokenReview + SubjectAccessReview).
	SecureMetrics bool
	// ProbeAddr serves /healthz and /readyz; "0" disables it.
	ProbeAddr string
	// PprofAddr serves net/http/pprof for profiling; empty or "0" (the
	// default) disables it. Unauthenticated: bind it to loopback.
	PprofAddr string
	// LeaderElection enables the Lease lock.
	LeaderElection bool
	// LeaderElectionNamespace holds the Lease; required out of cluster.
	LeaderElectionNamespace string
	// WebhookHost, WebhookPort and WebhookCertDir configure the admission
	// webhook server (an empty host listens on all addresses).
	WebhookHost    string
	WebhookPort    int
	WebhookCertDir string
	// EnableHTTP2 is off by default: HTTP/2 Rapid Reset and Stream
	// Cancellation (CVE-2023-44487, CVE-2023-39325) make it a risk for
	// servers that do not need it.
	EnableHTTP2 bool
	// SkipControllerNameValidation lets tests run several managers in one
	// process (controller names are global metric labels).
	SkipControllerNameValidation bool
	// WebhookMiddleware, when set, wraps every admission handler; the scale
	// benchmark uses it to time the webhooks as the API server calls them.
	WebhookMiddleware func(path string, h http.Handler) http.Handler
	// SyncPeriod is how often the caches replay every object to the
	// reconcilers; nil keeps controller-runtime's default (10 hours with
	// jitter). The scale benchmark shortens it to show a full resync
	// makes no writes.
	SyncPeriod *time.Duration
	// TLSProfileRecheck is how often a cluster without OpenShift's
	// APIServer config API is checked for it (default ten minutes).
	TLSProfileRecheck time.Duration
	// Controllers tune the reconcilers.
	Controllers ControllerOptions
	// OIDC, when set, makes the operator the OIDC issuer of its gateways.
	OIDC *OIDCOptions
}

// Secrets the OIDC issuer keeps in the operator's namespace: its signing
// keys, and its self-issued serving certificate with the CA gateways trust.
const (
	OIDCKeySecret = "openshell-operator-oidc-keys"
	OIDCTLSSecret = "openshell-operator-oidc-tls"
)

// OIDCOptions configure the operator's OIDC issuer.
type OIDCOptions struct {
	// IssuerURL is the https:// URL gateways fetch discovery from.
	IssuerURL string
	// BindAddress serves discovery and JWKS, e.g. ":8444".
	BindAddress string
	// TLS is the serving configuration with its certificate, and CAPEM the
	// CA gateways must trust. Without TLS the operator issues its own
	// serving certificate (Secret TLSSecret) for the issuer URL's host.
	TLS       *tls.Config
	CAPEM     []byte
	TLSSecret string
	// Namespace and KeySecret hold the signing keys.
	Namespace, KeySecret string
	// KeyRefresh is how often every replica reloads the signing keys and
	// the leader checks whether they are due for rotation (default one
	// minute; the next key is published a whole rotation ahead, so a
	// follower may lag by this much).
	KeyRefresh time.Duration
	// CertCheck is how often the self-issued serving certificate is
	// checked for renewal (default ten minutes).
	CertCheck time.Duration
	// CertClock decides serving-certificate renewal; tests move it ahead
	// to renew a certificate without waiting most of a year.
	CertClock func() time.Time
}

// metricsServing serves the controller-runtime registry on addr with
// tlsOpts; secure serves HTTPS and admits only callers a TokenReview and a
// SubjectAccessReview (get /metrics) allow. The operator's metrics and the
// relay's are served alike.
func metricsServing(addr string, secure bool, tlsOpts []func(*tls.Config)) metricsserver.Options {
	o := metricsserver.Options{BindAddress: addr, SecureServing: secure, TLSOpts: tlsOpts}
	if secure {
		o.FilterProvider = filters.WithAuthenticationAndAuthorization
	}
	return o
}

// http1Only makes a server speak HTTP/1.1 only: the relay's streams
// upgrade their connection, which HTTP/2 cannot, and the other servers
// keep HTTP/2 off unless --enable-http2 turns it on.
func http1Only(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }

// New builds a manager with every controller registered.
func New(cfg *rest.Config, opts Options) (ctrl.Manager, error) {
	// Every server follows the cluster's TLS security profile (OpenShift's
	// APIServer config; Intermediate elsewhere), per handshake.
	profile := tlsprofile.NewWatcher()
	profile.Log = ctrl.Log.WithName("tls-profile")
	tlsOpts := []func(*tls.Config){profile.ServerOption}
	if !opts.EnableHTTP2 {
		tlsOpts = append(tlsOpts, http1Only)
	}
	metricsOpts := metricsServing(opts.MetricsAddr, opts.SecureMetrics, tlsOpts)
	sc := newScope(opts.WatchNamespaces, opts.Controllers.Platform.OperatorNamespace, opts.Controllers.Platform.GatewayNamespaces)
	opts.Controllers.Platform.GatewayNamespaces = sc.platform
	cacheOpts, err := cacheOptions(cfg, sc)
	if err != nil {
		return nil, err
	}
	cacheOpts.SyncPeriod = opts.SyncPeriod
	// Below the pod's 30 s termination grace period, so the leader releases
	// its Lease before the kubelet kills it.
	gracefulShutdown := 25 * time.Second
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        scheme.New(),
		Cache:                         cacheOpts,
		Controller:                    ctrlconfig.Controller{SkipNameValidation: &opts.SkipControllerNameValidation},
		Metrics:                       metricsOpts,
		HealthProbeBindAddress:        opts.ProbeAddr,
		PprofBindAddress:              opts.PprofAddr,
		LeaderElection:                opts.LeaderElection,
		LeaderElectionID:              LeaderElectionID,
		LeaderElectionNamespace:       opts.LeaderElectionNamespace,
		LeaderElectionReleaseOnCancel: true,
		GracefulShutdownTimeout:       &gracefulShutdown,
		WebhookServer:                 webhookServer(opts, tlsOpts),
	})
	if err != nil {
		return nil, fmt.Errorf("create manager: %w", err)
	}
	if o := opts.OIDC; o != nil {
		// The key Secret lives in the operator's namespace, which the cache
		// may not watch: read and write it directly.
		direct, err := client.New(cfg, client.Options{Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper()})
		if err != nil {
			return nil, fmt.Errorf("create OIDC key client: %w", err)
		}
		issuer := &oidc.Issuer{URL: o.IssuerURL, Client: direct, SecretNamespace: o.Namespace, SecretName: o.KeySecret}
		opts.Controllers.Issuer = issuer
		issuer.SetCA(o.CAPEM)
		if err := mgr.Add(&issuerServer{issuer: issuer, addr: o.BindAddress, tls: o.TLS, tlsOpt: profile.ServerOption, tlsSecret: o.TLSSecret, client: direct,
			now: o.CertClock, keyRefresh: o.KeyRefresh, certCheck: o.CertCheck}); err != nil {
			return nil, err
		}
		if err := mgr.Add(&keyRotator{issuer: issuer, interval: o.KeyRefresh}); err != nil {
			return nil, err
		}
	}
	if err := mgr.Add(&profileFollower{watcher: profile, cfg: cfg, recheck: orDefault(opts.TLSProfileRecheck, 10*time.Minute)}); err != nil {
		return nil, err
	}
	if err := setupControllers(mgr, opts.Controllers, sc.watch); err != nil {
		return nil, err
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return nil, fmt.Errorf("add health check: %w", err)
	}
	ready := healthz.Ping
	if opts.Controllers.EnableWebhooks {
		// Not ready until the webhook server serves: the API server would
		// otherwise fail admission calls routed to this pod.
		ready = mgr.GetWebhookServer().StartedChecker()
	}
	if err := mgr.AddReadyzCheck("readyz", ready); err != nil {
		return nil, fmt.Errorf("add ready check: %w", err)
	}
	return mgr, nil
}

func webhookServer(opts Options, tlsOpts []func(*tls.Config)) webhook.Server {
	s := webhook.NewServer(webhook.Options{
		Host:    opts.WebhookHost,
		Port:    opts.WebhookPort,
		CertDir: opts.WebhookCertDir,
		TLSOpts: tlsOpts,
	})
	if opts.WebhookMiddleware == nil {
		return s
	}
	return wrappedWebhookServer{Server: s, wrap: opts.WebhookMiddleware}
}

// wrappedWebhookServer applies a middleware to every registered handler.
type wrappedWebhookServer struct {
	webhook.Server
	wrap func(string, http.Handler) http.Handler
}

func (s wrappedWebhookServer) Register(path string, h http.Handler) {
	s.Server.Register(path, s.wrap(path, h))
}

// +kubebuilder:rbac:groups=config.openshift.io,resources=apiservers,resourceNames=cluster,verbs=list;watch

// profileFollower runs the TLS profile watcher on every replica: followers
// serve webhooks and metrics too. It reads only the APIServer named
// cluster (a list and watch by field selector, which RBAC's resourceNames
// authorizes).
type profileFollower struct {
	watcher *tlsprofile.Watcher
	cfg     *rest.Config
	recheck time.Duration
}

func (p *profileFollower) NeedLeaderElection() bool { return false }

func (p *profileFollower) Start(ctx context.Context) error {
	cs, err := configv1client.NewForConfig(p.cfg)
	if err != nil {
		return fmt.Errorf("create the OpenShift config client: %w", err)
	}
	disc, err := discovery.NewDiscoveryClientForConfig(p.cfg)
	if err != nil {
		return fmt.Errorf("create a discovery client: %w", err)
	}
	return p.watcher.Run(ctx, disc, cs, p.recheck)
}
