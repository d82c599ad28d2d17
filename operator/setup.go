package operator

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"slices"
	"time"

	routev1 "github.com/openshift/api/route/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/discovery"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/openshell/openshell-operator/controllers/externalports"
	"github.com/openshell/openshell-operator/controllers/gateway"
	imagepolicyctrl "github.com/openshell/openshell-operator/controllers/imagepolicy"
	"github.com/openshell/openshell-operator/controllers/operatorcondition"
	"github.com/openshell/openshell-operator/controllers/pairedns"
	"github.com/openshell/openshell-operator/controllers/platform"
	"github.com/openshell/openshell-operator/controllers/policy"
	preflightctrl "github.com/openshell/openshell-operator/controllers/preflight"
	profilecatalogctrl "github.com/openshell/openshell-operator/controllers/profilecatalog"
	"github.com/openshell/openshell-operator/controllers/provider"
	"github.com/openshell/openshell-operator/controllers/providerprofile"
	"github.com/openshell/openshell-operator/controllers/relayscale"
	"github.com/openshell/openshell-operator/controllers/sandbox"
	"github.com/openshell/openshell-operator/controllers/sandboxtemplate"
	"github.com/openshell/openshell-operator/internal/gatewayapi"
	"github.com/openshell/openshell-operator/internal/gwconn"
	"github.com/openshell/openshell-operator/internal/imagepolicy"
	"github.com/openshell/openshell-operator/internal/index"
	"github.com/openshell/openshell-operator/internal/monitoring"
	"github.com/openshell/openshell-operator/internal/oidc"
	"github.com/openshell/openshell-operator/internal/operatorenv"
	"github.com/openshell/openshell-operator/internal/preflight"
	"github.com/openshell/openshell-operator/internal/profilecatalog"
	"github.com/openshell/openshell-operator/internal/relayload"
	render "github.com/openshell/openshell-operator/internal/render/gateway"
	"github.com/openshell/openshell-operator/internal/tenancy"
	"github.com/openshell/openshell-operator/internal/webhook"
)

// EventSource names the operator in events.
const EventSource = "openshell-operator"

// ControllerOptions tune the controllers (tests shorten periods).
type ControllerOptions struct {
	// EnableWebhooks registers the admission webhooks on the manager's
	// webhook server (off for out-of-cluster runs without certificates).
	EnableWebhooks bool
	// Images are the operand images of each release the operator ships
	// (RELATED_IMAGE_*).
	Images operatorenv.Releases
	// Proxy is the cluster proxy from the operator's environment, passed
	// on to managed gateways and their sandboxes.
	Proxy operatorenv.Proxy
	// DialGateway, when set, opens gateway connections by Service address
	// instead of the network (the local test cluster routes a Managed
	// gateway's Service to the process playing its pod); nil in
	// production.
	DialGateway func(ctx context.Context, addr string) (net.Conn, error)
	// PKI and Clock tune the built-in PKI (tests exercise rotation).
	PKI   gateway.PKIOptions
	Clock func() time.Time
	// Issuer is the operator's OIDC issuer (nil: not configured).
	Issuer *oidc.Issuer
	// PreflightResync re-probes aggregated APIs; 0 uses the default.
	PreflightResync time.Duration
	// Platform is the cluster admin's tenancy setting: where gateways are
	// served and whether operand images may be overridden.
	Platform tenancy.Platform
	// SCCRecheck is how soon a gateway whose SCC is missing or modified
	// reads it again; 0 uses the default.
	SCCRecheck time.Duration
	// TrustRoots are the public roots managed gateways trust besides the
	// operator's CA (cmd/ reads the image's system bundle).
	TrustRoots []byte
	// OperatorCondition names the OperatorCondition OLM created for this
	// install (OPERATOR_CONDITION_NAME), in the operator's namespace; empty
	// (not installed by OLM) reports nothing.
	OperatorCondition string
	// TokenHTTPClient calls External gateways' identity providers (nil:
	// the default client, which honours the proxy environment and the
	// system trust store; tests trust their own CA through it).
	TokenHTTPClient *http.Client
	// ForceReleaseAfter is how long a gateway must have been unreachable
	// for a deleted sandbox before force-release is honoured (0: the
	// default); SweepPeriod is how often every gateway is swept for
	// sandboxes whose object is gone, and bounds how long a change made
	// at a gateway directly lasts (0: the default).
	ForceReleaseAfter, SweepPeriod time.Duration
	// PairedReleaseGrace is how long a paired namespace stays off its
	// gateway's allowlist before it is deleted (0: the default).
	PairedReleaseGrace time.Duration
	// RelayScaling scales the relay's Deployment, in the operator's
	// namespace, on its replicas' sessions (zero: not scaled).
	RelayScaling relayload.Scaling
}

// setupControllers registers, in order, the indexes, every reconciler
// around the one shared preflight store, image-policy cache and gateway
// resolver, and the admission webhooks.
func setupControllers(mgr ctrl.Manager, opts ControllerOptions, watch []string) error {
	disc, err := discovery.NewDiscoveryClientForConfig(mgr.GetConfig())
	if err != nil {
		return fmt.Errorf("create discovery client: %w", err)
	}
	store := preflight.NewStore()
	policies := imagepolicy.NewCache()
	rec := mgr.GetEventRecorder(EventSource)
	c := mgr.GetClient()
	api := mgr.GetAPIReader()
	// Secrets are watched by metadata only, in a cache of their own: the
	// manager's Secret cache holds only the operator's own Secrets.
	secretMeta, err := cache.New(mgr.GetConfig(), cache.Options{Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper(),
		DefaultNamespaces: namespaceConfigs(watch), DefaultTransform: SecretMetadataTransform})
	if err != nil {
		return fmt.Errorf("create secret metadata cache: %w", err)
	}
	if err := mgr.Add(secretMeta); err != nil {
		return err
	}
	pool := gatewayapi.NewPool()
	// One slow gateway may hold at most half the sandbox workers.
	pool.MaxInFlight = sandbox.MaxConcurrentReconciles / 2
	pool.Dial = opts.DialGateway
	gateways := &gwconn.Resolver{Client: c, APIReader: api, Pool: pool, Issuer: opts.Issuer, SecretMetadata: secretMeta,
		TokenHTTPClient: opts.TokenHTTPClient}
	if err := mgr.Add(gateways); err != nil {
		return fmt.Errorf("add gateway sessions: %w", err)
	}
	// The sweep deletes what a force-release left at a gateway; only the
	// sandbox reconciler marks it.
	sweeper := &sandbox.Sweeper{Client: c, APIReader: api, Gateways: gateways, Platform: opts.Platform, Recorder: rec, Period: opts.SweepPeriod}
	if opts.Issuer != nil {
		// The relay keeps its membership Leases in the operator's
		// namespace (cmd/relay.go), signed with the issuer's keys.
		sweeper.MembershipNamespace = opts.Platform.OperatorNamespace
	}
	if err := mgr.Add(sweeper); err != nil {
		return fmt.Errorf("add orphan sweep: %w", err)
	}
	// Indexes first: the controllers' watches and the webhooks query them.
	if err := index.Register(context.Background(), mgr.GetFieldIndexer()); err != nil {
		return err
	}
	catalog, err := profilecatalog.Load()
	if err != nil {
		return err
	}
	for _, r := range []struct {
		kind  string
		setup interface{ SetupWithManager(ctrl.Manager) error }
	}{
		{"preflight", &preflightctrl.Reconciler{APIReader: api, Client: c, Discovery: disc,
			Store: store, Recorder: rec, ResyncPeriod: opts.PreflightResync}},
		{"OpenShellGateway", &gateway.Reconciler{Client: c, APIReader: api, Preflight: store, Recorder: rec, Gateways: gateways, Issuer: opts.Issuer, Catalog: catalog,
			Images: opts.Images, Proxy: opts.Proxy, TrustRoots: opts.TrustRoots, SCCRecheck: opts.SCCRecheck, PKI: opts.PKI, Clock: opts.Clock, Platform: opts.Platform}},
		{"OpenShellImagePolicy", &imagepolicyctrl.Reconciler{Client: c, APIReader: api, Policies: policies}},
		{"OpenShellPolicy", &policy.Reconciler{Client: c, Gateways: gateways, Recorder: rec, Platform: opts.Platform}},
		{"paired namespaces", &pairedns.Reconciler{Client: c, APIReader: api, SecretMetadata: secretMeta, Platform: opts.Platform, AllNamespaces: len(watch) == 0,
			ReleaseGrace: opts.PairedReleaseGrace, Preflight: store, Recorder: rec}},
		{"OpenShellProvider", &provider.Reconciler{Client: c, APIReader: api, Gateways: gateways, Recorder: rec,
			SecretMetadata: secretMeta, Platform: opts.Platform, DriftPeriod: opts.SweepPeriod}},
		{"OpenShellSandboxTemplate", &sandboxtemplate.Reconciler{Client: c, Gateways: gateways, Recorder: rec, Platform: opts.Platform,
			Policies: policies, DriftPeriod: opts.SweepPeriod}},
		{"OpenShellProviderProfile", &providerprofile.Reconciler{Client: c, Gateways: gateways, Recorder: rec, Platform: opts.Platform,
			DriftPeriod: opts.SweepPeriod}},
		{"shipped provider profiles", &profilecatalogctrl.Reconciler{Client: c, Gateways: gateways, Recorder: rec, Platform: opts.Platform, Catalog: catalog}},
		{"OpenShellSandbox", &sandbox.Reconciler{Client: c, APIReader: api, SecretMetadata: secretMeta, Preflight: store, Policies: policies,
			Recorder: rec, Gateways: gateways, Platform: opts.Platform, Sweeper: sweeper, ForceReleaseAfter: opts.ForceReleaseAfter, WatchedNamespaces: watch}},
	} {
		if err := r.setup.SetupWithManager(mgr); err != nil {
			return fmt.Errorf("set up %s controller: %w", r.kind, err)
		}
	}
	// The domain metrics, read from this manager's cache at scrape time.
	collector := &monitoring.Collector{Reader: c, Preflight: store}
	if opts.Issuer != nil {
		collector.RotatedAt = opts.Issuer.RotatedAt
	}
	monitoring.Use(collector)
	if ns := opts.Platform.OperatorNamespace; ns != "" {
		if err := (&platform.Reconciler{Client: c, APIReader: api, Preflight: store, Namespace: ns}).SetupWithManager(mgr); err != nil {
			return fmt.Errorf("set up platform objects: %w", err)
		}
	}
	if err := setupExternalPorts(mgr, disc, opts.Platform); err != nil {
		return err
	}
	// The relays sign their load with the issuer's keys: without an issuer
	// they publish none.
	if ns := opts.Platform.OperatorNamespace; ns != "" && opts.Issuer != nil && opts.RelayScaling.Enabled() {
		relayDeployment, err := cache.New(mgr.GetConfig(), cache.Options{Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper(),
			DefaultNamespaces: map[string]cache.Config{ns: {FieldSelector: fields.OneTermEqualSelector("metadata.name", relayscale.Deployment)}}})
		if err != nil {
			return fmt.Errorf("create the relay Deployment's cache: %w", err)
		}
		if err := mgr.Add(relayDeployment); err != nil {
			return err
		}
		rs := &relayscale.Reconciler{Client: c, Deployments: relayDeployment, Keys: opts.Issuer, Namespace: ns, Scaling: opts.RelayScaling,
			Recorder: rec, Clock: opts.Clock}
		if err := rs.SetupWithManager(mgr); err != nil {
			return fmt.Errorf("set up relay scaling: %w", err)
		}
	}
	if opts.OperatorCondition != "" {
		oc := &operatorcondition.Reconciler{Client: c, APIReader: api, Name: opts.OperatorCondition, Namespace: opts.Platform.OperatorNamespace}
		if err := oc.SetupWithManager(mgr); err != nil {
			return fmt.Errorf("set up OperatorCondition controller: %w", err)
		}
	}
	if !opts.EnableWebhooks {
		return nil
	}
	authz := webhook.Authorizer{Client: c}
	if err := (webhook.SandboxFinalizer{}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("set up OpenShellSandbox finalizer webhook: %w", err)
	}
	if err := (&webhook.SandboxValidator{Reader: c, Policies: policies, Platform: opts.Platform, Authorizer: authz}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("set up OpenShellSandbox webhook: %w", err)
	}
	if err := (&webhook.PolicyValidator{Reader: c, Authorizer: authz}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("set up OpenShellPolicy webhook: %w", err)
	}
	if err := (&webhook.TemplateValidator{Reader: c, Authorizer: authz, Policies: policies}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("set up OpenShellSandboxTemplate webhook: %w", err)
	}
	if err := webhook.SetupTenantAdminWebhooks(mgr, c, authz, opts.Platform); err != nil {
		return fmt.Errorf("set up tenant admin webhooks: %w", err)
	}
	if err := (&webhook.SandboxPodTenant{Reader: c}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("set up the sandbox pods' tenant label webhook: %w", err)
	}
	return nil
}

// SecretMetadataTransform keeps only what the operator needs of a tenant
// Secret's metadata (name, namespace, resourceVersion): it drops
// managedFields and annotations, which for a Secret created with kubectl
// apply include kubectl.kubernetes.io/last-applied-configuration — the
// Secret's data, which the operator must never hold in memory — and labels
// and owner references, which nothing reads and a tenant could fill.
func SecretMetadataTransform(in any) (any, error) {
	if obj, err := meta.Accessor(in); err == nil {
		obj.SetManagedFields(nil)
		obj.SetAnnotations(nil)
		obj.SetLabels(nil)
		obj.SetOwnerReferences(nil)
		obj.SetFinalizers(nil)
	}
	return in, nil
}

// namespaceConfigs maps watched namespaces to cache configuration; nil
// (all namespaces) for none.
func namespaceConfigs(ns []string) map[string]cache.Config {
	if len(ns) == 0 {
		return nil
	}
	out := map[string]cache.Config{}
	for _, n := range ns {
		out[n] = cache.Config{}
	}
	return out
}

// setupExternalPorts runs the external ports controller, with caches of
// its own objects alone (in the operator's namespace, where the manager's
// cache may not look): its Routes where route.openshift.io is served at
// start, its HTTPRoutes, BackendTLSPolicy and CA bundle where the Gateway
// API's HTTPRoutes and BackendTLSPolicies are.
func setupExternalPorts(mgr ctrl.Manager, disc discovery.DiscoveryInterface, platform tenancy.Platform) error {
	r := &externalports.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Namespace: platform.OperatorNamespace, Platform: platform}
	if ns := platform.OperatorNamespace; ns != "" {
		var err error
		if r.Routes, err = ownObjectsCache(mgr, disc, ns, routev1.GroupVersion.String(), "routes"); err != nil {
			return fmt.Errorf("the external ports Routes' cache: %w", err)
		}
		if r.GatewayAPI, err = ownObjectsCache(mgr, disc, ns, gatewayv1.GroupVersion.String(), "httproutes", "backendtlspolicies"); err != nil {
			return fmt.Errorf("the external ports HTTPRoutes' cache: %w", err)
		}
	}
	if err := r.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("set up external ports controller: %w", err)
	}
	return nil
}

// ownObjectsCache returns a cache of the external ports controller's
// objects in ns (selected by its labels), added to the manager; nil when
// groupVersion does not serve every one of resources.
func ownObjectsCache(mgr ctrl.Manager, disc discovery.DiscoveryInterface, ns, groupVersion string, resources ...string) (cache.Cache, error) {
	list, err := disc.ServerResourcesForGroupVersion(groupVersion)
	if apierrors.IsNotFound(err) {
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("discover %s: %w", groupVersion, err)
	}
	for _, want := range resources {
		if !slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == want }) {
			return nil, nil
		}
	}
	c, err := cache.New(mgr.GetConfig(), cache.Options{Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper(),
		DefaultNamespaces: map[string]cache.Config{ns: {LabelSelector: labels.SelectorFromSet(labels.Set{
			render.LabelComponent: externalports.Component, render.LabelManagedBy: render.ManagedByValue})}},
		DefaultTransform: cache.TransformStripManagedFields()})
	if err != nil {
		return nil, err
	}
	return c, mgr.Add(c)
}
