package sandboxcontrols

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
)

// TestDefaults: a sandbox takes the namespace's defaults only for the
// fields it leaves empty, records where they came from, and its own
// values always win.
func TestDefaults(t *testing.T) {
	res := &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")}}
	policy := &openshellv1alpha1.OpenShellPolicy{ObjectMeta: metav1.ObjectMeta{Name: "team-defaults"}, Spec: openshellv1alpha1.OpenShellPolicySpec{
		Default: true, SandboxDefaults: &openshellv1alpha1.SandboxDefaults{RuntimeClassName: "kata", Resources: res,
			TTLSecondsAfterFinished: ptr.To[int32](60), Providers: []string{"anthropic"}}}}
	for _, tc := range []struct {
		name string
		spec openshellv1alpha1.OpenShellSandboxSpec
		want *openshellv1alpha1.AppliedDefaults
	}{
		{"an empty spec takes every default", openshellv1alpha1.OpenShellSandboxSpec{},
			&openshellv1alpha1.AppliedDefaults{From: "team-defaults", SandboxDefaults: *policy.Spec.SandboxDefaults}},
		{"its own values win", openshellv1alpha1.OpenShellSandboxSpec{RuntimeClassName: "gvisor", Providers: []string{"github"}},
			&openshellv1alpha1.AppliedDefaults{From: "team-defaults", SandboxDefaults: openshellv1alpha1.SandboxDefaults{Resources: res,
				TTLSecondsAfterFinished: ptr.To[int32](60)}}},
		{"a zero TTL is a value, not empty", openshellv1alpha1.OpenShellSandboxSpec{RuntimeClassName: "gvisor", Providers: []string{"github"},
			Resources: res, TTLSecondsAfterFinished: ptr.To[int32](0)}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := TakeDefaults(&tc.spec, policy)
			if !equality.Semantic.DeepEqual(got, tc.want) {
				t.Fatalf("took %+v, want %+v", got, tc.want)
			}
			eff := *tc.spec.DeepCopy()
			Overlay(&eff, got)
			if eff.RuntimeClassName == "" || eff.Resources == nil || eff.TTLSecondsAfterFinished == nil || len(eff.Providers) == 0 {
				t.Fatalf("effective spec %+v still has empty fields", eff)
			}
			if tc.spec.RuntimeClassName != "" && eff.RuntimeClassName != tc.spec.RuntimeClassName {
				t.Fatalf("the default replaced the sandbox's own RuntimeClass")
			}
		})
	}
	if TakeDefaults(&openshellv1alpha1.OpenShellSandboxSpec{}, nil) != nil {
		t.Fatal("defaults without a default policy")
	}
}
