// Package tenancy decides what a namespace may do with a gateway. Two
// settings meet here: the platform's (in which namespaces the operator
// serves OpenShellGateways at all, and whether operand images may be
// overridden), which only a cluster admin can change because it lives in the
// operator's environment; and each gateway's spec.tenancy (which namespaces
// may run sandboxes on it). Both the admission webhooks and the reconcilers
// ask the same pure functions: the webhook gives the user an immediate
// answer, the reconciler re-checks before every gateway call because a
// webhook can be bypassed while it is down and access can be revoked later.
package tenancy

import (
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/operatorenv"
)

// Platform is the cluster admin's tenancy setting, read from the operator's
// environment (OLM: the Subscription's spec.config.env).
type Platform struct {
	// GatewayNamespaces are the namespaces whose OpenShellGateways the
	// operator reconciles: its own namespace plus OPENSHELL_GATEWAY_NAMESPACES.
	// A gateway anywhere else is refused, because OLM lets every namespace
	// admin and editor create OpenShellGateways, and a gateway holds
	// cluster-scoped RBAC, an SCC grant and signing keys.
	GatewayNamespaces []string
	// AllowImageOverrides lets spec.managed.images replace the operand
	// images; otherwise only the CSV's digest-pinned RELATED_IMAGE_* run.
	AllowImageOverrides bool
}

// ServesGateways reports whether gateways in ns are reconciled.
func (p Platform) ServesGateways(ns string) bool { return slices.Contains(p.GatewayNamespaces, ns) }

// GatewayServed explains why a gateway is not reconciled; "" means it is.
func (p Platform) GatewayServed(gw *openshellv1alpha1.OpenShellGateway) string {
	if p.ServesGateways(gw.Namespace) {
		return ""
	}
	return fmt.Sprintf("the operator reconciles OpenShellGateways only in the namespaces a cluster admin designates (%s): "+
		"create the gateway there, or have a cluster admin add %q to %s in the operator's Subscription (spec.config.env)",
		p.served(), gw.Namespace, operatorenv.EnvGatewayNamespaces)
}

// ImageOverride explains why a gateway's image overrides are refused; ""
// means there are none or they are allowed.
func (p Platform) ImageOverride(gw *openshellv1alpha1.OpenShellGateway) string {
	if p.AllowImageOverrides || gw.Spec.Managed == nil {
		return ""
	}
	var set []string
	im := gw.Spec.Managed.Images
	for _, f := range []struct{ name, v string }{{"gateway", im.Gateway}, {"supervisor", im.Supervisor}, {"sandbox", im.Sandbox}} {
		if f.v != "" {
			set = append(set, "spec.managed.images."+f.name)
		}
	}
	if len(set) == 0 {
		return ""
	}
	return fmt.Sprintf("%s would replace the operator's digest-pinned operand images: remove it, or have a cluster admin set %s=true "+
		"in the operator's Subscription (spec.config.env)", strings.Join(set, ", "), operatorenv.EnvAllowImageOverrides)
}

func (p Platform) served() string {
	if len(p.GatewayNamespaces) == 0 {
		return "none"
	}
	return strings.Join(p.GatewayNamespaces, ", ")
}

// Namespace is what access decisions need to know of a namespace.
type Namespace struct {
	Name   string
	Labels map[string]string
}

// GatewayAccess decides whether ns may run sandboxes on gw and push
// providers to it. It returns "" when allowed, otherwise a message for the
// reason GatewayNotAllowed that says what to ask for.
func (p Platform) GatewayAccess(gw *openshellv1alpha1.OpenShellGateway, ns Namespace) string {
	key := gw.Namespace + "/" + gw.Name
	if !p.ServesGateways(gw.Namespace) {
		return fmt.Sprintf("OpenShellGateway %s is not a platform gateway (the operator serves gateways only in %s): use a gateway your platform admin provides",
			key, p.served())
	}
	if ns.Name == gw.Namespace {
		return ""
	}
	an := gw.Spec.Tenancy.AllowedNamespaces
	switch an.From {
	case openshellv1alpha1.NamespacesFromAll:
		return ""
	case openshellv1alpha1.NamespacesFromSelector:
		sel, err := metav1.LabelSelectorAsSelector(an.Selector)
		if err != nil {
			return fmt.Sprintf("OpenShellGateway %s has an invalid spec.tenancy.allowedNamespaces.selector (%v): ask the platform admin to fix it", key, err)
		}
		if sel.Matches(labels.Set(ns.Labels)) {
			return ""
		}
		return fmt.Sprintf("OpenShellGateway %s admits only namespaces labelled %s, and namespace %s is not: ask the platform admin to admit it",
			key, sel.String(), ns.Name)
	default: // Same, or unset on an object written before the field existed.
		return fmt.Sprintf("OpenShellGateway %s admits only its own namespace (spec.tenancy.allowedNamespaces.from: Same): "+
			"ask the platform admin to admit namespace %s", key, ns.Name)
	}
}
