package gateway

import (
	"sigs.k8s.io/controller-runtime/pkg/client"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/gatewayline"
	"github.com/openshell/openshell-operator/internal/scc"
)

// Rendered is every object of a managed gateway, in apply order.
type Rendered struct {
	// Config is gateway.toml; ConfigHash rolls the pods when it changes.
	Config, ConfigHash string
	// Objects to apply. Those in the gateway's namespace carry an owner
	// reference; those in another sandbox namespace and the gateway's
	// ClusterRoleBinding carry only the gateway labels, which prune and
	// the deletion finalizer select on.
	Objects []client.Object
	// UsesSCC reports that Objects include the sandbox ServiceAccount's
	// binding to the narrow SCC's `use` ClusterRole (a cluster admin
	// applies the SCC itself from config/scc); when it is false on
	// OpenShift, prune deletes a binding an earlier render made.
	UsesSCC bool
}

// Render renders a managed gateway.
func Render(gw *openshellv1alpha1.OpenShellGateway, in Inputs) (Rendered, error) {
	config, err := GatewayTOML(gw, in)
	if err != nil {
		return Rendered{}, err
	}
	r := Rendered{Config: config, ConfigHash: ConfigHash(config, in.TrustBundle)}
	add := func(objs ...client.Object) { r.Objects = append(r.Objects, objs...) }
	add(ServiceAccounts(gw)...)
	add(RBAC(gw, in)...)
	if in.TLS == TLSCertManager {
		add(CertManagerObjects(gw, in)...)
	}
	add(ConfigMap(gw, config), TrustBundleConfigMap(gw, in.TrustBundle))
	if OperatorMode(gw) {
		add(WorkspacesConfigMap(gw, in.Workspaces))
	}
	if in.OpenShift() {
		add(TrustedCAConfigMap(gw))
	}
	add(Service(gw), Workload(gw, in, r.ConfigHash), PodDisruptionBudget(gw))
	add(NetworkPolicies(gw, in)...)
	if RouteEnabled(gw, in) {
		add(Route(gw))
	}
	if in.ServiceMonitor {
		add(ServiceMonitor(gw))
	}
	if UsesNarrowSCC(gw, in) {
		n := NamesFor(gw)
		m := meta(gw, "", n.SandboxNamespace, "sandbox-scc")
		add(scc.RoleBinding(n.SandboxNamespace, n.SandboxSA, m.Labels, m.OwnerReferences))
		r.UsesSCC = true
	}
	return r, nil
}

// UsesNarrowSCC reports whether the gateway needs the operator's SCC: on
// OpenShift, for a 0.0.x gateway in the sidecar topology. 0.1's pods have
// no capabilities and restricted-v2 admits them (internal/scc
// TestRestrictedV2AdmitsThe01Runtime).
func UsesNarrowSCC(gw *openshellv1alpha1.OpenShellGateway, in Inputs) bool {
	return in.SCC && in.Line != gatewayline.V01 && Topology(gw) == openshellv1alpha1.SupervisorTopologySidecar
}
