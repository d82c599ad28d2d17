package preflight

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// capabilityGauge is 1 when a capability is available and 0 when not.
var capabilityGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "openshell_operator_capability_available",
	Help: "Whether a cluster capability the operator uses is available (1) or not (0).",
}, []string{"capability"})

func init() {
	metrics.Registry.MustRegister(capabilityGauge)
}

// RecordMetrics sets one gauge per capability.
func RecordMetrics(r Result) {
	for name, ok := range r.Capabilities() {
		v := 0.0
		if ok {
			v = 1
		}
		capabilityGauge.WithLabelValues(name).Set(v)
	}
}

// CapabilityGauge returns the gauge for one capability (for tests).
func CapabilityGauge(name string) prometheus.Gauge {
	return capabilityGauge.WithLabelValues(name)
}
