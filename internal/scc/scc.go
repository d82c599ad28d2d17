// Package scc defines the narrow SecurityContextConstraints that lets
// OpenShell sandbox pods in the sidecar topology run on OpenShift without
// the privileged SCC, the ClusterRole granting `use` on it, and the
// per-namespace binding for a gateway's sandbox ServiceAccount. The
// sidecar pod needs more than restricted-v2 only in that its init
// containers and network sidecar run as root with a few added
// capabilities (see SidecarCapabilities; the pod shape is in
// test/sandboxpod, and test/sccadmit checks which shapes the SCC admits).
//
// The operator never creates or changes the SCC: an SCC's users and groups
// fields grant `use` without any RBAC check, and RBAC cannot limit `create`
// to a name, so whoever may create SCCs is cluster-admin-equivalent. A
// cluster admin applies config/scc/ (generated from this package); the
// operator reads it by name, reports on each gateway whether it matches
// (Verify), and binds the static `use` ClusterRole to sandbox
// ServiceAccounts.
package scc

import (
	"reflect"

	securityv1 "github.com/openshift/api/security/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Names of the cluster-scoped objects, shared by every gateway that uses
// the sidecar topology.
const (
	Name            = "openshell-sandbox-sidecar"
	UseClusterRole  = "openshell-sandbox-sidecar-scc-use"
	ManagedByLabel  = "app.kubernetes.io/managed-by"
	ManagedByValue  = "openshell-operator"
	ComponentLabel  = "app.kubernetes.io/component"
	ComponentValue  = "sandbox-scc"
	PartOfLabel     = "app.kubernetes.io/part-of"
	RoleBindingName = "openshell-sandbox-sidecar-scc"
)

// Capabilities the sidecar topology adds (network-init: NET_ADMIN, NET_RAW,
// CHOWN, FOWNER; binary-aware network sidecar: SYS_PTRACE, DAC_READ_SEARCH).
var SidecarCapabilities = []corev1.Capability{"NET_ADMIN", "NET_RAW", "CHOWN", "FOWNER", "SYS_PTRACE", "DAC_READ_SEARCH"}

// Volume types the sandbox pod uses.
var SidecarVolumes = []securityv1.FSType{
	securityv1.FSTypeEmptyDir, securityv1.FSTypePersistentVolumeClaim, securityv1.FSProjected, securityv1.FSTypeSecret,
}

// labels mark the SCC and its role as the operator's, as the bundle's
// other cluster-scoped objects are (part-of: what an uninstall selects).
func labels() map[string]string {
	return map[string]string{ManagedByLabel: ManagedByValue, ComponentLabel: ComponentValue, PartOfLabel: ManagedByValue}
}

// SidecarSCC is restricted-v2 loosened only where the sidecar pod needs it:
// root and fixed UIDs for the init containers and the network sidecar
// (RunAsAny), and the six capabilities above, which a container gets only
// by adding them (ALL is dropped from every container). Nothing
// host-level, no privilege escalation, SELinux from the namespace, seccomp
// runtime/default. Granted only through RBAC `use`: no users, no groups,
// no priority.
func SidecarSCC() *securityv1.SecurityContextConstraints {
	return &securityv1.SecurityContextConstraints{
		TypeMeta: metav1.TypeMeta{APIVersion: securityv1.GroupVersion.String(), Kind: "SecurityContextConstraints"},
		ObjectMeta: metav1.ObjectMeta{Name: Name, Labels: labels(), Annotations: map[string]string{
			"kubernetes.io/description": "OpenShell sandbox pods in the sidecar supervisor topology: restricted-v2 " +
				"(every container drops ALL capabilities) plus RunAsAny UIDs, because the supervisor's init " +
				"containers and network sidecar run as root, and six capabilities a container may add back only " +
				"by naming them (network-init: NET_ADMIN, NET_RAW, CHOWN, FOWNER; binary-aware network sidecar: " +
				"SYS_PTRACE, DAC_READ_SEARCH). A root container that adds none, such as workspace-init, holds no " +
				"capability. Granted only by RBAC use to sandbox ServiceAccounts; applied by a cluster admin " +
				"from config/scc and verified by openshell-operator.",
		}},
		Priority:                        nil,
		AllowPrivilegedContainer:        false,
		DefaultAddCapabilities:          nil,
		RequiredDropCapabilities:        []corev1.Capability{"ALL"},
		AllowedCapabilities:             SidecarCapabilities,
		AllowHostDirVolumePlugin:        false,
		Volumes:                         SidecarVolumes,
		AllowHostNetwork:                false,
		AllowHostPorts:                  false,
		AllowHostPID:                    false,
		AllowHostIPC:                    false,
		DefaultAllowPrivilegeEscalation: ptrBool(false),
		AllowPrivilegeEscalation:        ptrBool(false),
		SELinuxContext:                  securityv1.SELinuxContextStrategyOptions{Type: securityv1.SELinuxStrategyMustRunAs},
		RunAsUser:                       securityv1.RunAsUserStrategyOptions{Type: securityv1.RunAsUserStrategyRunAsAny},
		SupplementalGroups:              securityv1.SupplementalGroupsStrategyOptions{Type: securityv1.SupplementalGroupsStrategyRunAsAny},
		FSGroup:                         securityv1.FSGroupStrategyOptions{Type: securityv1.FSGroupStrategyMustRunAs},
		ReadOnlyRootFilesystem:          false,
		Users:                           []string{},
		Groups:                          []string{},
		SeccompProfiles:                 []string{"runtime/default"},
		// The API's default, said explicitly so Verify compares like with
		// like: the sandbox pod does not set hostUsers.
		UserNamespaceLevel: securityv1.NamespaceLevelAllowHost,
	}
}

func ptrBool(b bool) *bool { return &b }

// UseRole grants `use` on the SCC, by name only.
func UseRole() *rbacv1.ClusterRole {
	return &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: UseClusterRole, Labels: labels()},
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{securityv1.GroupName}, Resources: []string{"securitycontextconstraints"},
			ResourceNames: []string{Name}, Verbs: []string{"use"},
		}},
	}
}

// RoleBinding lets one sandbox ServiceAccount use the SCC in its namespace.
func RoleBinding(namespace, serviceAccount string, extraLabels map[string]string, owners []metav1.OwnerReference) *rbacv1.RoleBinding {
	l := labels()
	for k, v := range extraLabels {
		l[k] = v
	}
	return &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: RoleBindingName + "-" + serviceAccount, Namespace: namespace, Labels: l, OwnerReferences: owners},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: UseClusterRole},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: serviceAccount, Namespace: namespace}},
	}
}

// Verify compares a live SCC with SidecarSCC field by field, for every
// field that admission reads, and names those that differ; nil means the
// live SCC is the one config/scc holds. Any difference counts: a looser SCC
// grants sandbox pods more than reviewed, a tighter one refuses them.
func Verify(live *securityv1.SecurityContextConstraints) []string {
	want := SidecarSCC()
	var diff []string
	for _, f := range []struct {
		name      string
		got, want any
	}{
		{"priority", live.Priority, want.Priority},
		{"allowPrivilegedContainer", live.AllowPrivilegedContainer, want.AllowPrivilegedContainer},
		{"defaultAddCapabilities", live.DefaultAddCapabilities, want.DefaultAddCapabilities},
		{"requiredDropCapabilities", live.RequiredDropCapabilities, want.RequiredDropCapabilities},
		{"allowedCapabilities", live.AllowedCapabilities, want.AllowedCapabilities},
		{"allowHostDirVolumePlugin", live.AllowHostDirVolumePlugin, want.AllowHostDirVolumePlugin},
		{"volumes", live.Volumes, want.Volumes},
		{"allowedFlexVolumes", live.AllowedFlexVolumes, want.AllowedFlexVolumes},
		{"allowHostNetwork", live.AllowHostNetwork, want.AllowHostNetwork},
		{"allowHostPorts", live.AllowHostPorts, want.AllowHostPorts},
		{"allowHostPID", live.AllowHostPID, want.AllowHostPID},
		{"allowHostIPC", live.AllowHostIPC, want.AllowHostIPC},
		{"defaultAllowPrivilegeEscalation", live.DefaultAllowPrivilegeEscalation, want.DefaultAllowPrivilegeEscalation},
		{"allowPrivilegeEscalation", live.AllowPrivilegeEscalation, want.AllowPrivilegeEscalation},
		{"seLinuxContext", live.SELinuxContext, want.SELinuxContext},
		{"runAsUser", live.RunAsUser, want.RunAsUser},
		{"supplementalGroups", live.SupplementalGroups, want.SupplementalGroups},
		{"fsGroup", live.FSGroup, want.FSGroup},
		{"readOnlyRootFilesystem", live.ReadOnlyRootFilesystem, want.ReadOnlyRootFilesystem},
		{"users", live.Users, want.Users},
		{"groups", live.Groups, want.Groups},
		{"seccompProfiles", live.SeccompProfiles, want.SeccompProfiles},
		{"allowedUnsafeSysctls", live.AllowedUnsafeSysctls, want.AllowedUnsafeSysctls},
		{"forbiddenSysctls", live.ForbiddenSysctls, want.ForbiddenSysctls},
		{"userNamespaceLevel", live.UserNamespaceLevel, want.UserNamespaceLevel},
	} {
		if !equality.Semantic.DeepEqual(f.got, f.want) && !(isEmpty(f.got) && isEmpty(f.want)) {
			diff = append(diff, f.name)
		}
	}
	return diff
}

// isEmpty treats nil and empty slices alike (the API server may return
// either for an empty list).
func isEmpty(v any) bool {
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Slice, reflect.Map:
		return rv.Len() == 0
	case reflect.Pointer:
		return rv.IsNil()
	}
	return false
}
