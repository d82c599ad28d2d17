// Package controllers wires every reconciler into a manager.
package controllers

import (
	"fmt"
	"time"

	"k8s.io/client-go/discovery"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/openshell/openshell-operator/controllers/gateway"
	imagepolicyctrl "github.com/openshell/openshell-operator/controllers/imagepolicy"
	"github.com/openshell/openshell-operator/controllers/policy"
	preflightctrl "github.com/openshell/openshell-operator/controllers/preflight"
	"github.com/openshell/openshell-operator/controllers/provider"
	"github.com/openshell/openshell-operator/controllers/sandbox"
	"github.com/openshell/openshell-operator/internal/imagepolicy"
	"github.com/openshell/openshell-operator/internal/operatorenv"
	"github.com/openshell/openshell-operator/internal/preflight"
	"github.com/openshell/openshell-operator/internal/webhook"
)

// EventSource names the operator in events.
const EventSource = "openshell-operator"

// Options tune the controllers (tests shorten periods).
type Options struct {
	// EnableWebhooks registers the admission webhooks on the manager's
	// webhook server (off for out-of-cluster runs without certificates).
	EnableWebhooks bool
	// Images are the operand images (RELATED_IMAGE_*).
	Images operatorenv.RelatedImages
	// PKI and Clock tune the built-in PKI (tests exercise rotation).
	PKI   gateway.PKIOptions
	Clock func() time.Time
	// PreflightResync re-probes aggregated APIs; 0 uses the default.
	PreflightResync time.Duration
}

// SetupWithManager registers all reconcilers around one shared preflight store.
func SetupWithManager(mgr ctrl.Manager, opts Options) error {
	disc, err := discovery.NewDiscoveryClientForConfig(mgr.GetConfig())
	if err != nil {
		return fmt.Errorf("create discovery client: %w", err)
	}
	store := preflight.NewStore()
	policies := imagepolicy.NewCache()
	rec := mgr.GetEventRecorder(EventSource)
	c := mgr.GetClient()
	for name, setup := range map[string]interface{ SetupWithManager(ctrl.Manager) error }{
		"preflight": &preflightctrl.Reconciler{APIReader: mgr.GetAPIReader(), Client: c, Discovery: disc,
			Store: store, Recorder: rec, ResyncPeriod: opts.PreflightResync},
		"OpenShellGateway": &gateway.Reconciler{Client: c, Preflight: store, Recorder: rec,
			Images: opts.Images, PKI: opts.PKI, Clock: opts.Clock},
		"OpenShellSandbox":     &sandbox.Reconciler{Client: c, Preflight: store, Policies: policies, Recorder: rec},
		"OpenShellPolicy":      &policy.Reconciler{},
		"OpenShellProvider":    &provider.Reconciler{},
		"OpenShellImagePolicy": &imagepolicyctrl.Reconciler{Client: c, Policies: policies},
	} {
		if err := setup.SetupWithManager(mgr); err != nil {
			return fmt.Errorf("set up %s controller: %w", name, err)
		}
	}
	if opts.EnableWebhooks {
		if err := (&webhook.SandboxValidator{Reader: c, Policies: policies}).SetupWithManager(mgr); err != nil {
			return fmt.Errorf("set up OpenShellSandbox webhook: %w", err)
		}
	}
	return nil
}
