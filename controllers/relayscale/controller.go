// Package relayscale scales the relay's Deployment on the sessions its
// replicas hold, as they publish them in their load Leases
// (internal/relayload), not on anything the operator reconciles.
//
// It is the operator's own rather than a HorizontalPodAutoscaler: an OLM
// bundle cannot ship an HPA, and one on a session metric needs a
// custom-metrics API (prometheus-adapter, OpenShift's Custom Metrics
// Autoscaler) that not every cluster serves. It scales through the
// Deployment's scale subresource, as an HPA does, which leaves the
// Deployment's spec hash, and so OLM, alone; an OLM upgrade that puts the
// CSV's two replicas back is scaled again at the next change of sessions.
package relayscale

import (
	"context"
	"fmt"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/openshell/openshell-operator/controllers/internal/enqueue"
	"github.com/openshell/openshell-operator/controllers/internal/traced"
	"github.com/openshell/openshell-operator/internal/relayload"
	"github.com/openshell/openshell-operator/internal/status"
)

// Deployment is the relay's Deployment as the bundle names it
// (config/relay/deployment.yaml with config/olm's name prefix).
const Deployment = "openshell-operator-relay"

// availabilityRecheck is how soon a scale-up waiting for its last step's
// pod looks again.
const availabilityRecheck = 2 * time.Second

// Event reasons on the relay's Deployment.
const (
	ReasonScaled      = "RelayScaled"
	ReasonScaleFailed = "RelayScaleFailed"
)

// The load Leases, read from the manager's cache (operator.cacheOptions
// selects them in the operator's namespace only); the relay's Deployment
// watched (the gateways' list and watch) and scaled through its
// subresource, and no other.
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=list;watch,namespace=system
// +kubebuilder:rbac:groups=apps,resources=deployments/scale,resourceNames=openshell-operator-relay,verbs=update,namespace=system

// Reconciler scales the relay.
type Reconciler struct {
	Client client.Client
	// Deployments is a cache of the relay's Deployment alone: the
	// manager's caches only the Deployments of the operator's gateways.
	// Its changes are watched, since OLM puts the CSV's replicas back
	// whenever it (re)installs the Deployment (an upgrade, a certificate
	// rotation).
	Deployments cache.Cache
	// Keys checks the relays' signatures on their load Leases (the
	// operator's OIDC issuer, whose keys sign them).
	Keys      relayload.Verifier
	Namespace string
	Scaling   relayload.Scaling
	Recorder  events.EventRecorder
	Clock     func() time.Time

	// mu guards history, the recommendations of the scale-down window,
	// and said, the last decision logged: this reconciler's alone (one
	// worker; the lock is for tests).
	mu      sync.Mutex
	history []sample
	said    string
}

// Reconcile observes the sessions and the relay's Deployment, decides
// (decide and step, pure), scales, and looks again when a higher
// recommendation leaves the scale-down window or a step up is waiting for
// the last one's pod.
func (r *Reconciler) Reconcile(ctx context.Context, _ ctrl.Request) (ctrl.Result, error) {
	sessions, err := r.sessions(ctx)
	if err != nil {
		return ctrl.Result{}, err
	}
	dep := &appsv1.Deployment{}
	if err := r.Deployments.Get(ctx, client.ObjectKey{Namespace: r.Namespace, Name: Deployment}, dep); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, nil // installed without the relay (a plain install without config/relay)
		}
		return ctrl.Result{}, fmt.Errorf("read the relay's Deployment: %w", err)
	}
	current := ptr.Deref(dep.Spec.Replicas, 1)
	d := r.remember(current, r.Scaling.Recommend(sessions), r.now())
	next := step(current, dep.Status.AvailableReplicas, d.replicas)
	r.say(ctx, sessions, current, dep.Status.AvailableReplicas, d.replicas, next)
	if next != current {
		if err := r.scale(ctx, dep, current, next, sessions); err != nil {
			return ctrl.Result{}, err
		}
	}
	if next < d.replicas {
		return ctrl.Result{RequeueAfter: availabilityRecheck}, nil
	}
	return ctrl.Result{RequeueAfter: d.recheck}, nil
}

// say logs a decision that differs from the last one logged: what
// scaling decided is visible without a line per look (a step up waiting
// for its pod looks every availabilityRecheck).
func (r *Reconciler) say(ctx context.Context, sessions int, current, available, want, next int32) {
	msg := fmt.Sprintf("%d/%d/%d/%d/%d", sessions, current, available, want, next)
	r.mu.Lock()
	same := msg == r.said
	r.said = msg
	r.mu.Unlock()
	if !same {
		log.FromContext(ctx).Info("Relay scaling decided", "sessions", sessions, "replicas", current, "available", available, "wanted", want, "next", next)
	}
}

// sessions adds up the sessions every relay replica publishes; a Lease
// without a relay's signature counts for nothing.
func (r *Reconciler) sessions(ctx context.Context) (int, error) {
	list := &coordinationv1.LeaseList{}
	if err := r.Client.List(ctx, list, client.InNamespace(r.Namespace), client.MatchingLabels{relayload.Label: "true"}); err != nil {
		return 0, fmt.Errorf("list the relay replicas' load: %w", err)
	}
	n := 0
	for i := range list.Items {
		if l, err := relayload.Read(&list.Items[i], r.Keys); err == nil {
			n += l.Sessions
		} else {
			log.FromContext(ctx).V(1).Info("Not counting a load Lease", "lease", list.Items[i].Name, "reason", err.Error())
		}
	}
	return n, nil
}

// remember records the recommendation and decides on the window. The first
// look takes the replicas found as the window's start, so that an
// operator restart does not scale down at once.
func (r *Reconciler) remember(current, recommended int32, now time.Time) decision {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.history) == 0 {
		r.history = []sample{{at: now, replicas: current}}
	}
	if r.history[len(r.history)-1].replicas != recommended {
		r.history = append(r.history, sample{at: now, replicas: recommended})
	}
	r.history = prune(r.history, now, r.Scaling.ScaleDownDelay)
	return decide(current, r.history, now, r.Scaling)
}

// scale sets the relay's replicas through the scale subresource, with the
// Deployment's resourceVersion as its precondition (a conflict is looked
// at again).
func (r *Reconciler) scale(ctx context.Context, dep *appsv1.Deployment, from, replicas int32, sessions int) error {
	scale := &autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Namespace: dep.Namespace, Name: dep.Name, ResourceVersion: dep.ResourceVersion},
		Spec: autoscalingv1.ScaleSpec{Replicas: replicas}}
	if err := r.Client.SubResource("scale").Update(ctx, dep, client.WithSubResourceBody(scale)); err != nil {
		if !apierrors.IsConflict(err) {
			r.Recorder.Eventf(dep, nil, corev1.EventTypeWarning, ReasonScaleFailed, "Scale",
				"Could not scale the relay from %d to %d replicas for %d open sessions: %v", from, replicas, sessions, err)
		}
		return fmt.Errorf("scale the relay to %d replicas: %w", replicas, err)
	}
	r.Recorder.Eventf(dep, nil, corev1.EventTypeNormal, ReasonScaled, "Scale",
		"Scaled the relay from %d to %d replicas: %d open sessions, %d per replica (%d to %d replicas)",
		from, replicas, sessions, r.Scaling.SessionsPerReplica, r.Scaling.Min, r.Scaling.Max)
	log.FromContext(ctx).Info("Scaled the relay", "from", from, "to", replicas, "sessions", sessions)
	return nil
}

func (r *Reconciler) now() time.Time {
	if r.Clock != nil {
		return r.Clock()
	}
	return time.Now()
}

// SetupWithManager looks once at start (an idle relay left scaled up is
// scaled down), whenever a replica's load Lease changes, and whenever the
// relay's Deployment does.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	start, to := enqueue.Singleton(types.NamespacedName{Namespace: r.Namespace, Name: Deployment})
	return ctrl.NewControllerManagedBy(mgr).Named("relayscale").
		WatchesRawSource(start).
		WatchesRawSource(source.Kind[client.Object](r.Deployments, &appsv1.Deployment{}, to)).
		Watches(&coordinationv1.Lease{}, to, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			return o.GetNamespace() == r.Namespace && o.GetLabels()[relayload.Label] == "true"
		}))).
		Complete(traced.Reconciler("relayscale", status.RetryStale(r)))
}
