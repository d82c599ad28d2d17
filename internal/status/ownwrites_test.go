package status

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
)

func TestOwnWritesWaitForTheCache(t *testing.T) {
	key := client.ObjectKey{Namespace: "team-a", Name: "agent"}
	at := func(rv string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, ResourceVersion: rv}}
	}
	var w OwnWrites
	update := func(rv string) bool {
		return w.Predicate().Update(event.UpdateEvent{ObjectOld: at("0"), ObjectNew: at(rv)})
	}

	w.record(key, "5", "5") // wrote nothing
	if w.behind(key, "5") {
		t.Fatal("behind without a write")
	}

	// A reconcile read 5, recorded an intent (6) and wrote its status (7).
	w.record(key, "7", "5", "6")
	for _, cached := range []string{"5", "6"} {
		if !w.behind(key, cached) {
			t.Fatalf("a cache at %s, before the last write, is not behind", cached)
		}
	}
	if update("6") {
		t.Error("the intermediate write's arrival woke the reconcile")
	}
	if !update("7") {
		t.Fatal("the last write's arrival did not wake the put-off reconcile")
	}
	if w.behind(key, "6") || update("8") {
		t.Error("the entry outlived the cache catching up")
	}

	// An arrival with no reconcile waiting wakes nothing, and clears the
	// entry.
	w.record(key, "9", "8")
	if update("9") {
		t.Error("woke a reconcile nobody put off")
	}
	if w.behind(key, "8") {
		t.Error("behind after the cache showed the write")
	}

	// Another writer's version after the last write (the cache delivered
	// both before a reconcile read it) is caught up.
	w.record(key, "11", "10")
	if w.behind(key, "12") || w.behind(key, "10") {
		t.Error("behind at a version newer than the write")
	}

	// A deleted object is forgotten.
	w.record(key, "14", "13")
	w.Predicate().Delete(event.DeleteEvent{Object: at("14")})
	if w.behind(key, "13") {
		t.Error("entry kept after the object was deleted")
	}
}

// TestBeginCollectsTheVersionsOfTheReconcilesWrites: the helpers' writes
// during a reconcile begun with Begin are the versions it passed through.
func TestBeginCollectsTheVersionsOfTheReconcilesWrites(t *testing.T) {
	key := client.ObjectKey{Namespace: "team-a", Name: "agent"}
	var w OwnWrites
	ctx, behind, done := w.Begin(context.Background(), key, "5")
	if behind {
		t.Fatal("behind before any write")
	}
	for _, rv := range []string{"6", "7"} { // a finalizer, an intent
		noteWrite(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{ResourceVersion: rv}})
	}
	done("8")
	for _, cached := range []string{"5", "6", "7"} {
		if _, behind, _ := w.Begin(context.Background(), key, cached); !behind {
			t.Errorf("a cache at %s, before the last write, is not behind", cached)
		}
	}
	if _, behind, _ := w.Begin(context.Background(), key, "8"); behind {
		t.Error("behind at the last write")
	}
}
