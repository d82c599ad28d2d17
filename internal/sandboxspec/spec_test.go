package sandboxspec

import (
	"encoding/hex"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/openshellv1"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/sandboxv1"
)

func ptr[T any](v T) *T { return &v }

func TestPolicy(t *testing.T) {
	tests := []struct {
		name string
		spec openshellv1alpha1.OpenShellPolicySpec
		want *sandboxv1.SandboxPolicy
	}{{
		name: "empty spec renders only the version",
		spec: openshellv1alpha1.OpenShellPolicySpec{},
		want: &sandboxv1.SandboxPolicy{Version: 1},
	}, {
		name: "filesystem without includeWorkdir defaults it to true",
		spec: openshellv1alpha1.OpenShellPolicySpec{Filesystem: &openshellv1alpha1.FilesystemPolicy{
			ReadOnly: []string{"/usr", "/etc"}, ReadWrite: []string{"/tmp"}}},
		want: &sandboxv1.SandboxPolicy{Version: 1, Filesystem: &sandboxv1.FilesystemPolicy{
			IncludeWorkdir: true, ReadOnly: []string{"/usr", "/etc"}, ReadWrite: []string{"/tmp"}}},
	}, {
		name: "filesystem includeWorkdir false is kept",
		spec: openshellv1alpha1.OpenShellPolicySpec{Filesystem: &openshellv1alpha1.FilesystemPolicy{
			IncludeWorkdir: ptr(false), ReadOnly: []string{"/data"}}},
		want: &sandboxv1.SandboxPolicy{Version: 1, Filesystem: &sandboxv1.FilesystemPolicy{
			IncludeWorkdir: false, ReadOnly: []string{"/data"}}},
	}, {
		name: "filesystem includeWorkdir true is kept",
		spec: openshellv1alpha1.OpenShellPolicySpec{Filesystem: &openshellv1alpha1.FilesystemPolicy{IncludeWorkdir: ptr(true)}},
		want: &sandboxv1.SandboxPolicy{Version: 1, Filesystem: &sandboxv1.FilesystemPolicy{IncludeWorkdir: true}},
	}, {
		name: "empty filesystem still renders includeWorkdir true",
		spec: openshellv1alpha1.OpenShellPolicySpec{Filesystem: &openshellv1alpha1.FilesystemPolicy{}},
		want: &sandboxv1.SandboxPolicy{Version: 1, Filesystem: &sandboxv1.FilesystemPolicy{IncludeWorkdir: true}},
	}, {
		name: "landlock BestEffort",
		spec: openshellv1alpha1.OpenShellPolicySpec{Landlock: &openshellv1alpha1.LandlockPolicy{
			Compatibility: openshellv1alpha1.LandlockBestEffort}},
		want: &sandboxv1.SandboxPolicy{Version: 1, Landlock: &sandboxv1.LandlockPolicy{Compatibility: "best_effort"}},
	}, {
		name: "landlock HardRequirement",
		spec: openshellv1alpha1.OpenShellPolicySpec{Landlock: &openshellv1alpha1.LandlockPolicy{
			Compatibility: openshellv1alpha1.LandlockHardRequirement}},
		want: &sandboxv1.SandboxPolicy{Version: 1, Landlock: &sandboxv1.LandlockPolicy{Compatibility: "hard_requirement"}},
	}, {
		name: "process identity",
		spec: openshellv1alpha1.OpenShellPolicySpec{Process: &openshellv1alpha1.ProcessPolicy{RunAsUser: "1000", RunAsGroup: "sandbox"}},
		want: &sandboxv1.SandboxPolicy{Version: 1, Process: &sandboxv1.ProcessPolicy{RunAsUser: "1000", RunAsGroup: "sandbox"}},
	}, {
		name: "an MCP endpoint's options",
		spec: openshellv1alpha1.OpenShellPolicySpec{NetworkPolicies: []openshellv1alpha1.NetworkPolicyRule{{
			Name: "tools",
			Endpoints: []openshellv1alpha1.NetworkEndpoint{{Host: "mcp.example.com", Port: ptr(int32(443)), Protocol: "mcp",
				MCP: &openshellv1alpha1.MCPOptions{StrictToolNames: ptr(true), Versions: []string{"2025-06-18"}}}},
		}}},
		want: &sandboxv1.SandboxPolicy{Version: 1, NetworkPolicies: map[string]*sandboxv1.NetworkPolicyRule{
			"tools": {Name: "tools", Endpoints: []*sandboxv1.NetworkEndpoint{{Host: "mcp.example.com", Port: 443, Protocol: "mcp",
				Mcp: &sandboxv1.McpOptions{StrictToolNames: ptr(true), Versions: []string{"2025-06-18"}}}}},
		}},
	}, {
		name: "network rules keyed by name with every endpoint field",
		spec: openshellv1alpha1.OpenShellPolicySpec{NetworkPolicies: []openshellv1alpha1.NetworkPolicyRule{{
			Name: "github",
			Endpoints: []openshellv1alpha1.NetworkEndpoint{{
				Host: "api.github.com", Port: ptr(int32(443)), Protocol: "rest", Enforcement: "enforce",
				Rules: []openshellv1alpha1.L7Rule{
					{Method: "GET", Path: "/repos/**"},
					{OperationType: "query", OperationName: "viewer"},
				},
				DenyRules: []openshellv1alpha1.L7Rule{
					{Method: "DELETE", Path: "/repos/*", Command: "rm"},
					{OperationType: "mutation", OperationName: "deleteRepository"},
				},
				Path: "/v3",
			}, {
				Host: "github.com", Ports: []int32{22, 443}, Access: "read-only", AllowedIPs: []string{"140.82.112.0/20"},
			}},
			Binaries: []openshellv1alpha1.NetworkBinary{{Path: "/usr/bin/git"}, {Path: "/usr/bin/gh"}},
		}, {
			Name:      "pypi",
			Endpoints: []openshellv1alpha1.NetworkEndpoint{{Host: "pypi.org", Port: ptr(int32(8443)), Access: "full"}},
		}}},
		want: &sandboxv1.SandboxPolicy{Version: 1, NetworkPolicies: map[string]*sandboxv1.NetworkPolicyRule{
			"github": {
				Name: "github",
				Endpoints: []*sandboxv1.NetworkEndpoint{{
					Host: "api.github.com", Port: 443, Protocol: "rest", Enforcement: sandboxv1.NetworkEnforcementMode_NETWORK_ENFORCEMENT_MODE_ENFORCE,
					Rules: []*sandboxv1.L7Rule{
						{Allow: &sandboxv1.L7Allow{Method: "GET", Path: "/repos/**"}},
						{Allow: &sandboxv1.L7Allow{OperationType: "query", OperationName: "viewer"}},
					},
					DenyRules: []*sandboxv1.L7DenyRule{
						{Method: "DELETE", Path: "/repos/*", Command: "rm"},
						{OperationType: "mutation", OperationName: "deleteRepository"},
					},
					Path: "/v3",
				}, {
					Host: "github.com", Ports: []uint32{22, 443}, Access: sandboxv1.NetworkAccessPreset_NETWORK_ACCESS_PRESET_READ_ONLY, AllowedIps: []string{"140.82.112.0/20"},
				}},
				Binaries: []*sandboxv1.NetworkBinary{{Path: "/usr/bin/git"}, {Path: "/usr/bin/gh"}},
			},
			"pypi": {
				Name:      "pypi",
				Endpoints: []*sandboxv1.NetworkEndpoint{{Host: "pypi.org", Port: 8443, Access: sandboxv1.NetworkAccessPreset_NETWORK_ACCESS_PRESET_FULL}},
			},
		}},
	}, {
		name: "everything together",
		spec: openshellv1alpha1.OpenShellPolicySpec{
			Filesystem:      &openshellv1alpha1.FilesystemPolicy{IncludeWorkdir: ptr(false), ReadWrite: []string{"/work"}},
			Landlock:        &openshellv1alpha1.LandlockPolicy{Compatibility: openshellv1alpha1.LandlockHardRequirement},
			Process:         &openshellv1alpha1.ProcessPolicy{RunAsUser: "sandbox", RunAsGroup: "2000"},
			NetworkPolicies: []openshellv1alpha1.NetworkPolicyRule{{Name: "n", Endpoints: []openshellv1alpha1.NetworkEndpoint{{Host: "h", Ports: []int32{80}}}}},
		},
		want: &sandboxv1.SandboxPolicy{
			Version:         1,
			Filesystem:      &sandboxv1.FilesystemPolicy{IncludeWorkdir: false, ReadWrite: []string{"/work"}},
			Landlock:        &sandboxv1.LandlockPolicy{Compatibility: "hard_requirement"},
			Process:         &sandboxv1.ProcessPolicy{RunAsUser: "sandbox", RunAsGroup: "2000"},
			NetworkPolicies: map[string]*sandboxv1.NetworkPolicyRule{"n": {Name: "n", Endpoints: []*sandboxv1.NetworkEndpoint{{Host: "h", Ports: []uint32{80}}}}},
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Policy(tt.spec)
			if !proto.Equal(got, tt.want) {
				t.Errorf("Policy() =\n%v\nwant\n%v", got, tt.want)
			}
			// An unset CR section must stay unset so the gateway applies its
			// own default (an empty sub-message would not).
			if (got.GetFilesystem() == nil) != (tt.spec.Filesystem == nil) ||
				(got.GetLandlock() == nil) != (tt.spec.Landlock == nil) ||
				(got.GetProcess() == nil) != (tt.spec.Process == nil) {
				t.Errorf("Policy() set/unset sections do not follow the spec: %v", got)
			}
		})
	}
}

func TestHash(t *testing.T) {
	rules := func(names ...string) []openshellv1alpha1.NetworkPolicyRule {
		var out []openshellv1alpha1.NetworkPolicyRule
		for _, n := range names {
			out = append(out, openshellv1alpha1.NetworkPolicyRule{Name: n,
				Endpoints: []openshellv1alpha1.NetworkEndpoint{{Host: n + ".example.com", Port: ptr(int32(443))}}})
		}
		return out
	}
	base := openshellv1alpha1.OpenShellPolicySpec{
		Filesystem:      &openshellv1alpha1.FilesystemPolicy{ReadOnly: []string{"/usr"}},
		Landlock:        &openshellv1alpha1.LandlockPolicy{Compatibility: openshellv1alpha1.LandlockBestEffort},
		Process:         &openshellv1alpha1.ProcessPolicy{RunAsUser: "1000"},
		NetworkPolicies: rules("a", "b", "c", "d", "e", "f", "g", "h"),
	}
	baseHash := Hash(Policy(base))
	if b, err := hex.DecodeString(baseHash); err != nil || len(b) != 16 {
		t.Fatalf("Hash() = %q, want 32 hex characters", baseHash)
	}
	// The network rules are a proto map: the hash must not depend on
	// iteration order, neither on repeated calls nor on the CR list order.
	for i := range 50 {
		if h := Hash(Policy(base)); h != baseHash {
			t.Fatalf("Hash() run %d = %s, want %s (not deterministic)", i, h, baseHash)
		}
	}
	reordered := base
	reordered.NetworkPolicies = rules("h", "g", "f", "e", "d", "c", "b", "a")
	if h := Hash(Policy(reordered)); h != baseHash {
		t.Errorf("Hash() depends on the order of network rules: %s vs %s", h, baseHash)
	}

	changes := []struct {
		name   string
		mutate func(*openshellv1alpha1.OpenShellPolicySpec)
	}{
		{"filesystem path added", func(s *openshellv1alpha1.OpenShellPolicySpec) { s.Filesystem.ReadOnly = []string{"/usr", "/opt"} }},
		{"includeWorkdir off", func(s *openshellv1alpha1.OpenShellPolicySpec) { s.Filesystem.IncludeWorkdir = ptr(false) }},
		{"landlock stricter", func(s *openshellv1alpha1.OpenShellPolicySpec) {
			s.Landlock.Compatibility = openshellv1alpha1.LandlockHardRequirement
		}},
		{"process user", func(s *openshellv1alpha1.OpenShellPolicySpec) { s.Process.RunAsUser = "1001" }},
		{"network rule removed", func(s *openshellv1alpha1.OpenShellPolicySpec) {
			s.NetworkPolicies = rules("a", "b", "c", "d", "e", "f", "g")
		}},
		{"network port", func(s *openshellv1alpha1.OpenShellPolicySpec) {
			s.NetworkPolicies = rules("a", "b", "c", "d", "e", "f", "g", "h")
			s.NetworkPolicies[3].Endpoints[0].Port = ptr(int32(8443))
		}},
	}
	for _, c := range changes {
		t.Run(c.name, func(t *testing.T) {
			s := *base.DeepCopy()
			c.mutate(&s)
			if h := Hash(Policy(s)); h == baseHash {
				t.Errorf("Hash() did not change when the %s changed", c.name)
			}
		})
	}
}

func sandbox(mutate func(*openshellv1alpha1.OpenShellSandbox)) *openshellv1alpha1.OpenShellSandbox {
	sb := &openshellv1alpha1.OpenShellSandbox{
		ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: "team-a", UID: "uid-1"},
		Spec: openshellv1alpha1.OpenShellSandboxSpec{
			GatewayRef: openshellv1alpha1.GatewayReference{Name: "gw"},
			Image:      "registry.example.com/agent@sha256:0123",
		},
	}
	if mutate != nil {
		mutate(sb)
	}
	return sb
}

func TestSandboxSpec(t *testing.T) {
	policy := Policy(openshellv1alpha1.OpenShellPolicySpec{Process: &openshellv1alpha1.ProcessPolicy{RunAsUser: "1000"}})
	resources := func(m map[string]any) *structpb.Struct {
		s, err := structpb.NewStruct(m)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	template := func(image string, res *structpb.Struct) *openshellv1.SandboxTemplate {
		return &openshellv1.SandboxTemplate{Image: image, Labels: map[string]string{TemplateLabel: "true", LabelTenantNamespace: "team-a"}, Resources: res}
	}
	const image = "registry.example.com/agent@sha256:0123"
	tests := []struct {
		name string
		sb   *openshellv1alpha1.OpenShellSandbox
		in   SpecInputs
		want *openshellv1.SandboxSpec
	}{{
		name: "minimal: image and operator labels only",
		sb:   sandbox(nil),
		want: &openshellv1.SandboxSpec{Template: template(image, nil)},
	}, {
		// N5: the tenant's identity is the operator's to set; a pod label
		// of the tenant's choosing cannot stand in for it.
		name: "tenant labels beside the tenant's own",
		sb: sandbox(func(sb *openshellv1alpha1.OpenShellSandbox) {
			sb.Spec.PodLabels = map[string]openshellv1alpha1.PodLabelValue{"team": "a"}
		}),
		in: SpecInputs{NamespaceUID: "ns-uid"},
		want: &openshellv1.SandboxSpec{Template: &openshellv1.SandboxTemplate{Image: image, Labels: map[string]string{
			TemplateLabel: "true", LabelTenantNamespace: "team-a", LabelTenantNamespaceUID: "ns-uid", "team": "a"}}},
	}, {
		name: "empty image is passed through for the gateway default",
		sb:   sandbox(func(sb *openshellv1alpha1.OpenShellSandbox) { sb.Spec.Image = "" }),
		want: &openshellv1.SandboxSpec{Template: template("", nil)},
	}, {
		name: "env, providers and policy come from the inputs, not the CR",
		sb: sandbox(func(sb *openshellv1alpha1.OpenShellSandbox) {
			sb.Spec.LogLevel = "debug"
			sb.Spec.Command = []string{"claude", "--print", "hello world"}
			sb.Spec.Env = []openshellv1alpha1.SandboxEnvVar{
				{Name: "PLAIN", Value: ptr("literal")},
				{Name: "TOKEN", ValueFrom: &openshellv1alpha1.SandboxEnvVarSource{
					SecretKeyRef: openshellv1alpha1.SecretKeyReference{Name: "creds", Key: "token"}}},
			}
			sb.Spec.Providers = []string{"z-provider", "a-provider"}
			sb.Spec.PolicyRef = &openshellv1alpha1.LocalObjectReference{Name: "strict"}
		}),
		in: SpecInputs{
			Policy:    policy,
			Env:       map[string]string{"PLAIN": "literal", "TOKEN": "s3cret"},
			Providers: []string{"a-provider", "z-provider"},
		},
		want: &openshellv1.SandboxSpec{
			LogLevel:    "debug",
			Command:     []string{"claude", "--print", "hello world"},
			Environment: map[string]string{"PLAIN": "literal", "TOKEN": "s3cret"},
			Providers:   []string{"a-provider", "z-provider"},
			Policy:      policy,
			Template:    template(image, nil),
		},
	}, {
		name: "policyRef without a resolved policy leaves the policy unset",
		sb: sandbox(func(sb *openshellv1alpha1.OpenShellSandbox) {
			sb.Spec.PolicyRef = &openshellv1alpha1.LocalObjectReference{Name: "strict"}
		}),
		in:   SpecInputs{Policy: nil},
		want: &openshellv1.SandboxSpec{Template: template(image, nil)},
	}, {
		name: "gpu count",
		sb: sandbox(func(sb *openshellv1alpha1.OpenShellSandbox) {
			sb.Spec.GPU = &openshellv1alpha1.SandboxGPU{Count: 4}
		}),
		want: &openshellv1.SandboxSpec{Template: template(image, nil),
			ResourceRequirements: &openshellv1.ResourceRequirements{Gpu: &openshellv1.GpuResourceRequirements{Count: ptr(uint32(4))}}},
	}, {
		name: "gpu without count asks for one",
		sb: sandbox(func(sb *openshellv1alpha1.OpenShellSandbox) {
			sb.Spec.GPU = &openshellv1alpha1.SandboxGPU{}
		}),
		want: &openshellv1.SandboxSpec{Template: template(image, nil),
			ResourceRequirements: &openshellv1.ResourceRequirements{Gpu: &openshellv1.GpuResourceRequirements{Count: ptr(uint32(1))}}},
	}, {
		name: "limits and requests as canonical quantity strings",
		sb: sandbox(func(sb *openshellv1alpha1.OpenShellSandbox) {
			sb.Spec.Resources = &corev1.ResourceRequirements{
				Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2000m"), corev1.ResourceMemory: resource.MustParse("4096Mi")},
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("1Gi")},
			}
		}),
		want: &openshellv1.SandboxSpec{Template: template(image, resources(map[string]any{
			"limits":   map[string]any{"cpu": "2", "memory": "4Gi"},
			"requests": map[string]any{"cpu": "500m", "memory": "1Gi"},
		}))},
	}, {
		name: "limits only renders empty requests",
		sb: sandbox(func(sb *openshellv1alpha1.OpenShellSandbox) {
			sb.Spec.Resources = &corev1.ResourceRequirements{
				Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")},
			}
		}),
		want: &openshellv1.SandboxSpec{Template: template(image, resources(map[string]any{
			"limits":   map[string]any{"nvidia.com/gpu": "1"},
			"requests": map[string]any{},
		}))},
	}, {
		name: "empty resources render no resources",
		sb: sandbox(func(sb *openshellv1alpha1.OpenShellSandbox) {
			sb.Spec.Resources = &corev1.ResourceRequirements{Limits: corev1.ResourceList{}}
		}),
		want: &openshellv1.SandboxSpec{Template: template(image, nil)},
	}, {
		name: "gpu and resources together",
		sb: sandbox(func(sb *openshellv1alpha1.OpenShellSandbox) {
			sb.Spec.GPU = &openshellv1alpha1.SandboxGPU{Count: 2}
			sb.Spec.Resources = &corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("8Gi")},
			}
		}),
		want: &openshellv1.SandboxSpec{
			Template: template(image, resources(map[string]any{
				"limits":   map[string]any{},
				"requests": map[string]any{"memory": "8Gi"},
			})),
			ResourceRequirements: &openshellv1.ResourceRequirements{Gpu: &openshellv1.GpuResourceRequirements{Count: ptr(uint32(2))}},
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := SandboxSpec(tt.sb, tt.in)
			if err != nil {
				t.Fatalf("SandboxSpec() error = %v", err)
			}
			if !proto.Equal(got, tt.want) {
				t.Errorf("SandboxSpec() =\n%v\nwant\n%v", got, tt.want)
			}
			if (got.GetPolicy() == nil) != (tt.in.Policy == nil) {
				t.Errorf("SandboxSpec() policy = %v, want set exactly when the inputs carry one", got.GetPolicy())
			}
			if (got.GetResourceRequirements() == nil) != (tt.sb.Spec.GPU == nil) {
				t.Errorf("SandboxSpec() resource requirements = %v, want set exactly when spec.gpu is", got.GetResourceRequirements())
			}
		})
	}
}

func TestImmutableHash(t *testing.T) {
	full := func() *openshellv1alpha1.OpenShellSandbox {
		return sandbox(func(sb *openshellv1alpha1.OpenShellSandbox) {
			sb.Labels = map[string]string{"team": "a"}
			sb.Annotations = map[string]string{"note": "x"}
			sb.Spec.LogLevel = "info"
			sb.Spec.Command = []string{"claude", "--print", "hi"}
			sb.Spec.PolicyRef = &openshellv1alpha1.LocalObjectReference{Name: "strict"}
			sb.Spec.Providers = []string{"anthropic", "github"}
			sb.Spec.Env = []openshellv1alpha1.SandboxEnvVar{
				{Name: "B_PLAIN", Value: ptr("one")},
				{Name: "A_TOKEN", ValueFrom: &openshellv1alpha1.SandboxEnvVarSource{
					SecretKeyRef: openshellv1alpha1.SecretKeyReference{Name: "creds", Key: "token"}}},
				{Name: "C_EMPTY", Value: ptr("")},
			}
			sb.Spec.GPU = &openshellv1alpha1.SandboxGPU{Count: 1}
			sb.Spec.Resources = &corev1.ResourceRequirements{
				Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4Gi")},
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("1Gi")},
			}
		})
	}
	base := ImmutableHash(full())
	if b, err := hex.DecodeString(base); err != nil || len(b) != 16 {
		t.Fatalf("ImmutableHash() = %q, want 32 hex characters", base)
	}

	type sb = openshellv1alpha1.OpenShellSandbox
	tests := []struct {
		name     string
		mutate   func(*sb)
		recreate bool
	}{
		// What cannot change in place: a different hash recreates the sandbox.
		{"image", func(s *sb) { s.Spec.Image = "registry.example.com/agent@sha256:4567" }, true},
		{"image cleared", func(s *sb) { s.Spec.Image = "" }, true},
		{"log level", func(s *sb) { s.Spec.LogLevel = "debug" }, true},
		{"log level cleared", func(s *sb) { s.Spec.LogLevel = "" }, true},
		{"command argument", func(s *sb) { s.Spec.Command[2] = "bye" }, true},
		{"command argument appended", func(s *sb) { s.Spec.Command = append(s.Spec.Command, "--verbose") }, true},
		{"command arguments reordered", func(s *sb) { s.Spec.Command = []string{"claude", "hi", "--print"} }, true},
		{"command arguments joined", func(s *sb) { s.Spec.Command = []string{"claude", "--printhi"} }, true},
		{"command removed", func(s *sb) { s.Spec.Command = nil }, true},
		{"env value", func(s *sb) { s.Spec.Env[0].Value = ptr("two") }, true},
		{"env empty value set", func(s *sb) { s.Spec.Env[2].Value = ptr("x") }, true},
		{"env renamed", func(s *sb) { s.Spec.Env[0].Name = "B_OTHER" }, true},
		{"env added", func(s *sb) {
			s.Spec.Env = append(s.Spec.Env, openshellv1alpha1.SandboxEnvVar{Name: "D_NEW", Value: ptr("v")})
		}, true},
		{"env removed", func(s *sb) { s.Spec.Env = s.Spec.Env[1:] }, true},
		{"env secret name", func(s *sb) { s.Spec.Env[1].ValueFrom.SecretKeyRef.Name = "other" }, true},
		{"env secret key", func(s *sb) { s.Spec.Env[1].ValueFrom.SecretKeyRef.Key = "other" }, true},
		{"env literal to secret", func(s *sb) {
			s.Spec.Env[0].Value = nil
			s.Spec.Env[0].ValueFrom = &openshellv1alpha1.SandboxEnvVarSource{
				SecretKeyRef: openshellv1alpha1.SecretKeyReference{Name: "creds", Key: "one"}}
		}, true},
		{"env values moved between names", func(s *sb) {
			s.Spec.Env[0].Value, s.Spec.Env[2].Value = s.Spec.Env[2].Value, s.Spec.Env[0].Value
		}, true},
		{"gpu count", func(s *sb) { s.Spec.GPU.Count = 2 }, true},
		{"gpu removed", func(s *sb) { s.Spec.GPU = nil }, true},
		{"cpu limit", func(s *sb) { s.Spec.Resources.Limits[corev1.ResourceCPU] = resource.MustParse("3") }, true},
		{"memory request", func(s *sb) { s.Spec.Resources.Requests[corev1.ResourceMemory] = resource.MustParse("2Gi") }, true},
		{"resource added", func(s *sb) {
			s.Spec.Resources.Limits[corev1.ResourceEphemeralStorage] = resource.MustParse("10Gi")
		}, true},
		{"resource removed", func(s *sb) { delete(s.Spec.Resources.Requests, corev1.ResourceCPU) }, true},
		{"limits and requests swapped", func(s *sb) {
			s.Spec.Resources.Limits, s.Spec.Resources.Requests = s.Spec.Resources.Requests, s.Spec.Resources.Limits
		}, true},
		{"resources removed", func(s *sb) { s.Spec.Resources = nil }, true},

		// What changes in place or is not the sandbox's: same hash.
		{"policyRef changed", func(s *sb) { s.Spec.PolicyRef.Name = "relaxed" }, false},
		{"policyRef removed", func(s *sb) { s.Spec.PolicyRef = nil }, false},
		{"providers changed", func(s *sb) { s.Spec.Providers = []string{"github"} }, false},
		{"providers reordered", func(s *sb) { s.Spec.Providers = []string{"github", "anthropic"} }, false},
		{"providers removed", func(s *sb) { s.Spec.Providers = nil }, false},
		{"labels", func(s *sb) { s.Labels = map[string]string{"team": "b", "new": "y"} }, false},
		{"annotations", func(s *sb) { s.Annotations = nil }, false},
		{"metadata bookkeeping", func(s *sb) {
			s.Generation, s.ResourceVersion, s.Finalizers = 7, "12345", []string{"openshell.ai/finalizer"}
		}, false},
		{"status", func(s *sb) {
			s.Status.SandboxID, s.Status.AppliedSpecHash, s.Status.Phase = "id-9", "stale", openshellv1alpha1.SandboxPhaseReady
		}, false},
		{"env reordered", func(s *sb) {
			e := s.Spec.Env
			s.Spec.Env = []openshellv1alpha1.SandboxEnvVar{e[2], e[0], e[1]}
		}, false},
		{"equal quantities spelled differently", func(s *sb) {
			s.Spec.Resources.Limits[corev1.ResourceCPU] = resource.MustParse("2000m")
			s.Spec.Resources.Requests[corev1.ResourceMemory] = resource.MustParse("1024Mi")
		}, false},
		{"resource lists rebuilt in another insertion order", func(s *sb) {
			s.Spec.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("4Gi"), corev1.ResourceCPU: resource.MustParse("2")}
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := full()
			tt.mutate(s)
			got := ImmutableHash(s)
			if changed := got != base; changed != tt.recreate {
				t.Errorf("ImmutableHash() changed = %t after %q, want %t (recreate the sandbox: %t)", changed, tt.name, tt.recreate, tt.recreate)
			}
		})
	}
}

func TestImmutableHashIsDeterministicAndPure(t *testing.T) {
	many := corev1.ResourceList{}
	for _, n := range []string{"cpu", "memory", "ephemeral-storage", "example.com/a", "example.com/b", "example.com/c", "example.com/d", "hugepages-2Mi"} {
		many[corev1.ResourceName(n)] = resource.MustParse("1")
	}
	s := sandbox(func(sb *openshellv1alpha1.OpenShellSandbox) {
		sb.Spec.Env = []openshellv1alpha1.SandboxEnvVar{{Name: "Z", Value: ptr("1")}, {Name: "A", Value: ptr("2")}, {Name: "M", Value: ptr("3")}}
		sb.Spec.Resources = &corev1.ResourceRequirements{Limits: many, Requests: many}
	})
	first := ImmutableHash(s)
	for i := range 50 {
		if got := ImmutableHash(s.DeepCopy()); got != first {
			t.Fatalf("ImmutableHash() run %d = %s, want %s (not deterministic)", i, got, first)
		}
	}
	// Sorting env for the hash must not reorder the caller's spec.
	if s.Spec.Env[0].Name != "Z" || s.Spec.Env[1].Name != "A" || s.Spec.Env[2].Name != "M" {
		t.Errorf("ImmutableHash() reordered spec.env in place: %v", s.Spec.Env)
	}
	// Distinct sandboxes must not share a hash with the minimal one.
	if ImmutableHash(sandbox(nil)) == first {
		t.Error("ImmutableHash() ignores env and resources")
	}
}

func TestImmutableHashCoversWhatSandboxSpecRendersImmutably(t *testing.T) {
	// If two sandboxes hash the same, the immutable part of their rendered
	// specs (everything but policy, providers and resolved env values) must
	// be the same too, or a change would never reach the running sandbox.
	variants := []*openshellv1alpha1.OpenShellSandbox{
		sandbox(nil),
		sandbox(func(sb *openshellv1alpha1.OpenShellSandbox) { sb.Spec.Image = "other" }),
		sandbox(func(sb *openshellv1alpha1.OpenShellSandbox) { sb.Spec.LogLevel = "warn" }),
		sandbox(func(sb *openshellv1alpha1.OpenShellSandbox) { sb.Spec.Command = []string{"sh"} }),
		sandbox(func(sb *openshellv1alpha1.OpenShellSandbox) { sb.Spec.Command = []string{"sh", "-c"} }),
		sandbox(func(sb *openshellv1alpha1.OpenShellSandbox) { sb.Spec.GPU = &openshellv1alpha1.SandboxGPU{Count: 1} }),
		sandbox(func(sb *openshellv1alpha1.OpenShellSandbox) { sb.Spec.GPU = &openshellv1alpha1.SandboxGPU{Count: 3} }),
		sandbox(func(sb *openshellv1alpha1.OpenShellSandbox) {
			sb.Spec.Resources = &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}
		}),
		sandbox(func(sb *openshellv1alpha1.OpenShellSandbox) {
			sb.Spec.Resources = &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}
		}),
		sandbox(func(sb *openshellv1alpha1.OpenShellSandbox) {
			sb.Spec.GPU = &openshellv1alpha1.SandboxGPU{Count: 1}
			sb.Spec.Resources = &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}}
		}),
	}
	rendered := make([]*openshellv1.SandboxSpec, len(variants))
	for i, v := range variants {
		spec, err := SandboxSpec(v, SpecInputs{})
		if err != nil {
			t.Fatal(err)
		}
		rendered[i] = spec
	}
	for i := range variants {
		for j := i + 1; j < len(variants); j++ {
			sameHash := ImmutableHash(variants[i]) == ImmutableHash(variants[j])
			sameSpec := proto.Equal(rendered[i], rendered[j])
			if sameHash != sameSpec {
				t.Errorf("variants %d and %d: same hash %t but same rendered spec %t\n%v\n%v", i, j, sameHash, sameSpec, rendered[i], rendered[j])
			}
		}
	}
}

// TestImmutableHashFollowsTheRenderedSpec: two sandboxes share a hash
// exactly when their rendered specs are equal, at the edges where the hash
// once disagreed (a missed recreate, a needless one).
func TestImmutableHashFollowsTheRenderedSpec(t *testing.T) {
	tests := []struct {
		name string
		a, b *openshellv1alpha1.OpenShellSandbox
	}{{
		// Missed recreate: different specs, same hash ("gpu=1" is written
		// both for spec.gpu and for a resource literally named "gpu").
		name: "spec.gpu vs a resource key named gpu",
		a: sandbox(func(sb *openshellv1alpha1.OpenShellSandbox) {
			sb.Spec.GPU = &openshellv1alpha1.SandboxGPU{Count: 1}
			sb.Spec.Resources = &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}}
		}),
		b: sandbox(func(sb *openshellv1alpha1.OpenShellSandbox) {
			sb.Spec.Resources = &corev1.ResourceRequirements{Limits: corev1.ResourceList{
				"gpu": resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi")}}
		}),
	}, {
		// Needless recreate: same rendered spec, different hash.
		name: "resources: {} vs no resources",
		a:    sandbox(func(sb *openshellv1alpha1.OpenShellSandbox) { sb.Spec.Resources = &corev1.ResourceRequirements{} }),
		b:    sandbox(nil),
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sa, errA := SandboxSpec(tt.a, SpecInputs{})
			sb, errB := SandboxSpec(tt.b, SpecInputs{})
			if errA != nil || errB != nil {
				t.Fatal(errA, errB)
			}
			if sameHash, sameSpec := ImmutableHash(tt.a) == ImmutableHash(tt.b), proto.Equal(sa, sb); sameHash != sameSpec {
				t.Errorf("same hash %t but same rendered spec %t", sameHash, sameSpec)
			}
		})
	}
}

// TestProfile: a provider profile carries every field the CRD offers to
// its gateway twin, the category defaults to Other, endpoints are rendered
// as a policy's are, and the owner marks are a copy (never the caller's
// map, which the caller may reuse).
func TestProfile(t *testing.T) {
	port := int32(443)
	p := &openshellv1alpha1.OpenShellProviderProfile{ObjectMeta: metav1.ObjectMeta{Name: "github", Namespace: "team-a"},
		Spec: openshellv1alpha1.OpenShellProviderProfileSpec{DisplayName: "GitHub", Description: "Source control", InferenceCapable: true,
			Credentials: []openshellv1alpha1.ProviderProfileCredential{{Name: "TOKEN", Description: "PAT", EnvVars: []string{"GITHUB_TOKEN"},
				Required: true, AuthStyle: "bearer", HeaderName: "Authorization", QueryParam: "t", PathTemplate: "/x/{token}"}},
			Endpoints: []openshellv1alpha1.NetworkEndpoint{{Host: "api.github.com", Port: &port, Access: "read-only", Enforcement: "audit"}},
			Binaries:  []openshellv1alpha1.NetworkBinary{{Path: "/usr/bin/gh"}}}}
	owner := map[string]string{LabelOwnerUID: "u1"}
	got := Profile(p, owner)
	owner["later"] = "x"
	want := &openshellv1.ProviderProfile{Id: "github", DisplayName: "GitHub", Description: "Source control", InferenceCapable: true,
		Category: openshellv1.ProviderProfileCategory_PROVIDER_PROFILE_CATEGORY_OTHER,
		Credentials: []*openshellv1.ProviderProfileCredential{{Name: "TOKEN", Description: "PAT", EnvVars: []string{"GITHUB_TOKEN"},
			Required: true, AuthStyle: "bearer", HeaderName: "Authorization", QueryParam: "t", PathTemplate: "/x/{token}"}},
		Endpoints: []*sandboxv1.NetworkEndpoint{{Host: "api.github.com", Port: 443,
			Access: sandboxv1.NetworkAccessPreset_NETWORK_ACCESS_PRESET_READ_ONLY, Enforcement: sandboxv1.NetworkEnforcementMode_NETWORK_ENFORCEMENT_MODE_AUDIT}},
		Binaries:    []*sandboxv1.NetworkBinary{{Path: "/usr/bin/gh"}},
		Annotations: map[string]string{LabelOwnerUID: "u1"}}
	if !proto.Equal(got, want) {
		t.Fatalf("Profile =\n%v\nwant\n%v", got, want)
	}
	for cat, enum := range map[openshellv1alpha1.ProviderProfileCategory]openshellv1.ProviderProfileCategory{
		"Inference": openshellv1.ProviderProfileCategory_PROVIDER_PROFILE_CATEGORY_INFERENCE,
		"Knowledge": openshellv1.ProviderProfileCategory_PROVIDER_PROFILE_CATEGORY_KNOWLEDGE,
	} {
		p.Spec.Category = cat
		if got := Profile(p, nil).GetCategory(); got != enum {
			t.Errorf("category %s = %v, want %v", cat, got, enum)
		}
	}
	// Every category the CRD admits has its enum value.
	if len(profileCategory) != 8 {
		t.Errorf("profileCategory has %d entries: the CRD's enum has 7 values plus the default", len(profileCategory))
	}
}

// TestRenderedResourcesReadsBackWhatSandboxSpecRendered: the resources and
// GPUs a rendered gateway spec carries read back as the spec fields they
// came from, so what a gateway runs can be charged when the object's spec
// has changed since.
func TestRenderedResourcesReadsBackWhatSandboxSpecRendered(t *testing.T) {
	for name, mutate := range map[string]func(*openshellv1alpha1.OpenShellSandbox){
		"none": nil,
		"GPUs": func(sb *openshellv1alpha1.OpenShellSandbox) { sb.Spec.GPU = &openshellv1alpha1.SandboxGPU{Count: 2} },
		"limits and requests, devices among them": func(sb *openshellv1alpha1.OpenShellSandbox) {
			sb.Spec.Resources = &corev1.ResourceRequirements{
				Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), "nvidia.com/mig-1g.10gb": resource.MustParse("3")},
				Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1536Mi")}}
		},
		"limits only": func(sb *openshellv1alpha1.OpenShellSandbox) {
			sb.Spec.Resources = &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}}
		},
	} {
		t.Run(name, func(t *testing.T) {
			sb := sandbox(mutate)
			spec, err := SandboxSpec(sb, SpecInputs{})
			if err != nil {
				t.Fatal(err)
			}
			res, gpu := RenderedResources(spec)
			if !equality.Semantic.DeepEqual(res, sb.Spec.Resources) {
				t.Errorf("resources %+v, rendered from %+v", res, sb.Spec.Resources)
			}
			if !equality.Semantic.DeepEqual(gpu, sb.Spec.GPU) {
				t.Errorf("GPU %+v, rendered from %+v", gpu, sb.Spec.GPU)
			}
		})
	}
}

// TestSameRun: an adopted gateway sandbox runs the object's spec unless an
// immutable field it gives back differs.
func TestSameRun(t *testing.T) {
	render := func(sb *openshellv1alpha1.OpenShellSandbox) *openshellv1.SandboxSpec {
		spec, err := SandboxSpec(sb, SpecInputs{Env: map[string]string{"TOKEN": "v2"}})
		if err != nil {
			t.Fatal(err)
		}
		return spec
	}
	now := sandbox(func(sb *openshellv1alpha1.OpenShellSandbox) {
		sb.Spec.GPU = &openshellv1alpha1.SandboxGPU{Count: 1}
		sb.Spec.Command = []string{"agent"}
		sb.Spec.LogLevel = "info"
		sb.Spec.Resources = &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}
	})
	want := render(now)
	then := func(edit func(*openshellv1alpha1.OpenShellSandbox)) *openshellv1.SandboxSpec {
		sb := now.DeepCopy()
		edit(sb)
		return render(sb)
	}
	withoutEnv := render(now)
	withoutEnv.Environment = nil // as a gateway gives a sandbox back
	bare := sandbox(nil)
	defaulted := render(bare)
	defaulted.Command = []string{"/bin/bash", "-l"} // a gateway's default for no command
	for name, tc := range map[string]struct {
		got  *openshellv1.SandboxSpec
		same bool
	}{
		"the same spec":              {render(now), true},
		"given back without its env": {withoutEnv, true},
		"another image":              {then(func(sb *openshellv1alpha1.OpenShellSandbox) { sb.Spec.Image = "registry.example.com/agent@sha256:4567" }), false},
		"another command":            {then(func(sb *openshellv1alpha1.OpenShellSandbox) { sb.Spec.Command = []string{"other"} }), false},
		"more GPUs":                  {then(func(sb *openshellv1alpha1.OpenShellSandbox) { sb.Spec.GPU.Count = 2 }), false},
		"other resources": {then(func(sb *openshellv1alpha1.OpenShellSandbox) {
			sb.Spec.Resources.Limits[corev1.ResourceCPU] = resource.MustParse("2")
		}), false},
		"another log level": {then(func(sb *openshellv1alpha1.OpenShellSandbox) { sb.Spec.LogLevel = "debug" }), false},
	} {
		if got := SameRun(want, tc.got); got != tc.same {
			t.Errorf("%s: %v, want %v", name, got, tc.same)
		}
	}
	if !SameRun(render(bare), defaulted) {
		t.Error("a gateway's default for a field the spec leaves unset reads as another spec")
	}
}
