package sandbox

import (
	"context"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/scheme"
)

// TestLocatedSandboxesAreLookedAtOnceTheWatchSynced: once a watch of
// agents.x-k8s.io Sandboxes has synced, the sandboxes whose Sandbox
// (status names it) the watch does not hold are re-queued (one deleted
// before the watch listed was never an event), in every namespace; those
// whose Sandbox it holds, and those not created yet, are not; a reference
// of another version is (it cannot be told here).
func TestLocatedSandboxesAreLookedAtOnceTheWatchSynced(t *testing.T) {
	gvk := agentSandboxGVK("v1beta1")
	located := func(ns, name, apiVersion string) *openshellv1alpha1.OpenShellSandbox {
		return &openshellv1alpha1.OpenShellSandbox{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Status: openshellv1alpha1.OpenShellSandboxStatus{AgentSandbox: &openshellv1alpha1.AgentSandboxReference{
				APIVersion: apiVersion, Namespace: "sandboxes", Name: ns + "-" + name}}}
	}
	held := &unstructured.Unstructured{}
	held.SetGroupVersionKind(gvk)
	held.SetNamespace("sandboxes")
	held.SetName("team-a-running")
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(gvk, meta.RESTScopeNamespace)
	c := fake.NewClientBuilder().WithScheme(scheme.New()).WithRESTMapper(mapper).WithObjects(
		located("team-a", "running", "agents.x-k8s.io/v1beta1"), located("team-b", "lost", "agents.x-k8s.io/v1beta1"),
		located("team-c", "older", "agents.x-k8s.io/v1alpha1"),
		&openshellv1alpha1.OpenShellSandbox{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "not-created-yet"}}).Build()
	if err := c.Create(context.Background(), held); err != nil {
		t.Fatal(err)
	}
	r := &Reconciler{Client: c}
	synced := &metav1.PartialObjectMetadata{}
	synced.SetGroupVersionKind(gvk)
	var got []string
	for _, req := range r.resyncLocated(context.Background(), synced) {
		got = append(got, req.String())
	}
	slices.Sort(got)
	if want := []string{"team-b/lost", "team-c/older"}; !slices.Equal(got, want) {
		t.Fatalf("re-queued %v, want %v", got, want)
	}
	// One signal waits at a time: a second sync while one waits coalesces.
	ch := r.upstream.syncedEvents()
	if ch != r.upstream.syncedEvents() || cap(ch) != 1 {
		t.Fatalf("the synced channel is not one buffered channel")
	}
}
