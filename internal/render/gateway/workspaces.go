package gateway

import (
	"encoding/json"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	anpv1alpha1 "sigs.k8s.io/network-policy-api/apis/v1alpha1"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/render/tenantegress"
	"github.com/openshell/openshell-operator/internal/sandboxspec"
)

// Workspace mode Operator (0.1 line). The 0.1 Kubernetes driver runs the
// sandboxes of workspace W in the namespace named W when W is on its
// allowlist (workspace_mode = "operator"; namespace name = workspace
// name). The operator's workspace of a tenant namespace is
// sandboxspec.WorkspaceName (ws-<16 hex>), so each tenant namespace gets a
// paired namespace of that name, which the operator creates and owns:
// tenants hold no rights in it (their pods, the bootstrap Secrets and the
// driver's fence policies are out of their reach), the gateway holds only
// what its driver needs there, and nothing names it but the operator.
//
// The allowlist is a file (operator_namespace_file), not a label
// selector: a label selector makes the driver list and watch every
// namespace of the cluster. The file is a ConfigMap the operator writes and
// the gateway's pod mounts as a directory (the driver watches the
// directory, so the kubelet's atomic update reaches it).
//
// What stays cluster-wide for the gateway: list and watch of
// agents.x-k8s.io Sandboxes (ClusterRoleGatewayWorkspaces). The 0.1 driver
// follows its Sandboxes with one cluster-wide watch in every mode but
// Shared (its watch_sandboxes_cluster_wide; RBAC cannot bound a list by
// label). It is read-only, on the one kind; every write is granted per
// paired namespace.
const (
	// WorkspacesDir holds WorkspacesFile, the driver's allowlist: a JSON
	// array of namespace names.
	WorkspacesDir  = "/etc/openshell/workspaces"
	WorkspacesFile = "namespaces.json"
	// ClusterRoleGatewayWorkspaces is bound cluster-wide to an Operator
	// mode gateway: list and watch of Sandboxes.
	ClusterRoleGatewayWorkspaces = "openshell-gateway-workspaces"
	// ComponentWorkspace marks a paired namespace.
	ComponentWorkspace = "workspace"
	// AnnotationGatewayName on a paired namespace is its gateway's full
	// name (the label may be shortened with a hash).
	AnnotationGatewayName = "openshell.ai/gateway-name"
)

// Labels of a paired namespace, besides the gateway's (Labels): the tenant
// namespace incarnation it serves (sandboxspec.WorkspaceLabels).
const (
	// LabelPSAEnforce and friends pin the Pod Security level of a paired
	// namespace: the 0.1 runtime's pods meet restricted.
	LabelPSAEnforce = "pod-security.kubernetes.io/enforce"
	LabelPSAAudit   = "pod-security.kubernetes.io/audit"
	LabelPSAWarn    = "pod-security.kubernetes.io/warn"
	// LabelPSASync off keeps OpenShift's label syncer from lowering the
	// level to what the namespace's ServiceAccounts' SCCs would allow.
	LabelPSASync = "security.openshift.io/scc.podSecurityLabelSync"
)

// OperatorMode reports whether the gateway runs each tenant's sandboxes in
// a paired namespace.
func OperatorMode(gw *openshellv1alpha1.OpenShellGateway) bool {
	return gw.Spec.Mode == openshellv1alpha1.GatewayModeManaged && WorkspaceMode(gw) == openshellv1alpha1.WorkspaceModeOperator
}

// PairedNamespace is the namespace an Operator mode gateway runs the
// sandboxes of one tenant namespace incarnation in.
func PairedNamespace(tenant string, uid types.UID) string {
	return sandboxspec.WorkspaceName(tenant, uid)
}

// WorkspaceObjects are the objects of a tenant's paired namespace for an
// Operator mode gateway: the namespace itself, the sandbox ServiceAccount
// the driver expects there (it creates none in this mode), and the
// gateway's grants there (the same static ClusterRoles it holds in a
// Shared sandbox namespace, bound by RoleBindings).
func WorkspaceObjects(gw *openshellv1alpha1.OpenShellGateway, tenant string, uid types.UID) []client.Object {
	n := NamesFor(gw)
	ns := PairedNamespace(tenant, uid)
	nsMeta := meta(gw, ns, "", ComponentWorkspace)
	for k, v := range sandboxspec.WorkspaceLabels(tenant, uid) {
		nsMeta.Labels[k] = v
	}
	for _, k := range []string{LabelPSAEnforce, LabelPSAAudit, LabelPSAWarn} {
		nsMeta.Labels[k] = "restricted"
	}
	nsMeta.Labels[LabelPSASync] = "false"
	if gw.Spec.Managed.Sandboxes.TenantEgress != nil {
		// Off the allowlist until its tenant egress holds: no supervisor
		// may run there before the AdminNetworkPolicy does.
		nsMeta.Labels[LabelEgressPending] = "true"
	}
	nsMeta.Annotations = map[string]string{AnnotationGatewayName: gw.Name}
	subject := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: n.Fullname, Namespace: gw.Namespace}}
	return []client.Object{
		&corev1.Namespace{ObjectMeta: nsMeta},
		&corev1.ServiceAccount{ObjectMeta: meta(gw, n.SandboxSA, ns, "sandbox"), AutomountServiceAccountToken: ptr.To(false)},
		&rbacv1.RoleBinding{ObjectMeta: meta(gw, n.GatewayBinding, ns, "rbac"), Subjects: subject,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: ClusterRoleGatewaySandboxes}},
		&rbacv1.RoleBinding{ObjectMeta: meta(gw, n.RuntimeBinding, ns, "rbac"), Subjects: subject,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: ClusterRoleGatewayRuntime}},
	}
}

// LabelDraining on a paired namespace says, in Unix seconds, since when
// the operator is releasing it: its gateway's allowlist leaves it out, and
// it is deleted once the mounted allowlist has surely followed. Until then
// nobody else can create a namespace of its name, and so none can be put
// where a gateway whose file still names it would place a sandbox.
const LabelDraining = "openshell.ai/draining-since"

// Draining says whether a paired namespace is being released.
func Draining(ns metav1.Object) bool { return ns.GetLabels()[LabelDraining] != "" }

// LabelEgressPending on a paired namespace created for a gateway with
// tenant egress keeps it off the gateway's allowlist until its tenant's
// egress has been put in place once (an AdminNetworkPolicy written, or
// none needed): a sandbox waits (WorkspaceNamespacePending) rather than
// run with all egress open. It is set only at creation, so a namespace
// whose sandboxes already run never leaves the allowlist for it; a later
// failure leaves the policy in place as it was.
const LabelEgressPending = "openshell.ai/tenant-egress-pending"

// Allowlisted says whether a paired namespace may be on its gateway's
// allowlist: not going, not draining, not waiting for its tenant egress.
func Allowlisted(ns metav1.Object) bool {
	return ns.GetDeletionTimestamp().IsZero() && !Draining(ns) && ns.GetLabels()[LabelEgressPending] == ""
}

// IsPairedNamespace says whether a namespace's labels make it a paired
// namespace of any gateway (labels only the operator and cluster admins
// can set on a namespace).
func IsPairedNamespace(labels map[string]string) bool {
	return labels[LabelManagedBy] == ManagedByValue && labels[LabelComponent] == ComponentWorkspace
}

// PairedTenant returns the tenant namespace a paired namespace of gw
// serves, from its labels, if it is one the operator made for gw.
func PairedTenant(gw *openshellv1alpha1.OpenShellGateway, ns metav1.Object) (string, types.UID, bool) {
	l := ns.GetLabels()
	tenant, uid := l[sandboxspec.LabelNamespace], types.UID(l[sandboxspec.LabelNamespaceUID])
	if l[LabelManagedBy] != ManagedByValue || l[LabelComponent] != ComponentWorkspace || l[LabelGatewayNamespace] != gw.Namespace ||
		l[LabelGatewayName] != Labels(gw, "")[LabelGatewayName] || ns.GetAnnotations()[AnnotationGatewayName] != gw.Name ||
		tenant == "" || uid == "" || PairedNamespace(tenant, uid) != ns.GetName() {
		return "", "", false
	}
	return tenant, uid, true
}

// WorkspacesConfigMap is the driver's allowlist: the paired namespaces
// ready for sandboxes (sorted, so that the same set renders the same file).
func WorkspacesConfigMap(gw *openshellv1alpha1.OpenShellGateway, namespaces []string) *corev1.ConfigMap {
	names := slices.Sorted(slices.Values(namespaces))
	if names == nil {
		names = []string{}
	}
	b, _ := json.Marshal(names) // a []string always marshals
	return &corev1.ConfigMap{ObjectMeta: meta(gw, NamesFor(gw).Workspaces, gw.Namespace, "config"),
		Data: map[string]string{WorkspacesFile: string(b)}}
}

// WorkspacesIn reads the allowlist back from a WorkspacesConfigMap.
func WorkspacesIn(cm *corev1.ConfigMap) ([]string, error) {
	var names []string
	if err := json.Unmarshal([]byte(cm.Data[WorkspacesFile]), &names); err != nil {
		return nil, fmt.Errorf("ConfigMap %s/%s: %s is not a JSON list of names: %w", cm.Namespace, cm.Name, WorkspacesFile, err)
	}
	return names, nil
}

// operatorModeRBAC is what an Operator mode gateway holds besides its
// grants in each paired namespace: the cluster-wide Sandbox watch, and
// get on its client certificate's Secret in the source namespace.
func operatorModeRBAC(gw *openshellv1alpha1.OpenShellGateway) []client.Object {
	n := NamesFor(gw)
	subject := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: n.Fullname, Namespace: gw.Namespace}}
	return []client.Object{
		&rbacv1.ClusterRoleBinding{ObjectMeta: meta(gw, n.WorkspacesBinding, "", "rbac"), Subjects: subject,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: ClusterRoleGatewayWorkspaces}},
		&rbacv1.Role{ObjectMeta: meta(gw, n.ClientTLSReader, n.SandboxNamespace, "rbac"), Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{n.ClientTLS}, Verbs: []string{"get"}}}},
		&rbacv1.RoleBinding{ObjectMeta: meta(gw, n.ClientTLSReader, n.SandboxNamespace, "rbac"), Subjects: subject,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: n.ClientTLSReader}},
	}
}

// componentMirror marks what a paired namespace holds as a copy of its
// tenant namespace's controls.
const componentMirror = "tenant-controls"

// MirroredControls are copies, in the tenant's paired namespace, of the
// ResourceQuotas and LimitRanges of the tenant namespace: the limits a
// cluster admin set on the namespace (namespace admins may read but not
// change them) bind its sandboxes too, counted apart from the namespace's
// own pods. NetworkPolicies are not copied: Kubernetes unions what
// policies allow, so a tenant's policy could only widen the driver's
// workload fence, never narrow its supervisors' egress (which the driver
// allows everywhere); the tenant's OpenShellPolicy decides the agents'
// egress, enforced by the supervisor.
func MirroredControls(gw *openshellv1alpha1.OpenShellGateway, tenant string, uid types.UID, quotas []corev1.ResourceQuota, limits []corev1.LimitRange) []client.Object {
	ns := PairedNamespace(tenant, uid)
	var out []client.Object
	m := func(name string) metav1.ObjectMeta {
		o := meta(gw, MirrorName(name), ns, componentMirror)
		o.Labels[sandboxspec.LabelNamespace] = tenant
		return o
	}
	for _, q := range quotas {
		out = append(out, &corev1.ResourceQuota{ObjectMeta: m(q.Name), Spec: *q.Spec.DeepCopy()})
	}
	for _, l := range limits {
		out = append(out, &corev1.LimitRange{ObjectMeta: m(l.Name), Spec: *l.Spec.DeepCopy()})
	}
	return out
}

// MirrorName is the name of the copy of a tenant namespace's control.
func MirrorName(name string) string { return truncateHashed("tenant-"+name, name, 253) }

// IsMirror says whether an object in a paired namespace is one of
// MirroredControls.
func IsMirror(o metav1.Object) bool {
	l := o.GetLabels()
	return l[LabelManagedBy] == ManagedByValue && l[LabelComponent] == componentMirror
}

// PairedPullSecret is the one pull Secret the driver names in workspace
// mode Operator (image_pull_secrets is one gateway-wide list of names, and
// the driver copies nothing in this mode): in each paired namespace it
// holds the gateway's pull credentials and then its tenant's own, so each
// tenant's sandboxes pull with their own namespace's credentials only.
const PairedPullSecret = "openshell-image-pull"

// componentPull marks a paired namespace's pull Secret.
const componentPull = "image-pull"

// PullSecret merges the registry credentials of platform (the gateway's
// spec.managed.sandboxes.imagePullSecrets, from its namespace) and then
// tenant (the tenant namespace's OpenShellImagePolicy pullSecrets) into
// the paired namespace's PairedPullSecret. A registry both name keeps the
// platform's credentials: a tenant does not change how the platform's
// images are pulled. problems name the Secrets left out (wrong type,
// unreadable content), never a value. Pure.
func PullSecret(gw *openshellv1alpha1.OpenShellGateway, tenant string, uid types.UID, platform, tenants []corev1.Secret) (*corev1.Secret, []string) {
	auths := map[string]json.RawMessage{}
	var problems []string
	for _, s := range slices.Concat(platform, tenants) {
		var cfg struct {
			Auths map[string]json.RawMessage `json:"auths"`
		}
		if s.Type != corev1.SecretTypeDockerConfigJson {
			problems = append(problems, fmt.Sprintf("Secret %s/%s is of type %q, not %s", s.Namespace, s.Name, s.Type, corev1.SecretTypeDockerConfigJson))
			continue
		}
		if err := json.Unmarshal(s.Data[corev1.DockerConfigJsonKey], &cfg); err != nil {
			problems = append(problems, fmt.Sprintf("Secret %s/%s: its %s is not a Docker config", s.Namespace, s.Name, corev1.DockerConfigJsonKey))
			continue
		}
		for registry, entry := range cfg.Auths {
			if _, taken := auths[registry]; !taken {
				auths[registry] = entry
			}
		}
	}
	b, _ := json.Marshal(map[string]any{"auths": auths}) // raw messages and strings always marshal
	m := meta(gw, PairedPullSecret, PairedNamespace(tenant, uid), componentPull)
	m.Labels[sandboxspec.LabelNamespace] = tenant
	return &corev1.Secret{ObjectMeta: m, Type: corev1.SecretTypeDockerConfigJson, Data: map[string][]byte{corev1.DockerConfigJsonKey: b}}, problems
}

// AnnotationTenantEgress on a paired namespace is the outcome of its
// tenant's egress (spec.managed.sandboxes.tenantEgress), written by the
// paired namespace's reconciler and read by the gateway's
// (TenantEgressEnforced): TenantEgressApplied, TenantEgressNone, or
// TenantEgressNotWritten and why.
const AnnotationTenantEgress = "openshell.ai/tenant-egress"

// Outcomes recorded in AnnotationTenantEgress (a prefix, then details).
const (
	TenantEgressApplied    = "Applied"
	TenantEgressNone       = "None"
	TenantEgressNotWritten = "NotWritten"
)

// TenantEgressPolicyName is the AdminNetworkPolicy of a paired namespace.
func TenantEgressPolicyName(paired string) string { return "openshell-" + paired }

// TenantEgressPolicies render the AdminNetworkPolicies that make a
// tenant's egress NetworkPolicies bind its agents in paired namespace
// paired (internal/render/tenantegress says why and how); none when no
// policy of the tenant isolates egress.
func TenantEgressPolicies(gw *openshellv1alpha1.OpenShellGateway, tenant, paired string, pairedUID types.UID,
	policies []networkingv1.NetworkPolicy, sandboxes []tenantegress.Sandbox) ([]*anpv1alpha1.AdminNetworkPolicy, []tenantegress.Skipped) {
	labels := Labels(gw, "tenant-egress")
	labels[sandboxspec.LabelNamespace] = tenant
	var priority int32 = 99
	if te := gw.Spec.Managed.Sandboxes.TenantEgress; te != nil {
		priority = te.Priority
	}
	return tenantegress.Render(tenantegress.Inputs{
		Name: TenantEgressPolicyName(paired), Labels: labels, Owner: tenantegress.NamespaceOwner(paired, pairedUID),
		Tenant: tenant, Paired: paired, GatewayNamespace: gw.Namespace, GatewayPods: SelectorLabels(gw),
		Priority: priority, Policies: policies, Sandboxes: sandboxes,
	})
}
