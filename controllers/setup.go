// Package controllers wires every reconciler into a manager.
package controllers

import (
	"fmt"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/openshell/openshell-operator/controllers/gateway"
	"github.com/openshell/openshell-operator/controllers/imagepolicy"
	"github.com/openshell/openshell-operator/controllers/policy"
	"github.com/openshell/openshell-operator/controllers/provider"
	"github.com/openshell/openshell-operator/controllers/sandbox"
)

// SetupWithManager registers all reconcilers.
func SetupWithManager(mgr ctrl.Manager) error {
	for name, setup := range map[string]interface{ SetupWithManager(ctrl.Manager) error }{
		"OpenShellGateway":     &gateway.Reconciler{},
		"OpenShellSandbox":     &sandbox.Reconciler{},
		"OpenShellPolicy":      &policy.Reconciler{},
		"OpenShellProvider":    &provider.Reconciler{},
		"OpenShellImagePolicy": &imagepolicy.Reconciler{},
	} {
		if err := setup.SetupWithManager(mgr); err != nil {
			return fmt.Errorf("set up %s controller: %w", name, err)
		}
	}
	return nil
}
