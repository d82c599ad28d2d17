// Package platform applies the operator's own objects that plug it into
// the platform — its alerting rules (internal/monitoring's PrometheusRule)
// and the ServiceMonitor of its metrics, in the operator's namespace, and
// its console YAML samples
// (internal/console, cluster-scoped) — each only where preflight finds its
// API served, like Routes; and, where the cluster network cannot select the
// kube-apiserver's traffic, the NetworkPolicies that admit it
// (APIServerIngress). The objects ship inside the binary, so they
// always match this version (the rules its metrics); an upgrade applies the
// new ones.
package platform

import (
	"context"
	"errors"
	"fmt"

	consolev1 "github.com/openshift/api/console/v1"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/source"
	"sigs.k8s.io/yaml"

	"github.com/openshell/openshell-operator/controllers/internal/enqueue"
	"github.com/openshell/openshell-operator/controllers/internal/traced"
	"github.com/openshell/openshell-operator/internal/apply"
	"github.com/openshell/openshell-operator/internal/console"
	"github.com/openshell/openshell-operator/internal/monitoring"
	"github.com/openshell/openshell-operator/internal/preflight"
	render "github.com/openshell/openshell-operator/internal/render/gateway"
)

// The reads let a start that finds everything in place write nothing.
// +kubebuilder:rbac:groups=monitoring.coreos.com,resources=prometheusrules,verbs=get;create;patch,namespace=system
// +kubebuilder:rbac:groups=monitoring.coreos.com,resources=servicemonitors,verbs=get;create;patch,namespace=system
// +kubebuilder:rbac:groups=console.openshift.io,resources=consoleyamlsamples,verbs=get;create;patch
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;create;patch;delete,namespace=system

// Reconciler keeps the operator's platform objects.
type Reconciler struct {
	Client client.Client
	// APIReader reads the objects before applying them: they are not
	// cached (this controller runs at start and when preflight changes).
	APIReader client.Reader
	Preflight *preflight.Store
	// Namespace is the operator's namespace.
	Namespace string
}

// Rule renders the PrometheusRule for namespace: pure.
func Rule(namespace string) (*monitoringv1.PrometheusRule, error) {
	pr := &monitoringv1.PrometheusRule{}
	if err := yaml.UnmarshalStrict(monitoring.Rules, pr); err != nil {
		return nil, fmt.Errorf("parse the embedded alerting rules: %w", err)
	}
	pr.TypeMeta = metav1.TypeMeta{APIVersion: monitoringv1.SchemeGroupVersion.String(), Kind: monitoringv1.PrometheusRuleKind}
	pr.Namespace = namespace
	return pr, nil
}

// MetricsService is the operator's metrics Service as the bundle names it
// (config/manager/metrics_service.yaml with config/olm's name prefix).
const MetricsService = "openshell-operator-controller-manager-metrics-service"

// The OpenShift monitoring stack mounts the service-ca bundle here in its
// Prometheus pods; the service-ca signs the operator's metrics certificate
// (the Service's serving-cert annotation).
const serviceCAFile = "/etc/prometheus/configmaps/serving-certs-ca-bundle/service-ca.crt"

// ServiceMonitor has Prometheus scrape the operator's authenticated
// metrics endpoint with its ServiceAccount token. On OpenShift the
// endpoint's certificate is the service-ca's, which Prometheus verifies;
// elsewhere it is self-signed and skipping verification is the only option
// short of a CA the operator does not have: the token still authenticates
// Prometheus, and the metrics are not secret.
func ServiceMonitor(namespace string, openshift bool) *monitoringv1.ServiceMonitor {
	return serviceMonitor("openshell-operator", namespace, MetricsService, openshift)
}

// RelayMetricsService is the relay's metrics Service as the bundle names
// it (config/relay/metrics_service.yaml with config/olm's name prefix).
const RelayMetricsService = "openshell-operator-relay-metrics"

// RelayServiceMonitor has Prometheus scrape the relay's metrics (its open
// sessions, what to scale it on) the same way.
func RelayServiceMonitor(namespace string, openshift bool) *monitoringv1.ServiceMonitor {
	return serviceMonitor("openshell-relay", namespace, RelayMetricsService, openshift)
}

// serviceMonitor, named app, scrapes the https port of the metrics Service
// service, selected by its app.kubernetes.io/name label app.
func serviceMonitor(app, namespace, service string, openshift bool) *monitoringv1.ServiceMonitor {
	tlsConfig := &monitoringv1.TLSConfig{SafeTLSConfig: monitoringv1.SafeTLSConfig{InsecureSkipVerify: ptr.To(true)}}
	if openshift {
		tlsConfig = &monitoringv1.TLSConfig{CAFile: serviceCAFile,
			SafeTLSConfig: monitoringv1.SafeTLSConfig{ServerName: ptr.To(service + "." + namespace + ".svc")}}
	}
	return &monitoringv1.ServiceMonitor{
		TypeMeta:   metav1.TypeMeta{APIVersion: monitoringv1.SchemeGroupVersion.String(), Kind: monitoringv1.ServiceMonitorsKind},
		ObjectMeta: metav1.ObjectMeta{Name: app, Namespace: namespace},
		Spec: monitoringv1.ServiceMonitorSpec{
			Selector: metav1.LabelSelector{MatchLabels: map[string]string{
				"app.kubernetes.io/name": app, "app.kubernetes.io/component": "metrics"}},
			Endpoints: []monitoringv1.Endpoint{{Port: "https", Path: "/metrics", Scheme: "https",
				BearerTokenFile: "/var/run/secrets/kubernetes.io/serviceaccount/token", TLSConfig: tlsConfig}},
		},
	}
}

// NetworkTypeOVNKubernetes is the network plugin OpenShift reports for
// OVN-Kubernetes, whose NetworkPolicies can select host-network traffic by
// the namespace label policy-group.network.openshift.io/host-network.
const NetworkTypeOVNKubernetes = "OVNKubernetes"

// The kube-apiserver's ports on the operator's and the relay's pods, and
// the pods as the bundle labels them (config/manager, config/relay).
const (
	webhookPort = 9443
	relayPort   = 8443
)

var (
	operatorPods = map[string]string{"app.kubernetes.io/name": "openshell-operator", "control-plane": "controller-manager"}
	relayPods    = map[string]string{"app.kubernetes.io/name": "openshell-relay"}
)

// The names of the APIServerIngress policies, before the install's name
// prefix (NamePrefix for the bundle and the plain installs).
const (
	WebhookIngress = "webhook-from-apiserver"
	RelayIngress   = "relay-from-apiserver"
	NamePrefix     = "openshell-operator-"
)

// APIServerIngress renders the NetworkPolicies that admit every peer to the
// operator's webhook port and to the relay's port, named with prefix:
// pure. The bundle's own policies admit those ports only from the host
// network, where the kube-apiserver runs, by the label OVN-Kubernetes gives
// host traffic; no other network plugin offers such a label. The bundle
// and the plain installs ship these too (hack/manifests writes them from
// here), so that a new install is reachable on any network before the
// operator has looked; the operator deletes them where the cluster reports
// OVN-Kubernetes and puts them back anywhere else (or where the network is
// not known: off OpenShift, or not readable).
func APIServerIngress(namespace, prefix string) []*networkingv1.NetworkPolicy {
	tcp := corev1.ProtocolTCP
	policy := func(name string, pods map[string]string, port int) *networkingv1.NetworkPolicy {
		p := intstr.FromInt(port)
		return &networkingv1.NetworkPolicy{
			TypeMeta: metav1.TypeMeta{APIVersion: networkingv1.SchemeGroupVersion.String(), Kind: "NetworkPolicy"},
			ObjectMeta: metav1.ObjectMeta{Name: prefix + name, Namespace: namespace,
				Labels: map[string]string{render.LabelManagedBy: render.ManagedByValue}},
			Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: pods},
				PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
				Ingress:     []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &p}}}}},
		}
	}
	return []*networkingv1.NetworkPolicy{
		policy(WebhookIngress, operatorPods, webhookPort),
		policy(RelayIngress, relayPods, relayPort),
	}
}

// Desired lists the objects the platform pf serves an API for, each
// labelled as the operator's (the console samples are cluster-scoped and
// have no owner: an uninstall finds them by it): pure.
func Desired(pf preflight.Result, namespace string) ([]client.Object, error) {
	var out []client.Object
	if pf.PrometheusRule {
		pr, err := Rule(namespace)
		if err != nil {
			return nil, err
		}
		out = append(out, pr)
	}
	if pf.ServiceMonitor {
		out = append(out, ServiceMonitor(namespace, pf.OpenShift()), RelayServiceMonitor(namespace, pf.OpenShift()))
	}
	if !selectsHostTraffic(pf) {
		for _, np := range APIServerIngress(namespace, NamePrefix) {
			out = append(out, np)
		}
	}
	if pf.ConsoleYAMLSample {
		samples, err := console.Samples()
		if err != nil {
			return nil, err
		}
		for _, s := range samples {
			s.TypeMeta = metav1.TypeMeta{APIVersion: consolev1.GroupVersion.String(), Kind: "ConsoleYAMLSample"}
			out = append(out, s)
		}
	}
	for _, o := range out {
		l := o.GetLabels()
		if l == nil {
			l = map[string]string{}
		}
		l[render.LabelManagedBy] = render.ManagedByValue
		o.SetLabels(l)
	}
	return out, nil
}

// Unwanted lists the objects of Desired that pf calls for removing: the
// APIServerIngress policies where OVN-Kubernetes selects host traffic.
func Unwanted(pf preflight.Result, namespace string) []client.Object {
	var out []client.Object
	if selectsHostTraffic(pf) {
		for _, np := range APIServerIngress(namespace, NamePrefix) {
			out = append(out, np)
		}
	}
	return out
}

// selectsHostTraffic: the cluster's network lets a NetworkPolicy admit
// the host network alone (the bundle's own policies then suffice, and the
// APIServerIngress ones are unwanted).
func selectsHostTraffic(pf preflight.Result) bool {
	return pf.NetworkType == NetworkTypeOVNKubernetes
}

// Reconcile applies the desired objects that are not in place (a restart
// that finds them so writes nothing) and deletes the unwanted ones that
// exist; one object's failure does not hold back the others.
func (r *Reconciler) Reconcile(ctx context.Context, _ ctrl.Request) (ctrl.Result, error) {
	pf, known := r.Preflight.Get()
	if !known {
		return ctrl.Result{}, nil
	}
	objs, err := Desired(pf, r.Namespace)
	if err != nil {
		return ctrl.Result{}, err
	}
	var errs []error
	for _, o := range objs {
		if err := apply.Apply(ctx, r.Client, r.APIReader, o); err != nil {
			errs = append(errs, fmt.Errorf("apply %s %s: %w", o.GetObjectKind().GroupVersionKind().Kind, o.GetName(), err))
		}
	}
	for _, o := range Unwanted(pf, r.Namespace) {
		// Read first, so that steady state writes nothing.
		switch err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(o), o); {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			errs = append(errs, fmt.Errorf("get %s %s: %w", o.GetObjectKind().GroupVersionKind().Kind, o.GetName(), err))
			continue
		}
		if err := r.Client.Delete(ctx, o); client.IgnoreNotFound(err) != nil {
			errs = append(errs, fmt.Errorf("delete %s %s: %w", o.GetObjectKind().GroupVersionKind().Kind, o.GetName(), err))
		}
	}
	return ctrl.Result{}, errors.Join(errs...)
}

// SetupWithManager reconciles one key at start, whenever preflight's
// result changes (the Prometheus Operator or the console installed later)
// and whenever an APIServerIngress policy changes.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	start, to := enqueue.Singleton(types.NamespacedName{Namespace: r.Namespace, Name: "openshell-operator"})
	// The APIServerIngress policies are looked at again whenever one
	// changes: one put back where the cluster is OVN-Kubernetes (an OLM
	// upgrade, a GitOps sync) is deleted again, one deleted elsewhere is
	// put back.
	ingress := map[string]bool{}
	for _, np := range APIServerIngress(r.Namespace, NamePrefix) {
		ingress[np.Name] = true
	}
	return ctrl.NewControllerManagedBy(mgr).Named("platform").
		WatchesRawSource(start).
		WatchesRawSource(source.Channel(r.Preflight.Subscribe(), to)).
		Watches(&networkingv1.NetworkPolicy{}, to, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			return o.GetNamespace() == r.Namespace && ingress[o.GetName()]
		}))).
		Complete(traced.Reconciler("platform", r))
}
