package sandboxspec

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"google.golang.org/protobuf/types/known/durationpb"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/datamodelv1"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/openshellv1"
)

// GatewayTemplateName is the name of a template's current spec at a
// gateway: the object's name and a hash of its spec. The gateway has no
// update for templates, so a changed spec is a new template there, and
// sandboxes created from the old one keep it.
func GatewayTemplateName(t *openshellv1alpha1.OpenShellSandboxTemplate) string {
	b, _ := json.Marshal(t.Spec) // a struct of plain fields: never fails
	sum := sha256.Sum256(b)
	return t.Name + "-" + hex.EncodeToString(sum[:5])
}

// TemplateLabels mark a gateway template as made for one template object
// in one namespace incarnation.
func TemplateLabels(t *openshellv1alpha1.OpenShellSandboxTemplate, nsUID types.UID) map[string]string {
	l := WorkspaceLabels(t.Namespace, nsUID)
	l[LabelOwnerUID] = string(t.UID)
	return l
}

// WorkloadTemplate renders a template as the gateway's workspace template
// of name (GatewayTemplateName) with its owner labels.
func WorkloadTemplate(t *openshellv1alpha1.OpenShellSandboxTemplate, name string, labels map[string]string) *openshellv1.SandboxWorkloadTemplate {
	w := &openshellv1.SandboxWorkloadConfig{Image: t.Spec.Image}
	if len(t.Spec.Env) > 0 {
		w.Environment = make(map[string]string, len(t.Spec.Env))
		for _, e := range t.Spec.Env {
			w.Environment[e.Name] = e.Value
		}
	}
	if r := t.Spec.Resources; r != nil || t.Spec.GPU != nil {
		w.Resources = &openshellv1.SandboxResources{}
		if r != nil && r.CPU != nil {
			w.Resources.Cpu = r.CPU.String()
		}
		if r != nil && r.Memory != nil {
			w.Resources.Memory = r.Memory.String()
		}
		if t.Spec.GPU != nil {
			n := uint32(max(t.Spec.GPU.Count, 1))
			w.Resources.Gpu = &openshellv1.GpuResourceRequirements{Count: &n}
		}
	}
	spec := &openshellv1.SandboxWorkloadTemplateSpec{Workload: w}
	if s := t.Spec.Startup; s != nil {
		st := &openshellv1.SandboxStartup{MaxBurst: uint32(max(s.MaxBurst, 0))}
		if s.ReadyWithin != nil {
			st.ReadyWithin = durationpb.New(s.ReadyWithin.Duration)
		}
		spec.DesiredServiceLevel = &openshellv1.SandboxServiceLevel{Startup: st}
	}
	return &openshellv1.SandboxWorkloadTemplate{Metadata: &datamodelv1.ObjectMeta{Name: name, Labels: labels}, Spec: spec}
}

// TemplateDiffers says how a gateway template differs from what the
// operator would create for t under the same name, "" when it does not.
func TemplateDiffers(t *openshellv1alpha1.OpenShellSandboxTemplate, got *openshellv1.SandboxWorkloadTemplate) string {
	want := WorkloadTemplate(t, got.GetMetadata().GetName(), nil).GetSpec()
	a, _ := json.Marshal(want.GetWorkload())
	b, _ := json.Marshal(got.GetSpec().GetWorkload())
	if string(a) != string(b) {
		return "its workload (image, environment, resources) differs"
	}
	if want.GetDesiredServiceLevel().GetStartup().GetMaxBurst() != got.GetSpec().GetDesiredServiceLevel().GetStartup().GetMaxBurst() ||
		want.GetDesiredServiceLevel().GetStartup().GetReadyWithin().AsDuration() != got.GetSpec().GetDesiredServiceLevel().GetStartup().GetReadyWithin().AsDuration() {
		return "its startup service level differs"
	}
	if len(got.GetSpec().GetDriverConfig().GetFields()) > 0 {
		return "it carries a driver_config"
	}
	return ""
}

// Applied is what a sandbox takes from a template: the image, and the
// resources as both request and limit (the gateway's template has one
// value of each).
func Applied(t *openshellv1alpha1.OpenShellSandboxTemplate) *openshellv1alpha1.AppliedTemplate {
	a := &openshellv1alpha1.AppliedTemplate{Name: t.Name, Generation: t.Generation, Image: t.Spec.Image, GPU: t.Spec.GPU.DeepCopy()}
	if r := t.Spec.Resources; r != nil && (r.CPU != nil || r.Memory != nil) {
		l := corev1.ResourceList{}
		if r.CPU != nil {
			l[corev1.ResourceCPU] = *r.CPU
		}
		if r.Memory != nil {
			l[corev1.ResourceMemory] = *r.Memory
		}
		a.Resources = &corev1.ResourceRequirements{Limits: l, Requests: l.DeepCopy()}
	}
	return a
}

// FromTemplate turns a rendered create into one from the gateway template
// a names: the workload (image, resources, GPUs) is the template's, so
// the request leaves it to the gateway.
func FromTemplate(req *openshellv1.CreateSandboxRequest, a *openshellv1alpha1.AppliedTemplate) error {
	if a == nil {
		return nil
	}
	if a.GatewayName == "" {
		return fmt.Errorf("template %s has no name at the gateway yet", a.Name)
	}
	req.WorkloadTemplate = a.GatewayName
	if t := req.GetSpec().GetTemplate(); t != nil {
		t.Image, t.Resources, t.Environment = "", nil, nil
	}
	if req.Spec != nil {
		req.Spec.ResourceRequirements = nil
	}
	return nil
}
