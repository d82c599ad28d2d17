package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"text/tabwriter"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/openshell/openshell-operator/test/framework"
)

// apiRequests reads the API server's requests so far by verb and resource.
func apiRequests(ctx context.Context, cfg *rest.Config) (map[string]int, error) {
	return framework.APIServerRequests(ctx, cfg)
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
	return saveProfile(file, func() ([]byte, error) {
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return nil, err
		}
		raw, err := cs.RESTClient().Get().AbsPath("/debug/pprof/profile").Param("seconds", fmt.Sprint(seconds)).DoRaw(ctx)
		if err != nil {
			return nil, fmt.Errorf("profile the API server: %w", err)
		}
		return raw, nil
	})
}

// profileURL records a CPU profile for seconds from a net/http/pprof
// endpoint into file; the returned function waits for it.
func profileURL(ctx context.Context, url string, seconds int, file string) func() error {
	return saveProfile(file, func() ([]byte, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s?seconds=%d", url, seconds), nil)
		if err != nil {
			return nil, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, fmt.Errorf("profile %s: %w", url, err)
		}
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("profile %s: %s", url, resp.Status)
		}
		return raw, err
	})
}

// saveProfile runs fetch in the background (a CPU profile takes as long
// as it records) and writes what it returns to file; the returned
// function waits for it.
func saveProfile(file string, fetch func() ([]byte, error)) func() error {
	done := make(chan error, 1)
	go func() {
		raw, err := fetch()
		if err == nil {
			err = os.WriteFile(file, raw, 0o644)
		}
		done <- err
	}()
	return func() error { return <-done }
}
