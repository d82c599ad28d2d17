package webhook

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"

	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
)

// +kubebuilder:webhook:path=/mutate-openshell-ai-v1alpha1-openshellsandbox,mutating=true,failurePolicy=fail,sideEffects=None,groups=openshell.ai,resources=openshellsandboxes,verbs=create,versions=v1alpha1,name=mopenshellsandbox.openshell.ai,admissionReviewVersions=v1,timeoutSeconds=10,reinvocationPolicy=Never

// FinalizerPath is where the API server sends new OpenShellSandboxes for
// their finalizer.
const FinalizerPath = "/mutate-openshell-ai-v1alpha1-openshellsandbox"

// SandboxFinalizer sets openshellv1alpha1.SandboxFinalizer on every new
// OpenShellSandbox, so the controller does not spend an update of its own
// (a custom-resource write, the API server's most expensive request) before
// creating the sandbox at the gateway. The controller still adds the
// finalizer where no webhook runs.
//
// It is a plain admission.Handler rather than controller-runtime's
// CustomDefaulter on purpose: that one re-encodes the whole object from the
// operator's Go types and patches the difference, so an older operator
// could add or rewrite tenant fields; this one reads only
// metadata.finalizers and can only ever append the one finalizer.
type SandboxFinalizer struct{}

// SetupWithManager registers the webhook.
func (h SandboxFinalizer) SetupWithManager(mgr ctrl.Manager) error {
	mgr.GetWebhookServer().Register(FinalizerPath, &admission.Webhook{Handler: h})
	return nil
}

// Handle answers one AdmissionReview.
func (SandboxFinalizer) Handle(_ context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Create {
		return admission.Allowed("")
	}
	var obj struct {
		Metadata struct {
			Finalizers []string `json:"finalizers"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(req.Object.Raw, &obj); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	fins := obj.Metadata.Finalizers
	switch {
	case slices.Contains(fins, openshellv1alpha1.SandboxFinalizer):
		return admission.Allowed("")
	case len(fins) == 0:
		return admission.Patched("", jsonpatch.JsonPatchOperation{Operation: "add", Path: "/metadata/finalizers",
			Value: []string{openshellv1alpha1.SandboxFinalizer}})
	default:
		return admission.Patched("", jsonpatch.JsonPatchOperation{Operation: "add", Path: "/metadata/finalizers/-",
			Value: openshellv1alpha1.SandboxFinalizer})
	}
}
