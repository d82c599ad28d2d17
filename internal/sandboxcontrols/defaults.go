package sandboxcontrols

import (
	"slices"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
)

// TakeDefaults are the namespace defaults (on its default policy, nil when
// it has none) that a sandbox spec leaves room for: only the fields it
// leaves empty. Nil when it takes none. Pure.
func TakeDefaults(spec *openshellv1alpha1.OpenShellSandboxSpec, policy *openshellv1alpha1.OpenShellPolicy) *openshellv1alpha1.AppliedDefaults {
	if policy == nil || policy.Spec.SandboxDefaults == nil {
		return nil
	}
	d, out := policy.Spec.SandboxDefaults, openshellv1alpha1.AppliedDefaults{From: policy.Name}
	if spec.RuntimeClassName == "" {
		out.RuntimeClassName = d.RuntimeClassName
	}
	if spec.Resources == nil && d.Resources != nil {
		out.Resources = d.Resources.DeepCopy()
	}
	if spec.TTLSecondsAfterFinished == nil && d.TTLSecondsAfterFinished != nil {
		ttl := *d.TTLSecondsAfterFinished
		out.TTLSecondsAfterFinished = &ttl
	}
	if len(spec.Providers) == 0 {
		out.Providers = slices.Clone(d.Providers)
	}
	if out.SandboxDefaults.RuntimeClassName == "" && out.Resources == nil && out.TTLSecondsAfterFinished == nil && len(out.Providers) == 0 {
		return nil
	}
	return &out
}

// Overlay fills the fields of spec that d took a default for: the
// sandbox's effective spec, in the operator's memory only (the object's
// spec is the user's). Pure.
func Overlay(spec *openshellv1alpha1.OpenShellSandboxSpec, d *openshellv1alpha1.AppliedDefaults) {
	if d == nil {
		return
	}
	if spec.RuntimeClassName == "" {
		spec.RuntimeClassName = d.RuntimeClassName
	}
	if spec.Resources == nil && d.Resources != nil {
		spec.Resources = d.Resources.DeepCopy()
	}
	if spec.TTLSecondsAfterFinished == nil && d.TTLSecondsAfterFinished != nil {
		ttl := *d.TTLSecondsAfterFinished
		spec.TTLSecondsAfterFinished = &ttl
	}
	if len(spec.Providers) == 0 {
		spec.Providers = slices.Clone(d.Providers)
	}
}

// OverlayTemplate makes a sandbox spec's working copy carry what it takes
// from its template, so that the image policy, ceilings and budgets judge
// them as the sandbox's own (the object's spec leaves them unset: CEL).
// Pure.
func OverlayTemplate(spec *openshellv1alpha1.OpenShellSandboxSpec, a *openshellv1alpha1.AppliedTemplate) {
	if a == nil {
		return
	}
	spec.Image = a.Image
	if a.Resources != nil {
		spec.Resources = a.Resources.DeepCopy()
	}
	if a.GPU != nil {
		spec.GPU = a.GPU.DeepCopy()
	}
}

// Effective is sb as it runs, and is charged: its spec with what its
// status says it inherited, its template's workload and then the
// namespace defaults it took. sb is not changed. Pure.
func Effective(sb *openshellv1alpha1.OpenShellSandbox) *openshellv1alpha1.OpenShellSandbox {
	if sb.Status.Template == nil && sb.Status.Defaults == nil {
		return sb
	}
	out := sb.DeepCopy()
	OverlayTemplate(&out.Spec, sb.Status.Template)
	Overlay(&out.Spec, sb.Status.Defaults)
	return out
}
