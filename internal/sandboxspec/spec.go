// Package sandboxspec translates OpenShellSandbox, OpenShellPolicy and the
// namespace they live in into what the gateway API takes: the sandbox spec
// and policy messages, the hash that decides whether a running sandbox must
// be recreated, and the collision-resistant gateway names and owner labels
// of workspaces, sandboxes and providers. Pure: no I/O.
package sandboxspec

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/openshellv1"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/sandboxv1"
)

// Labels and annotations the operator puts on gateway sandboxes. The UID
// label is how a sandbox found on ALREADY_EXISTS is recognised as ours.
const (
	LabelOwnerUID       = "openshell.ai/k8s-uid"
	AnnotationNamespace = LabelNamespace
	AnnotationName      = "openshell.ai/k8s-name"
	// TemplateLabel marks the pods of operator-created sandboxes.
	TemplateLabel = "openshell.ai/managed-by-operator"
)

// The API's spellings of the endpoint settings 0.1 made enums (the CRD
// admits only these; an omitted one is the gateway's default).
var (
	enforcement = map[string]sandboxv1.NetworkEnforcementMode{
		"enforce": sandboxv1.NetworkEnforcementMode_NETWORK_ENFORCEMENT_MODE_ENFORCE,
		"audit":   sandboxv1.NetworkEnforcementMode_NETWORK_ENFORCEMENT_MODE_AUDIT,
	}
	access = map[string]sandboxv1.NetworkAccessPreset{
		"read-only":  sandboxv1.NetworkAccessPreset_NETWORK_ACCESS_PRESET_READ_ONLY,
		"read-write": sandboxv1.NetworkAccessPreset_NETWORK_ACCESS_PRESET_READ_WRITE,
		"full":       sandboxv1.NetworkAccessPreset_NETWORK_ACCESS_PRESET_FULL,
	}
)

var landlock = map[openshellv1alpha1.LandlockCompatibility]string{
	openshellv1alpha1.LandlockBestEffort:      "best_effort",
	openshellv1alpha1.LandlockHardRequirement: "hard_requirement",
}

// Policy renders an OpenShellPolicy as the gateway's SandboxPolicy.
func Policy(spec openshellv1alpha1.OpenShellPolicySpec) *sandboxv1.SandboxPolicy {
	p := &sandboxv1.SandboxPolicy{Version: 1}
	if fs := spec.Filesystem; fs != nil {
		p.Filesystem = &sandboxv1.FilesystemPolicy{IncludeWorkdir: fs.IncludeWorkdir == nil || *fs.IncludeWorkdir,
			ReadOnly: fs.ReadOnly, ReadWrite: fs.ReadWrite}
	}
	if ll := spec.Landlock; ll != nil {
		p.Landlock = &sandboxv1.LandlockPolicy{Compatibility: landlock[ll.Compatibility]}
	}
	if pr := spec.Process; pr != nil {
		p.Process = &sandboxv1.ProcessPolicy{RunAsUser: pr.RunAsUser, RunAsGroup: pr.RunAsGroup}
	}
	if len(spec.NetworkPolicies) > 0 {
		p.NetworkPolicies = map[string]*sandboxv1.NetworkPolicyRule{}
	}
	for _, r := range spec.NetworkPolicies {
		p.NetworkPolicies[r.Name] = &sandboxv1.NetworkPolicyRule{Name: r.Name, Endpoints: endpoints(r.Endpoints), Binaries: binaries(r.Binaries)}
	}
	return p
}

// endpoints renders the API's network endpoints (a policy rule's, a
// provider profile's) as the gateway's.
func endpoints(in []openshellv1alpha1.NetworkEndpoint) []*sandboxv1.NetworkEndpoint {
	var out []*sandboxv1.NetworkEndpoint
	for _, e := range in {
		ep := &sandboxv1.NetworkEndpoint{Host: e.Host, Protocol: e.Protocol, Enforcement: enforcement[e.Enforcement],
			Access: access[e.Access], AllowedIps: e.AllowedIPs, Path: e.Path}
		if e.Port != nil {
			ep.Port = uint32(*e.Port)
		}
		for _, port := range e.Ports {
			ep.Ports = append(ep.Ports, uint32(port))
		}
		if m := e.MCP; m != nil {
			ep.Mcp = &sandboxv1.McpOptions{StrictToolNames: m.StrictToolNames, AllowAllKnownMcpMethods: m.AllowAllKnownMCPMethods, Versions: m.Versions}
		}
		for _, l7 := range e.Rules {
			ep.Rules = append(ep.Rules, &sandboxv1.L7Rule{Allow: &sandboxv1.L7Allow{Method: l7.Method, Path: l7.Path,
				Command: l7.Command, OperationType: l7.OperationType, OperationName: l7.OperationName}})
		}
		for _, l7 := range e.DenyRules {
			ep.DenyRules = append(ep.DenyRules, &sandboxv1.L7DenyRule{Method: l7.Method, Path: l7.Path,
				Command: l7.Command, OperationType: l7.OperationType, OperationName: l7.OperationName})
		}
		out = append(out, ep)
	}
	return out
}

func binaries(in []openshellv1alpha1.NetworkBinary) []*sandboxv1.NetworkBinary {
	var out []*sandboxv1.NetworkBinary
	for _, b := range in {
		out = append(out, &sandboxv1.NetworkBinary{Path: b.Path})
	}
	return out
}

// profileCategory spells the API's categories as the gateway's enum.
var profileCategory = map[openshellv1alpha1.ProviderProfileCategory]openshellv1.ProviderProfileCategory{
	"":              openshellv1.ProviderProfileCategory_PROVIDER_PROFILE_CATEGORY_OTHER,
	"Other":         openshellv1.ProviderProfileCategory_PROVIDER_PROFILE_CATEGORY_OTHER,
	"Inference":     openshellv1.ProviderProfileCategory_PROVIDER_PROFILE_CATEGORY_INFERENCE,
	"Agent":         openshellv1.ProviderProfileCategory_PROVIDER_PROFILE_CATEGORY_AGENT,
	"SourceControl": openshellv1.ProviderProfileCategory_PROVIDER_PROFILE_CATEGORY_SOURCE_CONTROL,
	"Messaging":     openshellv1.ProviderProfileCategory_PROVIDER_PROFILE_CATEGORY_MESSAGING,
	"Data":          openshellv1.ProviderProfileCategory_PROVIDER_PROFILE_CATEGORY_DATA,
	"Knowledge":     openshellv1.ProviderProfileCategory_PROVIDER_PROFILE_CATEGORY_KNOWLEDGE,
}

// Profile renders an OpenShellProviderProfile as the gateway's profile,
// marked with owner (annotations: the profile message has no labels) so
// that a profile of the same id found at the gateway is recognised as
// this object's or not.
func Profile(p *openshellv1alpha1.OpenShellProviderProfile, owner map[string]string) *openshellv1.ProviderProfile {
	out := &openshellv1.ProviderProfile{Id: p.Name, DisplayName: p.Spec.DisplayName, Description: p.Spec.Description,
		Category: profileCategory[p.Spec.Category], Endpoints: endpoints(p.Spec.Endpoints), Binaries: binaries(p.Spec.Binaries),
		InferenceCapable: p.Spec.InferenceCapable, Annotations: maps.Clone(owner)}
	for _, c := range p.Spec.Credentials {
		out.Credentials = append(out.Credentials, &openshellv1.ProviderProfileCredential{Name: c.Name, Description: c.Description,
			EnvVars: c.EnvVars, Required: c.Required, AuthStyle: c.AuthStyle, HeaderName: c.HeaderName, QueryParam: c.QueryParam,
			PathTemplate: c.PathTemplate})
	}
	return out
}

// Hash is a stable hash of a message (deterministic encoding).
func Hash(m proto.Message) string {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}

// SpecInputs are what CreateSandbox needs besides the sandbox itself.
type SpecInputs struct {
	Policy *sandboxv1.SandboxPolicy
	// Env holds resolved values (secretKeyRef already read).
	Env map[string]string
	// Providers are gateway provider names.
	Providers []string
	// RuntimeClass is the pod's RuntimeClass (the sandbox's, else the
	// gateway's default; internal/sandboxcontrols).
	RuntimeClass string
	// NamespaceUID is the sandbox namespace's UID (its incarnation), for
	// the tenant labels.
	NamespaceUID types.UID
}

// Bounds of what one sandbox's env may take from Secrets: the operator
// reads them uncached on each reconcile (it never holds tenant Secret
// values in a cache), so without a bound one namespace's sandboxes could
// make every worker hold a hundred large Secrets at once and exhaust the
// operator for every tenant.
const (
	// MaxEnvSecrets is how many distinct Secrets one sandbox's env may read.
	MaxEnvSecrets = 16
	// MaxEnvBytes is the gateway's limit on a sandbox's environment in total.
	MaxEnvBytes = 256 << 10
)

// Labels the operator puts on every sandbox pod to say whose it is. Every
// tenant's pods share the gateway's sandbox namespace, and podLabels are
// the tenant's to choose, so these are the only labels a NetworkPolicy (or
// a cost report) may trust to tell tenants apart; the CRD refuses podLabels
// under openshell.ai/, so no tenant can wear another's.
const (
	LabelTenantNamespace    = "openshell.ai/tenant-namespace"
	LabelTenantNamespaceUID = "openshell.ai/tenant-namespace-uid"
)

// SandboxSpec renders the gateway spec of a sandbox.
func SandboxSpec(sb *openshellv1alpha1.OpenShellSandbox, in SpecInputs) (*openshellv1.SandboxSpec, error) {
	spec := &openshellv1.SandboxSpec{
		LogLevel:    sb.Spec.LogLevel,
		Environment: in.Env,
		Command:     sb.Spec.Command,
		Policy:      in.Policy,
		Providers:   in.Providers,
		Template: &openshellv1.SandboxTemplate{
			Image:            sb.Spec.Image,
			Labels:           withTenant(podLabels(sb), sb.Namespace, in.NamespaceUID),
			Annotations:      podAnnotations(sb),
			RuntimeClassName: in.RuntimeClass,
		},
	}
	if sb.Spec.GPU != nil {
		n := uint32(max(sb.Spec.GPU.Count, 1))
		spec.ResourceRequirements = &openshellv1.ResourceRequirements{Gpu: &openshellv1.GpuResourceRequirements{Count: &n}}
	}
	if r := sb.Spec.Resources; r != nil && (len(r.Limits) > 0 || len(r.Requests) > 0) {
		st, err := structpb.NewStruct(map[string]any{"limits": quantities(r.Limits), "requests": quantities(r.Requests)})
		if err != nil {
			return nil, fmt.Errorf("render resources: %w", err)
		}
		spec.Template.Resources = st
	}
	return spec, nil
}

// OperatorPodLabels are the label keys the operator puts on every sandbox
// pod (through SandboxTemplate.labels), besides the sandbox's podLabels. A
// gateway from 0.1.5 refuses template labels its driver does not allowlist:
// its allowed_pod_labels must name these (and any podLabels key tenants
// use; podAnnotations keys in allowed_pod_annotations).
var OperatorPodLabels = []string{TemplateLabel, LabelTenantNamespace, LabelTenantNamespaceUID}

// podLabels are the sandbox's pod labels plus the operator's template label
// (reserved prefixes are refused by the CRD, so a user label never replaces
// it).
func podLabels(sb *openshellv1alpha1.OpenShellSandbox) map[string]string {
	out := map[string]string{TemplateLabel: "true"}
	for k, v := range sb.Spec.PodLabels {
		if _, reserved := out[k]; !reserved {
			out[k] = string(v)
		}
	}
	return out
}

// withTenant adds the tenant labels to a sandbox's pod labels. They are
// not part of ImmutableHash: they follow from the namespace, and hashing
// them would recreate every running sandbox on the operator upgrade that
// introduced them (a sandbox created before carries them once recreated).
func withTenant(labels map[string]string, namespace string, uid types.UID) map[string]string {
	labels[LabelTenantNamespace] = namespace
	if uid != "" {
		labels[LabelTenantNamespaceUID] = string(uid)
	}
	return labels
}

func podAnnotations(sb *openshellv1alpha1.OpenShellSandbox) map[string]string {
	if len(sb.Spec.PodAnnotations) == 0 {
		return nil
	}
	out := make(map[string]string, len(sb.Spec.PodAnnotations))
	for k, v := range sb.Spec.PodAnnotations {
		out[k] = string(v)
	}
	return out
}

func quantities(l corev1.ResourceList) map[string]any {
	out := map[string]any{}
	for k, v := range l {
		out[string(k)] = v.String()
	}
	return out
}

// RenderedResources reads back what Render put in a gateway sandbox's spec
// for sb's resources and GPUs, as the spec fields it came from: what the
// gateway runs a sandbox with, when its spec may since have changed (a
// sandbox adopted after its status was lost). Values it cannot read are
// left out.
func RenderedResources(spec *openshellv1.SandboxSpec) (*corev1.ResourceRequirements, *openshellv1alpha1.SandboxGPU) {
	var gpu *openshellv1alpha1.SandboxGPU
	if c := spec.GetResourceRequirements().GetGpu(); c != nil && c.Count != nil {
		gpu = &openshellv1alpha1.SandboxGPU{Count: int32(min(c.GetCount(), math.MaxInt32))}
	}
	fields := spec.GetTemplate().GetResources().GetFields()
	if len(fields) == 0 {
		return nil, gpu
	}
	list := func(name string) corev1.ResourceList {
		out := corev1.ResourceList{}
		for k, v := range fields[name].GetStructValue().GetFields() {
			if q, err := resource.ParseQuantity(v.GetStringValue()); err == nil {
				out[corev1.ResourceName(k)] = q
			}
		}
		if len(out) == 0 {
			return nil
		}
		return out
	}
	return &corev1.ResourceRequirements{Limits: list("limits"), Requests: list("requests")}, gpu
}

// SameRun reports whether a gateway sandbox whose spec is got runs what sb
// asks for now, rendered as want, in what changes only by recreating it:
// image, command, log level, resources and GPUs, each where want sets it
// (a gateway fills some it is not given: a command, for one). Env is left
// out (a gateway does not give a sandbox's environment back: it holds
// Secret values), and so are labels, annotations and the runtime class (a
// gateway may add its own). For a sandbox adopted after its status was
// lost, when nothing recorded which spec created it: a field unset since
// is not seen, and a needless recreate is the worse mistake.
func SameRun(want, got *openshellv1.SandboxSpec) bool {
	wt, gt := want.GetTemplate(), got.GetTemplate()
	return (wt.GetImage() == "" || wt.GetImage() == gt.GetImage()) &&
		(len(want.GetCommand()) == 0 || slices.Equal(want.GetCommand(), got.GetCommand())) &&
		(want.GetLogLevel() == "" || want.GetLogLevel() == got.GetLogLevel()) &&
		(want.GetResourceRequirements() == nil || proto.Equal(want.GetResourceRequirements(), got.GetResourceRequirements())) &&
		(wt.GetResources() == nil || proto.Equal(wt.GetResources(), gt.GetResources()))
}

// ImmutableHash hashes what cannot change in place (image, command, env,
// GPU, resources, log level): a change means a new gateway sandbox. Env is
// hashed by its references, not the Secret values, so rotating an env
// Secret does not recreate sandboxes.
func ImmutableHash(sb *openshellv1alpha1.OpenShellSandbox) string {
	h := sha256.New()
	w := func(s string) { _, _ = h.Write([]byte(s)); _, _ = h.Write([]byte{0}) }
	w(sb.Spec.Image)
	w(sb.Spec.LogLevel)
	for _, c := range sb.Spec.Command {
		w(c)
	}
	w("env")
	env := append([]openshellv1alpha1.SandboxEnvVar{}, sb.Spec.Env...)
	sort.Slice(env, func(i, j int) bool { return env[i].Name < env[j].Name })
	for _, e := range env {
		w(e.Name)
		if e.Value != nil {
			w("=" + *e.Value)
		}
		if e.ValueFrom != nil {
			w("secret:" + e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key)
		}
	}
	if sb.Spec.GPU != nil {
		w(fmt.Sprintf("gpu=%d", sb.Spec.GPU.Count))
	}
	// Only when set, so that sandboxes created before the field hash as
	// they did (a gateway default applies to new sandboxes only).
	if sb.Spec.RuntimeClassName != "" {
		w("runtimeClass=" + sb.Spec.RuntimeClassName)
	}
	sorted := func(name string, kv map[string]string) {
		w(name)
		for _, k := range slices.Sorted(maps.Keys(kv)) {
			w(k + "=" + kv[k])
		}
	}
	if len(sb.Spec.PodLabels) > 0 { // the operator's own label alone hashes like none
		sorted("podLabels", podLabels(sb))
	}
	if a := podAnnotations(sb); len(a) > 0 {
		sorted("podAnnotations", a)
	}
	// Resources that render nothing hash like none; a marker keeps a
	// resource named "gpu" apart from spec.gpu.
	if r := sb.Spec.Resources; r != nil && (len(r.Limits) > 0 || len(r.Requests) > 0) {
		w("resources")
		for _, l := range []corev1.ResourceList{r.Limits, r.Requests} {
			for _, k := range slices.Sorted(maps.Keys(l)) {
				q := l[k]
				w(string(k) + "=" + q.String())
			}
			w("|")
		}
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// PodLabels are the labels a sandbox's workload pod wears (its podLabels,
// the template label and the tenant labels), as the tenant's
// NetworkPolicies select it; nsUID is its namespace's UID.
func PodLabels(sb *openshellv1alpha1.OpenShellSandbox, nsUID types.UID) map[string]string {
	return withTenant(podLabels(sb), sb.Namespace, nsUID)
}
