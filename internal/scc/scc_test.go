package scc

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	securityv1 "github.com/openshift/api/security/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/controller-runtime/pkg/client"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/openshell/openshell-operator/internal/apply"
	"github.com/openshell/openshell-operator/internal/scheme"
	"github.com/openshell/openshell-operator/test/sandboxpod"
	"github.com/openshell/openshell-operator/test/sccadmit"
)

// privileged is OpenShift's built-in privileged SCC, the one upstream asks
// users to grant today.
func privileged() *securityv1.SecurityContextConstraints {
	t := true
	return &securityv1.SecurityContextConstraints{
		AllowPrivilegedContainer: true, AllowedCapabilities: []corev1.Capability{"*"},
		AllowHostDirVolumePlugin: true, AllowHostNetwork: true, AllowHostPorts: true, AllowHostPID: true, AllowHostIPC: true,
		Volumes: []securityv1.FSType{securityv1.FSTypeAll}, AllowPrivilegeEscalation: &t, DefaultAllowPrivilegeEscalation: &t,
		SELinuxContext:     securityv1.SELinuxContextStrategyOptions{Type: securityv1.SELinuxStrategyRunAsAny},
		RunAsUser:          securityv1.RunAsUserStrategyOptions{Type: securityv1.RunAsUserStrategyRunAsAny},
		SupplementalGroups: securityv1.SupplementalGroupsStrategyOptions{Type: securityv1.SupplementalGroupsStrategyRunAsAny},
		FSGroup:            securityv1.FSGroupStrategyOptions{Type: securityv1.FSGroupStrategyRunAsAny},
		SeccompProfiles:    []string{"*"}, Users: []string{"system:admin"}, Groups: []string{"system:cluster-admins"},
	}
}

func sidecarPod(binaryAware, workspace bool) corev1.PodSpec {
	return sandboxpod.Sidecar(sandboxpod.Inputs{ServiceAccount: "gw-sandbox", AgentImage: "agent", SupervisorImage: "sup",
		ClientTLSSecret: "gw-client-tls", SandboxUID: 1000680000, SandboxGID: 1000680000, BinaryAware: binaryAware, Workspace: workspace})
}

func TestSidecarPodIsAdmitted(t *testing.T) {
	s := SidecarSCC()
	for name, pod := range map[string]corev1.PodSpec{
		"binary-aware, workspace PVC": sidecarPod(true, true),
		"binary-aware, no workspace":  sidecarPod(true, false),
		"relaxed sidecar":             sidecarPod(false, true),
	} {
		if v := sccadmit.Violations(s, pod); len(v) > 0 {
			t.Errorf("%s: the narrow SCC refuses the sidecar pod:\n  %s", name, strings.Join(v, "\n  "))
		}
	}
}

// TestEveryContainerNeedsWhatTheSCCAllows walks the pod container by
// container: every added capability is allowed, and the SCC allows no
// capability the pod does not use.
func TestEveryContainerNeedsWhatTheSCCAllows(t *testing.T) {
	pod := sidecarPod(true, true)
	used := map[corev1.Capability]bool{}
	for _, c := range append(pod.InitContainers, pod.Containers...) {
		if c.SecurityContext == nil || c.SecurityContext.Capabilities == nil {
			continue
		}
		for _, cp := range c.SecurityContext.Capabilities.Add {
			used[cp] = true
			if !slices.Contains(SidecarSCC().AllowedCapabilities, cp) {
				t.Errorf("container %s adds %s, which the SCC does not allow", c.Name, cp)
			}
		}
	}
	for _, cp := range SidecarSCC().AllowedCapabilities {
		if !used[cp] {
			t.Errorf("the SCC allows %s, which no container of the sidecar pod adds", cp)
		}
	}
	var vols []securityv1.FSType
	for _, v := range pod.Volumes {
		if t := sccadmit.VolumeType(v); !slices.Contains(vols, t) {
			vols = append(vols, t)
		}
	}
	slices.Sort(vols)
	allowed := slices.Clone(SidecarSCC().Volumes)
	slices.Sort(allowed)
	if !slices.Equal(vols, allowed) {
		t.Errorf("volume types: pod uses %v, SCC allows %v; they must be equal", vols, allowed)
	}
}

func TestCombinedAgentIsRefused(t *testing.T) {
	pod := sidecarPod(true, false)
	pod.Containers = []corev1.Container{sandboxpod.CombinedAgent("agent")}
	v := strings.Join(sccadmit.Violations(SidecarSCC(), pod), "\n")
	for _, want := range []string{"capability SYS_ADMIN is not allowed", "capability SYSLOG is not allowed"} {
		if !strings.Contains(v, want) {
			t.Errorf("combined agent: want a violation %q, got:\n%s", want, v)
		}
	}
	if len(sccadmit.Violations(privileged(), pod)) != 0 {
		t.Error("privileged must admit the combined agent (sanity check of the evaluator)")
	}
}

func TestHostAccessIsRefused(t *testing.T) {
	tr := true
	for name, mutate := range map[string]func(*corev1.PodSpec){
		"host network": func(p *corev1.PodSpec) { p.HostNetwork = true },
		"host PID":     func(p *corev1.PodSpec) { p.HostPID = true },
		"host IPC":     func(p *corev1.PodSpec) { p.HostIPC = true },
		"hostPath": func(p *corev1.PodSpec) {
			p.Volumes = append(p.Volumes, corev1.Volume{Name: "h", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}})
		},
		"host port": func(p *corev1.PodSpec) {
			p.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 22, HostPort: 22}}
		},
		"privileged": func(p *corev1.PodSpec) { p.Containers[0].SecurityContext.Privileged = &tr },
		"escalation": func(p *corev1.PodSpec) { p.Containers[0].SecurityContext.AllowPrivilegeEscalation = &tr },
		"configMap vol": func(p *corev1.PodSpec) {
			p.Volumes = append(p.Volumes, corev1.Volume{Name: "c", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{}}})
		},
		"SYS_ADMIN": func(p *corev1.PodSpec) {
			p.Containers[1].SecurityContext.Capabilities.Add = append(p.Containers[1].SecurityContext.Capabilities.Add, "SYS_ADMIN")
		},
		"drop-required": func(p *corev1.PodSpec) {
			p.Containers[1].SecurityContext.Capabilities.Add = []corev1.Capability{"SETUID"}
		},
		"unconfined": func(p *corev1.PodSpec) {
			p.SecurityContext.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}
		},
	} {
		pod := sidecarPod(true, true)
		mutate(&pod)
		if len(sccadmit.Violations(SidecarSCC(), pod)) == 0 {
			t.Errorf("%s: admitted, want refused", name)
		}
	}
}

// TestNarrowerThanPrivileged compares the SCC with privileged field by
// field: every permission is equal or smaller, and most are strictly so.
func TestNarrowerThanPrivileged(t *testing.T) {
	s, p := SidecarSCC(), privileged()
	boolNarrower := map[string][2]bool{
		"allowPrivilegedContainer": {s.AllowPrivilegedContainer, p.AllowPrivilegedContainer},
		"allowHostDirVolumePlugin": {s.AllowHostDirVolumePlugin, p.AllowHostDirVolumePlugin},
		"allowHostNetwork":         {s.AllowHostNetwork, p.AllowHostNetwork},
		"allowHostPorts":           {s.AllowHostPorts, p.AllowHostPorts},
		"allowHostPID":             {s.AllowHostPID, p.AllowHostPID},
		"allowHostIPC":             {s.AllowHostIPC, p.AllowHostIPC},
		"allowPrivilegeEscalation": {*s.AllowPrivilegeEscalation, *p.AllowPrivilegeEscalation},
	}
	for f, v := range boolNarrower {
		if v[0] || !v[1] {
			t.Errorf("%s: ours %v, privileged %v; want false vs true", f, v[0], v[1])
		}
	}
	if slices.Contains(s.AllowedCapabilities, "*") || len(s.AllowedCapabilities) != 6 {
		t.Errorf("allowedCapabilities = %v, want exactly the six sidecar capabilities", s.AllowedCapabilities)
	}
	for _, forbidden := range []corev1.Capability{"SYS_ADMIN", "SYSLOG", "SYS_MODULE", "NET_BIND_SERVICE", "SETUID"} {
		if slices.Contains(s.AllowedCapabilities, forbidden) {
			t.Errorf("allowedCapabilities contains %s", forbidden)
		}
	}
	if len(s.DefaultAddCapabilities) != 0 {
		t.Errorf("defaultAddCapabilities = %v, want none", s.DefaultAddCapabilities)
	}
	if slices.Contains(s.Volumes, securityv1.FSTypeAll) || slices.Contains(s.Volumes, securityv1.FSTypeHostPath) {
		t.Errorf("volumes = %v: no '*' and no hostPath", s.Volumes)
	}
	if s.SELinuxContext.Type != securityv1.SELinuxStrategyMustRunAs {
		t.Errorf("seLinuxContext = %s, want MustRunAs (privileged: RunAsAny)", s.SELinuxContext.Type)
	}
	if s.FSGroup.Type != securityv1.FSGroupStrategyMustRunAs {
		t.Errorf("fsGroup = %s, want MustRunAs", s.FSGroup.Type)
	}
	if !slices.Equal(s.SeccompProfiles, []string{"runtime/default"}) {
		t.Errorf("seccompProfiles = %v, want [runtime/default]", s.SeccompProfiles)
	}
	if s.Priority != nil || len(s.Users) != 0 || len(s.Groups) != 0 || s.Users == nil || s.Groups == nil {
		t.Errorf("priority %v users %v groups %v: want null and explicit empty lists (granted by RBAC only)", s.Priority, s.Users, s.Groups)
	}
	if s.ReadOnlyRootFilesystem {
		t.Error("readOnlyRootFilesystem must be false: workspace-init writes into the image")
	}
	// Besides the added capabilities, the one loosening of restricted-v2:
	// RunAsAny UIDs, because the init containers and the binary-aware
	// network sidecar run as UID 0 (test/sandboxpod).
	if s.RunAsUser.Type != securityv1.RunAsUserStrategyRunAsAny {
		t.Errorf("runAsUser = %s, want RunAsAny", s.RunAsUser.Type)
	}
}

func TestUseRoleIsByNameOnly(t *testing.T) {
	r := UseRole()
	if len(r.Rules) != 1 || !slices.Equal(r.Rules[0].Verbs, []string{"use"}) || !slices.Equal(r.Rules[0].ResourceNames, []string{Name}) {
		t.Fatalf("use role rules = %+v", r.Rules)
	}
	rb := RoleBinding("team-a", "gw-sandbox", nil, nil)
	if rb.Subjects[0].Name != "gw-sandbox" || rb.Subjects[0].Namespace != "team-a" || rb.RoleRef.Name != UseClusterRole {
		t.Fatalf("role binding = %+v", rb)
	}
}

// TestConfigSCCIsTheOperatorsSCC: config/scc/ (generated by hack/scc) holds
// exactly the SCC and use ClusterRole the operator applies.
func TestConfigSCCIsTheOperatorsSCC(t *testing.T) {
	for file, want := range map[string]client.Object{"scc.yaml": SidecarSCC(), "use_role.yaml": UseRole()} {
		raw, err := os.ReadFile(filepath.Join("..", "..", "config", "scc", file))
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]any{}
		if err := sigsyaml.Unmarshal(raw, &got); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		u, err := apply.ToUnstructured(scheme.New(), want)
		if err != nil {
			t.Fatal(err)
		}
		if !equality.Semantic.DeepEqual(got, u.Object) {
			t.Errorf("config/scc/%s differs from internal/scc: run make generate", file)
		}
	}
}

// TestDropAllLeavesEachContainerOnlyWhatItAdds admits the sidecar pod
// container by container: with ALL required to be dropped, every container
// holds exactly the capabilities it names, so root containers that add
// none (supervisor install, workspace-init with the tenant's image) hold
// none, and only network-init and the network sidecar hold any.
func TestDropAllLeavesEachContainerOnlyWhatItAdds(t *testing.T) {
	s := SidecarSCC()
	want := map[string][]corev1.Capability{
		sandboxpod.ContainerInstall:     nil,
		sandboxpod.ContainerNetworkInit: {"NET_ADMIN", "NET_RAW", "CHOWN", "FOWNER"},
		sandboxpod.ContainerWorkspace:   nil,
		sandboxpod.ContainerAgent:       nil,
		sandboxpod.ContainerSidecar:     {"SYS_PTRACE", "DAC_READ_SEARCH"},
	}
	pod := sidecarPod(true, true)
	for _, c := range append(pod.InitContainers, pod.Containers...) {
		if v := sccadmit.Violations(s, corev1.PodSpec{Containers: []corev1.Container{c}}); len(v) > 0 {
			t.Errorf("container %s alone is refused: %v", c.Name, v)
		}
		got, bounded := sccadmit.EffectiveCapabilities(s, c)
		if !bounded {
			t.Errorf("container %s keeps the runtime's default capabilities", c.Name)
		}
		if !slices.Equal(got, want[c.Name]) {
			t.Errorf("container %s holds %v, want %v", c.Name, got, want[c.Name])
		}
	}
}

func TestVerify(t *testing.T) {
	if d := Verify(SidecarSCC()); d != nil {
		t.Fatalf("the SCC differs from itself: %v", d)
	}
	// As the API server may return it: empty lists omitted.
	live := SidecarSCC()
	live.Users, live.Groups = nil, nil
	if d := Verify(live); d != nil {
		t.Errorf("nil and empty lists must compare equal: %v", d)
	}
	for name, tc := range map[string]struct {
		mutate func(*securityv1.SecurityContextConstraints)
		want   string
	}{
		"users grant use without RBAC": {func(s *securityv1.SecurityContextConstraints) { s.Users = []string{"system:serviceaccount:t:x"} }, "users"},
		"a wider capability set": {func(s *securityv1.SecurityContextConstraints) {
			s.AllowedCapabilities = append(s.AllowedCapabilities, "SYS_ADMIN")
		}, "allowedCapabilities"},
		"drops only a few": {func(s *securityv1.SecurityContextConstraints) {
			s.RequiredDropCapabilities = []corev1.Capability{"KILL"}
		}, "requiredDropCapabilities"},
		"host network": {func(s *securityv1.SecurityContextConstraints) { s.AllowHostNetwork = true }, "allowHostNetwork"},
		"a priority":   {func(s *securityv1.SecurityContextConstraints) { p := int32(10); s.Priority = &p }, "priority"},
	} {
		s := SidecarSCC()
		tc.mutate(s)
		if d := Verify(s); !slices.Equal(d, []string{tc.want}) {
			t.Errorf("%s: Verify = %v, want [%s]", name, d, tc.want)
		}
	}
}
