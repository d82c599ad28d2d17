package main

import (
	"context"
	"fmt"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	render "github.com/openshell/openshell-operator/internal/render/gateway"
	"github.com/openshell/openshell-operator/test/framework"
	"github.com/openshell/openshell-operator/test/stack"
)

// measureInflation is a tenant trying to inflate the operator's memory:
// n ConfigMaps of 100 KiB each, carrying the operator's own managed-by
// label, in a namespace the operator watches. The operator caches its
// children only in platform namespaces, so its footprint should not move
// (compare the two rows).
func measureInflation(ctx context.Context, cluster *framework.Cluster, st *stack.Stack, n int) ([]FootprintResult, error) {
	c := cluster.Client
	var prints []FootprintResult
	objects := fmt.Sprintf("a tenant's %d ConfigMaps of 100 KiB labelled %s=%s", n, render.LabelManagedBy, render.ManagedByValue)
	before, err := footprint(cluster, st, "before the tenant's ConfigMaps", objects)
	if err != nil || before == nil {
		return nil, err
	}
	prints = append(prints, *before)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bench-tenant-inflate"}}
	if err := c.Create(ctx, ns); err != nil {
		return nil, err
	}
	defer func() { _ = c.Delete(context.Background(), ns) }()
	blob := strings.Repeat("x", 100<<10)
	if err := inParallel(n, 8, func(i int) error {
		return c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("inflate-%d", i), Namespace: ns.Name,
			Labels: map[string]string{render.LabelManagedBy: render.ManagedByValue}}, Data: map[string]string{"blob": blob}})
	}); err != nil {
		return nil, fmt.Errorf("create the tenant's ConfigMaps: %w", err)
	}
	// Every ConfigMap is stored (the list proves it); the operator had
	// the events in flight for as long as the creates took.
	list := &corev1.ConfigMapList{}
	if err := c.List(ctx, list, client.InNamespace(ns.Name), client.MatchingLabels{render.LabelManagedBy: render.ManagedByValue}); err != nil {
		return nil, err
	}
	if len(list.Items) != n {
		return nil, fmt.Errorf("stored %d of %d ConfigMaps", len(list.Items), n)
	}
	after, err := footprint(cluster, st, "after the tenant's ConfigMaps", objects)
	if err != nil {
		return nil, err
	}
	return append(prints, *after), nil
}

// inParallel runs do(0) … do(n-1) on the given number of workers and
// returns the first error.
func inParallel(n, workers int, do func(i int) error) error {
	var wg sync.WaitGroup
	errs := make(chan error, n)
	work := make(chan int)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				if err := do(i); err != nil {
					errs <- err
				}
			}
		}()
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	return <-errs
}
