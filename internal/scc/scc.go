// Package scc renders the narrow SecurityContextConstraints that lets
// OpenShell sandbox pods in the sidecar topology run on OpenShift without
// the privileged SCC, the ClusterRole granting `use` on it, and the
// per-namespace binding for a gateway's sandbox ServiceAccount. The
// sidecar pod needs more than restricted-v2 only in that its init
// containers and network sidecar run as root with a few added
// capabilities (see SidecarCapabilities; the pod shape is in
// test/sandboxpod, and test/sccadmit checks which shapes the SCC admits).
package scc

import (
	securityv1 "github.com/openshift/api/security/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
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
	RoleBindingName = "openshell-sandbox-sidecar-scc"
)

// Capabilities the sidecar topology adds (network-init: NET_ADMIN, NET_RAW,
// CHOWN, FOWNER; binary-aware network sidecar: SYS_PTRACE, DAC_READ_SEARCH).
var SidecarCapabilities = []corev1.Capability{"NET_ADMIN", "NET_RAW", "CHOWN", "FOWNER", "SYS_PTRACE", "DAC_READ_SEARCH"}

// Volume types the sandbox pod uses.
var SidecarVolumes = []securityv1.FSType{
	securityv1.FSTypeEmptyDir, securityv1.FSTypePersistentVolumeClaim, securityv1.FSProjected, securityv1.FSTypeSecret,
}

func labels() map[string]string {
	return map[string]string{ManagedByLabel: ManagedByValue, ComponentLabel: ComponentValue}
}

// SidecarSCC is restricted-v2 loosened only where the sidecar pod needs it:
// root and fixed UIDs for the init containers and the network sidecar
// (RunAsAny), and the six capabilities above. Nothing host-level, no
// privilege escalation, SELinux from the namespace, seccomp runtime/default.
// Granted only through RBAC `use`: no users, no groups, no priority.
func SidecarSCC() *securityv1.SecurityContextConstraints {
	return &securityv1.SecurityContextConstraints{
		TypeMeta: metav1.TypeMeta{APIVersion: securityv1.GroupVersion.String(), Kind: "SecurityContextConstraints"},
		ObjectMeta: metav1.ObjectMeta{Name: Name, Labels: labels(), Annotations: map[string]string{
			"kubernetes.io/description": "OpenShell sandbox pods in the sidecar supervisor topology: " +
				"restricted-v2 plus RunAsAny UIDs and the capabilities network enforcement needs " +
				"(NET_ADMIN, NET_RAW, CHOWN, FOWNER, SYS_PTRACE, DAC_READ_SEARCH). Managed by openshell-operator.",
		}},
		Priority:                        nil,
		AllowPrivilegedContainer:        false,
		DefaultAddCapabilities:          nil,
		RequiredDropCapabilities:        []corev1.Capability{"KILL", "MKNOD", "SETUID", "SETGID"},
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
