package framework

import (
	"context"
	"fmt"
	"strings"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// ReconcileCount sums controller_runtime_reconcile_total for one controller
// (all results), or for every controller when controller is empty. Tests
// and benchmarks use it to see whether anything reconciled, not only
// whether anything was written.
func ReconcileCount(controller string) float64 {
	return sumCounter("controller_runtime_reconcile_total", controller)
}

// ReconcileErrors sums controller_runtime_reconcile_errors_total for one
// controller: reconciles that returned an error (a status patch conflict,
// say), which a reconciler that reads its own writes correctly never has
// on the normal path.
func ReconcileErrors(controller string) float64 {
	return sumCounter("controller_runtime_reconcile_errors_total", controller)
}

// sumCounter sums a counter over the series of one controller (all when
// controller is empty).
func sumCounter(name, controller string) float64 {
	mfs, _ := metrics.Registry.Gather()
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if controller == "" || hasLabel(m.GetLabel(), "controller", controller) {
				total += m.GetCounter().GetValue()
			}
		}
	}
	return total
}

func hasLabel[L interface {
	GetName() string
	GetValue() string
}](labels []L, name, value string) bool {
	for _, l := range labels {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}

// GatewayCalls counts this process's calls to the gateway at endpoint
// (https://host:port) by gRPC code, from
// openshell_operator_gateway_requests_total.
func GatewayCalls(endpoint string) map[string]float64 {
	host := strings.TrimPrefix(endpoint, "https://")
	out := map[string]float64{}
	mfs, _ := metrics.Registry.Gather()
	for _, mf := range mfs {
		if mf.GetName() != "openshell_operator_gateway_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if !hasLabel(m.GetLabel(), "gateway", host) {
				continue
			}
			for _, l := range m.GetLabel() {
				if l.GetName() == "code" {
					out[l.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}

// APIServerRequests reads apiserver_request_total from the API server and
// sums it by "VERB resource[/subresource]", every client together.
func APIServerRequests(ctx context.Context, cfg *rest.Config) (map[string]int, error) {
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
