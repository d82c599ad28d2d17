package operator

import (
	"fmt"
	"slices"

	cmv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	routev1 "github.com/openshift/api/route/v1"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openshell/openshell-operator/internal/relayload"
	render "github.com/openshell/openshell-operator/internal/render/gateway"
)

// scope is where the operator's caches look.
type scope struct {
	// watch are the namespaces of the OpenShell resources (nil: all): OLM's
	// target namespaces plus the operator's own, whose gateways are served
	// in every install mode and where OLM always grants the CSV's
	// permissions.
	watch []string
	// platform are the served gateway namespaces: the only ones holding the
	// operator's children, and the only ones tenants cannot write to.
	platform []string
	// operator is the operator's own namespace (empty out of cluster).
	operator string
}

// newScope reconciles the install mode with the tenancy setting. A gateway
// namespace outside the OperatorGroup's targets is dropped: the bundle's
// namespaced RBAC does not reach it, and an informer there would fail.
func newScope(watch []string, opNS string, gatewayNS []string) scope {
	s := scope{watch: slices.Clone(watch), operator: opNS}
	if len(s.watch) > 0 && opNS != "" && !slices.Contains(s.watch, opNS) {
		s.watch = append(s.watch, opNS)
	}
	for _, ns := range gatewayNS {
		if len(s.watch) > 0 && !slices.Contains(s.watch, ns) {
			ctrl.Log.WithName("setup").Error(nil, "Ignoring a gateway namespace outside the operator's target namespaces: add it to the OperatorGroup",
				"namespace", ns, "targets", s.watch)
			continue
		}
		s.platform = append(s.platform, ns)
	}
	return s
}

// cacheOptions keeps tenants from inflating the operator's memory: the
// kinds the operator creates as a gateway's children are cached only in
// platform namespaces (where tenants cannot write) and only with the
// operator's label; cluster-scoped ClusterRoleBindings only with the label
// (only cluster admins create them). Route and cert-manager kinds join when
// their APIs are served at start; an API installed later is cached, once
// the preflight sees it, in every watched namespace until the operator
// restarts (controller-runtime fixes a kind's cache scope at start).
func cacheOptions(cfg *rest.Config, s scope) (cache.Options, error) {
	ours := labels.SelectorFromSet(labels.Set{render.LabelManagedBy: render.ManagedByValue})
	child := cache.ByObject{Label: ours}
	if len(s.platform) > 0 {
		child.Namespaces = namespaceConfigs(s.platform)
	}
	byObject := map[client.Object]cache.ByObject{
		// Only the operator's own Secrets (gateway keys and certificates,
		// labelled by the operator or by cert-manager from the
		// Certificate's secretTemplate). Tenant Secrets are read on demand
		// and watched by metadata only (setupControllers).
		&corev1.Secret{}:                child,
		&corev1.Service{}:               child,
		&corev1.ConfigMap{}:             child,
		&corev1.ServiceAccount{}:        child,
		&appsv1.Deployment{}:            child,
		&appsv1.StatefulSet{}:           child,
		&rbacv1.RoleBinding{}:           child,
		&rbacv1.Role{}:                  child,
		&networkingv1.NetworkPolicy{}:   child,
		&policyv1.PodDisruptionBudget{}: child,
		// Metadata only: the gateway pods' UIDs (status.instance).
		&corev1.Pod{}:                child,
		&rbacv1.ClusterRoleBinding{}: {Label: ours},
	}
	// Leases: only the relay replicas' load, in the operator's namespace
	// (not every node's heartbeat and every operator's leader election).
	if s.operator != "" {
		byObject[&coordinationv1.Lease{}] = cache.ByObject{Namespaces: map[string]cache.Config{
			s.operator: {LabelSelector: labels.SelectorFromSet(labels.Set{relayload.Label: "true"})}}}
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return cache.Options{}, fmt.Errorf("create discovery client: %w", err)
	}
	for _, k := range []struct {
		gv   string
		objs []client.Object
	}{
		{routev1.GroupVersion.String(), []client.Object{&routev1.Route{}}},
		{cmv1.SchemeGroupVersion.String(), []client.Object{&cmv1.Certificate{}, &cmv1.Issuer{}}},
		{monitoringv1.SchemeGroupVersion.String(), []client.Object{&monitoringv1.ServiceMonitor{}}},
	} {
		if _, err := disc.ServerResourcesForGroupVersion(k.gv); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return cache.Options{}, fmt.Errorf("discover %s: %w", k.gv, err)
		}
		for _, o := range k.objs {
			byObject[o] = child
		}
	}
	return cache.Options{ByObject: byObject, DefaultNamespaces: namespaceConfigs(s.watch),
		// Nothing reads managedFields from the cache (writes are server-side
		// applies); they are most of the memory of small objects.
		DefaultTransform: cache.TransformStripManagedFields()}, nil
}
