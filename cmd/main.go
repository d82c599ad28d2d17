// Command manager runs the OpenShell operator.
package main

import (
	"context"
	// The operator image is scratch: crypto/x509 falls back to these roots
	// for the operator's own outbound TLS (External gateways' token URLs).
	_ "golang.org/x/crypto/x509roots/fallback"

	"flag"
	"os"
	"path/filepath"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/openshell/openshell-operator/controllers/pairedns"
	"github.com/openshell/openshell-operator/controllers/sandbox"
	"github.com/openshell/openshell-operator/internal/operatorenv"
	"github.com/openshell/openshell-operator/internal/relayload"
	"github.com/openshell/openshell-operator/internal/tenancy"
	"github.com/openshell/openshell-operator/internal/tracing"
	"github.com/openshell/openshell-operator/internal/trust"
	"github.com/openshell/openshell-operator/operator"
)

// The metrics endpoint authenticates and authorizes its callers.
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create
// Leader election uses a Lease in the operator's namespace (see config/rbac/leader_election_role.yaml).

func main() {
	if filepath.Base(os.Args[0]) == gatherName {
		os.Exit(gather(os.Args[1:]))
	}
	if len(os.Args) > 1 && os.Args[1] == relayCommand {
		os.Exit(relay(os.Args[2:]))
	}
	var opts operator.Options
	flag.StringVar(&opts.MetricsAddr, "metrics-bind-address", ":8443", `Address of the metrics endpoint; "0" disables it.`)
	flag.BoolVar(&opts.SecureMetrics, "metrics-secure", true, "Serve metrics over HTTPS with authentication and authorization.")
	flag.StringVar(&opts.ProbeAddr, "health-probe-bind-address", ":8081", "Address of the health and readiness probes.")
	flag.StringVar(&opts.PprofAddr, "pprof-bind-address", "0", `Address serving Go profiles (net/http/pprof, no authentication: use 127.0.0.1:<port>); "0" disables it.`)
	flag.BoolVar(&opts.LeaderElection, "leader-elect", false, "Elect a leader with a Lease so only one replica is active.")
	flag.StringVar(&opts.LeaderElectionNamespace, "leader-election-namespace", "", "Namespace of the leader election Lease (default: the operator's namespace).")
	flag.IntVar(&opts.WebhookPort, "webhook-port", 9443, "Port of the admission webhook server.")
	flag.StringVar(&opts.WebhookCertDir, "webhook-cert-dir", "/tmp/k8s-webhook-server/serving-certs", "Folder with the webhook serving certificate (tls.crt, tls.key).")
	flag.BoolVar(&opts.EnableHTTP2, "enable-http2", false, "Enable HTTP/2 for the metrics and webhook servers.")
	flag.DurationVar(&opts.Controllers.ForceReleaseAfter, "force-release-after", sandbox.DefaultForceReleaseAfter,
		"How long a gateway must have been unreachable for a deleted sandbox before its openshell.ai/force-release annotation is honoured.")
	flag.DurationVar(&opts.Controllers.SweepPeriod, "sweep-period", sandbox.DefaultSweepPeriod,
		"How often every gateway's sandboxes are listed (orphans the operator created are deleted) and what the operator wrote at each gateway is compared with what it holds: changes made there directly (attached providers, policies, provider records, profiles, workspace members) are put back.")
	flag.DurationVar(&opts.Controllers.PairedReleaseGrace, "paired-namespace-release-grace", pairedns.DefaultReleaseGrace,
		"How long a released paired namespace (workspace mode Operator) stays off its gateway's allowlist before it is deleted: at least the kubelet's ConfigMap update delay.")
	flag.BoolVar(&opts.Controllers.EnableWebhooks, "enable-webhooks", true, "Serve the admission webhooks (needs the serving certificate in --webhook-cert-dir).")
	var issuerURL, issuerAddr string
	flag.StringVar(&issuerURL, "oidc-issuer-url", "", `The operator's OIDC issuer URL, which managed gateways trust (default: https://openshell-operator-oidc.<OPERATOR_NAMESPACE>.svc:8444; "none" disables the issuer).`)
	flag.StringVar(&issuerAddr, "oidc-bind-address", ":8444", "Address serving OIDC discovery and JWKS over TLS.")
	var syncPeriod time.Duration
	flag.DurationVar(&syncPeriod, "sync-period", 10*time.Hour, "How often every watched object is reconciled again even when nothing changed (drift detection against the gateway).")
	// Chosen from make bench (docs/performance.md): a policy edit costs one
	// status write per sandbox using it; at 10,000 sandboxes that took
	// 3m18s at 50 QPS, 1m20s at 200 and no less at 400 (the API server was
	// the limit), while another client's writes stayed in the same range.
	// On the server, API Priority and Fairness keeps the operator's service
	// account from crowding other users.
	var relayScaleDownDelay time.Duration
	flag.DurationVar(&relayScaleDownDelay, "relay-scale-down-delay", relayload.DefaultScaling.ScaleDownDelay,
		"How long the relay's sessions must have needed fewer replicas before it is scaled down (scaling up is at once); "+
			"the bounds are "+relayload.EnvMinReplicas+", "+relayload.EnvMaxReplicas+" (0: not scaled) and "+relayload.EnvSessionsPerReplica+".")
	var qps float64
	var burst int
	flag.Float64Var(&qps, "kube-api-qps", 200, "Sustained requests per second to the Kubernetes API server.")
	flag.IntVar(&burst, "kube-api-burst", 400, "Burst of requests to the Kubernetes API server.")
	zapOpts := zap.Options{Development: false}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()

	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	log := ctrl.Log.WithName("setup")

	ns, err := operatorenv.WatchNamespaces(os.Getenv(operatorenv.EnvWatchNamespace))
	if err != nil {
		log.Error(err, "Invalid watch namespaces")
		os.Exit(1)
	}
	opts.WatchNamespaces = ns
	opts.Controllers.Images = operatorenv.RelatedImagesFromEnv(os.Getenv)
	opts.Controllers.Proxy = operatorenv.ProxyFromEnv(os.Getenv)
	if missing := opts.Controllers.Images.Missing(); len(missing) > 0 {
		log.Info("Operand images are not set; managed gateways will report RelatedImagesMissing", "unset", missing)
	}
	platform, err := tenancy.PlatformFromEnv(os.Getenv)
	if err != nil {
		log.Error(err, "Invalid tenancy setting")
		os.Exit(1)
	}
	opts.Controllers.Platform = platform
	opts.Controllers.OperatorCondition = os.Getenv(operatorenv.EnvOperatorConditionName)
	scaling, err := relayload.ScalingFromEnv(os.Getenv)
	if err != nil {
		log.Error(err, "Invalid relay scaling")
		os.Exit(1)
	}
	scaling.ScaleDownDelay = relayScaleDownDelay
	opts.Controllers.RelayScaling = scaling
	log.Info("Scaling the relay on its sessions", "minReplicas", scaling.Min, "maxReplicas", scaling.Max,
		"sessionsPerReplica", scaling.SessionsPerReplica, "enabled", scaling.Enabled())
	roots, rootsFrom := trust.SystemPEM()
	log.Info("Managed gateways trust these public roots", "from", rootsFrom)
	opts.Controllers.TrustRoots = roots
	log.Info("Serving OpenShellGateways", "namespaces", platform.GatewayNamespaces, "operandImageOverrides", platform.AllowImageOverrides)
	if opts.LeaderElectionNamespace == "" {
		opts.LeaderElectionNamespace = os.Getenv(operatorenv.EnvOperatorNamespace)
	}

	opNS := os.Getenv(operatorenv.EnvOperatorNamespace)
	if issuerURL == "" && opNS != "" {
		issuerURL = "https://openshell-operator-oidc." + opNS + ".svc:8444"
	}
	if issuerURL != "" && issuerURL != "none" {
		if opNS == "" {
			log.Error(nil, "The OIDC issuer needs OPERATOR_NAMESPACE for its key and certificate Secrets")
			os.Exit(1)
		}
		opts.OIDC = &operator.OIDCOptions{IssuerURL: issuerURL, BindAddress: issuerAddr, Namespace: opNS,
			KeySecret: operator.OIDCKeySecret, TLSSecret: operator.OIDCTLSSecret}
	}

	if syncPeriod <= 0 {
		log.Error(nil, "--sync-period must be positive", "value", syncPeriod)
		os.Exit(1)
	}
	opts.SyncPeriod = &syncPeriod
	ctx := ctrl.SetupSignalHandler()
	// Before the controllers are built: each decides then whether its
	// reconciles get spans (controllers/internal/traced).
	stopTracing, err := tracing.Start(ctx, "openshell-operator")
	if err != nil {
		// Traces are not worth not reconciling for.
		log.Error(err, "Unable to export traces; running without")
		stopTracing = func(context.Context) error { return nil }
	}
	if tracing.Enabled() {
		log.Info("Exporting traces of reconciles over OTLP (OTEL_EXPORTER_OTLP_ENDPOINT)")
	}
	defer func() { _ = stopTracing(flushContext()) }()
	cfg := ctrl.GetConfigOrDie()
	cfg.QPS, cfg.Burst = float32(qps), burst
	mgr, err := operator.New(cfg, opts)
	if err != nil {
		log.Error(err, "Unable to set up the manager")
		os.Exit(1)
	}
	if len(ns) == 0 {
		log.Info("Watching all namespaces")
	} else {
		log.Info("Watching namespaces", "namespaces", ns)
	}
	if err := mgr.Start(ctx); err != nil {
		log.Error(err, "Manager exited with an error")
		_ = stopTracing(flushContext())
		os.Exit(1)
	}
}

// flushContext bounds the last flush of traces at exit, well inside the
// pod's termination grace.
func flushContext() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_ = cancel // released when the process exits
	return ctx
}
