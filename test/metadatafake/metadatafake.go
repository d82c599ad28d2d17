// Package metadatafake prepares client-go's fake metadata client for tests
// of informers over it: objects by kind, and a signal once an informer's
// watch is registered. The fake's watch starts from now, so a change made
// between an informer's list and its watch is lost (a real API server
// replays it from the list's resourceVersion); a test that changes objects
// after the informer has synced waits for the watch first.
package metadatafake

import (
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/metadata/fake"
	clienttesting "k8s.io/client-go/testing"
)

// Client is the fake, with the watches' registration signals.
type Client struct {
	*fake.FakeMetadataClient
	mu       sync.Mutex
	watching map[string]chan struct{} // by resource
}

// New serves objs, and signals each resource's first watch.
func New(t testing.TB, objs ...*metav1.PartialObjectMetadata) *Client {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := metav1.AddMetaToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	rt := make([]runtime.Object, len(objs))
	for i, o := range objs {
		rt[i] = o
	}
	c := &Client{FakeMetadataClient: fake.NewSimpleMetadataClient(scheme, rt...), watching: map[string]chan struct{}{}}
	c.PrependWatchReactor("*", func(a clienttesting.Action) (bool, watch.Interface, error) {
		var opts metav1.ListOptions
		if wa, ok := a.(clienttesting.WatchActionImpl); ok {
			opts = wa.ListOptions
		}
		w, err := c.Tracker().Watch(a.GetResource(), a.GetNamespace(), opts)
		if err != nil {
			return true, nil, err
		}
		c.mu.Lock()
		ch := c.signal(a.GetResource().Resource)
		select {
		case <-ch:
		default:
			close(ch)
		}
		c.mu.Unlock()
		return true, w, nil
	})
	return c
}

// signal is resource's registration channel; c.mu is held.
func (c *Client) signal(resource string) chan struct{} {
	ch, ok := c.watching[resource]
	if !ok {
		ch = make(chan struct{})
		c.watching[resource] = ch
	}
	return ch
}

// Watching is closed once a watch of resource is registered: changes made
// from then on reach it.
func (c *Client) Watching(resource string) <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.signal(resource)
}

// Object is an object's metadata (ns "" for a cluster-scoped kind).
func Object(apiVersion, kind, ns, name string) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: apiVersion, Kind: kind},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, ResourceVersion: "1"}}
}
