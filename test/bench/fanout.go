package main

import (
	"context"
	"fmt"
	"os"
	"sort"
	"text/tabwriter"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
)

// benchPolicy is the OpenShellPolicy every benchmark sandbox references,
// so that the create path includes the policy and fan-out can be measured.
const benchPolicy = "bench-policy"

func newBenchPolicy(ns string) *openshellv1alpha1.OpenShellPolicy {
	return &openshellv1alpha1.OpenShellPolicy{ObjectMeta: metav1.ObjectMeta{Name: benchPolicy, Namespace: ns},
		Spec: openshellv1alpha1.OpenShellPolicySpec{Filesystem: &openshellv1alpha1.FilesystemPolicy{
			ReadOnly: []string{"/usr", "/lib", "/etc"}, ReadWrite: []string{"/tmp"}}}}
}

// FanoutResult is the time from one policy edit to every sandbox that
// references it reporting the new policy applied.
type FanoutResult struct {
	Sandboxes int           `json:"sandboxes"`
	Applied   int           `json:"applied"`
	First     time.Duration `json:"first"`
	P50       time.Duration `json:"p50"`
	All       time.Duration `json:"all"`
}

// measureFanout edits the policy of namespace ns and watches until every
// sandbox there has a newer policy version and Synced=True.
func measureFanout(ctx context.Context, c client.Client, w client.WithWatch, ns string) (FanoutResult, error) {
	list := &openshellv1alpha1.OpenShellSandboxList{}
	if err := c.List(ctx, list, client.InNamespace(ns)); err != nil {
		return FanoutResult{}, err
	}
	before := map[string]int64{}
	for _, sb := range list.Items {
		before[sb.Name] = sb.Status.PolicyVersion
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	wi, err := w.Watch(wctx, &openshellv1alpha1.OpenShellSandboxList{}, client.InNamespace(ns),
		&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.ResourceVersion}})
	if err != nil {
		return FanoutResult{}, err
	}
	defer wi.Stop()

	pol := &openshellv1alpha1.OpenShellPolicy{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: benchPolicy}, pol); err != nil {
		return FanoutResult{}, err
	}
	pol.Spec.Filesystem.ReadWrite = append(pol.Spec.Filesystem.ReadWrite, fmt.Sprintf("/var/tmp/edit-%d", time.Now().UnixNano()))
	start := time.Now()
	if err := c.Update(ctx, pol); err != nil {
		return FanoutResult{}, fmt.Errorf("edit policy: %w", err)
	}
	applied := map[string]time.Duration{}
	for ev := range wi.ResultChan() {
		if ev.Type != watch.Modified {
			continue
		}
		sb, ok := ev.Object.(*openshellv1alpha1.OpenShellSandbox)
		if !ok {
			continue
		}
		synced := meta.IsStatusConditionTrue(sb.Status.Conditions, openshellv1alpha1.ConditionSynced)
		if _, done := applied[sb.Name]; !done && synced && sb.Status.PolicyVersion > before[sb.Name] {
			applied[sb.Name] = time.Since(start)
		}
		if len(applied) == len(before) {
			break
		}
	}
	lat := make([]time.Duration, 0, len(applied))
	for _, d := range applied {
		lat = append(lat, d)
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	r := FanoutResult{Sandboxes: len(before), Applied: len(lat), P50: pct(lat, 50)}
	if len(lat) > 0 {
		r.First, r.All = lat[0], lat[len(lat)-1]
	}
	return r, nil
}

func printFanout(f *os.File, rs []FanoutResult) {
	if len(rs) == 0 {
		return
	}
	fmt.Fprintf(f, "\nPolicy fan-out: one OpenShellPolicy edit, every sandbox referencing it reports it applied (Synced)\n\n")
	w := tabwriter.NewWriter(f, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "sandboxes\tapplied\tfirst\tp50\tall\t")
	for _, r := range rs {
		fmt.Fprintf(w, "%d\t%d\t%s\t%s\t%s\t\n", r.Sandboxes, r.Applied, r.First.Round(time.Millisecond),
			r.P50.Round(time.Millisecond), r.All.Round(time.Millisecond))
	}
	_ = w.Flush()
}
