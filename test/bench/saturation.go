package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"sync"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// SaturationStep is one offered rate on one path.
type SaturationStep struct {
	Rate    int `json:"rate"`
	Created int `json:"created"`
	// CreateRate is the rate the creator achieved (it falls behind when
	// the API server does not keep up with the creates themselves).
	CreateRate float64 `json:"createRatePerSecond"`
	// ReadyRate is how many objects per second became ready in the second
	// half of the window: the offered rate while the path keeps pace, its
	// capacity once it does not.
	ReadyRate float64       `json:"readyRatePerSecond"`
	P50       time.Duration `json:"p50"`
	Sustained bool          `json:"sustained"`
}

// SaturationResult is one path's search for its maximum sustained rate.
type SaturationResult struct {
	Path  string           `json:"path"`
	Steps []SaturationStep `json:"steps"`
	// MaxSustained is the highest offered rate the path kept pace with.
	MaxSustained int `json:"maxSustainedPerSecond"`
	// Capacity is the ready rate at the first rate it did not keep pace
	// with (0 if it kept pace with every rate tried).
	Capacity float64 `json:"capacityPerSecond"`
}

// keepsPace is how close to the offered rate both the creates and the
// readiness must come for a rate to count as sustained.
const keepsPace = 0.95

// saturate offers the path rising rates (each 20 % above the last) for
// window each, in a namespace per step, until it no longer keeps pace; then
// the rates between the last it kept pace with and that one, one by one.
func saturate(ctx context.Context, c client.Client, w client.WithWatch, name string, p path, from, limit int, window time.Duration) (SaturationResult, error) {
	res := SaturationResult{Path: name}
	try := func(rate int) (bool, error) {
		step, err := saturationStep(ctx, c, w, name, p, rate, window)
		if err != nil {
			return false, err
		}
		res.Steps = append(res.Steps, step)
		fmt.Printf("  saturation %-8s offered %3d/s: created %.1f/s, ready %.1f/s, p50 %s\n", name, rate, step.CreateRate, step.ReadyRate, step.P50.Round(time.Millisecond))
		if step.Sustained {
			res.MaxSustained = rate
		} else {
			res.Capacity = step.ReadyRate
		}
		return step.Sustained, nil
	}
	failed := 0
	for rate := from; rate <= limit; rate = max(rate+1, int(math.Ceil(float64(rate)*1.2))) {
		ok, err := try(rate)
		if err != nil {
			return res, err
		}
		if !ok {
			failed = rate
			break
		}
	}
	for rate := res.MaxSustained + 1; failed > 0 && rate < failed; rate++ {
		ok, err := try(rate)
		if err != nil || !ok {
			return res, err
		}
	}
	return res, nil
}

// saturationStep offers one rate for window in a namespace of its own.
func saturationStep(ctx context.Context, c client.Client, w client.WithWatch, name string, p path, rate int, window time.Duration) (SaturationStep, error) {
	ns := fmt.Sprintf("sat-%s-%d", name, rate)
	n := int(window.Seconds() * float64(rate))
	o, err := offer(ctx, c, w, p, ns, rate, n, 4*window+5*time.Minute)
	if err != nil {
		return SaturationStep{}, fmt.Errorf("%s at %d/s: %w", name, rate, err)
	}
	half := window / 2
	s := SaturationStep{Rate: rate, Created: n, CreateRate: o.createRate(),
		ReadyRate: float64(o.tracker.readyBetween(o.start.Add(half), o.start.Add(window))) / half.Seconds(), P50: pct(o.tracker.latencies(), 50)}
	s.Sustained = s.CreateRate >= keepsPace*float64(rate) && s.ReadyRate >= keepsPace*float64(rate)
	return s, nil
}

// offered is one run of the concurrent creator.
type offered struct {
	tracker    *tracker
	n          int
	start      time.Time
	offeredFor time.Duration
	wall       time.Duration
}

func (o offered) createRate() float64 { return float64(o.n) / o.offeredFor.Seconds() }

// offer creates n objects of the path in a new namespace ns at rate,
// concurrently (a slow create must not lower the offered rate; at most 64
// in flight), and waits until every one is ready or timeout passes.
func offer(ctx context.Context, c client.Client, w client.WithWatch, p path, ns string, rate, n int, timeout time.Duration) (offered, error) {
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		return offered{}, err
	}
	if p.setup != nil {
		if err := p.setup(ctx, c, ns); err != nil {
			return offered{}, fmt.Errorf("set up %s: %w", ns, err)
		}
	}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tr, stop, err := track(wctx, w, p, ns, n)
	if err != nil {
		return offered{}, err
	}
	defer stop()
	var (
		wg       sync.WaitGroup
		errMu    sync.Mutex
		firstErr error
	)
	inFlight := make(chan struct{}, 64)
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	start := time.Now()
	for i := 0; i < n; i++ {
		<-tick.C
		inFlight <- struct{}{}
		tr.markCreated(fmt.Sprintf("%s%d", p.prefix, i))
		wg.Add(1)
		go func(i int) {
			defer func() { <-inFlight; wg.Done() }()
			if err := p.create(ctx, c, ns, i); err != nil {
				errMu.Lock()
				firstErr = errors.Join(firstErr, fmt.Errorf("create %d: %w", i, err))
				errMu.Unlock()
			}
		}(i)
	}
	o := offered{tracker: tr, n: n, start: start, offeredFor: time.Since(start)}
	wg.Wait()
	if firstErr != nil {
		return offered{}, firstErr
	}
	tr.wait(wctx)
	o.wall = time.Since(start)
	if got := len(tr.latencies()); got != n {
		return offered{}, fmt.Errorf("%d of %d ready in %s", got, n, timeout)
	}
	return o, nil
}

func printSaturation(f *os.File, rs []SaturationResult) {
	if len(rs) == 0 {
		return
	}
	fmt.Fprintf(f, "\nSaturation: rising offered rates until Ready no longer keeps pace (≥ %.0f %% of the rate, creates and readiness)\n\n", keepsPace*100)
	w := tabwriter.NewWriter(f, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "path\toffered/s\tcreated/s\tready/s\tp50\tsustained\t")
	for _, r := range rs {
		for _, s := range r.Steps {
			fmt.Fprintf(w, "%s\t%d\t%.1f\t%.1f\t%s\t%v\t\n", r.Path, s.Rate, s.CreateRate, s.ReadyRate, s.P50.Round(time.Millisecond), s.Sustained)
		}
	}
	_ = w.Flush()
	var raw, op *SaturationResult
	for i := range rs {
		switch rs[i].Path {
		case "raw":
			raw = &rs[i]
		case "operator":
			op = &rs[i]
		}
	}
	if raw == nil || op == nil {
		return
	}
	fmt.Fprintf(f, "\n  max sustained: raw %d/s, operator %d/s", raw.MaxSustained, op.MaxSustained)
	if raw.MaxSustained > 0 {
		fmt.Fprintf(f, " (ratio %.2f)", float64(op.MaxSustained)/float64(raw.MaxSustained))
	}
	fmt.Fprintf(f, "\n  capacity (ready rate when overloaded): raw %.1f/s, operator %.1f/s", raw.Capacity, op.Capacity)
	if raw.Capacity > 0 && op.Capacity > 0 {
		fmt.Fprintf(f, " (ratio %.2f; target ≥ 0.90)", op.Capacity/raw.Capacity)
	}
	fmt.Fprintln(f)
}
