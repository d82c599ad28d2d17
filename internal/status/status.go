// Package status holds the small helpers every reconciler uses to record
// conditions and to write status only when it changed, so that a steady
// state makes no API writes.
package status

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Object is an API object with conditions and an observed generation.
type Object interface {
	client.Object
	GetConditions() []metav1.Condition
	SetConditions([]metav1.Condition)
	GetObservedGeneration() int64
	SetObservedGeneration(int64)
	// StatusValue returns the whole status struct, for change detection.
	StatusValue() any
}

// SetCondition records a condition computed from the object's current
// generation. lastTransitionTime only moves when the status flips. It
// reports whether anything changed.
func SetCondition(o Object, typ string, s metav1.ConditionStatus, reason, msg string) bool {
	conds := o.GetConditions()
	changed := meta.SetStatusCondition(&conds, metav1.Condition{
		Type: typ, Status: s, Reason: reason, Message: msg, ObservedGeneration: o.GetGeneration(),
	})
	o.SetConditions(conds)
	return changed
}

// Patch writes o's status if it differs from orig's, with a merge patch
// against orig. Unchanged status makes no request. The patch carries
// orig's resourceVersion: a merge patch leaves out whatever did not change
// relative to its base, so a base read from a stale cache would silently
// keep another writer's values (a condition set by the previous reconcile,
// say); the conflict makes the reconcile run again on fresh data instead.
func Patch[T Object](ctx context.Context, c client.Client, orig, o T) error {
	if equality.Semantic.DeepEqual(orig.StatusValue(), o.StatusValue()) {
		return nil
	}
	if err := c.Status().Patch(ctx, o, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("patch status of %s: %w", client.ObjectKeyFromObject(o), err)
	}
	return nil
}
