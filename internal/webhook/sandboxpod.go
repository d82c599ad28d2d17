package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	render "github.com/openshell/openshell-operator/internal/render/gateway"
	"github.com/openshell/openshell-operator/internal/sandboxspec"
	"github.com/openshell/openshell-operator/internal/tenancy"
)

// +kubebuilder:webhook:path=/validate-sandbox-pod-tenant,mutating=false,failurePolicy=fail,sideEffects=None,groups="",resources=pods,verbs=create;update,versions=v1,name=vsandboxpodtenant.openshell.ai,admissionReviewVersions=v1,timeoutSeconds=10
// +kubebuilder:webhook:path=/validate-sandbox-pod-tenant,mutating=false,failurePolicy=fail,sideEffects=None,groups="",resources=pods,verbs=create;update,versions=v1,name=vsandboxpodtenantuid.openshell.ai,admissionReviewVersions=v1,timeoutSeconds=10

// SandboxPodTenantPath is where the API server sends pods that wear the
// tenant labels.
const SandboxPodTenantPath = "/validate-sandbox-pod-tenant"

// SandboxPodTenantWebhook is the webhook's name; hack/manifests gives it
// SandboxPodTenantObjectSelector, so the API server calls it only for
// pods that wear the tenant label (sandbox pods), never for anyone else's.
const SandboxPodTenantWebhook = "vsandboxpodtenant.openshell.ai"

// SandboxPodTenantObjectSelector selects the pods the webhook sees.
func SandboxPodTenantObjectSelector() *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: sandboxspec.LabelTenantNamespace, Operator: metav1.LabelSelectorOpExists}}}
}

// SandboxPodTenantUIDWebhook is the same check for pods that wear the
// tenant namespace's UID label: an object selector cannot say "either
// label", and a pod wearing the UID label alone must not pass unseen
// (NetworkPolicies may select on either).
const SandboxPodTenantUIDWebhook = "vsandboxpodtenantuid.openshell.ai"

// SandboxPodTenantUIDObjectSelector selects the pods the UID webhook sees:
// those wearing the UID label but not the namespace label, which the
// first webhook already checks (both labels on one pod, as every sandbox
// pod wears them, would otherwise cost two calls for one answer).
func SandboxPodTenantUIDObjectSelector() *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: sandboxspec.LabelTenantNamespaceUID, Operator: metav1.LabelSelectorOpExists},
		{Key: sandboxspec.LabelTenantNamespace, Operator: metav1.LabelSelectorOpDoesNotExist}}}
}

// SandboxPodTenant refuses a pod that wears a tenant namespace's identity
// labels (openshell.ai/tenant-namespace, -uid) without being a sandbox pod
// of that namespace (sandboxspec.TenantClaimProblem). NetworkPolicies and
// cost reports select tenants by those labels, and the gateway copies a
// sandbox template's labels onto its pods: without this check a Tenant
// Admin holding a gateway token could create a sandbox at the gateway
// wearing another namespace's labels (fourth adversarial read, R5).
type SandboxPodTenant struct {
	// Reader reads namespaces and OpenShellSandboxes (the manager's cache).
	Reader client.Reader
}

// SetupWithManager registers the webhook.
func (h *SandboxPodTenant) SetupWithManager(mgr ctrl.Manager) error {
	mgr.GetWebhookServer().Register(SandboxPodTenantPath, &admission.Webhook{Handler: h})
	return nil
}

// podIdentity is what the check reads of a pod.
type podIdentity struct {
	Metadata struct {
		Labels          map[string]string       `json:"labels"`
		OwnerReferences []metav1.OwnerReference `json:"ownerReferences"`
	} `json:"metadata"`
}

func (p *podIdentity) claim() sandboxspec.TenantClaim {
	c := sandboxspec.TenantClaim{Namespace: p.Metadata.Labels[sandboxspec.LabelTenantNamespace],
		UID: p.Metadata.Labels[sandboxspec.LabelTenantNamespaceUID]}
	for _, o := range p.Metadata.OwnerReferences {
		if o.Kind == "Sandbox" && strings.HasPrefix(o.APIVersion, "agents.x-k8s.io/") {
			c.Sandbox = o.Name
		}
	}
	return c
}

// Handle answers one AdmissionReview.
func (h *SandboxPodTenant) Handle(ctx context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return admission.Allowed("")
	}
	var pod podIdentity
	if err := json.Unmarshal(req.Object.Raw, &pod); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	claim := pod.claim()
	switch {
	case claim.Namespace == "" && claim.UID != "":
		// The operator's sandbox pods always wear both.
		return admission.Denied(fmt.Sprintf("the pod wears %s without %s: only sandbox pods may carry the tenant labels, and they carry both",
			sandboxspec.LabelTenantNamespaceUID, sandboxspec.LabelTenantNamespace))
	case claim.Namespace == "":
		return admission.Allowed("")
	}
	claim.PodNamespace = req.Namespace
	if req.Operation == admissionv1.Update {
		var old podIdentity
		if err := json.Unmarshal(req.OldObject.Raw, &old); err == nil && old.claim().Namespace == claim.Namespace && old.claim().UID == claim.UID &&
			old.claim().Sandbox == claim.Sandbox {
			// Admitted when it was made: a status or other update.
			return admission.Allowed("")
		}
	}
	problem, err := h.problem(ctx, claim)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	if problem != "" {
		return admission.Denied(problem)
	}
	return admission.Allowed("")
}

func (h *SandboxPodTenant) problem(ctx context.Context, claim sandboxspec.TenantClaim) (string, error) {
	podNS, _, err := tenancy.ReadNamespace(ctx, h.Reader, claim.PodNamespace)
	if err != nil && !apierrors.IsNotFound(err) {
		return "", fmt.Errorf("read namespace %s: %w", claim.PodNamespace, err)
	}
	claim.InPairedNamespace = render.IsPairedNamespace(podNS.Labels)
	_, uid, err := tenancy.ReadNamespace(ctx, h.Reader, claim.Namespace)
	if apierrors.IsNotFound(err) {
		uid = types.UID("")
	} else if err != nil {
		return "", fmt.Errorf("read namespace %s: %w", claim.Namespace, err)
	}
	var names []string
	if claim.Sandbox != "" && uid != "" && !strings.Contains(claim.Sandbox, sandboxspec.WorkspaceSeparator) {
		// 0.0.111's names: the namespace's OpenShellSandboxes (cached).
		list := &openshellv1alpha1.OpenShellSandboxList{}
		if err := h.Reader.List(ctx, list, client.InNamespace(claim.Namespace)); err != nil {
			return "", fmt.Errorf("list the OpenShellSandboxes of %s: %w", claim.Namespace, err)
		}
		for _, sb := range list.Items {
			names = append(names, sb.Name)
		}
	}
	return sandboxspec.TenantClaimProblem(claim, uid, names), nil
}
