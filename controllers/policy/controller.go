// Package policy reconciles OpenShellPolicy objects: it counts the
// sandboxes that reference a policy (changes propagate through the sandbox
// controller, which watches policies), holds a finalizer while any sandbox
// uses it, a backstop for the deletion webhook, and runs the policy
// advisor's review loop (advisor.go).
package policy

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/controllers/internal/enqueue"
	"github.com/openshell/openshell-operator/controllers/internal/traced"
	"github.com/openshell/openshell-operator/internal/gwconn"
	"github.com/openshell/openshell-operator/internal/index"
	"github.com/openshell/openshell-operator/internal/status"
	"github.com/openshell/openshell-operator/internal/tenancy"
)

// Finalizer keeps a referenced policy until no sandbox uses it.
const Finalizer = "openshell.ai/policy-in-use"

// +kubebuilder:rbac:groups=openshell.ai,resources=openshellpolicies,verbs=list;watch;patch,namespace=system
// +kubebuilder:rbac:groups=openshell.ai,resources=openshellpolicies/status,verbs=patch,namespace=system
// +kubebuilder:rbac:groups=openshell.ai,resources=openshellpolicies/finalizers,verbs=update,namespace=system

// Reconciler reconciles OpenShellPolicy.
type Reconciler struct {
	Client client.Client
	// Gateways reaches the gateways of the policy's sandboxes (the advisor).
	Gateways *gwconn.Resolver
	Recorder events.EventRecorder
	// Platform decides which gateways the policy's namespace may use.
	Platform tenancy.Platform
}

// Reconcile updates the usage count and the finalizer.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	p := &openshellv1alpha1.OpenShellPolicy{}
	if err := r.Client.Get(ctx, req.NamespacedName, p); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	users, err := index.PolicyUsers(ctx, r.Client, p)
	if err != nil {
		return ctrl.Result{}, err
	}
	orig := p.DeepCopy()
	switch {
	case len(users) == 0 && !p.DeletionTimestamp.IsZero():
		// The last user went: releasing the policy deletes it, so there is
		// no status left to write.
		return ctrl.Result{}, status.RemoveFinalizer(ctx, r.Client, p, Finalizer)
	case len(users) == 0:
		if err := status.RemoveFinalizer(ctx, r.Client, p, Finalizer); err != nil {
			return ctrl.Result{}, err
		}
		orig = p.DeepCopy()
	case p.DeletionTimestamp.IsZero():
		if _, err := status.AddFinalizer(ctx, r.Client, orig, p, Finalizer); err != nil {
			return ctrl.Result{}, err
		}
	}
	if !p.DeletionTimestamp.IsZero() && len(users) > 0 {
		status.SetCondition(p, openshellv1alpha1.ConditionReady, metav1.ConditionFalse, openshellv1alpha1.PolicyReasonInUse,
			"deletion waits until no sandbox references this policy: "+strings.Join(users, ", "))
	} else {
		status.SetCondition(p, openshellv1alpha1.ConditionReady, metav1.ConditionTrue, openshellv1alpha1.PolicyReasonValid,
			fmt.Sprintf("used by %d sandbox(es)", len(users)))
	}
	p.Status.SandboxCount = int32(len(users))
	again, err := r.reconcileAdvisor(ctx, p)
	if err != nil {
		return ctrl.Result{}, err
	}
	p.Status.ObservedGeneration = p.Generation
	return ctrl.Result{RequeueAfter: again}, status.Patch(ctx, r.Client, orig, p)
}

// countSettle is how long sandbox events for one policy are gathered before
// its count is recomputed: a summary for the Tenant Admin, so while
// sandboxes are created at any rate it costs one status write per policy
// every five seconds, not one per sandbox (deleting a policy in use is
// refused by the webhook, not by this count).
const countSettle = 5 * time.Second

// SetupWithManager registers the reconciler; sandbox changes re-queue the
// policy they reference (also the one they stopped referencing, via the
// old object of the update event).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		// Its own status writes are not changes to act on (the advisor
		// polls); a finalizer taken off is (the deletion backstop).
		For(&openshellv1alpha1.OpenShellPolicy{}, builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, finalizersChanged))).
		Named("openshellpolicy").
		// The sandbox count is a summary: a burst of sandboxes becomes one
		// status write per policy per countSettle, not one per sandbox.
		Watches(&openshellv1alpha1.OpenShellSandbox{}, enqueue.Coalesced(countSettle, func(_ context.Context, o client.Object) []reconcile.Request {
			if ref := o.(*openshellv1alpha1.OpenShellSandbox).Spec.PolicyRef; ref != nil {
				return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: o.GetNamespace(), Name: ref.Name}}}
			}
			return nil
		}), builder.WithPredicates(index.SpecOrDeletionChanged)). // not the sandboxes' status writes
		// The advisor closes an approved proposal once the rule is in effect
		// in the sandbox: when the sandbox's applied policy changes.
		Watches(&openshellv1alpha1.OpenShellSandbox{}, handler.EnqueueRequestsFromMapFunc(r.advisorPolicyOf),
			builder.WithPredicates(appliedPolicyChanged)).
		Complete(traced.Reconciler("openshellpolicy", status.RetryStale(r)))
}

// appliedPolicyChanged passes sandbox updates whose applied or loaded
// policy, or gateway sandbox, changed (status writes otherwise do not concern policies).
var appliedPolicyChanged = predicate.Funcs{
	CreateFunc:  func(event.CreateEvent) bool { return false },
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, n := e.ObjectOld.(*openshellv1alpha1.OpenShellSandbox), e.ObjectNew.(*openshellv1alpha1.OpenShellSandbox)
		loaded := func(sb *openshellv1alpha1.OpenShellSandbox) bool {
			return meta.IsStatusConditionTrue(sb.Status.Conditions, openshellv1alpha1.SandboxConditionPolicyLoaded)
		}
		return o.Status.AppliedPolicyHash != n.Status.AppliedPolicyHash || o.Status.SandboxID != n.Status.SandboxID || loaded(o) != loaded(n)
	},
}

// advisorPolicyOf maps a sandbox to the policy whose advisor reads it: the
// one it names, or its namespace's one default when it names none.
func (r *Reconciler) advisorPolicyOf(ctx context.Context, o client.Object) []reconcile.Request {
	if ref := o.(*openshellv1alpha1.OpenShellSandbox).Spec.PolicyRef; ref != nil {
		return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: o.GetNamespace(), Name: ref.Name}}}
	}
	def, err := r.namespaceDefault(ctx, o.GetNamespace())
	if err != nil || def == nil || def.Spec.Advisor == nil {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKeyFromObject(def)}}
}

// finalizersChanged passes updates that change the object's finalizers.
var finalizersChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		return !slices.Equal(e.ObjectOld.GetFinalizers(), e.ObjectNew.GetFinalizers())
	},
}
