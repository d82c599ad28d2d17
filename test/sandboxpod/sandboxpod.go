// Package sandboxpod builds the pod spec an OpenShell gateway's Kubernetes
// compute driver puts into the agents.x-k8s.io Sandbox of a sandbox, in the
// sidecar topology the operator deploys and, for contrast, the combined
// topology's agent. The
// SCC tests check the operator's SCC against it, and the test gateway uses
// it as the compute driver would.
package sandboxpod

import (
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// Container names.
const (
	ContainerInstall     = "openshell-supervisor-install"
	ContainerNetworkInit = "openshell-network-init"
	ContainerWorkspace   = "workspace-init"
	ContainerAgent       = "agent"
	ContainerSidecar     = "openshell-supervisor-network"
)

// Inputs parameterise the pod.
type Inputs struct {
	ServiceAccount  string
	AgentImage      string
	SupervisorImage string
	ClientTLSSecret string
	SandboxID       string
	SandboxName     string
	GRPCEndpoint    string
	// SandboxUID and SandboxGID are the agent's IDs: on OpenShift the
	// driver takes them from the namespace's SCC UID range; 1000 (the
	// default here) elsewhere.
	SandboxUID, SandboxGID int64
	// ProxyUID is the relaxed-mode sidecar UID (default 1337).
	ProxyUID int64
	// BinaryAware runs the network sidecar as root with SYS_PTRACE and
	// DAC_READ_SEARCH (upstream default) instead of as ProxyUID.
	BinaryAware bool
	// Workspace adds the workspace PVC and its init container.
	Workspace bool
	// Env is added to the agent container's environment (the gateway
	// sandbox's spec.environment).
	Env map[string]string
	// SATokenTTL is the projected token lifetime in seconds.
	SATokenTTL int64
}

// Defaults fills unset inputs with the upstream defaults.
func (in Inputs) Defaults() Inputs {
	if in.SandboxUID == 0 {
		in.SandboxUID = 1000
	}
	if in.SandboxGID == 0 {
		in.SandboxGID = in.SandboxUID
	}
	if in.ProxyUID == 0 {
		in.ProxyUID = 1337
	}
	if in.SATokenTTL == 0 {
		in.SATokenTTL = 3600
	}
	return in
}

func caps(add ...corev1.Capability) *corev1.Capabilities {
	return &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: add}
}

// Sidecar is the sidecar-topology pod spec with the supervisor installed by
// an init container (the sideload method the operator configures).
func Sidecar(in Inputs) corev1.PodSpec {
	in = in.Defaults()
	uid, gid := in.SandboxUID, in.SandboxGID
	stateMount := corev1.VolumeMount{Name: "openshell-sidecar-state", MountPath: "/run/openshell-sidecar"}
	tlsMount := corev1.VolumeMount{Name: "openshell-supervisor-tls", MountPath: "/etc/openshell-tls/proxy"}
	binMount := corev1.VolumeMount{Name: "openshell-supervisor-bin", MountPath: "/opt/openshell/bin"}
	identity := []corev1.EnvVar{
		{Name: "OPENSHELL_SANDBOX_ID", Value: in.SandboxID},
		{Name: "OPENSHELL_SANDBOX", Value: in.SandboxName},
		{Name: "OPENSHELL_SUPERVISOR_TOPOLOGY", Value: "sidecar"},
		{Name: "OPENSHELL_NETWORK_ENFORCEMENT_MODE", Value: "sidecar-nftables"},
		{Name: "OPENSHELL_SIDECAR_CONTROL_SOCKET", Value: "/run/openshell-sidecar/control.sock"},
		{Name: "OPENSHELL_PROXY_TLS_DIR", Value: "/etc/openshell-tls/proxy"},
		{Name: "OPENSHELL_SANDBOX_UID", Value: strconv.FormatInt(uid, 10)},
		{Name: "OPENSHELL_SANDBOX_GID", Value: strconv.FormatInt(gid, 10)},
	}
	agentEnv := append([]corev1.EnvVar{}, identity...)
	for k, v := range in.Env {
		agentEnv = append(agentEnv, corev1.EnvVar{Name: k, Value: v})
	}
	sidecarUser, sidecarNonRoot := int64(0), false
	sidecarCaps := caps("SYS_PTRACE", "DAC_READ_SEARCH")
	if !in.BinaryAware {
		sidecarUser, sidecarNonRoot, sidecarCaps = in.ProxyUID, true, caps()
	}
	sidecarEnv := append(append([]corev1.EnvVar{}, identity...),
		corev1.EnvVar{Name: "OPENSHELL_ENDPOINT", Value: in.GRPCEndpoint},
		corev1.EnvVar{Name: "OPENSHELL_TLS_CA", Value: "/etc/openshell-tls/proxy/client/ca.crt"},
		corev1.EnvVar{Name: "OPENSHELL_TLS_CERT", Value: "/etc/openshell-tls/proxy/client/tls.crt"},
		corev1.EnvVar{Name: "OPENSHELL_TLS_KEY", Value: "/etc/openshell-tls/proxy/client/tls.key"},
		corev1.EnvVar{Name: "OPENSHELL_K8S_SA_TOKEN_FILE", Value: "/var/run/secrets/openshell/token"})

	spec := corev1.PodSpec{
		ServiceAccountName:           in.ServiceAccount,
		AutomountServiceAccountToken: ptr.To(false),
		RestartPolicy:                corev1.RestartPolicyNever,
		ShareProcessNamespace:        ptr.To(true),
		SecurityContext:              &corev1.PodSecurityContext{FSGroup: ptr.To(gid)},
		InitContainers: []corev1.Container{
			{
				Name: ContainerInstall, Image: in.SupervisorImage,
				Command:         []string{"/openshell-sandbox", "copy-self", "/opt/openshell/bin/openshell-sandbox"},
				SecurityContext: &corev1.SecurityContext{RunAsUser: ptr.To[int64](0)},
				VolumeMounts:    []corev1.VolumeMount{binMount},
			},
			{
				Name: ContainerNetworkInit, Image: in.SupervisorImage,
				Command: []string{"/openshell-sandbox", "--mode=network-init",
					"--proxy-uid", fmt.Sprint(sidecarUser), "--proxy-gid", fmt.Sprint(gid),
					"--sidecar-state-dir", "/run/openshell-sidecar", "--sidecar-tls-dir", "/etc/openshell-tls/proxy"},
				SecurityContext: &corev1.SecurityContext{RunAsUser: ptr.To[int64](0), AllowPrivilegeEscalation: ptr.To(false),
					Capabilities: caps("NET_ADMIN", "NET_RAW", "CHOWN", "FOWNER")},
				VolumeMounts: []corev1.VolumeMount{stateMount, tlsMount,
					{Name: "openshell-client-tls", MountPath: "/etc/openshell-tls/client", ReadOnly: true}},
			},
		},
		Containers: []corev1.Container{
			{
				Name: ContainerAgent, Image: in.AgentImage,
				Command: []string{"/opt/openshell/bin/openshell-sandbox", "--mode=process", "--workdir", "/sandbox"},
				Env:     agentEnv,
				SecurityContext: &corev1.SecurityContext{RunAsUser: ptr.To(uid), RunAsGroup: ptr.To(gid), RunAsNonRoot: ptr.To(true),
					AllowPrivilegeEscalation: ptr.To(false), Capabilities: caps()},
				VolumeMounts: []corev1.VolumeMount{{Name: binMount.Name, MountPath: binMount.MountPath, ReadOnly: true}, stateMount, tlsMount},
			},
			{
				Name: ContainerSidecar, Image: in.SupervisorImage,
				Command: []string{"/openshell-sandbox", "--mode=network"},
				Env:     sidecarEnv,
				SecurityContext: &corev1.SecurityContext{RunAsUser: ptr.To(sidecarUser), RunAsGroup: ptr.To(gid), RunAsNonRoot: ptr.To(sidecarNonRoot),
					AllowPrivilegeEscalation: ptr.To(false), Capabilities: sidecarCaps},
				VolumeMounts: []corev1.VolumeMount{stateMount, tlsMount,
					{Name: "openshell-sa-token", MountPath: "/var/run/secrets/openshell", ReadOnly: true}},
			},
		},
		Volumes: []corev1.Volume{
			{Name: "openshell-client-tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
				SecretName: in.ClientTLSSecret, DefaultMode: ptr.To[int32](0o440)}}},
			{Name: "openshell-sa-token", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
				DefaultMode: ptr.To[int32](0o440),
				Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{
					Audience: "openshell-gateway", ExpirationSeconds: ptr.To(in.SATokenTTL), Path: "token"}}}}}},
			{Name: "openshell-supervisor-bin", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			{Name: "openshell-sidecar-state", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			{Name: "openshell-supervisor-tls", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		},
	}
	if in.Workspace {
		spec.InitContainers = append(spec.InitContainers, corev1.Container{
			Name: ContainerWorkspace, Image: in.AgentImage,
			Command:         []string{"sh", "-c", "test -e /workspace-pvc/.workspace-initialized || (cd /sandbox && tar cf - . | tar xf - -C /workspace-pvc --no-same-owner --no-same-permissions && touch /workspace-pvc/.workspace-initialized)"},
			SecurityContext: &corev1.SecurityContext{RunAsUser: ptr.To[int64](0)},
			VolumeMounts:    []corev1.VolumeMount{{Name: "workspace", MountPath: "/workspace-pvc"}},
		})
		spec.Containers[0].VolumeMounts = append(spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: "workspace", MountPath: "/sandbox"})
		spec.Volumes = append(spec.Volumes, corev1.Volume{Name: "workspace", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "workspace"}}})
	}
	return spec
}

// CombinedAgent is the combined topology's agent container: root with
// SYS_ADMIN, NET_ADMIN, SYS_PTRACE and SYSLOG, dropping nothing. It is what
// forces the privileged SCC upstream, and what the narrow SCC must refuse.
func CombinedAgent(image string) corev1.Container {
	return corev1.Container{
		Name: ContainerAgent, Image: image,
		Command: []string{"/opt/openshell/bin/openshell-sandbox", "--mode=combined"},
		SecurityContext: &corev1.SecurityContext{RunAsUser: ptr.To[int64](0),
			Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"SYS_ADMIN", "NET_ADMIN", "SYS_PTRACE", "SYSLOG"}}},
	}
}
