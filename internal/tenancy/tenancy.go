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
	"context"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/index"
	"github.com/openshell/openshell-operator/internal/operatorenv"
)

// LabelServeGateways must be "true" on every gateway namespace other than
// the operator's own. The list in OPENSHELL_GATEWAY_NAMESPACES names
// namespaces; the label proves the namespace of that name is the one the
// cluster admin meant. Without it, a self-provisioner could request a
// listed namespace that does not exist (yet, or any more) and become the
// admin of a served gateway namespace. OpenShift project admins and
// self-provisioners cannot set namespace labels.
const LabelServeGateways = "openshell.ai/serve-gateways"

// Platform is the cluster admin's tenancy setting, read from the operator's
// environment (OLM: the Subscription's spec.config.env).
type Platform struct {
	// OperatorNamespace is where the operator runs; its gateways are served
	// without a label (the namespace exists for as long as the operator does).
	OperatorNamespace string
	// GatewayNamespaces are the namespaces whose OpenShellGateways the
	// operator reconciles: its own namespace plus OPENSHELL_GATEWAY_NAMESPACES
	// (which must also carry LabelServeGateways). A gateway anywhere else is
	// refused, because OLM lets every namespace admin and editor create
	// OpenShellGateways, and a gateway holds cluster-scoped RBAC, an SCC
	// grant and signing keys.
	GatewayNamespaces []string
	// AllowImageOverrides lets spec.managed.images replace the operand
	// images; otherwise only the CSV's digest-pinned RELATED_IMAGE_* run.
	AllowImageOverrides bool
}

// GatewayServed explains why gateways in namespace gwNS are not
// reconciled; "" means they are.
func (p Platform) GatewayServed(gwNS Namespace) string {
	switch {
	case gwNS.Name == p.OperatorNamespace && p.OperatorNamespace != "":
		return ""
	case !slices.Contains(p.GatewayNamespaces, gwNS.Name):
		return fmt.Sprintf("the operator reconciles OpenShellGateways only in the namespaces a cluster admin designates (%s): "+
			"create the gateway there, or have a cluster admin add %q to %s in the operator's Subscription (spec.config.env) "+
			"and label the namespace %s=true", p.served(), gwNS.Name, operatorenv.EnvGatewayNamespaces, LabelServeGateways)
	case gwNS.Labels[LabelServeGateways] != "true":
		return fmt.Sprintf("namespace %s is listed in %s but not labelled %s=true: a cluster admin labels it to confirm that this "+
			"namespace (and not one someone else created under that name) holds platform gateways",
			gwNS.Name, operatorenv.EnvGatewayNamespaces, LabelServeGateways)
	}
	return ""
}

// ImageOverride explains why a gateway's image overrides are refused; ""
// means there are none or they are allowed.
func (p Platform) ImageOverride(gw *openshellv1alpha1.OpenShellGateway) string {
	if p.AllowImageOverrides || gw.Spec.Managed == nil {
		return ""
	}
	var set []string
	im := gw.Spec.Managed.Images
	for _, f := range []struct{ name, v string }{{"gateway", im.Gateway}, {"supervisor", im.Supervisor}, {"sandbox", im.Sandbox},
		{"sandboxRuntime", im.SandboxRuntime}} {
		if f.v != "" {
			set = append(set, "spec.managed.images."+f.name)
		}
	}
	if len(set) == 0 {
		return ""
	}
	return fmt.Sprintf("%s would replace the operand images the operator ships (its RELATED_IMAGE_* images): remove it, or have a cluster admin set %s=true "+
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

// GatewayAccess decides whether ns may run sandboxes on gw (in namespace
// gwNS) and push providers to it. It returns "" when allowed, otherwise a
// message for the reason GatewayNotAllowed that says what to ask for.
func (p Platform) GatewayAccess(gw *openshellv1alpha1.OpenShellGateway, gwNS, ns Namespace) string {
	key := gw.Namespace + "/" + gw.Name
	if p.GatewayServed(gwNS) != "" {
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

// ReadNamespace reads the metadata access decisions need from the
// manager's cache.
func ReadNamespace(ctx context.Context, r client.Reader, name string) (Namespace, types.UID, error) {
	ns, err := index.GetNamespace(ctx, r, name)
	if err != nil {
		return Namespace{}, "", err
	}
	return Namespace{Name: ns.Name, Labels: ns.Labels}, ns.UID, nil
}

// Served reads gw's namespace and decides GatewayServed.
func (p Platform) Served(ctx context.Context, r client.Reader, gw *openshellv1alpha1.OpenShellGateway) (string, error) {
	gwNS, _, err := ReadNamespace(ctx, r, gw.Namespace)
	if err != nil {
		return "", err
	}
	return p.GatewayServed(gwNS), nil
}

// SandboxNamespaceServed explains why a served gateway may not place its
// sandboxes in sandboxNS; "" means it may. The gateway may create
// agents.x-k8s.io Sandboxes there, and the Agent Sandbox controller turns
// their pod templates into pods with any ServiceAccount and Secret of that
// namespace, so the namespace must hold nothing more valuable than the
// gateway's own keys:
//   - never the operator's namespace (its ServiceAccount and OIDC signing
//     keys), not even for a gateway that lives there;
//   - never another gateway's namespace (its CA, JWT keys and KEK);
//   - a gateway namespace too (listed and labelled): the operator writes the
//     sandbox ServiceAccount, its SCC binding and NetworkPolicies there,
//     which the bundle grants only in the namespaces OLM targets, and
//     tenants must not be able to create pods in it.
func (p Platform) SandboxNamespaceServed(ctx context.Context, r client.Reader, gw *openshellv1alpha1.OpenShellGateway, sandboxNS string) (string, error) {
	field := "spec.managed.sandboxes.namespace"
	if sandboxNS == gw.Namespace {
		field = "the sandbox namespace (by default the gateway's own)"
	}
	if sandboxNS == p.OperatorNamespace && p.OperatorNamespace != "" {
		return fmt.Sprintf("%s is %s, the operator's namespace: sandbox pods there could run as the operator's ServiceAccount "+
			"or mount its Secrets; set spec.managed.sandboxes.namespace to another namespace listed in %s and labelled %s=true",
			field, sandboxNS, operatorenv.EnvGatewayNamespaces, LabelServeGateways), nil
	}
	if sandboxNS == gw.Namespace {
		return p.sandboxNamespaceShared(ctx, r, gw, sandboxNS, field)
	}
	ns, _, err := ReadNamespace(ctx, r, sandboxNS)
	if err != nil {
		return "", err
	}
	if why := p.GatewayServed(ns); why != "" {
		return field + " " + sandboxNS + " is not a platform namespace: " + why, nil
	}
	others := &openshellv1alpha1.OpenShellGatewayList{}
	if err := r.List(ctx, others, client.InNamespace(sandboxNS)); err != nil {
		return "", fmt.Errorf("list gateways in %s: %w", sandboxNS, err)
	}
	if len(others.Items) > 0 {
		return fmt.Sprintf("%s %s holds OpenShellGateway %s/%s, whose keys this gateway's sandbox pods could mount: "+
			"place sandboxes in a namespace of their own", field, sandboxNS, sandboxNS, others.Items[0].Name), nil
	}
	return p.sandboxNamespaceShared(ctx, r, gw, sandboxNS, field)
}

// SandboxNamespace is where a gateway's sandboxes run: a Managed gateway's
// spec.managed.sandboxes.namespace, else its own namespace ("" for an
// External gateway, whose sandboxes the operator does not place).
func SandboxNamespace(gw *openshellv1alpha1.OpenShellGateway) string {
	switch {
	case gw.Spec.Mode == openshellv1alpha1.GatewayModeExternal:
		return ""
	case gw.Spec.Managed != nil && gw.Spec.Managed.Sandboxes.Namespace != "":
		return gw.Spec.Managed.Sandboxes.Namespace
	}
	return gw.Namespace
}

// sandboxNamespaceShared refuses a sandbox namespace another served
// gateway placed its sandboxes in first: each gateway's RoleBinding there
// covers every agents.x-k8s.io Sandbox of the namespace, so one gateway
// (compromised, or its platform admin) could rewrite the other's pod
// templates and run its code with the other tenant's Secrets. The earlier
// gateway keeps the namespace; gateways that are not served (a tenant's)
// never count, so a tenant cannot claim a platform namespace first.
func (p Platform) sandboxNamespaceShared(ctx context.Context, r client.Reader, gw *openshellv1alpha1.OpenShellGateway, sandboxNS, field string) (string, error) {
	all := &openshellv1alpha1.OpenShellGatewayList{}
	if err := r.List(ctx, all); err != nil {
		return "", fmt.Errorf("list gateways: %w", err)
	}
	for i := range all.Items {
		o := &all.Items[i]
		if client.ObjectKeyFromObject(o) == client.ObjectKeyFromObject(gw) || SandboxNamespace(o) != sandboxNS || !earlier(o, gw) {
			continue
		}
		if served, err := p.Served(ctx, r, o); err != nil {
			return "", err
		} else if served != "" {
			continue
		}
		return fmt.Sprintf("%s %s already holds the sandboxes of OpenShellGateway %s/%s: two gateways may not share a sandbox "+
			"namespace (each could rewrite the other's sandboxes); set spec.managed.sandboxes.namespace to a namespace of its own",
			field, sandboxNS, o.Namespace, o.Name), nil
	}
	return "", nil
}

// earlier orders gateways by creation, then by namespace/name.
func earlier(a, b *openshellv1alpha1.OpenShellGateway) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	return a.Namespace+"/"+a.Name < b.Namespace+"/"+b.Name
}

// Access reads gw's namespace and decides GatewayAccess for ns.
func (p Platform) Access(ctx context.Context, r client.Reader, gw *openshellv1alpha1.OpenShellGateway, ns Namespace) (string, error) {
	gwNS, _, err := ReadNamespace(ctx, r, gw.Namespace)
	if err != nil {
		return "", err
	}
	return p.GatewayAccess(gw, gwNS, ns), nil
}
