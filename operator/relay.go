package operator

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/go-logr/logr"
	userclient "github.com/openshift/client-go/user/clientset/versioned"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/openshell/openshell-operator/internal/gatewayapi"
	"github.com/openshell/openshell-operator/internal/groupmember"
	"github.com/openshell/openshell-operator/internal/gwconn"
	"github.com/openshell/openshell-operator/internal/oidc"
	"github.com/openshell/openshell-operator/internal/rbacchange"
	"github.com/openshell/openshell-operator/internal/relay"
	"github.com/openshell/openshell-operator/internal/relayload"
	"github.com/openshell/openshell-operator/internal/saexist"
	"github.com/openshell/openshell-operator/internal/scheme"
	"github.com/openshell/openshell-operator/internal/tlsprofile"
)

// RelayCertDir is where the relay reads its serving certificate by default,
// as RelayCertFile and RelayKeyFile: where OLM mounts an APIService's
// certificate, and where the plain installs (config/base) mount theirs.
const (
	RelayCertDir  = "/apiserver.local.config/certificates"
	RelayCertFile = "apiserver.crt"
	RelayKeyFile  = "apiserver.key"
)

// The external port listener's TokenReviews a replica sends at most (a
// second, and in a burst); answers are cached 10 s, so a caller that
// keeps its token costs one a 10 s.
const (
	externalTokenReviewQPS   = 20
	externalTokenReviewBurst = 50
)

// RelayExternalCertDir is where the relay's Deployment mounts the external
// port listener's certificate (config/relay/deployment.yaml).
const RelayExternalCertDir = "/var/run/secrets/openshell/external-ports"

// RelayOptions configure the relay, the data plane through which Sandbox
// Consumers use their sandboxes (manager relay). It runs as a Deployment
// of its own, not in the operator's: an operator upgrade must not cut
// open shells, and it scales on sessions, not on reconciled objects.
type RelayOptions struct {
	// BindAddress serves the aggregated API (":8443").
	BindAddress string
	// CertFile and KeyFile are the serving certificate the APIService's
	// caBundle trusts (OLM mounts them); they are reloaded when they
	// change.
	CertFile, KeyFile string
	// Issuer is the operator's OIDC issuer whose keys sign the gateway
	// tokens the relay mints (its URL, and the Secret with its keys).
	IssuerURL, IssuerNamespace, IssuerKeySecret string
	// Namespace is the relay's own, where the replicas share the workspace
	// memberships they granted as Leases (default IssuerNamespace).
	Namespace string
	// KeyRefresh is how often the signing keys are reloaded (default one
	// minute, as the operator's replicas do).
	KeyRefresh time.Duration
	// MembershipRecheck is how often the granted workspace memberships
	// are looked at (default 2 s); each is authorized again then if RBAC
	// changed since its last answer, or that answer is AuthorizationMaxAge
	// old.
	MembershipRecheck time.Duration
	// AuthorizationMaxAge bounds how long an open session's or a
	// membership's answer holds while no Role, RoleBinding, ClusterRole or
	// ClusterRoleBinding changes (default one minute): the time a
	// revocation by another authorizer (a webhook) can take.
	AuthorizationMaxAge time.Duration
	// DrainGrace is how long a stopping relay (an operator upgrade, a
	// scale-down, a drained node) lets its open sessions run on, refusing
	// new ones, before it tells those left to reconnect (default 90 s; the
	// Deployment's terminationGracePeriodSeconds must exceed it plus
	// DrainTimeout).
	DrainGrace time.Duration
	// DrainTimeout bounds the wait for open sessions to close once they
	// have been told the relay is stopping (default 10 s).
	DrainTimeout time.Duration
	// ExternalBindAddress serves the external port listener, which the
	// gateways' external ports Routes reach ("" or "0": none), with the
	// certificate in ExternalCertFile and ExternalKeyFile (OpenShift's
	// service-ca issues it for the listener's Service; read at each
	// handshake once present, so one issued after the start is used).
	ExternalBindAddress, ExternalCertFile, ExternalKeyFile string
	// MetricsAddr serves the relay's metrics (its sessions) over HTTPS to
	// callers allowed to get /metrics; "" or "0" serves none.
	MetricsAddr string
	// MaxSessions bounds the sessions one replica holds (0: 400);
	// MaxSessionsPerUser and MaxSessionsPerNamespace those of one user and
	// of one namespace across the replicas (0: 16 and 64), and
	// MaxSessionsPerRequester those of the projects one person requested,
	// on gateways that admit every namespace (0: 128).
	MaxSessions, MaxSessionsPerUser, MaxSessionsPerNamespace, MaxSessionsPerRequester int
	// Replica is the pod the relay runs in (POD_NAME, POD_UID): it
	// publishes its sessions in a Lease that pod owns, for the other
	// replicas' limits and the operator's scaling. Without it the replica
	// counts its limits alone and its sessions do not scale the relay.
	Replica relayload.Replica
	// LoadInterval spaces the writes of the replica's load (default 1 s).
	LoadInterval time.Duration
	// DialGateway is ControllerOptions.DialGateway, for the relay's
	// gateway connections; nil in production.
	DialGateway func(ctx context.Context, addr string) (net.Conn, error)
	Log         logr.Logger
}

// Relay is a relay built from its options: the server, and what runs
// beside it until its context ends (key reloads, membership rechecks,
// events).
type Relay struct {
	Server *relay.Server
	run    []func(context.Context)
	log    logr.Logger
}

// Drain is how a stopping relay treats its open sessions: they run on for
// Grace, then those left are told to reconnect and given Timeout to close.
type Drain struct {
	Grace, Timeout time.Duration
}

// NewRelay builds the relay: the front-proxy authenticator from the
// cluster's extension-apiserver-authentication, SubjectAccessReviews, the
// gateways' connections, the token exchange and the audit. What a request
// reads, it reads uncached: the relay's RBAC is what it may read, and a
// consumer's request must see the sandbox as it is now. Only the other
// replicas' load Leases, the membership Leases the rechecks look at, and
// RBAC objects' metadata (for when to authorize open sessions again) are
// followed by informers.
func NewRelay(ctx context.Context, cfg *rest.Config, o RelayOptions) (*Relay, error) {
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme.New()})
	if err != nil {
		return nil, fmt.Errorf("create the relay's client: %w", err)
	}
	authn, err := relay.FrontProxy(ctx, kube)
	if err != nil {
		return nil, err
	}
	issuer := &oidc.Issuer{URL: o.IssuerURL, Client: c, SecretNamespace: o.IssuerNamespace, SecretName: o.IssuerKeySecret}
	if err := issuer.Load(ctx); err != nil && !errors.Is(err, oidc.ErrNoKeys) {
		return nil, fmt.Errorf("load the issuer's keys: %w", err)
	}
	pool := gatewayapi.NewPool()
	pool.Dial = o.DialGateway
	resolver := &gwconn.Resolver{Client: c, APIReader: c, Pool: pool, Issuer: issuer}
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: kube.EventsV1()})
	recorder := broadcaster.NewRecorder(c.Scheme(), "openshell-relay")
	authz := relay.SARAuthorizer{Client: c}
	metaClient, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("create the relay's metadata client: %w", err)
	}
	leaseNS := o.Namespace
	if leaseNS == "" {
		leaseNS = o.IssuerNamespace
	}
	// The controller-runtime registry: the relay's metrics server serves
	// it, with client-go's request metrics beside the relay's own.
	metrics, err := relay.NewMetrics(ctrlmetrics.Registry)
	if err != nil {
		return nil, fmt.Errorf("register the relay's metrics: %w", err)
	}
	// Answers are asked again when RBAC changes, not on a short timer
	// (internal/rbacchange says why). Until its informers have synced,
	// none holds: every check asks, as without it.
	rbac := &rbacchange.Changes{MaxAge: o.AuthorizationMaxAge, OnChange: metrics.RBACChanged}
	// A deleted ServiceAccount's sessions end and its memberships go,
	// though RBAC still names it (internal/saexist).
	accounts := &saexist.Accounts{}
	// On OpenShift, a user who leaves a Group their identity named loses
	// their sessions and memberships (internal/groupmember).
	groups := &groupmember.Groups{}
	leaseCache, err := relay.MembershipLeaseCache(cfg, c.Scheme(), leaseNS)
	if err != nil {
		return nil, fmt.Errorf("create the relay's membership cache: %w", err)
	}
	tokens := &relay.Tokens{Reader: c, Resolver: resolver, Issuer: issuer, Authz: authz, Recheck: o.MembershipRecheck,
		RBAC: rbac, Accounts: accounts, Groups: groups, Metrics: metrics, Leases: c, LeaseCache: leaseCache, LeaseNamespace: leaseNS}
	srv := &relay.Server{Authn: authn, Authz: authz, RBAC: rbac, Accounts: accounts, Groups: groups, Reader: c, Tokens: tokens, Metrics: metrics,
		MaxSessions: o.MaxSessions, MaxSessionsPerUser: o.MaxSessionsPerUser, MaxSessionsPerNamespace: o.MaxSessionsPerNamespace,
		MaxSessionsPerRequester: o.MaxSessionsPerRequester,
		Gateways:                relay.ResolverGateways{Reader: c, Resolver: resolver, Tokens: tokens}, Audit: relay.Auditor{Log: o.Log, Recorder: recorder}}
	// The external port listener's TokenReviews on a client of their
	// own, rate-limited: anyone who reaches its Route can send tokens, and
	// must not use up the relay's share of the kube-apiserver (its
	// SubjectAccessReviews).
	reviewCfg := rest.CopyConfig(cfg)
	reviewCfg.QPS, reviewCfg.Burst = externalTokenReviewQPS, externalTokenReviewBurst
	reviews, err := kubernetes.NewForConfig(reviewCfg)
	if err != nil {
		return nil, err
	}
	if srv.External, err = relay.NewExternalAuthenticator(reviews.AuthenticationV1()); err != nil {
		return nil, err
	}
	r := &Relay{Server: srv, log: o.Log}
	if o.Replica.Pod != "" && o.Replica.UID != "" {
		srv.Share = &relay.LoadShare{Client: c, Kube: kube, Namespace: leaseNS, Replica: o.Replica, Keys: issuer,
			MinInterval: o.LoadInterval, Log: o.Log.WithName("load")}
		r.run = append(r.run, func(ctx context.Context) { srv.Share.Run(ctx, srv) })
	} else {
		o.Log.Info("No " + relayload.EnvPodName + " and " + relayload.EnvPodUID + ": this replica counts its session limits alone and its sessions do not scale the relay")
	}
	r.run = append(r.run,
		func(ctx context.Context) {
			broadcaster.StartRecordingToSink(ctx.Done())
			<-ctx.Done()
			broadcaster.Shutdown()
		},
		func(ctx context.Context) {
			// Start blocks until ctx ends; a cache that cannot sync makes
			// each look fall back to a list (Tokens.leases).
			if err := leaseCache.Start(ctx); err != nil {
				o.Log.Error(err, "Following the membership Leases")
			}
		},
		func(ctx context.Context) { _ = tokens.Start(ctx) },
		func(ctx context.Context) {
			follow(ctx, func(ctx context.Context) error { return rbac.Watch(ctx, metaClient) }, metrics.RBACFollowed, o.Log,
				"RBAC changes (may the relay list and watch roles, rolebindings, clusterroles and clusterrolebindings?): every session and membership check asks the API server")
		},
		func(ctx context.Context) {
			follow(ctx, func(ctx context.Context) error { return accounts.Watch(ctx, metaClient) }, metrics.ServiceAccountsFollowed, o.Log,
				"ServiceAccounts (may the relay get, list and watch serviceaccounts?): a deleted one's sessions and memberships last while RBAC names it")
		},
		func(ctx context.Context) { reloadKeys(ctx, issuer, orDefault(o.KeyRefresh, time.Minute), o.Log) })
	if servesGroups(kube) {
		userClient, err := userclient.NewForConfig(cfg)
		if err != nil {
			return nil, fmt.Errorf("create the relay's user.openshift.io client: %w", err)
		}
		r.run = append(r.run, func(ctx context.Context) {
			follow(ctx, func(ctx context.Context) error { return groups.Watch(ctx, userClient) }, metrics.GroupsFollowed, o.Log,
				"OpenShift Groups (may the relay list and watch groups.user.openshift.io?): a user removed from a group keeps their sessions and memberships")
		})
	}
	return r, nil
}

// servesGroups reports that the cluster serves OpenShift's Groups
// (user.openshift.io/v1); elsewhere groups are not objects to follow.
func servesGroups(kube kubernetes.Interface) bool {
	res, err := kube.Discovery().ServerResourcesForGroupVersion("user.openshift.io/v1")
	if err != nil {
		return false
	}
	for _, r := range res.APIResources {
		if r.Name == "groups" {
			return true
		}
	}
	return false
}

// MaxAuthorizationMaxAge bounds --authorization-max-age: past it, a
// revocation by an authorizer other than RBAC could outlast what anyone
// would call a revocation.
const MaxAuthorizationMaxAge = 10 * time.Minute

// ValidateAuthorizationMaxAge refuses an AuthorizationMaxAge that is not
// positive (it would not turn the reuse of answers off: 0 means the
// default) or above MaxAuthorizationMaxAge.
func ValidateAuthorizationMaxAge(d time.Duration) error {
	if d <= 0 || d > MaxAuthorizationMaxAge {
		return fmt.Errorf("%s is not within (0, %s]", d, MaxAuthorizationMaxAge)
	}
	return nil
}

// follow runs watch (an informer's Watch: it returns once synced) until
// ctx ends, calls synced once it has, and says what goes without it when
// it has not within a minute, or failed: until then the relay is correct,
// and costs or sees what it did before.
func follow(ctx context.Context, watch func(context.Context) error, synced func(), log logr.Logger, without string) {
	done := make(chan error, 1)
	go func() { done <- watch(ctx) }()
	patience := time.NewTimer(time.Minute)
	defer patience.Stop()
	for {
		select {
		case err := <-done:
			switch {
			case err == nil:
				synced()
			case ctx.Err() == nil:
				log.Error(err, "Not following "+without)
			}
			return
		case <-patience.C:
			log.Info("Not following " + without + " yet")
		case <-ctx.Done():
			return
		}
	}
}

// reloadKeys follows the operator's key rotation: the leader operator
// rotates, every relay replica reloads. Until the first keys exist (a
// fresh install, where the relay may start before the operator has made
// them) it looks every keyPoll, so tokens work seconds after they do.
func reloadKeys(ctx context.Context, issuer *oidc.Issuer, every time.Duration, log logr.Logger) {
	const keyPoll = 2 * time.Second
	for {
		wait := every
		if !issuer.HasKeys() {
			wait = min(every, keyPoll)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		if err := issuer.Load(ctx); err != nil && !errors.Is(err, oidc.ErrNoKeys) {
			log.Error(err, "Reloading the OIDC signing keys")
		}
	}
}

// Serve serves the relay on lis until ctx ends, then drains: open
// sessions end with a notice to their clients (they reconnect to another
// replica), new ones are refused, and Serve returns once they have closed
// or drainTimeout has passed.
func (r *Relay) Serve(ctx context.Context, lis net.Listener, tlsConfig *tls.Config, d Drain) error {
	bg, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	defer stopBG()
	for _, run := range r.run {
		go run(bg)
	}
	tlsConfig = relayTLS(tlsConfig.Clone())
	hs := &http.Server{Handler: r.Server.Handler(), TLSConfig: tlsConfig, ReadHeaderTimeout: 10 * time.Second}
	if err := serveTLS(ctx, hs, lis); err != nil {
		return err
	}
	drain, cancel := context.WithTimeout(context.Background(), d.Grace+orDefault(d.Timeout, 10*time.Second))
	defer cancel()
	// The kube-apiserver keeps connections to this replica in its pool
	// after the pod has left the Service's endpoints: without keep-alives
	// each is closed after the request it carries, so the next request
	// (a log read, a token exchange) dials anew and reaches a replica that
	// stays, instead of being refused here.
	hs.SetKeepAlivesEnabled(false)
	finished, ended, drained := r.Server.Drain(drain, d.Grace)
	r.log.Info("Drained", "finished", finished, "toldToReconnect", ended, "grace", d.Grace)
	// Plain requests (discovery, a token exchange) finish; the streams'
	// hijacked connections are closed by the sessions' own ends.
	shut := hs.Shutdown(drain)
	if errors.Is(shut, http.ErrServerClosed) {
		shut = nil
	}
	return errors.Join(drained, shut)
}

// ServeExternal serves the external port listener on lis until ctx ends,
// then stops taking requests; its open sessions are the relay's, which
// Serve drains.
func (r *Relay) ServeExternal(ctx context.Context, lis net.Listener, tlsConfig *tls.Config, d Drain) error {
	tlsConfig = tlsConfig.Clone()
	http1Only(tlsConfig)
	hs := &http.Server{Handler: r.Server.ExternalHandler(), TLSConfig: tlsConfig, ReadHeaderTimeout: 10 * time.Second}
	if err := serveTLS(ctx, hs, lis); err != nil {
		return err
	}
	hs.SetKeepAlivesEnabled(false)
	drain, cancel := context.WithTimeout(context.Background(), d.Grace+orDefault(d.Timeout, 10*time.Second))
	defer cancel()
	if err := hs.Shutdown(drain); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// serveTLS serves hs on lis until ctx ends (nil; the caller then shuts hs
// down) or the server fails first (its error).
func serveTLS(ctx context.Context, hs *http.Server, lis net.Listener) error {
	served := make(chan error, 1)
	go func() { served <- hs.ServeTLS(lis, "", "") }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
		return nil
	}
}

// relayTLS asks for a client certificate, which the front-proxy
// authenticator verifies (against the cluster's CA, which rotates), and
// serves HTTP/1.1 only: exec and port-forward upgrade the connection,
// which HTTP/2 cannot.
func relayTLS(c *tls.Config) *tls.Config {
	c.ClientAuth = tls.RequestClientCert
	http1Only(c)
	return c
}

// RunRelay runs the relay as manager relay does: its serving certificate
// reloaded from files, TLS following the cluster's security profile.
func RunRelay(ctx context.Context, cfg *rest.Config, o RelayOptions) error {
	r, err := NewRelay(ctx, cfg, o)
	if err != nil {
		return err
	}
	certs, err := certwatcher.New(o.CertFile, o.KeyFile)
	if err != nil {
		return fmt.Errorf("load the relay's serving certificate: %w", err)
	}
	go func() { _ = certs.Start(ctx) }()
	profile := tlsprofile.NewWatcher()
	profile.Log = o.Log.WithName("tls-profile")
	follower := &profileFollower{watcher: profile, cfg: cfg, recheck: 10 * time.Minute}
	go func() { _ = follower.Start(ctx) }()
	// Set before the profile's per-handshake configuration copies it.
	tlsConfig := relayTLS(&tls.Config{GetCertificate: certs.GetCertificate, MinVersion: tls.VersionTLS12})
	profile.ServerOption(tlsConfig)
	if err := serveRelayMetrics(ctx, cfg, o.MetricsAddr, profile.ServerOption); err != nil {
		return err
	}
	lis, err := net.Listen("tcp", o.BindAddress)
	if err != nil {
		return fmt.Errorf("listen for the relay: %w", err)
	}
	if o.ExternalBindAddress != "" && o.ExternalBindAddress != "0" {
		ext, err := net.Listen("tcp", o.ExternalBindAddress)
		if err != nil {
			return fmt.Errorf("listen for the external port listener: %w", err)
		}
		keyPair := &fileKeyPair{certFile: o.ExternalCertFile, keyFile: o.ExternalKeyFile}
		extTLS := &tls.Config{GetCertificate: keyPair.get, MinVersion: tls.VersionTLS12}
		profile.ServerOption(extTLS)
		o.Log.Info("Serving the external port listener", "address", ext.Addr().String())
		go func() {
			if err := r.ServeExternal(ctx, ext, extTLS, Drain{Grace: o.DrainGrace, Timeout: o.DrainTimeout}); err != nil {
				o.Log.Error(err, "The external port listener stopped")
			}
		}()
	}
	o.Log.Info("Serving the access.openshell.ai API", "address", lis.Addr().String())
	return r.Serve(ctx, lis, tlsConfig, Drain{Grace: o.DrainGrace, Timeout: o.DrainTimeout})
}

// serveRelayMetrics serves the controller-runtime registry (the relay's
// sessions) on addr as the operator serves its own: HTTPS with the
// certificate the service-ca issues for the relay's metrics Service where
// there is one (OpenShift), a self-signed one elsewhere, and only to
// callers a TokenReview and a SubjectAccessReview (get /metrics) allow.
func serveRelayMetrics(ctx context.Context, cfg *rest.Config, addr string, profile func(*tls.Config)) error {
	if addr == "" || addr == "0" {
		return nil
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return fmt.Errorf("the metrics server's client: %w", err)
	}
	srv, err := metricsserver.NewServer(metricsServing(addr, true, []func(*tls.Config){profile, http1Only}), cfg, hc)
	if err != nil {
		return fmt.Errorf("the relay's metrics server: %w", err)
	}
	go func() { _ = srv.Start(ctx) }()
	return nil
}

// fileKeyPair is a serving certificate read from files at the handshake
// that finds them changed (or first finds them): controller-runtime's
// certwatcher needs them at start, and the service-ca may issue this one
// after the pod started, the kubelet then filling the optional volume.
type fileKeyPair struct {
	certFile, keyFile string
	mu                sync.Mutex
	stamp             time.Time
	cert              *tls.Certificate
}

func (f *fileKeyPair) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	info, err := os.Stat(f.certFile)
	if err != nil {
		if f.cert != nil {
			return f.cert, nil
		}
		return nil, fmt.Errorf("no serving certificate for the external port listener yet: %w", err)
	}
	if f.cert != nil && info.ModTime().Equal(f.stamp) {
		return f.cert, nil
	}
	cert, err := tls.LoadX509KeyPair(f.certFile, f.keyFile)
	if err != nil {
		if f.cert != nil {
			// Mid-rotation (a key of the next pair beside the last
			// certificate): the last good pair serves until both are new.
			return f.cert, nil
		}
		return nil, fmt.Errorf("load the external port listener's certificate: %w", err)
	}
	f.cert, f.stamp = &cert, info.ModTime()
	return f.cert, nil
}
