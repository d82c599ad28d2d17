// Package alerting installs the operator's alerting rules
// (internal/monitoring's PrometheusRule) in the operator's namespace
// wherever the Prometheus Operator's API is served — on OpenShift, its
// cluster monitoring — and nowhere else: like Routes, preflight decides.
// The rules ship inside the binary, so they always match the metrics this
// version exports; an upgrade applies the new ones.
package alerting

import (
	"context"
	"fmt"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/source"
	"sigs.k8s.io/yaml"

	"github.com/openshell/openshell-operator/controllers/internal/enqueue"
	"github.com/openshell/openshell-operator/internal/apply"
	"github.com/openshell/openshell-operator/internal/monitoring"
	"github.com/openshell/openshell-operator/internal/preflight"
)

// +kubebuilder:rbac:groups=monitoring.coreos.com,resources=prometheusrules,verbs=create;patch,namespace=system

// Reconciler keeps the operator's PrometheusRule.
type Reconciler struct {
	Client    client.Client
	Preflight *preflight.Store
	// Namespace is the operator's namespace.
	Namespace string
}

// Rule renders the PrometheusRule for namespace: pure.
func Rule(namespace string) (*monitoringv1.PrometheusRule, error) {
	pr := &monitoringv1.PrometheusRule{}
	if err := yaml.UnmarshalStrict(monitoring.Rules, pr); err != nil {
		return nil, fmt.Errorf("parse the embedded alerting rules: %w", err)
	}
	pr.TypeMeta = metav1.TypeMeta{APIVersion: monitoringv1.SchemeGroupVersion.String(), Kind: monitoringv1.PrometheusRuleKind}
	pr.Namespace = namespace
	if pr.Labels == nil {
		pr.Labels = map[string]string{}
	}
	pr.Labels["app.kubernetes.io/managed-by"] = "openshell-operator"
	return pr, nil
}

// Reconcile applies the rules when the API is served. Server-side apply
// sends the same content every time, so a steady state changes nothing.
func (r *Reconciler) Reconcile(ctx context.Context, _ ctrl.Request) (ctrl.Result, error) {
	pf, known := r.Preflight.Get()
	if !known || !pf.PrometheusRule {
		return ctrl.Result{}, nil
	}
	pr, err := Rule(r.Namespace)
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := apply.Apply(ctx, r.Client, pr); err != nil {
		return ctrl.Result{}, fmt.Errorf("apply PrometheusRule %s: %w", pr.Name, err)
	}
	return ctrl.Result{}, nil
}

// SetupWithManager reconciles one key at start and whenever preflight's
// result changes (the Prometheus Operator installed later).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	start, to := enqueue.Singleton(types.NamespacedName{Namespace: r.Namespace, Name: "openshell-operator"})
	return ctrl.NewControllerManagedBy(mgr).Named("alerting").
		WatchesRawSource(start).
		WatchesRawSource(source.Channel(r.Preflight.Subscribe(), to)).
		Complete(r)
}
