package main

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// apiRequests reads apiserver_request_total from the API server and sums
// it by "VERB resource[/subresource]" (every client, watches included).
func apiRequests(ctx context.Context, cfg *rest.Config) (map[string]int, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	raw, err := cs.RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("read API server metrics: %w", err)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(string(raw)))
	if err != nil {
		return nil, fmt.Errorf("parse API server metrics: %w", err)
	}
	out := map[string]int{}
	for _, m := range mfs["apiserver_request_total"].GetMetric() {
		l := map[string]string{}
		for _, lp := range m.GetLabel() {
			l[lp.GetName()] = lp.GetValue()
		}
		key := l["verb"] + " " + l["resource"]
		if l["subresource"] != "" {
			key += "/" + l["subresource"]
		}
		out[key] += int(m.GetCounter().GetValue())
	}
	return out, nil
}

// printAPIRequests lists the API server requests of each run, the
// busiest first.
func printAPIRequests(f *os.File, rs []Result) {
	if len(rs) == 0 || rs[0].APIRequests == nil {
		return
	}
	keys := map[string]int{}
	for _, r := range rs {
		for k, v := range r.APIRequests {
			keys[k] += v
		}
	}
	order := make([]string, 0, len(keys))
	for k, v := range keys {
		if v >= 10 {
			order = append(order, k)
		}
	}
	sort.Slice(order, func(i, j int) bool { return keys[order[i]] > keys[order[j]] })
	fmt.Fprintf(f, "\nAPI server requests during each run, all clients (apiserver_request_total; 10 or more)\n\n")
	w := tabwriter.NewWriter(f, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(w, "request\t")
	for _, r := range rs {
		fmt.Fprintf(w, "%s %d\t", r.Path, r.N)
	}
	fmt.Fprintln(w)
	for _, k := range order {
		fmt.Fprintf(w, "%s\t", k)
		for _, r := range rs {
			fmt.Fprintf(w, "%d\t", r.APIRequests[k])
		}
		fmt.Fprintln(w)
	}
	_ = w.Flush()
}

// profileAPIServer records a CPU profile of the API server for seconds
// into file (BENCH_PROFILE); the returned function waits for it.
func profileAPIServer(ctx context.Context, cfg *rest.Config, seconds int, file string) func() error {
	done := make(chan error, 1)
	go func() {
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			done <- err
			return
		}
		raw, err := cs.RESTClient().Get().AbsPath("/debug/pprof/profile").Param("seconds", fmt.Sprint(seconds)).DoRaw(ctx)
		if err != nil {
			done <- fmt.Errorf("profile the API server: %w", err)
			return
		}
		done <- os.WriteFile(file, raw, 0o644)
	}()
	return func() error { return <-done }
}
