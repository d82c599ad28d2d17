package sandboxcontrols

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
)

func TestCheck(t *testing.T) {
	gw := &openshellv1alpha1.OpenShellGateway{ObjectMeta: metav1.ObjectMeta{Namespace: "platform", Name: "shared"},
		Spec: openshellv1alpha1.OpenShellGatewaySpec{SandboxControls: openshellv1alpha1.SandboxControls{
			MaxResources:          corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("16Gi")},
			MaxGPUs:               ptr.To[int32](1),
			AllowedRuntimeClasses: []string{"kata", "gvisor"}, DefaultRuntimeClass: "kata",
			AllowedProviderTypes: []string{"claude-code"},
		}}}
	res := func(kind string, cpu, mem string) *corev1.ResourceRequirements {
		l := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}
		if kind == "limits" {
			return &corev1.ResourceRequirements{Limits: l}
		}
		// Requests beside limits within the ceiling.
		return &corev1.ResourceRequirements{Requests: l, Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("16Gi")}}
	}
	within := res("limits", "1", "1Gi")
	types := map[string]string{"anthropic": "claude-code", "gh": "github"}
	for name, tc := range map[string]struct {
		spec   openshellv1alpha1.OpenShellSandboxSpec
		reason string
		field  string
		msg    string
	}{
		"within every ceiling":      {spec: openshellv1alpha1.OpenShellSandboxSpec{Resources: res("limits", "4", "16Gi"), GPU: &openshellv1alpha1.SandboxGPU{Count: 1}, RuntimeClassName: "gvisor", Providers: []string{"anthropic", "missing"}}},
		"no limits under a ceiling": {spec: openshellv1alpha1.OpenShellSandboxSpec{}, reason: "ResourceLimitExceeded", field: "spec.resources.limits.cpu", msg: "caps cpu at 4 per sandbox (maxResources): set spec.resources.limits.cpu"},
		"gpu as a resource":         {spec: openshellv1alpha1.OpenShellSandboxSpec{Resources: &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi"), "nvidia.com/gpu": resource.MustParse("8")}}}, reason: "ResourceLimitExceeded", field: "spec.gpu.count", msg: "8 GPUs and devices (spec.gpu.count and every extended resource"},
		"memory limit":              {spec: openshellv1alpha1.OpenShellSandboxSpec{Resources: res("limits", "1", "64Gi")}, reason: "ResourceLimitExceeded", field: "spec.resources.limits.memory", msg: "spec.resources.limits.memory 64Gi exceeds gateway platform/shared's maxResources.memory 16Gi"},
		"cpu request":               {spec: openshellv1alpha1.OpenShellSandboxSpec{Resources: res("requests", "8", "1Gi")}, reason: "ResourceLimitExceeded", field: "spec.resources.requests.cpu", msg: "maxResources.cpu 4"},
		"millicores compare":        {spec: openshellv1alpha1.OpenShellSandboxSpec{Resources: res("limits", "4001m", "1Gi")}, reason: "ResourceLimitExceeded", field: "spec.resources.limits.cpu"},
		"gpus":                      {spec: openshellv1alpha1.OpenShellSandboxSpec{Resources: within, GPU: &openshellv1alpha1.SandboxGPU{Count: 2}}, reason: "ResourceLimitExceeded", field: "spec.gpu.count", msg: "2 GPUs and devices (spec.gpu.count and every extended resource: */gpu, MIG slices, shared GPUs, KVM, RDMA) exceed gateway platform/shared's maxGPUs 1"},
		// N7: every device plugin's resource counts against maxGPUs.
		"mig slices count":               {spec: openshellv1alpha1.OpenShellSandboxSpec{Resources: &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi"), "nvidia.com/mig-7g.141gb": resource.MustParse("8")}}}, reason: "ResourceLimitExceeded", field: "spec.gpu.count", msg: "8 GPUs and devices"},
		"kvm beside a gpu":               {spec: openshellv1alpha1.OpenShellSandboxSpec{Resources: &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi"), "devices.kubevirt.io/kvm": resource.MustParse("1")}}, GPU: &openshellv1alpha1.SandboxGPU{Count: 1}}, reason: "ResourceLimitExceeded", field: "spec.gpu.count", msg: "2 GPUs and devices"},
		"gpu field and resource are one": {spec: openshellv1alpha1.OpenShellSandboxSpec{Resources: &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi"), "nvidia.com/gpu": resource.MustParse("1")}}, GPU: &openshellv1alpha1.SandboxGPU{Count: 1}}},
		"hugepages are not devices":      {spec: openshellv1alpha1.OpenShellSandboxSpec{Resources: &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi"), "hugepages-2Mi": resource.MustParse("64Mi")}}}},
		"huge counts do not wrap":        {spec: openshellv1alpha1.OpenShellSandboxSpec{Resources: &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi"), "nvidia.com/gpu": resource.MustParse("4294967296")}}}, reason: "InvalidResources", field: "spec.resources.limits.nvidia.com/gpu", msg: "a sandbox asks for at most 65536 of a device"},
		// Two counts that would wrap int64 when added (a negative sum would
		// lower the namespace's GPU charge): refused, never summed.
		"overflowing devices are refused": {spec: openshellv1alpha1.OpenShellSandboxSpec{Resources: &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi"), "nvidia.com/gpu": resource.MustParse("4611686018427387904"), "rdma/hca": resource.MustParse("4611686018427387904")}}}, reason: "InvalidResources", field: "spec.resources.limits.nvidia.com/gpu", msg: "at most 65536"},
		"beyond int64 is refused":         {spec: openshellv1alpha1.OpenShellSandboxSpec{Resources: &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi"), "rdma/hca": resource.MustParse("1e19")}}}, reason: "InvalidResources", field: "spec.resources.limits.rdma/hca", msg: "at most 65536"},
		// N8: a negative request is refused whatever the ceilings.
		"negative request": {spec: openshellv1alpha1.OpenShellSandboxSpec{Resources: &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("-100")}, Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi")}}}, reason: "InvalidResources", field: "spec.resources.requests.cpu", msg: "spec.resources.requests.cpu is -100: requests and limits cannot be negative"},
		// A limit of 0 is no limit to the kubelet, yet within any ceiling.
		"zero limit":           {spec: openshellv1alpha1.OpenShellSandboxSpec{Resources: &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("0"), corev1.ResourceMemory: resource.MustParse("1Gi")}}}, reason: "InvalidResources", field: "spec.resources.limits.cpu", msg: "spec.resources.limits.cpu is 0, which the kubelet treats as no limit at all"},
		"zero request is fine": {spec: openshellv1alpha1.OpenShellSandboxSpec{Resources: &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("0")}, Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi")}}}},
		"runtime class":        {spec: openshellv1alpha1.OpenShellSandboxSpec{Resources: within, RuntimeClassName: "runc"}, reason: "RuntimeClassNotAllowed", field: "spec.runtimeClassName", msg: `RuntimeClass "runc" is not allowed on gateway platform/shared: use one of kata, gvisor`},
		"provider type":        {spec: openshellv1alpha1.OpenShellSandboxSpec{Resources: within, Providers: []string{"anthropic", "gh"}}, reason: "ProviderNotAllowed", field: "spec.providers[1]", msg: `OpenShellProvider gh has type "github"`},
	} {
		t.Run(name, func(t *testing.T) {
			v := Check(gw, &openshellv1alpha1.OpenShellSandbox{Spec: tc.spec}, types)
			if tc.reason == "" {
				if v != nil {
					t.Fatalf("violation %+v", v)
				}
				return
			}
			if v == nil || v.Reason != tc.reason || v.Field != tc.field || !strings.Contains(v.Message, tc.msg) || !strings.HasPrefix(v.Message, tc.reason+": ") {
				t.Fatalf("got %+v, want %s on %s with %q", v, tc.reason, tc.field, tc.msg)
			}
		})
	}
	if Check(nil, &openshellv1alpha1.OpenShellSandbox{}, nil) != nil {
		t.Fatal("no gateway, no violation")
	}
	open := &openshellv1alpha1.OpenShellGateway{}
	if v := Check(open, &openshellv1alpha1.OpenShellSandbox{Spec: openshellv1alpha1.OpenShellSandboxSpec{Resources: &corev1.ResourceRequirements{
		Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("-1Gi")}}}}, nil); v == nil || v.Reason != "InvalidResources" {
		t.Fatalf("a negative limit on a gateway without controls: %+v", v)
	}
	if v := Check(open, &openshellv1alpha1.OpenShellSandbox{Spec: openshellv1alpha1.OpenShellSandboxSpec{
		GPU: &openshellv1alpha1.SandboxGPU{Count: 16}, Resources: res("limits", "64", "1Ti"), Providers: []string{"gh"}}}, types); v != nil {
		t.Fatalf("a gateway without controls refused: %+v", v)
	}
	// N6: without a list, a tenant may not pick a runtime handler.
	if v := Check(open, &openshellv1alpha1.OpenShellSandbox{Spec: openshellv1alpha1.OpenShellSandboxSpec{RuntimeClassName: "any"}}, nil); v == nil ||
		v.Reason != "RuntimeClassNotAllowed" || !strings.Contains(v.Message, "it runs only its default RuntimeClass") {
		t.Fatalf("a RuntimeClass on a gateway that lists none: %+v", v)
	}
	annotated := &openshellv1alpha1.OpenShellGateway{Spec: openshellv1alpha1.OpenShellGatewaySpec{SandboxControls: openshellv1alpha1.SandboxControls{
		AllowedPodAnnotations: []string{"prometheus.io/", "example.com/"}}}}
	ann := func(keys ...string) *openshellv1alpha1.OpenShellSandbox {
		sb := &openshellv1alpha1.OpenShellSandbox{Spec: openshellv1alpha1.OpenShellSandboxSpec{PodAnnotations: map[string]openshellv1alpha1.PodAnnotationValue{}}}
		for _, k := range keys {
			sb.Spec.PodAnnotations[k] = "v"
		}
		return sb
	}
	if v := Check(annotated, ann("prometheus.io/scrape", "example.com/team"), nil); v != nil {
		t.Fatalf("allowed annotations: %+v", v)
	}
	if v := Check(annotated, ann("prometheus.io/scrape", "cni.example.net/network"), nil); v == nil || v.Reason != "PodAnnotationNotAllowed" ||
		!strings.Contains(v.Message, `"cni.example.net/network" is not allowed`) {
		t.Fatalf("an annotation outside the allowlist: %+v", v)
	}
	withDefault := &openshellv1alpha1.OpenShellGateway{Spec: openshellv1alpha1.OpenShellGatewaySpec{SandboxControls: openshellv1alpha1.SandboxControls{DefaultRuntimeClass: "kata"}}}
	if v := Check(withDefault, &openshellv1alpha1.OpenShellSandbox{Spec: openshellv1alpha1.OpenShellSandboxSpec{RuntimeClassName: "kata"}}, nil); v != nil {
		t.Fatalf("naming the gateway's default: %+v", v)
	}
}

func TestRuntimeClass(t *testing.T) {
	gw := &openshellv1alpha1.OpenShellGateway{Spec: openshellv1alpha1.OpenShellGatewaySpec{SandboxControls: openshellv1alpha1.SandboxControls{DefaultRuntimeClass: "kata"}}}
	sb := &openshellv1alpha1.OpenShellSandbox{}
	if got := RuntimeClass(gw, sb); got != "kata" {
		t.Fatalf("default: %q", got)
	}
	sb.Spec.RuntimeClassName = "gvisor"
	if got := RuntimeClass(gw, sb); got != "gvisor" {
		t.Fatalf("own: %q", got)
	}
	if got := RuntimeClass(nil, &openshellv1alpha1.OpenShellSandbox{}); got != "" {
		t.Fatalf("no gateway: %q", got)
	}
}

func TestPolicyViolation(t *testing.T) {
	required := &openshellv1alpha1.OpenShellGateway{ObjectMeta: metav1.ObjectMeta{Namespace: "p", Name: "gw"},
		Spec: openshellv1alpha1.OpenShellGatewaySpec{SandboxControls: openshellv1alpha1.SandboxControls{RequirePolicy: ptr.To(true)}}}
	optional := &openshellv1alpha1.OpenShellGateway{Spec: openshellv1alpha1.OpenShellGatewaySpec{SandboxControls: openshellv1alpha1.SandboxControls{RequirePolicy: ptr.To(false)}}}
	named := &openshellv1alpha1.OpenShellSandbox{Spec: openshellv1alpha1.OpenShellSandboxSpec{PolicyRef: &openshellv1alpha1.LocalObjectReference{Name: "x"}}}
	none := &openshellv1alpha1.OpenShellSandbox{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a"}}
	for name, tc := range map[string]struct {
		gw       *openshellv1alpha1.OpenShellGateway
		sb       *openshellv1alpha1.OpenShellSandbox
		defaults []string
		reason   string
	}{
		"named policy":              {required, named, nil, ""},
		"namespace default":         {required, none, []string{"d"}, ""},
		"required, none":            {required, none, nil, "PolicyRequired"},
		"not required, none":        {optional, none, nil, ""},
		"several defaults":          {optional, none, []string{"a", "b"}, "DefaultPolicyAmbiguous"},
		"several defaults, named":   {required, named, []string{"a", "b"}, ""},
		"requirePolicy unset (nil)": {&openshellv1alpha1.OpenShellGateway{}, none, nil, ""},
	} {
		v := PolicyViolation(tc.gw, tc.sb, tc.defaults)
		if (v == nil) != (tc.reason == "") || (v != nil && (v.Reason != tc.reason || v.Field != "spec.policyRef" || !strings.HasPrefix(v.Message, tc.reason+": "))) {
			t.Errorf("%s: got %+v, want %q", name, v, tc.reason)
		}
	}
	now := metav1.Now()
	only, names := NamespaceDefaults([]openshellv1alpha1.OpenShellPolicy{
		{ObjectMeta: metav1.ObjectMeta{Name: "b"}, Spec: openshellv1alpha1.OpenShellPolicySpec{Default: true}},
		{ObjectMeta: metav1.ObjectMeta{Name: "plain"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "going", DeletionTimestamp: &now}, Spec: openshellv1alpha1.OpenShellPolicySpec{Default: true}},
	})
	if only == nil || only.Name != "b" || len(names) != 1 {
		t.Fatalf("one default: %v %v", only, names)
	}
	only, names = NamespaceDefaults([]openshellv1alpha1.OpenShellPolicy{
		{ObjectMeta: metav1.ObjectMeta{Name: "b"}, Spec: openshellv1alpha1.OpenShellPolicySpec{Default: true}},
		{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Spec: openshellv1alpha1.OpenShellPolicySpec{Default: true}},
	})
	if only != nil || strings.Join(names, ",") != "a,b" {
		t.Fatalf("two defaults: %v %v", only, names)
	}
}

func TestCheckBudget(t *testing.T) {
	gw := &openshellv1alpha1.OpenShellGateway{ObjectMeta: metav1.ObjectMeta{Namespace: "p", Name: "gw"},
		Spec: openshellv1alpha1.OpenShellGatewaySpec{SandboxControls: openshellv1alpha1.SandboxControls{NamespaceBudget: &openshellv1alpha1.NamespaceBudget{
			MaxSandboxes: ptr.To[int32](3), MaxGPUs: ptr.To[int32](2),
			MaxRequests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4")}}}}}
	sbx := func(name, gwName string, cpu string, gpus int32, mut func(*openshellv1alpha1.OpenShellSandbox)) openshellv1alpha1.OpenShellSandbox {
		s := openshellv1alpha1.OpenShellSandbox{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: name},
			Spec: openshellv1alpha1.OpenShellSandboxSpec{GatewayRef: openshellv1alpha1.GatewayReference{Name: gwName, Namespace: "p"}}}
		if cpu == "" {
			cpu = "100m"
		}
		// a limit alone counts as the request
		s.Spec.Resources = &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}}
		if gpus > 0 {
			s.Spec.GPU = &openshellv1alpha1.SandboxGPU{Count: gpus}
		}
		if mut != nil {
			mut(&s)
		}
		return s
	}
	now := metav1.Now()
	others := []openshellv1alpha1.OpenShellSandbox{
		sbx("a", "gw", "2", 1, nil),
		sbx("other-gateway", "elsewhere", "8", 2, nil),
		sbx("rejected", "gw", "8", 2, func(s *openshellv1alpha1.OpenShellSandbox) { s.Status.Phase = openshellv1alpha1.SandboxPhaseRejected }),
		sbx("going", "gw", "8", 2, func(s *openshellv1alpha1.OpenShellSandbox) { s.DeletionTimestamp = &now }),
	}
	for name, tc := range map[string]struct {
		sb     openshellv1alpha1.OpenShellSandbox
		others []openshellv1alpha1.OpenShellSandbox
		msg    string
	}{
		"within":                {sbx("new", "gw", "2", 1, nil), others, ""},
		"cpu over":              {sbx("new", "gw", "3", 0, nil), others, "namespace team-a would have 5 cpu requested on gateway p/gw, over its budget of 4"},
		"gpus over":             {sbx("new", "gw", "", 2, nil), others, "would have 3 GPUs"},
		"count over":            {sbx("new", "gw", "", 0, nil), append(others, sbx("b", "gw", "", 0, nil), sbx("c", "gw", "", 0, nil)), "would have 4 sandboxes"},
		"itself is not counted": {sbx("a", "gw", "4", 2, nil), others, ""},
		"other gateway":         {sbx("x", "elsewhere", "64", 16, nil), others, ""},
		// A negative sandbox admitted before the check lowers nothing.
		"a negative peer does not make room": {sbx("new", "gw", "3", 0, nil), append(others, sbx("sponge", "gw", "-100", 0, nil)),
			"would have 5 cpu requested"},
	} {
		v := CheckBudget(gw, &tc.sb, tc.others)
		if tc.msg == "" {
			if v != nil {
				t.Errorf("%s: %+v", name, v)
			}
			continue
		}
		if v == nil || v.Reason != "NamespaceBudgetExceeded" || !strings.Contains(v.Message, tc.msg) {
			t.Errorf("%s: got %+v, want %q", name, v, tc.msg)
		}
	}
	if CheckBudget(&openshellv1alpha1.OpenShellGateway{}, &openshellv1alpha1.OpenShellSandbox{}, nil) != nil {
		t.Error("no budget, no violation")
	}
	noRequest := openshellv1alpha1.OpenShellSandbox{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "unbounded"},
		Spec: openshellv1alpha1.OpenShellSandboxSpec{GatewayRef: openshellv1alpha1.GatewayReference{Name: "gw", Namespace: "p"}}}
	if v := CheckBudget(gw, &noRequest, nil); v == nil || !strings.Contains(v.Message, "set spec.resources.requests.cpu") {
		t.Errorf("a sandbox without a cpu request under a cpu budget: %+v", v)
	}
}

// TestGPUsNeverWrap: counts the admission check refuses (beyond
// MaxDevices, beyond int64) still count as the most, so that a sandbox
// that got past admission some other way can never lower a budget's sum.
func TestGPUsNeverWrap(t *testing.T) {
	sb := &openshellv1alpha1.OpenShellSandbox{Spec: openshellv1alpha1.OpenShellSandboxSpec{Resources: &corev1.ResourceRequirements{Limits: corev1.ResourceList{
		"nvidia.com/gpu": resource.MustParse("4611686018427387904"), "rdma/hca": resource.MustParse("4611686018427387904"), "example.com/fpga": resource.MustParse("1e19")}}}}
	if got := GPUs(sb); got != 3*MaxDevices {
		t.Fatalf("GPUs = %d, want %d (each refused count as MaxDevices)", got, 3*MaxDevices)
	}
}

// TestChargeOfARunningSandbox: while a sandbox runs, an edit that lowers its
// devices or requests (and waits to be applied) charges what it was created
// with; once it does not run, its spec.
func TestChargeOfARunningSandbox(t *testing.T) {
	sb := &openshellv1alpha1.OpenShellSandbox{Spec: openshellv1alpha1.OpenShellSandboxSpec{Resources: &corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("4Gi")}}}}
	sb.Status.AppliedResources = &openshellv1alpha1.AppliedResources{Devices: 2,
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("1Gi")}}
	devices, req := Charge(sb)
	if devices != 0 || req.Cpu().String() != "1" {
		t.Fatalf("not running: charged %d devices, %v; want its spec", devices, req)
	}
	sb.Status.SandboxID = "id"
	devices, req = Charge(sb)
	if devices != 2 || req.Cpu().String() != "2" || req.Memory().String() != "4Gi" {
		t.Fatalf("running: charged %d devices, cpu %s, memory %s; want 2, 2 and 4Gi (the larger of each)", devices, req.Cpu(), req.Memory())
	}
	if a := Applied(sb); a.Devices != 0 || a.Requests.Cpu().String() != "1" {
		t.Fatalf("Applied = %+v, want its spec", a)
	}
}
