package main

import (
	"context"
	"net/http"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/scheme"
)

// scriptedWatches hands out the test's watchers in order and records the
// resourceVersion each watch asked to start from.
type scriptedWatches struct {
	client.WithWatch
	next chan *watch.FakeWatcher
	from chan string
}

func (s *scriptedWatches) Watch(_ context.Context, _ client.ObjectList, opts ...client.ListOption) (watch.Interface, error) {
	lo := &client.ListOptions{}
	lo.ApplyOptions(opts)
	rv := ""
	if lo.Raw != nil {
		rv = lo.Raw.ResourceVersion
	}
	s.from <- rv
	return <-s.next, nil
}

func TestTrackerResumesAfterTheAPIServerEndsItsWatch(t *testing.T) {
	sandbox := func(name, rv string, phase openshellv1alpha1.SandboxPhase) *openshellv1alpha1.OpenShellSandbox {
		return &openshellv1alpha1.OpenShellSandbox{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", ResourceVersion: rv},
			Status: openshellv1alpha1.OpenShellSandboxStatus{Phase: phase}}
	}
	// What a list finds after the watches failed: both Ready.
	c := fake.NewClientBuilder().WithScheme(scheme.New()).
		WithObjects(sandbox("a", "", openshellv1alpha1.SandboxPhaseReady), sandbox("b", "", openshellv1alpha1.SandboxPhaseReady)).Build()
	s := &scriptedWatches{WithWatch: c, next: make(chan *watch.FakeWatcher), from: make(chan string, 3)}
	p := path{list: func() client.ObjectList { return &openshellv1alpha1.OpenShellSandboxList{} },
		ready: func(o any) (string, bool) {
			sb, ok := o.(*openshellv1alpha1.OpenShellSandbox)
			return sb.GetName(), ok && sb.Status.Phase == openshellv1alpha1.SandboxPhaseReady
		}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	first := watch.NewFake()
	go func() { s.next <- first }()
	tr, stop, err := track(ctx, s, p, "ns", 2)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	tr.markCreated("a")
	tr.markCreated("b")

	first.Modify(sandbox("a", "5", openshellv1alpha1.SandboxPhaseReady))
	first.Stop() // the API server ends the watch
	second := watch.NewFake()
	select {
	case s.next <- second:
	case <-time.After(10 * time.Second):
		t.Fatal("the tracker did not watch again after the API server ended its watch")
	}
	second.Error(&metav1.Status{Status: metav1.StatusFailure, Code: http.StatusGone, Reason: metav1.StatusReasonExpired})
	second.Stop() // the list that follows finds both Ready: no further watch

	tr.wait(ctx)
	if got := len(tr.latencies()); got != 2 {
		t.Fatalf("%d of 2 ready, want both (b is Ready only in the list)", got)
	}
	if got := []string{<-s.from, <-s.from}; got[0] != "" || got[1] != "5" {
		t.Errorf("watches started from %q, want the first from now and the second from the last resourceVersion seen (5)", got)
	}
}
