// Package sandboxcontrols decides whether a sandbox stays within its
// gateway's spec.sandboxControls — resource and GPU ceilings, allowed
// RuntimeClasses, allowed provider types — and which RuntimeClass it runs
// with. Pure: the admission webhook and the sandbox controller call the
// same functions, so `oc apply` and status give the same reason.
package sandboxcontrols

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
)

// Violation is the first ceiling a sandbox exceeds.
type Violation struct {
	// Reason is the condition reason and the admission cause type.
	Reason string
	// Field is the sandbox field at fault, for the admission cause.
	Field string
	// Message says what is over which limit and what to do.
	Message string
}

// Check returns the first control sb violates on gw, or nil.
// providerTypes maps each attached provider that exists to its spec.type
// (missing providers are reported elsewhere).
func Check(gw *openshellv1alpha1.OpenShellGateway, sb *openshellv1alpha1.OpenShellSandbox, providerTypes map[string]string) *Violation {
	if gw == nil {
		return nil
	}
	c := gw.Spec.SandboxControls
	name := gw.Namespace + "/" + gw.Name
	if v := CheckQuantities(sb); v != nil {
		return v
	}
	if v := checkResources(c, name, sb); v != nil {
		return v
	}
	if n := GPUs(sb); c.MaxGPUs != nil && n > int64(*c.MaxGPUs) {
		return &Violation{Reason: openshellv1alpha1.SandboxReasonResourceLimitExceeded, Field: "spec.gpu.count",
			Message: fmt.Sprintf("%s: %d GPUs and devices (spec.gpu.count and every extended resource: */gpu, MIG slices, shared GPUs, KVM, RDMA) exceed gateway %s's maxGPUs %d",
				openshellv1alpha1.SandboxReasonResourceLimitExceeded, n, name, *c.MaxGPUs)}
	}
	if rc := RuntimeClass(gw, sb); !runtimeClassAllowed(c, rc) {
		shown := fmt.Sprintf("RuntimeClass %q is", rc)
		if rc == "" {
			shown = "no RuntimeClass (and the gateway sets no default) is"
		}
		use := "use one of " + strings.Join(c.AllowedRuntimeClasses, ", ")
		if len(c.AllowedRuntimeClasses) == 0 {
			use = "it runs only its default RuntimeClass; remove spec.runtimeClassName, or ask the Platform Admin to list it in spec.sandboxControls.allowedRuntimeClasses"
		}
		return &Violation{Reason: openshellv1alpha1.SandboxReasonRuntimeClassNotAllowed, Field: "spec.runtimeClassName",
			Message: fmt.Sprintf("%s: %s not allowed on gateway %s: %s",
				openshellv1alpha1.SandboxReasonRuntimeClassNotAllowed, shown, name, use)}
	}
	if len(c.AllowedPodAnnotations) > 0 {
		for _, k := range slices.Sorted(maps.Keys(sb.Spec.PodAnnotations)) {
			if !slices.ContainsFunc(c.AllowedPodAnnotations, func(p string) bool { return strings.HasPrefix(k, p) }) {
				return &Violation{Reason: openshellv1alpha1.SandboxReasonPodAnnotationNotAllowed, Field: "spec.podAnnotations",
					Message: fmt.Sprintf("%s: pod annotation %q is not allowed on gateway %s: keys must start with one of %s",
						openshellv1alpha1.SandboxReasonPodAnnotationNotAllowed, k, name, strings.Join(c.AllowedPodAnnotations, ", "))}
			}
		}
	}
	if len(c.AllowedProviderTypes) > 0 {
		for i, p := range sb.Spec.Providers {
			if t, ok := providerTypes[p]; ok && !slices.Contains(c.AllowedProviderTypes, t) {
				return &Violation{Reason: openshellv1alpha1.SandboxReasonProviderNotAllowed, Field: fmt.Sprintf("spec.providers[%d]", i),
					Message: fmt.Sprintf("%s: OpenShellProvider %s has type %q, which gateway %s does not allow (allowed: %s)",
						openshellv1alpha1.SandboxReasonProviderNotAllowed, p, t, name, strings.Join(c.AllowedProviderTypes, ", "))}
			}
		}
	}
	return nil
}

func checkResources(c openshellv1alpha1.SandboxControls, gw string, sb *openshellv1alpha1.OpenShellSandbox) *Violation {
	if len(c.MaxResources) == 0 {
		return nil
	}
	r := sb.Spec.Resources
	if r == nil {
		r = &corev1.ResourceRequirements{}
	}
	names := sortedNames(c.MaxResources)
	// A ceiling needs a limit to hold to: without one the agent is bounded
	// only by the node.
	for _, n := range names {
		if _, ok := r.Limits[n]; !ok {
			return &Violation{Reason: openshellv1alpha1.SandboxReasonResourceLimitExceeded, Field: "spec.resources.limits." + string(n),
				Message: fmt.Sprintf("%s: gateway %s caps %s at %s per sandbox (maxResources): set spec.resources.limits.%s within it",
					openshellv1alpha1.SandboxReasonResourceLimitExceeded, gw, n, ptr.To(c.MaxResources[n]).String(), n)}
		}
	}
	for _, kind := range []struct {
		field string
		list  corev1.ResourceList
	}{{"requests", r.Requests}, {"limits", r.Limits}} {
		for _, n := range names {
			got, ok := kind.list[n]
			max := c.MaxResources[n]
			if ok && got.Cmp(max) > 0 {
				return &Violation{Reason: openshellv1alpha1.SandboxReasonResourceLimitExceeded, Field: "spec.resources." + kind.field + "." + string(n),
					Message: fmt.Sprintf("%s: spec.resources.%s.%s %s exceeds gateway %s's maxResources.%s %s",
						openshellv1alpha1.SandboxReasonResourceLimitExceeded, kind.field, n, got.String(), gw, n, max.String())}
			}
		}
	}
	return nil
}

// runtimeClassAllowed: a RuntimeClass picks the node's runtime handler,
// and a handler with allowed_annotations honours pod annotations that add
// devices or change the sandbox's confinement, so a tenant may name only
// what the Platform Admin listed; without a list, only the gateway's
// default (or none).
func runtimeClassAllowed(c openshellv1alpha1.SandboxControls, rc string) bool {
	if len(c.AllowedRuntimeClasses) > 0 {
		return slices.Contains(c.AllowedRuntimeClasses, rc)
	}
	return rc == "" || rc == c.DefaultRuntimeClass
}

// RuntimeClass is the RuntimeClass sb runs with on gw: its own, else the
// gateway's default, else none.
func RuntimeClass(gw *openshellv1alpha1.OpenShellGateway, sb *openshellv1alpha1.OpenShellSandbox) string {
	if sb.Spec.RuntimeClassName != "" || gw == nil {
		return sb.Spec.RuntimeClassName
	}
	return gw.Spec.SandboxControls.DefaultRuntimeClass
}

// RequiresPolicy reports whether gw refuses sandboxes without a policy
// (spec.sandboxControls.requirePolicy; the API defaults it to true).
func RequiresPolicy(gw *openshellv1alpha1.OpenShellGateway) bool {
	return gw != nil && gw.Spec.SandboxControls.RequirePolicy != nil && *gw.Spec.SandboxControls.RequirePolicy
}

// NamespaceDefaults are the names of the policies that say spec.default
// (and are not being deleted), sorted; the one default when there is one.
func NamespaceDefaults(policies []openshellv1alpha1.OpenShellPolicy) (*openshellv1alpha1.OpenShellPolicy, []string) {
	var names []string
	var only *openshellv1alpha1.OpenShellPolicy
	for i := range policies {
		if p := &policies[i]; p.Spec.Default && p.DeletionTimestamp.IsZero() {
			names = append(names, p.Name)
			only = p
		}
	}
	sort.Strings(names)
	if len(names) != 1 {
		only = nil
	}
	return only, names
}

// PolicyViolation is why sb may not run without a policy: it names none,
// its namespace has no single default (defaults are their names), and
// either the gateway requires one or several defaults make the choice
// ambiguous. Nil when sb names a policy or may run under the gateway's.
func PolicyViolation(gw *openshellv1alpha1.OpenShellGateway, sb *openshellv1alpha1.OpenShellSandbox, defaults []string) *Violation {
	switch {
	case sb.Spec.PolicyRef != nil || len(defaults) == 1:
		return nil
	case len(defaults) > 1:
		return &Violation{Reason: openshellv1alpha1.SandboxReasonDefaultPolicyAmbiguous, Field: "spec.policyRef",
			Message: fmt.Sprintf("%s: no spec.policyRef, and OpenShellPolicies %s of namespace %s all say spec.default: name one in spec.policyRef, or ask a Tenant Admin to keep one default",
				openshellv1alpha1.SandboxReasonDefaultPolicyAmbiguous, strings.Join(defaults, ", "), sb.Namespace)}
	case RequiresPolicy(gw):
		return &Violation{Reason: openshellv1alpha1.SandboxReasonPolicyRequired, Field: "spec.policyRef",
			Message: fmt.Sprintf("%s: gateway %s/%s requires a policy: set spec.policyRef to an OpenShellPolicy of namespace %s, or ask a Tenant Admin to mark one spec.default: true",
				openshellv1alpha1.SandboxReasonPolicyRequired, gw.Namespace, gw.Name, sb.Namespace)}
	}
	return nil
}

// Charge is what a namespace budget charges another sandbox: its devices
// (GPUs) and requests, and while it runs at least what the gateway created
// it with (status.appliedResources), so that an edit that lowers its
// resources and waits to be applied (held by a missing Secret, say) frees
// nothing for the others. Negative requests (refused at admission) never
// lower the charge.
func Charge(sb *openshellv1alpha1.OpenShellSandbox) (devices int64, req corev1.ResourceList) {
	spec := Applied(sb)
	devices, req = spec.Devices, spec.Requests
	if req == nil {
		req = corev1.ResourceList{}
	}
	if a := sb.Status.AppliedResources; a != nil && sb.Status.SandboxID != "" {
		devices = max(devices, a.Devices)
		for k, v := range a.Requests {
			if cur, ok := req[k]; v.Sign() > 0 && (!ok || v.Cmp(cur) > 0) {
				req[k] = v.DeepCopy()
			}
		}
	}
	return devices, req
}

// Applied is what status.appliedResources records for a sandbox created
// from its current spec.
func Applied(sb *openshellv1alpha1.OpenShellSandbox) *openshellv1alpha1.AppliedResources {
	a := &openshellv1alpha1.AppliedResources{Devices: GPUs(sb)}
	for k, v := range requests(sb) {
		if v.Sign() > 0 {
			if a.Requests == nil {
				a.Requests = corev1.ResourceList{}
			}
			a.Requests[k] = v
		}
	}
	return a
}

// requests are what a sandbox counts against a budget: its requests, a
// limit standing in for a missing request (as Kubernetes defaults it).
func requests(sb *openshellv1alpha1.OpenShellSandbox) corev1.ResourceList {
	out := corev1.ResourceList{}
	if r := sb.Spec.Resources; r != nil {
		for k, v := range r.Limits {
			out[k] = v.DeepCopy()
		}
		for k, v := range r.Requests {
			out[k] = v.DeepCopy()
		}
	}
	return out
}

// Counts reports whether other is charged to its namespace's budget on gw:
// it uses gw, is not being deleted and was not rejected.
func Counts(gw *openshellv1alpha1.OpenShellGateway, other *openshellv1alpha1.OpenShellSandbox) bool {
	return other.GatewayKey().Namespace == gw.Namespace && other.GatewayKey().Name == gw.Name &&
		other.DeletionTimestamp.IsZero() && other.Status.Phase != openshellv1alpha1.SandboxPhaseRejected
}

// CheckBudget returns the budget sb would break on gw together with the
// namespace's other sandboxes that count (see Counts; sb itself is skipped
// by name), or nil.
func CheckBudget(gw *openshellv1alpha1.OpenShellGateway, sb *openshellv1alpha1.OpenShellSandbox, others []openshellv1alpha1.OpenShellSandbox) *Violation {
	if gw == nil || gw.Spec.SandboxControls.NamespaceBudget == nil || sb.GatewayKey() != client.ObjectKeyFromObject(gw) {
		return nil
	}
	b := gw.Spec.SandboxControls.NamespaceBudget
	count, gpus := int32(1), GPUs(sb)
	used := requests(sb)
	budgeted := sortedNames(b.MaxRequests)
	for _, n := range budgeted {
		if _, ok := used[n]; !ok {
			return &Violation{Reason: openshellv1alpha1.SandboxReasonNamespaceBudgetExceeded, Field: "spec.resources.requests." + string(n),
				Message: fmt.Sprintf("%s: gateway %s/%s budgets each namespace's %s requests (namespaceBudget.maxRequests): set spec.resources.requests.%s (or a limit)",
					openshellv1alpha1.SandboxReasonNamespaceBudgetExceeded, gw.Namespace, gw.Name, n, n)}
		}
	}
	for i := range others {
		o := &others[i]
		if o.Name == sb.Name || o.Namespace != sb.Namespace || !Counts(gw, o) {
			continue
		}
		count++
		devices, req := Charge(o)
		gpus += devices
		for k, v := range req {
			q := used[k]
			q.Add(v)
			used[k] = q
		}
	}
	over := func(field, what string, have, max string) *Violation {
		return &Violation{Reason: openshellv1alpha1.SandboxReasonNamespaceBudgetExceeded, Field: field,
			Message: fmt.Sprintf("%s: namespace %s would have %s %s on gateway %s/%s, over its budget of %s (spec.sandboxControls.namespaceBudget): delete or shrink a sandbox, or ask the Platform Admin",
				openshellv1alpha1.SandboxReasonNamespaceBudgetExceeded, sb.Namespace, have, what, gw.Namespace, gw.Name, max)}
	}
	if b.MaxSandboxes != nil && count > *b.MaxSandboxes {
		return over("metadata.name", "sandboxes", fmt.Sprint(count), fmt.Sprint(*b.MaxSandboxes))
	}
	if b.MaxGPUs != nil && gpus > int64(*b.MaxGPUs) {
		return over("spec.gpu.count", "GPUs", fmt.Sprint(gpus), fmt.Sprint(*b.MaxGPUs))
	}
	for _, n := range budgeted {
		max := b.MaxRequests[n]
		if got, ok := used[n]; ok && got.Cmp(max) > 0 {
			return over("spec.resources", string(n)+" requested", got.String(), max.String())
		}
	}
	return nil
}

// sortedNames are the resource names of l in order, so that the first
// violation reported is the same on every call (webhook and controller).
func sortedNames(l corev1.ResourceList) []corev1.ResourceName {
	return slices.Sorted(maps.Keys(l))
}

// MaxDevices bounds what one sandbox may ask for of one extended resource:
// far above any node's devices, and low enough that no sum of a sandbox's
// or a namespace's counts can overflow.
const MaxDevices = 1 << 16

// CheckQuantities refuses a negative request or limit: the API's quantity
// syntax allows a sign, and a negative request would lower what the
// namespace's other sandboxes are charged (a "-100" CPU request let three
// 2-CPU sandboxes into a 2-CPU budget). It also refuses a limit of zero:
// the kubelet sets no CPU quota and no memory maximum for it, so "0" is no
// limit at all, while it passes every ceiling (0 is within any
// maxResources). And it refuses a device count that is not a whole number
// up to MaxDevices: a huge one would overflow the GPU sums and lower the
// namespace's charge. Whatever the gateway's controls.
func CheckQuantities(sb *openshellv1alpha1.OpenShellSandbox) *Violation {
	r := sb.Spec.Resources
	if r == nil {
		return nil
	}
	for _, kind := range []struct {
		field string
		list  corev1.ResourceList
	}{{"requests", r.Requests}, {"limits", r.Limits}} {
		for _, n := range sortedNames(kind.list) {
			q := kind.list[n]
			if q.Sign() < 0 {
				return &Violation{Reason: openshellv1alpha1.SandboxReasonInvalidResources, Field: "spec.resources." + kind.field + "." + string(n),
					Message: fmt.Sprintf("%s: spec.resources.%s.%s is %s: requests and limits cannot be negative",
						openshellv1alpha1.SandboxReasonInvalidResources, kind.field, n, q.String())}
			}
			if v, ok := q.AsInt64(); extended(n) && (!ok || v > MaxDevices) {
				return &Violation{Reason: openshellv1alpha1.SandboxReasonInvalidResources, Field: "spec.resources." + kind.field + "." + string(n),
					Message: fmt.Sprintf("%s: spec.resources.%s.%s is %s: a sandbox asks for at most %d of a device (an extended resource), as a whole number",
						openshellv1alpha1.SandboxReasonInvalidResources, kind.field, n, q.String(), MaxDevices)}
			}
			if q.IsZero() && kind.field == "limits" {
				return &Violation{Reason: openshellv1alpha1.SandboxReasonInvalidResources, Field: "spec.resources.limits." + string(n),
					Message: fmt.Sprintf("%s: spec.resources.limits.%s is 0, which the kubelet treats as no limit at all: set a positive limit, or leave it out",
						openshellv1alpha1.SandboxReasonInvalidResources, n)}
			}
		}
	}
	return nil
}

// extended reports whether n is an extended resource (a device plugin's:
// nvidia.com/gpu, nvidia.com/mig-1g.10gb, devices.kubevirt.io/kvm, rdma/hca),
// as Kubernetes defines it: domain-qualified, outside kubernetes.io.
func extended(n corev1.ResourceName) bool {
	return strings.Contains(string(n), "/") && !strings.HasPrefix(string(n), "kubernetes.io/") &&
		!strings.HasPrefix(string(n), corev1.DefaultResourceRequestsPrefix)
}

// GPUs is what a sandbox counts against GPU ceilings and budgets: every
// device it asks for. spec.gpu.count and */gpu resources name the same GPUs
// (the larger counts); every other extended resource — MIG slices, shared
// GPUs, KVM, RDMA — adds its count, since the gateway passes it through to
// the pod and device nodes come with it whatever the SCC says. Negative
// counts (refused at admission) count as none.
func GPUs(sb *openshellv1alpha1.OpenShellSandbox) int64 {
	var field, gpus, other int64
	if sb.Spec.GPU != nil {
		field = int64(max(sb.Spec.GPU.Count, 1))
	}
	if r := sb.Spec.Resources; r != nil {
		asked := map[corev1.ResourceName]int64{}
		for _, l := range []corev1.ResourceList{r.Limits, r.Requests} {
			for k, v := range l {
				if extended(k) {
					n, ok := v.AsInt64()
					if !ok || n > MaxDevices {
						n = MaxDevices // refused at admission; counted as the most, never wrapped
					}
					asked[k] = max(asked[k], n, 0)
				}
			}
		}
		for k, n := range asked {
			if strings.HasSuffix(string(k), "/gpu") {
				gpus += n
			} else {
				other += n
			}
		}
	}
	return max(field, gpus) + other
}
