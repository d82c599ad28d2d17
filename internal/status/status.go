// Package status holds the small helpers every reconciler uses to record
// conditions, to write status only when it changed (so that a steady state
// makes no API writes), to persist an intent before an external call, and
// to add and remove its finalizer without tripping over its own status
// write.
package status

import (
	"context"
	"fmt"
	"strings"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
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
	msg = truncate(msg)
	conds := o.GetConditions()
	changed := meta.SetStatusCondition(&conds, metav1.Condition{
		Type: typ, Status: s, Reason: reason, Message: msg, ObservedGeneration: o.GetGeneration(),
	})
	o.SetConditions(conds)
	return changed
}

// maxMessage bounds a condition message: messages carry text from
// gateways (and from what tenants wrote), and one over the API's 32 KiB
// would make every status write of the object fail.
const maxMessage = 4096

func truncate(msg string) string { return Clip(msg, maxMessage, "… (truncated)") }

// Clip bounds s at n bytes, cut on a rune boundary and ending in mark when
// cut: for text from gateways and agents put in conditions, status fields
// and event notes, whose size the API bounds.
func Clip(s string, n int, mark string) string {
	if len(s) <= n {
		return s
	}
	cut := max(n-len(mark), 0)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
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
	noteWrite(ctx, o)
	return nil
}

// AddFinalizer adds the finalizer name to o with a merge patch of the
// object (optimistically locked, so no other writer's finalizer is lost),
// and carries the result into orig as well: the status Patch that follows
// compares against orig's resourceVersion, which the finalizer write just
// changed, and would otherwise always conflict. It reports whether it wrote.
func AddFinalizer[T Object](ctx context.Context, c client.Client, orig, o T, name string) (bool, error) {
	if controllerutil.ContainsFinalizer(o, name) {
		return false, nil
	}
	fin := orig.DeepCopyObject().(T)
	controllerutil.AddFinalizer(fin, name)
	if err := c.Patch(ctx, fin, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return false, fmt.Errorf("add finalizer %s to %s: %w", name, client.ObjectKeyFromObject(o), err)
	}
	for _, obj := range []client.Object{orig, o} {
		controllerutil.AddFinalizer(obj, name)
		obj.SetResourceVersion(fin.GetResourceVersion())
	}
	noteWrite(ctx, fin)
	return true, nil
}

// Record persists a status change before the reconcile acts on the world
// (an intent: where a sandbox is about to be created), so that a crash, a
// lost final status write or a deletion in between cannot lose it. mutate
// is applied to a copy of orig and patched (optimistically locked); then
// to orig and o, which also take the new resourceVersion, so the
// reconcile's final Patch neither conflicts nor drops o's other changes.
func Record[T Object](ctx context.Context, c client.Client, orig, o T, mutate func(T)) error {
	rec := orig.DeepCopyObject().(T)
	mutate(rec)
	if equality.Semantic.DeepEqual(orig.StatusValue(), rec.StatusValue()) {
		return nil
	}
	if err := c.Status().Patch(ctx, rec, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("record status of %s: %w", client.ObjectKeyFromObject(o), err)
	}
	for _, obj := range []T{orig, o} {
		mutate(obj)
		obj.SetResourceVersion(rec.GetResourceVersion())
	}
	noteWrite(ctx, rec)
	return nil
}

// RemoveFinalizer removes the finalizer name from o with an optimistically
// locked merge patch; an object already gone is not an error.
func RemoveFinalizer(ctx context.Context, c client.Client, o client.Object, name string) error {
	if !controllerutil.ContainsFinalizer(o, name) {
		return nil
	}
	base := o.DeepCopyObject().(client.Object)
	controllerutil.RemoveFinalizer(o, name)
	if err := c.Patch(ctx, o, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("remove finalizer %s from %s: %w", name, client.ObjectKeyFromObject(o), err)
	}
	noteWrite(ctx, o)
	return nil
}

// Message is err's text, stable across attempts for a condition or a
// recorded outcome: an optimistic-lock conflict names a resource version
// that changes on every attempt, which would make each retry a new status
// write.
func Message(err error) string {
	msg := err.Error()
	if i := strings.Index(msg, ": the object has been modified"); i >= 0 {
		msg = msg[:i] + ": conflict, retrying"
	}
	return msg
}
