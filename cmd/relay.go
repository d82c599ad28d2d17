package main

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/openshell/openshell-operator/internal/operatorenv"
	"github.com/openshell/openshell-operator/internal/relayload"
	"github.com/openshell/openshell-operator/internal/tracing"
	"github.com/openshell/openshell-operator/operator"
)

// relayCommand is the first argument that runs the relay instead of the
// operator: the same image, a Deployment of its own (operator.RelayOptions
// says why).
const relayCommand = "relay"

// relay runs the relay until SIGTERM and returns the exit code.
func relay(args []string) int {
	fs := flag.NewFlagSet(relayCommand, flag.ContinueOnError)
	var o operator.RelayOptions
	fs.StringVar(&o.BindAddress, "bind-address", ":8443", "Address serving the access.openshell.ai API.")
	certDir := fs.String("cert-dir", operator.RelayCertDir, "Folder with the serving certificate the APIService trusts ("+operator.RelayCertFile+" and "+operator.RelayKeyFile+": OLM mounts them here).")
	fs.StringVar(&o.IssuerURL, "oidc-issuer-url", "", `The operator's OIDC issuer URL, whose keys sign gateway tokens (default: https://openshell-operator-oidc.<OPERATOR_NAMESPACE>.svc:8444).`)
	fs.StringVar(&o.ExternalBindAddress, "external-bind-address", "0", `Address serving the external port listener, which the gateways' external ports Routes reach; "0" serves none.`)
	externalCertDir := fs.String("external-cert-dir", operator.RelayExternalCertDir, "Folder with the external port listener's serving certificate (tls.crt and tls.key: the service-ca's Secret for its Service).")
	fs.StringVar(&o.MetricsAddr, "metrics-bind-address", ":8444", `Address serving the relay's metrics (HTTPS, callers allowed to get /metrics); "0" serves none.`)
	fs.IntVar(&o.MaxSessions, "max-sessions", 0, "Sessions one replica holds at most (0: 400, for the Deployment's 512 MiB memory limit); more are refused with a retry, which may reach another replica.")
	fs.IntVar(&o.MaxSessionsPerUser, "max-sessions-per-user", 0, "Sessions one user holds at most across the replicas (0: 16); more are refused with 429.")
	fs.IntVar(&o.MaxSessionsPerNamespace, "max-sessions-per-namespace", 0, "Sessions one namespace holds at most across the replicas (0: 64); more are refused with 429.")
	fs.IntVar(&o.MaxSessionsPerRequester, "max-sessions-per-requester", 0, "Sessions all the projects one person requested (openshift.io/requester) hold at most across the replicas, on gateways that admit every namespace (0: 128); more are refused with 429.")
	fs.DurationVar(&o.AuthorizationMaxAge, "authorization-max-age", time.Minute, "How long an open session's or a workspace membership's authorization holds while no Role, RoleBinding, ClusterRole or ClusterRoleBinding changes: the longest a revocation by another authorizer (a webhook) can take to end them.")
	fs.DurationVar(&o.DrainGrace, "drain-grace", 90*time.Second, "How long a stopping relay lets its open sessions run on, refusing new ones, before it tells those left to reconnect (0: at once). terminationGracePeriodSeconds must exceed it plus --drain-timeout.")
	fs.DurationVar(&o.DrainTimeout, "drain-timeout", 10*time.Second, "How long a stopping relay waits for its sessions to close after telling their clients to reconnect.")
	zapOpts := zap.Options{Development: false}
	zapOpts.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	log := ctrl.Log.WithName("relay")
	if err := operator.ValidateAuthorizationMaxAge(o.AuthorizationMaxAge); err != nil {
		log.Error(err, "Invalid --authorization-max-age")
		return 2
	}
	o.Log = log
	o.CertFile, o.KeyFile = filepath.Join(*certDir, operator.RelayCertFile), filepath.Join(*certDir, operator.RelayKeyFile)
	o.ExternalCertFile, o.ExternalKeyFile = filepath.Join(*externalCertDir, "tls.crt"), filepath.Join(*externalCertDir, "tls.key")
	o.IssuerNamespace, o.IssuerKeySecret = os.Getenv(operatorenv.EnvOperatorNamespace), operator.OIDCKeySecret
	o.Replica = relayload.Replica{Pod: os.Getenv(relayload.EnvPodName), UID: types.UID(os.Getenv(relayload.EnvPodUID))}
	if o.IssuerNamespace == "" {
		log.Error(nil, "The relay needs OPERATOR_NAMESPACE for the issuer's key Secret")
		return 1
	}
	if o.IssuerURL == "" {
		o.IssuerURL = "https://openshell-operator-oidc." + o.IssuerNamespace + ".svc:8444"
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		log.Error(err, "No Kubernetes configuration")
		return 1
	}
	ctx := ctrl.SetupSignalHandler()
	stopTracing, err := tracing.Start(ctx, "openshell-relay")
	if err != nil {
		log.Error(err, "Unable to export traces; running without")
		stopTracing = func(context.Context) error { return nil }
	}
	defer func() { _ = stopTracing(flushContext()) }()
	if err := operator.RunRelay(ctx, cfg, o); err != nil {
		log.Error(err, "Relay exited with an error")
		return 1
	}
	return 0
}
