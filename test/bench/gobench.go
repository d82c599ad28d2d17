package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
)

// GoBench is one line of `go test -bench` output that make bench hands
// over (BENCH_GO_RESULTS), so the image-policy figures appear in the same
// report as the cluster ones.
type GoBench struct {
	Name    string             `json:"name"`
	Metrics map[string]float64 `json:"metrics"`
}

// readGoBench parses the benchmark lines of a `go test -bench` output:
// name, iterations, then value/unit pairs.
func readGoBench(path string) ([]GoBench, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []GoBench
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 4 || !strings.HasPrefix(fields[0], "Benchmark") {
			continue
		}
		b := GoBench{Name: fields[0], Metrics: map[string]float64{}}
		for i := 2; i+1 < len(fields); i += 2 {
			v, err := strconv.ParseFloat(fields[i], 64)
			if err != nil {
				return nil, fmt.Errorf("%s: value %q: %w", fields[0], fields[i], err)
			}
			b.Metrics[fields[i+1]] = v
		}
		out = append(out, b)
	}
	return out, sc.Err()
}

func printGoBench(f *os.File, bs []GoBench) {
	printGoBenchGroup(f, bs, "BenchmarkEvaluate/", "Image policy decisions (Go benchmarks, same machine)", "decisions/s")
	printGoBenchGroup(f, bs, "BenchmarkSandboxAdmission/",
		"Sandbox admission through the webhook's HTTP handler, 1,000-entry policy (Go benchmark, same machine)", "reviews/s")
}

func printGoBenchGroup(f *os.File, bs []GoBench, prefix, title, rate string) {
	var rows []GoBench
	for _, b := range bs {
		if strings.HasPrefix(b.Name, prefix) {
			rows = append(rows, b)
		}
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(f, "\n%s\n\n", title)
	w := tabwriter.NewWriter(f, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "case\tns/op\t%s\tB/op\tallocs/op\t\n", rate)
	for _, b := range rows {
		name := strings.TrimPrefix(b.Name, prefix)
		if i := strings.LastIndex(name, "-"); i > 0 {
			name = name[:i] // the GOMAXPROCS suffix
		}
		perSec := b.Metrics[rate]
		if perSec == 0 && b.Metrics["ns/op"] > 0 {
			perSec = 1e9 / b.Metrics["ns/op"]
		}
		fmt.Fprintf(w, "%s\t%.0f\t%.0f\t%.0f\t%.0f\t\n", name, b.Metrics["ns/op"], perSec, b.Metrics["B/op"], b.Metrics["allocs/op"])
	}
	_ = w.Flush()
}
