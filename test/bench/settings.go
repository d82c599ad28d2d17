package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/openshell/openshell-operator/test/framework"
)

// settings are the benchmark's knobs, from the environment (see the
// package doc); the defaults keep `make bench` short on two cores.
type settings struct {
	sizes                   []int
	rate                    int
	steady                  time.Duration
	inflate, admission      int
	secretAttack            bool
	saturationFrom          int
	saturationWindow        time.Duration
	scale, scaleRate        int
	requestCost             int
	fanoutQPS               []int
	goBench                 []GoBench
	out, mode, operatorArgs string
}

func readSettings() (settings, error) {
	s := settings{out: os.Getenv("BENCH_OUT"), mode: os.Getenv("BENCH_OPERATOR"), operatorArgs: os.Getenv("BENCH_OPERATOR_ARGS")}
	var errs []error
	ints := func(name, def string) []int {
		v := os.Getenv(name)
		if v == "" {
			v = def
		}
		var out []int
		for _, f := range strings.Split(v, ",") {
			if f = strings.TrimSpace(f); f == "" {
				continue
			}
			n, err := strconv.Atoi(f)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", name, err))
			}
			out = append(out, n)
		}
		return out
	}
	one := func(name string, def int) int {
		if v := ints(name, strconv.Itoa(def)); len(v) == 1 {
			return v[0]
		}
		errs = append(errs, fmt.Errorf("%s: want one number", name))
		return def
	}
	duration := func(name string, def time.Duration) time.Duration {
		v := os.Getenv(name)
		if v == "" {
			return def
		}
		d, err := time.ParseDuration(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
		return d
	}
	s.sizes, s.rate = ints("BENCH_N", "100"), one("BENCH_RATE", 10)
	s.steady = duration("BENCH_STEADY", 30*time.Second)
	s.inflate, s.admission = one("BENCH_INFLATE", 1000), one("BENCH_ADMISSION", 200)
	s.secretAttack = one("BENCH_SECRET_ATTACK", 1) != 0
	s.saturationFrom, s.saturationWindow = one("BENCH_SATURATION", 10), duration("BENCH_SATURATION_WINDOW", 20*time.Second)
	s.scale, s.scaleRate = one("BENCH_SCALE", 0), one("BENCH_SCALE_RATE", s.rate)
	s.fanoutQPS = ints("BENCH_FANOUT_QPS", "")
	s.requestCost = one("BENCH_REQUEST_COST", 200)
	if len(errs) > 0 {
		return s, errs[0]
	}
	if v := os.Getenv("BENCH_GO_RESULTS"); v != "" {
		var err error
		if s.goBench, err = readGoBench(v); err != nil {
			return s, fmt.Errorf("BENCH_GO_RESULTS: %w", err)
		}
	}
	if s.out == "" {
		s.out = filepath.Join(framework.RepoRoot(), "bench", "results")
	}
	if s.mode == "" {
		s.mode = "process"
	}
	return s, nil
}
