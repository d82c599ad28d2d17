package relayscale

import (
	"time"

	"github.com/openshell/openshell-operator/internal/relayload"
)

// sample is the replicas the sessions needed from at until the next
// sample.
type sample struct {
	at       time.Time
	replicas int32
}

// decision is what to do now: the replicas to set, and when to look again
// (0: not until the sessions change).
type decision struct {
	replicas int32
	recheck  time.Duration
}

// decide scales up to the latest recommendation at once, and down only as
// far as every recommendation of the last ScaleDownDelay allows, as the
// HorizontalPodAutoscaler's stabilization window does: a burst of
// sessions that ends does not take replicas, and their sessions, away
// until the delay has shown it was not a lull. history is in time order,
// the latest recommendation last. Pure.
func decide(current int32, history []sample, now time.Time, p relayload.Scaling) decision {
	latest := history[len(history)-1].replicas
	if latest >= current {
		return decision{replicas: latest}
	}
	since := now.Add(-p.ScaleDownDelay)
	want, recheck := latest, time.Duration(0)
	for i, s := range history {
		until := now // the last sample holds until now
		if i+1 < len(history) {
			until = history[i+1].at
		}
		if !until.After(since) || s.replicas <= latest {
			continue
		}
		// Still in the window: it holds the replicas up until it leaves.
		want = max(want, min(s.replicas, current))
		if left := until.Sub(since); recheck == 0 || left < recheck {
			recheck = left
		}
	}
	return decision{replicas: want, recheck: recheck}
}

// prune drops the samples that ended before the window: the last is
// always kept.
func prune(history []sample, now time.Time, delay time.Duration) []sample {
	since := now.Add(-delay)
	for len(history) > 1 && !history[1].at.After(since) {
		history = history[1:]
	}
	return history
}

// step limits a scale-up to one replica above those available, so that
// the Deployment stays Available while the new pod starts (its
// maxUnavailable, config/relay/deployment.yaml, allows one of three or
// more): OLM turns a Succeeded CSV whose Deployment is not Available
// Failed, and reinstalling it would put the CSV's replicas back. Scaling
// down is not limited. Pure.
func step(current, available, want int32) int32 {
	if want <= current {
		return want
	}
	return max(current, min(want, available+1))
}
