package sandbox

import (
	"context"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/scheme"
)

// TestLocatedSandboxesAreLookedAtOnceTheWatchSynced: once a watch of
// agents.x-k8s.io Sandboxes has synced, every sandbox whose Sandbox
// status names is re-queued (one deleted before the watch listed was
// never an event), in every namespace, and no other.
func TestLocatedSandboxesAreLookedAtOnceTheWatchSynced(t *testing.T) {
	located := func(ns, name string) *openshellv1alpha1.OpenShellSandbox {
		return &openshellv1alpha1.OpenShellSandbox{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Status: openshellv1alpha1.OpenShellSandboxStatus{AgentSandbox: &openshellv1alpha1.AgentSandboxReference{
				APIVersion: "agents.x-k8s.io/v1beta1", Namespace: "sandboxes", Name: ns + "-" + name}}}
	}
	c := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(
		located("team-a", "running"), located("team-b", "running"),
		&openshellv1alpha1.OpenShellSandbox{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "not-created-yet"}}).Build()
	r := &Reconciler{Client: c}
	var got []string
	for _, req := range r.resyncLocated(context.Background(), nil) {
		got = append(got, req.String())
	}
	slices.Sort(got)
	if want := []string{"team-a/running", "team-b/running"}; !slices.Equal(got, want) {
		t.Fatalf("re-queued %v, want %v", got, want)
	}
	// One signal waits at a time: a second sync while one waits coalesces.
	ch := r.upstream.syncedEvents()
	if ch != r.upstream.syncedEvents() || cap(ch) != 1 {
		t.Fatalf("the synced channel is not one buffered channel")
	}
}
