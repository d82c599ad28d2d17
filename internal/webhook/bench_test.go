package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/imagepolicy"
	"github.com/openshell/openshell-operator/internal/scheme"
	"github.com/openshell/openshell-operator/internal/tenancy"
)

// cacheReader serves objects as the manager's cache does without deep
// copies (client.UnsafeDisableDeepCopy): by reference, without copying.
type cacheReader struct {
	gateway *openshellv1alpha1.OpenShellGateway
	items   []openshellv1alpha1.OpenShellImagePolicy
}

func (r *cacheReader) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	switch o := obj.(type) {
	case *openshellv1alpha1.OpenShellGateway:
		// The cache copies on Get.
		r.gateway.DeepCopyInto(o)
	case *metav1.PartialObjectMetadata:
		// The sandbox's namespace, by metadata (gateway access).
		o.Name = key.Name
		o.UID = "ns-uid"
	default:
		return fmt.Errorf("cacheReader: unexpected %T", obj)
	}
	return nil
}

func (r *cacheReader) List(_ context.Context, list client.ObjectList, _ ...client.ListOption) error {
	if _, ok := list.(*openshellv1alpha1.OpenShellImagePolicyList); !ok {
		return nil // no OpenShellPolicies: the sandbox runs under the gateway's default
	}
	return meta.SetList(list, func() []runtime.Object {
		out := make([]runtime.Object, len(r.items))
		for i := range r.items {
			out[i] = &r.items[i]
		}
		return out
	}())
}

// BenchmarkSandboxAdmission is one AdmissionReview for a sandbox create
// through the webhook's HTTP handler, against a 1,000-entry image policy:
// what the API server's call costs the operator, allocations included (in
// a burst of creates, garbage becomes GC pauses, and those become the
// webhook's tail latency).
func BenchmarkSandboxAdmission(b *testing.B) {
	for _, tc := range []struct {
		name  string
		image string
	}{
		{"allowed", "mirror.example.com/team-7/agent@sha256:" + fmt.Sprintf("%064x", 1)},
		{"denied", "docker.io/team-7/agent@sha256:" + fmt.Sprintf("%064x", 1)},
	} {
		b.Run(tc.name, func(b *testing.B) {
			allowed := make([]string, 1000)
			for i := range allowed {
				allowed[i] = fmt.Sprintf("mirror.example.com/team-%d", i)
			}
			r := &cacheReader{
				gateway: &openshellv1alpha1.OpenShellGateway{ObjectMeta: metav1.ObjectMeta{Name: "gw", Namespace: "ns"},
					Spec: openshellv1alpha1.OpenShellGatewaySpec{ImagePolicy: openshellv1alpha1.ImagePolicyEnforcement{
						Mode: openshellv1alpha1.ImagePolicyEnforce, WhenNoPolicy: openshellv1alpha1.NoPolicyDeny}}},
				items: []openshellv1alpha1.OpenShellImagePolicy{{ObjectMeta: metav1.ObjectMeta{Name: "mirrors", Namespace: "ns", ResourceVersion: "1"},
					Spec: openshellv1alpha1.OpenShellImagePolicySpec{AllowedMirrors: allowed}}},
			}
			s := scheme.New()
			wh := admission.WithValidator[*openshellv1alpha1.OpenShellSandbox](s, &SandboxValidator{Reader: r, Policies: imagepolicy.NewCache(),
				Platform: tenancy.Platform{OperatorNamespace: "ns", GatewayNamespaces: []string{"ns"}}})
			sb := &openshellv1alpha1.OpenShellSandbox{TypeMeta: metav1.TypeMeta{APIVersion: openshellv1alpha1.GroupVersion.String(), Kind: "OpenShellSandbox"},
				ObjectMeta: metav1.ObjectMeta{Name: "sb", Namespace: "ns"},
				Spec:       openshellv1alpha1.OpenShellSandboxSpec{GatewayRef: openshellv1alpha1.GatewayReference{Name: "gw"}, Image: tc.image}}
			raw, _ := json.Marshal(sb)
			review, _ := json.Marshal(admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
				Request: &admissionv1.AdmissionRequest{UID: types.UID("1"), Operation: admissionv1.Create, Namespace: "ns", Name: "sb",
					Kind:   metav1.GroupVersionKind{Group: "openshell.ai", Version: "v1alpha1", Kind: "OpenShellSandbox"},
					Object: runtime.RawExtension{Raw: raw}}})
			serve := func() *httptest.ResponseRecorder {
				req := httptest.NewRequest(http.MethodPost, "/validate", bytes.NewReader(review))
				req.Header.Set("Content-Type", "application/json")
				w := httptest.NewRecorder()
				wh.ServeHTTP(w, req)
				return w
			}
			var out admissionv1.AdmissionReview
			if err := json.Unmarshal(serve().Body.Bytes(), &out); err != nil || out.Response == nil {
				b.Fatalf("no admission response: %v", err)
			}
			if out.Response.Allowed != (tc.name == "allowed") {
				b.Fatalf("allowed=%v for %s: %+v", out.Response.Allowed, tc.image, out.Response.Result)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				serve()
			}
		})
	}
}
