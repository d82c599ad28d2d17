package scc

import (
	"strings"
	"testing"

	securityv1 "github.com/openshift/api/security/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/openshell/openshell-operator/test/sccadmit"
)

// The 0.1 runtime's pod shapes, written by hand from the facts in
// shared/reference/openshell-0.1.md §3.4 (the driver's admission rules for
// the workload Pod, the supervisor Pod's fields): not from any renderer,
// so that the SCC decision rests on what the gateway creates. uid is the
// start of the namespace's OpenShift UID range, which the driver takes
// when sandbox_uid is not pinned (§3.5).
const nsRangeStart = 1000680000

// restrictedV2 is OpenShift's built-in restricted-v2 SCC (4.11 and later),
// as a namespace with the range 1000680000/10000 resolves it: what every
// authenticated ServiceAccount may use.
func restrictedV2() *securityv1.SecurityContextConstraints {
	f := false
	ranges := []securityv1.IDRange{{Min: nsRangeStart, Max: nsRangeStart + 9999}}
	return &securityv1.SecurityContextConstraints{
		AllowPrivilegeEscalation: &f, AllowedCapabilities: []corev1.Capability{"NET_BIND_SERVICE"},
		RequiredDropCapabilities: []corev1.Capability{"ALL"},
		Volumes: []securityv1.FSType{securityv1.FSTypeConfigMap, securityv1.FSTypeCSI, securityv1.FSTypeDownwardAPI, securityv1.FSTypeEmptyDir,
			securityv1.FSTypeEphemeral, securityv1.FSTypePersistentVolumeClaim, securityv1.FSProjected, securityv1.FSTypeSecret},
		SELinuxContext: securityv1.SELinuxContextStrategyOptions{Type: securityv1.SELinuxStrategyMustRunAs},
		RunAsUser: securityv1.RunAsUserStrategyOptions{Type: securityv1.RunAsUserStrategyMustRunAsRange,
			UIDRangeMin: ptr.To[int64](nsRangeStart), UIDRangeMax: ptr.To[int64](nsRangeStart + 9999)},
		FSGroup:            securityv1.FSGroupStrategyOptions{Type: securityv1.FSGroupStrategyMustRunAs, Ranges: ranges},
		SupplementalGroups: securityv1.SupplementalGroupsStrategyOptions{Type: securityv1.SupplementalGroupsStrategyRunAsAny},
		SeccompProfiles:    []string{"runtime/default"},
		Groups:             []string{"system:authenticated"},
	}
}

// hardened is the container security context both 0.1 pods carry.
func hardened(uid int64, readOnlyRoot bool) *corev1.SecurityContext {
	return &corev1.SecurityContext{RunAsUser: ptr.To(uid), RunAsGroup: ptr.To(uid), RunAsNonRoot: ptr.To(true),
		AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(readOnlyRoot),
		Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}
}

func secretVol(name, secret string) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: secret}}}
}

func emptyDir(name string, medium corev1.StorageMedium) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: medium}}}
}

// workload01 is the workload Pod the Agent Sandbox controller creates from
// the gateway's template: init container openshell-sandbox-bootstrap (the
// only one mounting the generation's Secret, copying it to memory), agent
// container with openshell-sandbox as PID 1, the workspace PVC.
func workload01(uid int64) corev1.PodSpec {
	strict := corev1.SupplementalGroupsPolicyStrict
	return corev1.PodSpec{
		AutomountServiceAccountToken: ptr.To(false), RestartPolicy: corev1.RestartPolicyNever,
		DNSPolicy: corev1.DNSNone, DNSConfig: &corev1.PodDNSConfig{Nameservers: []string{"127.0.0.53"}},
		SchedulingGates: []corev1.PodSchedulingGate{{Name: "openshell.ai/bootstrap"}},
		SecurityContext: &corev1.PodSecurityContext{RunAsUser: ptr.To(uid), RunAsGroup: ptr.To(uid), RunAsNonRoot: ptr.To(true),
			FSGroup: ptr.To(uid), SupplementalGroupsPolicy: &strict,
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			Sysctls:        []corev1.Sysctl{{Name: "net.ipv4.ip_unprivileged_port_start", Value: "0"}}},
		InitContainers: []corev1.Container{{Name: "openshell-sandbox-bootstrap", Image: "sandbox-runtime", SecurityContext: hardened(uid, false),
			VolumeMounts: []corev1.VolumeMount{{Name: "bootstrap", MountPath: "/bootstrap", ReadOnly: true}, {Name: "runtime", MountPath: "/run/openshell"}}}},
		Containers: []corev1.Container{{Name: "agent", Image: "agent", Command: []string{"/run/openshell/openshell-sandbox"}, SecurityContext: hardened(uid, false),
			VolumeMounts: []corev1.VolumeMount{{Name: "runtime", MountPath: "/run/openshell"}, {Name: "workspace", MountPath: "/sandbox"}}}},
		Volumes: []corev1.Volume{secretVol("bootstrap", "os-sandbox-id-gen"), emptyDir("runtime", corev1.StorageMediumMemory),
			{Name: "workspace", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "workspace-sb"}}},
			{Name: "podinfo", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{}}}},
	}
}

// supervisor01 is the supervisor Pod the gateway creates: same UID and GID
// as the workload, read-only root, the supervisor Secret, a projected SA
// token for audience openshell-gateway, emptyDirs for its socket and logs,
// and in shared mode the client TLS Secret.
func supervisor01(uid int64) corev1.PodSpec {
	return corev1.PodSpec{
		ServiceAccountName: "gw-sandbox", AutomountServiceAccountToken: ptr.To(false), RestartPolicy: corev1.RestartPolicyNever,
		TerminationGracePeriodSeconds: ptr.To[int64](30), SchedulingGates: []corev1.PodSchedulingGate{{Name: "openshell.ai/bootstrap"}},
		SecurityContext: &corev1.PodSecurityContext{FSGroup: ptr.To(uid), FSGroupChangePolicy: ptr.To(corev1.FSGroupChangeOnRootMismatch),
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
		Containers: []corev1.Container{{Name: "supervisor", Image: "supervisor", SecurityContext: hardened(uid, true),
			Command: []string{"/openshell-supervisor", "--health-socket-path", "/run/openshell/health.sock"},
			VolumeMounts: []corev1.VolumeMount{{Name: "bootstrap", MountPath: "/.openshell/supervisor", ReadOnly: true},
				{Name: "sa-token", MountPath: "/var/run/secrets/openshell", ReadOnly: true}, {Name: "run", MountPath: "/run/openshell"},
				{Name: "logs", MountPath: "/var/log"}, {Name: "client-tls", MountPath: "/var/run/secrets/openshell-tls", ReadOnly: true}}}},
		Volumes: []corev1.Volume{secretVol("bootstrap", "os-supervisor-id-gen"),
			{Name: "sa-token", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{{
				ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Audience: "openshell-gateway", ExpirationSeconds: ptr.To[int64](3600), Path: "token"}}}}}},
			emptyDir("run", ""), emptyDir("logs", ""), secretVol("client-tls", "gw-client-tls")},
	}
}

// TestRestrictedV2AdmitsThe01Runtime is the SCC decision for 0.1 gateways:
// both pods of the two-pod runtime are admitted by restricted-v2 as it is,
// so no custom SCC is needed (and none is granted) for them. The 0.0.x
// sidecar pod is not: it keeps the narrow SCC of config/scc.
func TestRestrictedV2AdmitsThe01Runtime(t *testing.T) {
	for name, pod := range map[string]corev1.PodSpec{"workload": workload01(nsRangeStart), "supervisor": supervisor01(nsRangeStart)} {
		if v := sccadmit.Violations(restrictedV2(), pod); len(v) > 0 {
			t.Errorf("restricted-v2 refuses the 0.1 %s pod:\n  %s", name, strings.Join(v, "\n  "))
		}
	}
	if len(sccadmit.Violations(restrictedV2(), sidecarPod(true, true))) == 0 {
		t.Error("restricted-v2 admits the 0.0.x sidecar pod, which adds capabilities: the oracle is broken")
	}
}

// TestRestrictedV2RefusesWhatThe01RuntimeMustNotNeed: the oracle fails
// the 0.1 pods on every change that would need more than restricted-v2
// (so the test above can fail), including the two the reference leaves
// open: an image volume for openshell-sandbox, and a UID outside the
// namespace's range (a pinned sandbox_uid on OpenShift).
func TestRestrictedV2RefusesWhatThe01RuntimeMustNotNeed(t *testing.T) {
	for name, mutate := range map[string]func(*corev1.PodSpec){
		"an image volume": func(p *corev1.PodSpec) {
			p.Volumes = append(p.Volumes, corev1.Volume{Name: "img", VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: "sandbox-runtime"}}})
		},
		"a UID outside the namespace's range": func(p *corev1.PodSpec) {
			p.Containers[0].SecurityContext.RunAsUser = ptr.To[int64](10001)
		},
		"an fsGroup outside the range": func(p *corev1.PodSpec) { p.SecurityContext.FSGroup = ptr.To[int64](1000) },
		"an added capability": func(p *corev1.PodSpec) {
			p.Containers[0].SecurityContext.Capabilities.Add = []corev1.Capability{"NET_ADMIN"}
		},
		"an unsafe sysctl": func(p *corev1.PodSpec) {
			p.SecurityContext.Sysctls = append(p.SecurityContext.Sysctls, corev1.Sysctl{Name: "net.core.somaxconn", Value: "1024"})
		},
		"a hostPath": func(p *corev1.PodSpec) {
			p.Volumes = append(p.Volumes, corev1.Volume{Name: "h", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}})
		},
		"privilege gain": func(p *corev1.PodSpec) { p.Containers[0].SecurityContext.AllowPrivilegeEscalation = ptr.To(true) },
	} {
		pod := workload01(nsRangeStart)
		mutate(&pod)
		if len(sccadmit.Violations(restrictedV2(), pod)) == 0 {
			t.Errorf("%s: admitted by restricted-v2, want refused", name)
		}
	}
}
