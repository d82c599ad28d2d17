package sandboxspec

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/types"
)

// WorkspaceSeparator joins a workspace and a sandbox name in the name of
// the agents.x-k8s.io Sandbox a 0.1 gateway creates in a shared sandbox
// namespace: "{workspace}--{name}". The gateway takes the workspace from the
// caller's authorized scope, and names never contain "--", so the prefix
// says whose workspace a Sandbox (and its pods) came from.
const WorkspaceSeparator = "--"

// TenantClaim is what a pod in a sandbox namespace says about itself and
// where it came from.
type TenantClaim struct {
	// Namespace and UID are its openshell.ai/tenant-namespace and
	// openshell.ai/tenant-namespace-uid labels (UID may be empty: pods of
	// sandboxes created before the UID label).
	Namespace, UID string
	// Sandbox is the name of the agents.x-k8s.io Sandbox that owns the pod
	// ("" when none does).
	Sandbox string
	// PodNamespace is the pod's own namespace: in workspace mode Operator
	// a sandbox runs in its tenant's paired namespace, named after the
	// tenant's workspace, where only the operator and the gateway write.
	// InPairedNamespace says PodNamespace is such a namespace (by labels
	// only the operator and cluster admins can set): there the Sandbox's
	// name says nothing (any workspace's sandbox may bear any name) and
	// only the namespace decides.
	PodNamespace      string
	InPairedNamespace bool
}

// TenantClaimProblem says why a pod's claim to be tenant namespace's (of
// incarnation uid) is false, or "" when it holds. The claim holds only for
// a pod of a Sandbox the gateway created in that namespace's workspace
// (0.1: the Sandbox's name begins with WorkspaceName(namespace, uid) and
// "--", which only the operator and that namespace's Tenant Admins holding
// a gateway token can make the gateway write; in workspace mode Operator,
// the pod is in the namespace named after that workspace), or, on 0.0.111, which has
// no workspaces and grants no tenant tokens, for a Sandbox named as the
// operator names one of that namespace's OpenShellSandboxes (sandboxes).
// NetworkPolicies select tenants by these labels, so a gateway token of
// one namespace must not be able to dress a pod as another's.
func TenantClaimProblem(c TenantClaim, uid types.UID, sandboxes []string) string {
	label := fmt.Sprintf("%s=%s", LabelTenantNamespace, c.Namespace)
	switch {
	case c.Sandbox == "":
		return fmt.Sprintf("the pod wears %s but no agents.x-k8s.io Sandbox owns it: only sandbox pods may carry the tenant labels", label)
	case uid == "":
		return fmt.Sprintf("the pod wears %s but namespace %s does not exist", label, c.Namespace)
	case c.UID != "" && c.UID != string(uid):
		return fmt.Sprintf("the pod wears %s=%s, which is not namespace %s's UID (%s): it claims an earlier or forged namespace",
			LabelTenantNamespaceUID, c.UID, c.Namespace, uid)
	case c.InPairedNamespace:
		if c.PodNamespace == WorkspaceName(c.Namespace, uid) {
			return ""
		}
		return fmt.Sprintf("the pod wears %s but runs in namespace %s, which is not namespace %s's paired namespace (%s): "+
			"a gateway token of one namespace cannot dress a pod as another's", label, c.PodNamespace, c.Namespace, WorkspaceName(c.Namespace, uid))
	case strings.HasPrefix(c.Sandbox, WorkspaceName(c.Namespace, uid)+WorkspaceSeparator):
		return ""
	case !strings.Contains(c.Sandbox, WorkspaceSeparator) && slices.ContainsFunc(sandboxes, func(n string) bool { return SandboxName(c.Namespace, n) == c.Sandbox }):
		return ""
	}
	return fmt.Sprintf("the pod wears %s but its Sandbox %s was not created in namespace %s's workspace (%s): "+
		"a gateway token of one namespace cannot dress a pod as another's", label, c.Sandbox, c.Namespace, WorkspaceName(c.Namespace, uid))
}
