// Package operatorcondition tells OLM whether upgrading the operator now
// would disrupt the data plane, through the OperatorCondition OLM creates
// for the installed CSV (named by OPERATOR_CONDITION_NAME in the operator's
// namespace): Upgradeable=False while any gateway is rotating its CA, whose
// phases an upgrade would interrupt. OLM then holds the next CSV in
// Pending (reason OperatorConditionNotUpgradeable) until it clears.
//
// operator-lib's conditions package does this for other operators; it is
// not available here, so this writes spec.conditions with the typed
// OperatorCondition API from operator-framework/api. OLM grants the
// operator's ServiceAccount get, update and patch on that one object; the
// bundle adds nothing.
package operatorcondition

import (
	"context"
	"fmt"
	"slices"
	"strings"

	operatorsv2 "github.com/operator-framework/api/pkg/operators/v2"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/controllers/internal/enqueue"
	"github.com/openshell/openshell-operator/controllers/internal/traced"
	"github.com/openshell/openshell-operator/internal/status"
)

// Reasons of the Upgradeable condition the operator reports.
const (
	// ReasonCARotationInProgress: a gateway's CA rotation is under way.
	ReasonCARotationInProgress = "CARotationInProgress"
	// ReasonReady: nothing an upgrade would interrupt.
	ReasonReady = "Ready"
)

// Reconciler keeps the OperatorCondition's Upgradeable condition.
type Reconciler struct {
	// Client reads OpenShellGateways from the cache; APIReader and Writer
	// read and write the OperatorCondition directly (it is not cached).
	Client    client.Client
	APIReader client.Reader
	// Name is the OperatorCondition, in the operator's Namespace.
	Name, Namespace string
}

// Upgradeable decides the condition from the gateways: pure.
func Upgradeable(gateways []openshellv1alpha1.OpenShellGateway) metav1.Condition {
	var rotating []string
	for _, gw := range gateways {
		if c := meta.FindStatusCondition(gw.Status.Conditions, openshellv1alpha1.GatewayConditionTLSReady); c != nil &&
			c.Reason == openshellv1alpha1.GatewayReasonCARotating {
			rotating = append(rotating, gw.Namespace+"/"+gw.Name)
		}
	}
	if len(rotating) == 0 {
		return metav1.Condition{Type: operatorsv2.Upgradeable, Status: metav1.ConditionTrue, Reason: ReasonReady,
			Message: "no gateway is in a step an upgrade would interrupt"}
	}
	slices.Sort(rotating)
	return metav1.Condition{Type: operatorsv2.Upgradeable, Status: metav1.ConditionFalse, Reason: ReasonCARotationInProgress,
		Message: fmt.Sprintf("%d gateway(s) rotating their CA (%s): upgrade once it completes (see their TLSReady condition)",
			len(rotating), strings.Join(rotating, ", "))}
}

// Reconcile writes the Upgradeable condition when it changed; steady state
// makes no write.
func (r *Reconciler) Reconcile(ctx context.Context, _ ctrl.Request) (ctrl.Result, error) {
	list := &openshellv1alpha1.OpenShellGatewayList{}
	if err := r.Client.List(ctx, list); err != nil {
		return ctrl.Result{}, fmt.Errorf("list gateways: %w", err)
	}
	want := Upgradeable(list.Items)
	oc := &operatorsv2.OperatorCondition{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: r.Namespace, Name: r.Name}, oc); err != nil {
		return ctrl.Result{}, fmt.Errorf("read OperatorCondition %s: %w", r.Name, err)
	}
	orig := oc.DeepCopy()
	cur := meta.FindStatusCondition(oc.Spec.Conditions, operatorsv2.Upgradeable)
	if cur != nil && cur.Status == want.Status && cur.Reason == want.Reason && cur.Message == want.Message {
		return ctrl.Result{}, nil
	}
	meta.SetStatusCondition(&oc.Spec.Conditions, want)
	if err := r.Client.Patch(ctx, oc, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return ctrl.Result{}, fmt.Errorf("update OperatorCondition %s: %w", r.Name, err)
	}
	ctrl.LoggerFrom(ctx).Info("Reported upgradeability to OLM", "status", want.Status, "reason", want.Reason)
	return ctrl.Result{}, nil
}

// SetupWithManager reconciles one key at start (a gateway may have gone
// while no operator ran) and on every gateway change that matters.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	start, to := enqueue.Singleton(types.NamespacedName{Namespace: r.Namespace, Name: r.Name})
	return ctrl.NewControllerManagedBy(mgr).Named("operatorcondition").
		WatchesRawSource(start).
		Watches(&openshellv1alpha1.OpenShellGateway{}, to,
			builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, tlsReasonChanged()))).
		Complete(traced.Reconciler("operatorcondition", status.RetryStale(r)))
}

// tlsReasonChanged passes gateway updates whose TLSReady reason changed.
func tlsReasonChanged() predicate.Predicate {
	reason := func(o client.Object) string {
		gw, ok := o.(*openshellv1alpha1.OpenShellGateway)
		if !ok {
			return ""
		}
		if c := meta.FindStatusCondition(gw.Status.Conditions, openshellv1alpha1.GatewayConditionTLSReady); c != nil {
			return c.Reason
		}
		return ""
	}
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool { return reason(e.ObjectOld) != reason(e.ObjectNew) }}
}
