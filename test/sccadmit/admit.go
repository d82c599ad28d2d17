// Package sccadmit is a test oracle for SecurityContextConstraints
// admission: it tells why an SCC would not admit a pod, for the fields the
// sandbox pod uses, so tests can check the operator's SCC against the pod
// shapes the gateway renders. It is not OpenShift's admission plugin.
package sccadmit

import (
	"fmt"
	"slices"
	"strings"

	securityv1 "github.com/openshift/api/security/v1"
	corev1 "k8s.io/api/core/v1"
)

// Violations lists why an SCC would not admit a pod, container by
// container, following the SCC admission rules for the fields the sandbox
// pod uses: privilege, host namespaces, ports and paths, capabilities,
// privilege escalation, UIDs, volume types and seccomp. An empty result
// means admitted. It is a test oracle, not a replacement for OpenShift's
// admission plugin.
func Violations(s *securityv1.SecurityContextConstraints, pod corev1.PodSpec) []string {
	var out []string
	bad := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }

	if pod.HostNetwork && !s.AllowHostNetwork {
		bad("pod: hostNetwork is not allowed")
	}
	if pod.HostPID && !s.AllowHostPID {
		bad("pod: hostPID is not allowed")
	}
	if pod.HostIPC && !s.AllowHostIPC {
		bad("pod: hostIPC is not allowed")
	}
	for _, v := range pod.Volumes {
		t := VolumeType(v)
		if t == securityv1.FSTypeHostPath && !s.AllowHostDirVolumePlugin {
			bad("volume %s: hostPath is not allowed", v.Name)
		}
		if !slices.Contains(s.Volumes, securityv1.FSTypeAll) && !slices.Contains(s.Volumes, t) {
			bad("volume %s: type %s is not allowed", v.Name, t)
		}
	}
	if pod.SecurityContext != nil && pod.SecurityContext.SeccompProfile != nil {
		if p := seccompName(pod.SecurityContext.SeccompProfile); !seccompAllowed(s, p) {
			bad("pod: seccomp profile %s is not allowed", p)
		}
	}
	var podUser *int64
	if psc := pod.SecurityContext; psc != nil {
		podUser = psc.RunAsUser
		if s.FSGroup.Type == securityv1.FSGroupStrategyMustRunAs && psc.FSGroup != nil && !inRanges(*psc.FSGroup, s.FSGroup.Ranges) {
			bad("pod: fsGroup %d is outside the SCC's ranges", *psc.FSGroup)
		}
		if s.SupplementalGroups.Type == securityv1.SupplementalGroupsStrategyMustRunAs {
			for _, g := range psc.SupplementalGroups {
				if !inRanges(g, s.SupplementalGroups.Ranges) {
					bad("pod: supplemental group %d is outside the SCC's ranges", g)
				}
			}
		}
		for _, sc := range psc.Sysctls {
			if why := sysctlRefused(s, sc.Name); why != "" {
				bad("pod: sysctl %s %s", sc.Name, why)
			}
		}
	}
	check := func(c corev1.Container) {
		sc := c.SecurityContext
		if sc == nil {
			sc = &corev1.SecurityContext{}
		}
		if sc.Privileged != nil && *sc.Privileged && !s.AllowPrivilegedContainer {
			bad("container %s: privileged is not allowed", c.Name)
		}
		for _, p := range c.Ports {
			if p.HostPort != 0 && !s.AllowHostPorts {
				bad("container %s: hostPort %d is not allowed", c.Name, p.HostPort)
			}
		}
		if sc.Capabilities != nil {
			for _, cp := range sc.Capabilities.Add {
				if slices.Contains(s.RequiredDropCapabilities, cp) {
					bad("container %s: capability %s must be dropped", c.Name, cp)
				} else if !slices.Contains(s.AllowedCapabilities, cp) && !slices.Contains(s.AllowedCapabilities, securityv1.AllowAllCapabilities) &&
					!slices.Contains(s.DefaultAddCapabilities, cp) {
					bad("container %s: capability %s is not allowed", c.Name, cp)
				}
			}
		}
		if sc.AllowPrivilegeEscalation != nil && *sc.AllowPrivilegeEscalation && s.AllowPrivilegeEscalation != nil && !*s.AllowPrivilegeEscalation {
			bad("container %s: allowPrivilegeEscalation is not allowed", c.Name)
		}
		uid := podUser
		if sc.RunAsUser != nil {
			uid = sc.RunAsUser
		}
		switch s.RunAsUser.Type {
		case securityv1.RunAsUserStrategyMustRunAsNonRoot:
			if uid != nil && *uid == 0 {
				bad("container %s: runs as root, but the SCC requires non-root", c.Name)
			}
		case securityv1.RunAsUserStrategyMustRunAs:
			if uid == nil || s.RunAsUser.UID == nil || *uid != *s.RunAsUser.UID {
				bad("container %s: must run as UID %v", c.Name, s.RunAsUser.UID)
			}
		case securityv1.RunAsUserStrategyMustRunAsRange:
			if uid != nil && s.RunAsUser.UIDRangeMin != nil && s.RunAsUser.UIDRangeMax != nil &&
				(*uid < *s.RunAsUser.UIDRangeMin || *uid > *s.RunAsUser.UIDRangeMax) {
				bad("container %s: UID %d is outside the range %d-%d", c.Name, *uid, *s.RunAsUser.UIDRangeMin, *s.RunAsUser.UIDRangeMax)
			}
		}
		if sc.SeccompProfile != nil {
			if p := seccompName(sc.SeccompProfile); !seccompAllowed(s, p) {
				bad("container %s: seccomp profile %s is not allowed", c.Name, p)
			}
		}
	}
	for _, c := range pod.InitContainers {
		check(c)
	}
	for _, c := range pod.Containers {
		check(c)
	}
	return out
}

// EffectiveCapabilities is what a container holds once admitted: SCC
// admission adds the SCC's required drops to the container's drops, so
// when ALL is dropped (by either) the container holds exactly what it
// adds. bounded is false when ALL is not dropped: the container then also
// keeps the container runtime's default set.
func EffectiveCapabilities(s *securityv1.SecurityContextConstraints, c corev1.Container) (caps []corev1.Capability, bounded bool) {
	drop := slices.Clone(s.RequiredDropCapabilities)
	if c.SecurityContext != nil && c.SecurityContext.Capabilities != nil {
		drop = append(drop, c.SecurityContext.Capabilities.Drop...)
		caps = slices.Clone(c.SecurityContext.Capabilities.Add)
	}
	return caps, slices.Contains(drop, "ALL")
}

// VolumeType is the SCC volume type (FSType) of a pod volume.
func VolumeType(v corev1.Volume) securityv1.FSType {
	switch {
	case v.EmptyDir != nil:
		return securityv1.FSTypeEmptyDir
	case v.Secret != nil:
		return securityv1.FSTypeSecret
	case v.Projected != nil:
		return securityv1.FSProjected
	case v.PersistentVolumeClaim != nil:
		return securityv1.FSTypePersistentVolumeClaim
	case v.ConfigMap != nil:
		return securityv1.FSTypeConfigMap
	case v.HostPath != nil:
		return securityv1.FSTypeHostPath
	case v.DownwardAPI != nil:
		return securityv1.FSTypeDownwardAPI
	case v.CSI != nil:
		return securityv1.FSTypeCSI
	case v.Ephemeral != nil:
		return securityv1.FSTypeEphemeral
	case v.Image != nil:
		return "image"
	}
	return securityv1.FSTypeNone
}

func seccompName(p *corev1.SeccompProfile) string {
	switch p.Type {
	case corev1.SeccompProfileTypeRuntimeDefault:
		return "runtime/default"
	case corev1.SeccompProfileTypeUnconfined:
		return "unconfined"
	case corev1.SeccompProfileTypeLocalhost:
		if p.LocalhostProfile != nil {
			return "localhost/" + *p.LocalhostProfile
		}
	}
	return string(p.Type)
}

func seccompAllowed(s *securityv1.SecurityContextConstraints, profile string) bool {
	return slices.Contains(s.SeccompProfiles, "*") || slices.Contains(s.SeccompProfiles, profile)
}

// inRanges says whether id lies in the SCC's ranges; an SCC without ranges
// takes them from the namespace at admission, which the oracle does not
// know, so it does not judge.
func inRanges(id int64, ranges []securityv1.IDRange) bool {
	if len(ranges) == 0 {
		return true
	}
	for _, r := range ranges {
		if id >= r.Min && id <= r.Max {
			return true
		}
	}
	return false
}

// safeSysctls are the kubelet's safe set (Kubernetes 1.34), which a pod may
// set unless the SCC forbids them; any other needs allowedUnsafeSysctls.
var safeSysctls = []string{"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
	"net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports", "net.ipv4.tcp_keepalive_time",
	"net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes", "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"}

func sysctlRefused(s *securityv1.SecurityContextConstraints, name string) string {
	matches := func(patterns []string) bool {
		return slices.ContainsFunc(patterns, func(p string) bool {
			return p == "*" || p == name || (strings.HasSuffix(p, "*") && strings.HasPrefix(name, strings.TrimSuffix(p, "*")))
		})
	}
	switch {
	case matches(s.ForbiddenSysctls):
		return "is forbidden by the SCC"
	case !slices.Contains(safeSysctls, name) && !matches(s.AllowedUnsafeSysctls):
		return "is unsafe and not allowed by the SCC"
	}
	return ""
}
