// Package monitoring exports the domain metrics an SRE alerts on — the
// state the operator sees, read from its cache when Prometheus scrapes —
// and ships the alerting rules over them (rules.yaml, a PrometheusRule,
// unit-tested with promtool). Labels stay low-cardinality: gateways and
// Secrets by namespace/name, never sandbox names.
//
// Gateway RPC counts and latencies are recorded where the calls are made
// (internal/gatewayapi), image-policy denials where admission decides
// (internal/webhook); reconcile errors are controller-runtime's own
// controller_runtime_reconcile_errors_total.
package monitoring

import (
	"context"
	_ "embed"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/pki"
	"github.com/openshell/openshell-operator/internal/preflight"
	render "github.com/openshell/openshell-operator/internal/render/gateway"
)

// Rules is the PrometheusRule (YAML) with the operator's alerts.
//
//go:embed rules.yaml
var Rules []byte

// Metric names, shared with the rules and their tests.
const (
	MetricSandboxes          = "openshell_operator_sandboxes"
	MetricGatewayUp          = "openshell_operator_gateway_up"
	MetricCertificateExpiry  = "openshell_operator_certificate_expiry_timestamp_seconds"
	MetricSigningKeyAge      = "openshell_operator_oidc_signing_key_age_seconds"
	MetricAgentSandbox       = "openshell_operator_agent_sandbox_available"
	MetricImagePolicyDenials = "openshell_operator_image_policy_denials_total"
	MetricForceReleases      = "openshell_operator_sandbox_force_releases_total"
	MetricOrphansSwept       = "openshell_operator_orphans_swept_total"
	MetricSweepSeconds       = "openshell_operator_orphan_sweep_seconds"
)

var (
	sandboxesDesc = prometheus.NewDesc(MetricSandboxes,
		"OpenShellSandboxes by gateway (namespace/name) and phase.", []string{"gateway", "phase"}, nil)
	gatewayUpDesc = prometheus.NewDesc(MetricGatewayUp,
		"1 when the OpenShellGateway is Available, 0 otherwise.", []string{"gateway", "mode"}, nil)
	certExpiryDesc = prometheus.NewDesc(MetricCertificateExpiry,
		"notAfter (Unix seconds) of each gateway certificate the operator issues or cert-manager issues for it.",
		[]string{"namespace", "secret"}, nil)
	keyAgeDesc = prometheus.NewDesc(MetricSigningKeyAge,
		"Seconds since the operator's OIDC signing key last rotated.", nil, nil)
	agentSandboxDesc = prometheus.NewDesc(MetricAgentSandbox,
		"1 when the Agent Sandbox CRD is served, 0 when it is missing.", nil, nil)
)

// imagePolicyDenials counts images refused (Enforce) or warned about
// (Warn) at admission, by reason.
var imagePolicyDenials = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: MetricImagePolicyDenials,
	Help: "Sandbox images refused or warned about at admission by the image policy, by reason and enforcement mode.",
}, []string{"reason", "mode"})

// forceReleases counts sandboxes released without the gateway confirming
// their deletion: the force-release annotation (each one is swept at the
// gateway once it answers: orphansSwept, sweepSeconds), a gateway object
// deleted first, or a gateway the operator no longer serves.
var (
	forceReleases = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: MetricForceReleases,
		Help: "OpenShellSandboxes released without their gateway confirming the deletion (force-release annotation, gateway object gone, gateway no longer served), by gateway.",
	}, []string{"gateway"})
	orphansSwept = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: MetricOrphansSwept,
		Help: "Gateway sandboxes the operator created and deleted by a sweep because their OpenShellSandbox was gone, by gateway.",
	}, []string{"gateway"})
	sweepSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    MetricSweepSeconds,
		Help:    "Seconds from a sweep being asked for (a force-release, a start) to the sweep that deleted what was left, by gateway.",
		Buckets: prometheus.ExponentialBuckets(0.1, 4, 8),
	}, []string{"gateway"})
)

func init() {
	ctrlmetrics.Registry.MustRegister(imagePolicyDenials, forceReleases, orphansSwept, sweepSeconds)
}

// SandboxForceReleased counts one force-release on a gateway.
func SandboxForceReleased(gateway string) { forceReleases.WithLabelValues(gateway).Inc() }

// OrphansSwept records a sweep of a gateway that deleted n sandboxes,
// took after it was asked for.
func OrphansSwept(gateway string, n int, took time.Duration) {
	orphansSwept.WithLabelValues(gateway).Add(float64(n))
	sweepSeconds.WithLabelValues(gateway).Observe(took.Seconds())
}

// ImagePolicyDenied counts one image-policy denial.
func ImagePolicyDenied(reason string, mode openshellv1alpha1.ImagePolicyMode) {
	imagePolicyDenials.WithLabelValues(reason, string(mode)).Inc()
}

// current is the Collector the registered one reads through: every
// manager (tests start several in one process) uses the latest.
var current atomic.Pointer[Collector]

type proxy struct{}

func (proxy) Describe(ch chan<- *prometheus.Desc) { (&Collector{}).Describe(ch) }
func (proxy) Collect(ch chan<- prometheus.Metric) {
	if c := current.Load(); c != nil {
		c.Collect(ch)
	}
}

var registerOnce sync.Once

// Use makes c the source of the domain metrics on controller-runtime's
// registry (served by the manager's metrics endpoint).
func Use(c *Collector) {
	current.Store(c)
	registerOnce.Do(func() { ctrlmetrics.Registry.MustRegister(proxy{}) })
}

// Collector reports gateways, sandboxes, certificates, the signing key and
// the Agent Sandbox CRD from the operator's cache at scrape time.
type Collector struct {
	Reader    client.Reader
	Preflight interface {
		Get() (preflight.Result, bool)
	}
	// RotatedAt is when the OIDC signing key last rotated (nil: no issuer).
	RotatedAt func() time.Time
	Now       func() time.Time
}

// Describe sends the descriptors.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{sandboxesDesc, gatewayUpDesc, certExpiryDesc, keyAgeDesc, agentSandboxDesc} {
		ch <- d
	}
}

// Collect reads the cache; a read that fails leaves its metric out (the
// scrape still succeeds, and a missing series is what absent() alerts on).
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	now := time.Now
	if c.Now != nil {
		now = c.Now
	}
	gateways := &openshellv1alpha1.OpenShellGatewayList{}
	known := map[string]bool{}
	if err := c.Reader.List(ctx, gateways); err == nil {
		for _, gw := range gateways.Items {
			known[gw.Namespace+"/"+gw.Name] = true
			up := 0.0
			if meta.IsStatusConditionTrue(gw.Status.Conditions, openshellv1alpha1.ConditionAvailable) {
				up = 1
			}
			mode := string(gw.Spec.Mode)
			if mode == "" {
				mode = string(openshellv1alpha1.GatewayModeManaged)
			}
			ch <- prometheus.MustNewConstMetric(gatewayUpDesc, prometheus.GaugeValue, up, gw.Namespace+"/"+gw.Name, mode)
		}
	}
	sandboxes := &openshellv1alpha1.OpenShellSandboxList{}
	if err := c.Reader.List(ctx, sandboxes); err == nil {
		for k, n := range countSandboxes(sandboxes.Items, known) {
			ch <- prometheus.MustNewConstMetric(sandboxesDesc, prometheus.GaugeValue, float64(n), k.gateway, k.phase)
		}
	}
	secrets := &corev1.SecretList{}
	if err := c.Reader.List(ctx, secrets, client.MatchingLabels{render.LabelManagedBy: render.ManagedByValue, render.LabelComponent: "tls"}); err == nil {
		for _, s := range secrets.Items {
			cert, err := pki.ParseCert(s.Data[corev1.TLSCertKey])
			if err != nil {
				continue
			}
			ch <- prometheus.MustNewConstMetric(certExpiryDesc, prometheus.GaugeValue, float64(cert.NotAfter.Unix()), s.Namespace, s.Name)
		}
	}
	if c.RotatedAt != nil {
		if at := c.RotatedAt(); !at.IsZero() {
			ch <- prometheus.MustNewConstMetric(keyAgeDesc, prometheus.GaugeValue, now().Sub(at).Seconds())
		}
	}
	if c.Preflight != nil {
		if pf, known := c.Preflight.Get(); known {
			v := 0.0
			if pf.AgentSandbox.Available {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(agentSandboxDesc, prometheus.GaugeValue, v)
		}
	}
}

type sandboxKey struct{ gateway, phase string }

// UnknownGateway labels sandboxes whose gateway does not exist: the
// gateway reference is the tenant's to write, so naming it would let a
// tenant add series at will.
const UnknownGateway = "unknown"

// countSandboxes groups sandboxes by gateway (one of known, else
// UnknownGateway) and phase. Pure.
func countSandboxes(items []openshellv1alpha1.OpenShellSandbox, known map[string]bool) map[sandboxKey]int {
	out := map[sandboxKey]int{}
	for _, sb := range items {
		gw := sb.GatewayKey().String()
		if !known[gw] {
			gw = UnknownGateway
		}
		phase := string(sb.Status.Phase)
		if phase == "" {
			phase = string(openshellv1alpha1.SandboxPhasePending)
		}
		out[sandboxKey{gateway: gw, phase: phase}]++
	}
	return out
}
