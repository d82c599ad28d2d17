package webhook

import (
	"context"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

func TestSandboxFinalizerOnlyAppendsTheFinalizer(t *testing.T) {
	for _, tt := range []struct {
		name    string
		op      admissionv1.Operation
		object  string
		allowed bool
		patch   string // "" for no patch
	}{
		{"new sandbox without finalizers", admissionv1.Create, `{"metadata":{"name":"a"},"spec":{"image":"x"}}`, true,
			`add /metadata/finalizers [openshell.ai/sandbox-cleanup]`},
		{"keeps the tenant's own finalizers", admissionv1.Create, `{"metadata":{"name":"a","finalizers":["team.example/keep"]}}`, true,
			`add /metadata/finalizers/- openshell.ai/sandbox-cleanup`},
		{"already there", admissionv1.Create, `{"metadata":{"finalizers":["openshell.ai/sandbox-cleanup"]}}`, true, ""},
		{"updates are not its business", admissionv1.Update, `{"metadata":{}}`, true, ""},
		{"not an object", admissionv1.Create, `[1]`, false, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp := SandboxFinalizer{}.Handle(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
				Operation: tt.op, Object: runtime.RawExtension{Raw: []byte(tt.object)}}})
			if resp.Allowed != tt.allowed {
				t.Fatalf("allowed = %v, want %v (%v)", resp.Allowed, tt.allowed, resp.Result)
			}
			got := ""
			for _, p := range resp.Patches {
				got += p.Operation + " " + p.Path + " " + fmtValue(p.Value)
			}
			if got != tt.patch {
				t.Errorf("patch = %q, want %q", got, tt.patch)
			}
		})
	}
}

func fmtValue(v any) string {
	switch x := v.(type) {
	case []string:
		s := "["
		for i, e := range x {
			if i > 0 {
				s += " "
			}
			s += e
		}
		return s + "]"
	case string:
		return x
	}
	return "?"
}
