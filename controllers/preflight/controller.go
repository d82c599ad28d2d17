// Package preflight runs the cluster probe whenever a CRD the operator
// depends on is created, changed or deleted (and periodically, for APIs that
// are aggregated rather than CRDs), publishes the result to the shared
// preflight.Store, records capability metrics, and emits events on every
// OpenShellGateway when a capability appears or disappears.
package preflight

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/controllers/internal/traced"
	"github.com/openshell/openshell-operator/internal/preflight"
)

// DefaultResyncPeriod re-probes aggregated APIs (OpenShift serves Routes
// from openshift-apiserver, which no CRD event announces). A probe that
// finds nothing new writes nothing.
const DefaultResyncPeriod = 5 * time.Minute

// Work items: every trigger collapses into one probe. A CRD event also
// schedules a settle probe shortly after, because discovery and CRD status
// trail the event that announced the change.
var (
	probeKey  = reconcile.Request{NamespacedName: types.NamespacedName{Name: "cluster"}}
	settleKey = reconcile.Request{NamespacedName: types.NamespacedName{Name: "settle"}}
)

// settleDelay is how long after a CRD event the settle probe runs.
const settleDelay = 2 * time.Second

// Event reasons for capability transitions.
const (
	ReasonCapabilityAvailable = "CapabilityAvailable"
	ReasonCapabilityLost      = "CapabilityLost"
)

// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions,verbs=get;list;watch
// The network plugin OpenShift runs (NetworkPolicy enforcement), read by name.
// +kubebuilder:rbac:groups=config.openshift.io,resources=networks,verbs=get,resourceNames=cluster

// Reconciler probes the cluster and publishes the result.
type Reconciler struct {
	// APIReader reads the Agent Sandbox CRD in full, bypassing the cache
	// (the cache holds CRD metadata only).
	APIReader client.Reader
	// Client lists gateways (cached) to attach transition events.
	Client    client.Client
	Discovery discovery.DiscoveryInterface
	Store     *preflight.Store
	Recorder  events.EventRecorder
	// ResyncPeriod defaults to DefaultResyncPeriod.
	ResyncPeriod time.Duration
}

// Reconcile probes the cluster once.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := logf.FromContext(ctx)
	res, err := preflight.Probe(ctx, r.APIReader, r.Discovery)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("probe cluster: %w", err)
	}
	preflight.RecordMetrics(res)
	transitions, changed := r.Store.Set(res)
	if changed {
		log.Info("Cluster capabilities changed", "agentSandbox", res.AgentSandbox.Message,
			"certManager", res.CertManager, "route", res.Route, "scc", res.SCC, "idms", res.IDMS,
			"kubernetes", res.Kubernetes.Version)
	}
	if len(transitions) > 0 {
		if err := r.emit(ctx, transitions, res); err != nil {
			return ctrl.Result{}, err
		}
	}
	if req == settleKey {
		return ctrl.Result{}, nil
	}
	period := r.ResyncPeriod
	if period == 0 {
		period = DefaultResyncPeriod
	}
	return ctrl.Result{RequeueAfter: period}, nil
}

func (r *Reconciler) emit(ctx context.Context, ts []preflight.Transition, res preflight.Result) error {
	gws := &openshellv1alpha1.OpenShellGatewayList{}
	if err := r.Client.List(ctx, gws); err != nil {
		return fmt.Errorf("list gateways for capability events: %w", err)
	}
	for _, t := range ts {
		typ, reason, verb := corev1.EventTypeNormal, ReasonCapabilityAvailable, "is now available"
		if !t.Available {
			typ, reason, verb = corev1.EventTypeWarning, ReasonCapabilityLost, "is no longer available"
		}
		note := fmt.Sprintf("%s %s", t.Capability, verb)
		if t.Capability == "AgentSandbox" {
			note += ": " + res.AgentSandbox.Message
		}
		for i := range gws.Items {
			r.Recorder.Eventf(&gws.Items[i], nil, typ, reason, "Preflight", "%s", note)
		}
	}
	return nil
}

// SetupWithManager watches CRD metadata only, filtered to the CRDs that matter.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	relevant := predicate.NewPredicateFuncs(func(o client.Object) bool {
		return slices.Contains(preflight.WatchedCRDs, o.GetName())
	})
	probe := func(q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		q.Add(probeKey)
		q.AddAfter(settleKey, settleDelay)
	}
	toProbe := handler.Funcs{
		CreateFunc: func(_ context.Context, _ event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			probe(q)
		},
		UpdateFunc: func(_ context.Context, _ event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			probe(q)
		},
		DeleteFunc: func(_ context.Context, _ event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			probe(q)
		},
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("preflight").
		WatchesMetadata(&apiextensionsv1.CustomResourceDefinition{}, toProbe, builder.WithPredicates(relevant)).
		// Probe once at start-up even when none of the CRDs exists yet.
		WatchesRawSource(source.Func(func(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
			q.Add(probeKey)
			return nil
		})).
		Complete(traced.Reconciler("preflight", r))
}
