package main

import (
	"testing"
	"time"
)

func TestRequestFloors(t *testing.T) {
	costs := []RequestCost{
		{Request: "POST configmaps", P50: time.Millisecond, APIServerCPU: time.Millisecond},
		{Request: costCreate, P50: 6 * time.Millisecond, APIServerCPU: 3 * time.Millisecond, EtcdCPU: time.Millisecond},
		{Request: costStatusPatch, P50: 5 * time.Millisecond, APIServerCPU: 7 * time.Millisecond, EtcdCPU: time.Millisecond},
	}
	cpu := func(d time.Duration) map[string]time.Duration {
		return map[string]time.Duration{"kube-apiserver": d / 2, "etcd": d / 2}
	}
	results := []Result{
		{Path: "raw", N: 100, CPU: cpu(5 * time.Second)},
		{Path: "operator", N: 100, CPU: cpu(7 * time.Second)},
		{Path: "raw", N: 1000, CPU: cpu(100 * time.Second)},
		{Path: "operator", N: 1000, CPU: cpu(120 * time.Second)},
	}
	fl, ok := requestFloors(costs, results)
	if !ok {
		t.Fatal("floors not computed")
	}
	want := floors{latency: 11 * time.Millisecond, requestCPU: 12 * time.Millisecond, rawCPU: 100 * time.Millisecond,
		operatorCPU: 120 * time.Millisecond, n: 1000}
	if fl != want {
		t.Errorf("floors = %+v, want %+v", fl, want)
	}
	// The largest raw run without its operator run gives no operator figure.
	fl, _ = requestFloors(costs, append(results, Result{Path: "raw", N: 2000, CPU: cpu(time.Second)}))
	if fl.n != 2000 || fl.operatorCPU != 0 {
		t.Errorf("floors = %+v, want n 2000 and no operator CPU", fl)
	}
	if _, ok := requestFloors(costs[:1], results); ok {
		t.Error("floors computed without the operator path's two requests")
	}
}

func TestRecheckRates(t *testing.T) {
	timers, steady := recheckRates(1000, 1000, 2, time.Minute)
	// 2 replicas × 1,000 memberships every 2 s + 1,000 sessions every 5 s;
	// 3,000 answers once a minute.
	if timers != 1200 || steady != 50 {
		t.Errorf("recheckRates = %v, %v; want 1200, 50", timers, steady)
	}
}
