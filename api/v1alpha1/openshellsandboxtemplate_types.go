package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TemplateEnvVar is one plain environment variable of a template. Its value
// is stored at the gateway, where the workspace's users can read it: a
// secret belongs in the sandbox's own env (secretKeyRef) or a provider.
type TemplateEnvVar struct {
	// Name of the variable. Names starting with OPENSHELL_ are reserved by
	// the supervisor.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern=`^[A-Za-z_][A-Za-z0-9_]*$`
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('OPENSHELL_')",message="environment variables starting with OPENSHELL_ are reserved by the supervisor"
	// +required
	Name string `json:"name"`

	// Value of the variable.
	// +kubebuilder:validation:MaxLength=8192
	// +optional
	Value string `json:"value,omitempty"`
}

// TemplateResources are the agent's CPU and memory. The gateway's template
// carries one value of each; the operator checks ceilings and budgets as
// if it were both the request and the limit.
type TemplateResources struct {
	// CPU, e.g. 500m or 2.
	// +optional
	CPU *resource.Quantity `json:"cpu,omitempty"`
	// Memory, e.g. 1Gi.
	// +optional
	Memory *resource.Quantity `json:"memory,omitempty"`
}

// TemplateStartup is the startup service level a template asks the
// gateway for (its desired_service_level.startup).
type TemplateStartup struct {
	// ReadyWithin is how soon a sandbox created from the template should be
	// Ready.
	// +optional
	ReadyWithin *metav1.Duration `json:"readyWithin,omitempty"`
	// MaxBurst is how many sandboxes of the template may start at once.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	// +optional
	MaxBurst int32 `json:"maxBurst,omitempty"`
}

// OpenShellSandboxTemplateSpec is a reusable agent workload.
type OpenShellSandboxTemplateSpec struct {
	// Image is the agent's OCI image. The namespace's OpenShellImagePolicy
	// must allow it: checked when the template is written, again at each
	// gateway it is synced to, and again when a sandbox is created from it.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	// +required
	Image string `json:"image"`

	// Env are plain environment variables of every sandbox created from the
	// template (a sandbox's own env is added to them).
	// +kubebuilder:validation:MaxItems=64
	// +listType=map
	// +listMapKey=name
	// +optional
	Env []TemplateEnvVar `json:"env,omitempty"`

	// Resources are the agent's CPU and memory, within the gateway's
	// ceilings and the namespace's budget.
	// +optional
	Resources *TemplateResources `json:"resources,omitempty"`

	// GPU requests GPUs for the agent.
	// +optional
	GPU *SandboxGPU `json:"gpu,omitempty"`

	// Startup is the startup service level asked of the gateway.
	// +optional
	Startup *TemplateStartup `json:"startup,omitempty"`

	// ExternalPorts are ports the agent serves that callers outside the
	// cluster may reach, where the sandbox's gateway publishes external
	// ports (OpenShellGateway spec.externalPorts). A caller still needs a
	// bearer token whose user may create openshellsandboxes/proxy on the
	// sandbox. The relay reads the template at each request: removing a
	// port here closes it at once. In the cluster, every port is reached
	// through openshellsandboxes/proxy, listed here or not.
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:items:Minimum=1
	// +kubebuilder:validation:items:Maximum=65535
	// +listType=set
	// +optional
	ExternalPorts []int32 `json:"externalPorts,omitempty"`
}

// SandboxTemplateGatewayStatus is the template at one gateway. The gateway
// has no update for templates, so each spec is a template of its own
// there, named after its content; an older one is deleted once no
// sandbox created from it is left.
type SandboxTemplateGatewayStatus struct {
	// Gateway is the namespace/name of the OpenShellGateway.
	Gateway string `json:"gateway"`
	// Name of the template at the gateway: this object's name and a hash of
	// the spec it was created from.
	Name string `json:"name"`
	// Workspace at the gateway.
	Workspace string `json:"workspace"`
	// ID is the gateway's ID of the template the operator created: a
	// template deleted and created again there (by anyone) has another,
	// and no sandbox is created from it.
	// +optional
	ID string `json:"id,omitempty"`
	// ResourceVersion is the gateway's resource version of the template.
	// +optional
	ResourceVersion uint64 `json:"resourceVersion,omitempty"`
	// ObservedGeneration is the generation whose spec this entry holds; an
	// entry of an older generation is kept while sandboxes created from it
	// run.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// GatewayInstance is the gateway's status.instance when the template
	// was created there: a gateway whose pods were replaced is checked.
	// +optional
	GatewayInstance string `json:"gatewayInstance,omitempty"`
}

// OpenShellSandboxTemplateStatus is the observed state of a template.
type OpenShellSandboxTemplateStatus struct {
	// Gateways holds the template at each gateway whose sandboxes use it.
	// +listType=map
	// +listMapKey=gateway
	// +listMapKey=name
	// +optional
	Gateways []SandboxTemplateGatewayStatus `json:"gateways,omitempty"`

	// Conditions: Ready.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// ObservedGeneration is the spec generation the operator last acted on fully.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// OpenShellSandboxTemplate is a Tenant Admin's reusable agent workload
// (image, environment, resources, startup service level). A sandbox names
// it in spec.templateRef; the operator syncs it to the workspace templates
// of the OpenShell 0.1 gateways where such sandboxes run. Changing it
// affects sandboxes created afterwards; one in use cannot be deleted.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=ostmpl,categories=openshell
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 52",message="metadata.name must be at most 52 characters: the gateway's template name adds a hash of the spec"
// +kubebuilder:printcolumn:name="Image",type=string,JSONPath=`.spec.image`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type OpenShellSandboxTemplate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the workload.
	// +required
	Spec OpenShellSandboxTemplateSpec `json:"spec"`
	// Status is the observed state.
	// +optional
	Status OpenShellSandboxTemplateStatus `json:"status,omitempty"`
}

// OpenShellSandboxTemplateList contains a list of OpenShellSandboxTemplate.
// +kubebuilder:object:root=true
type OpenShellSandboxTemplateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []OpenShellSandboxTemplate `json:"items"`
}

func init() {
	objectTypes = append(objectTypes, &OpenShellSandboxTemplate{}, &OpenShellSandboxTemplateList{})
}

// Reasons of an OpenShellSandboxTemplate's Ready.
const (
	// TemplateReasonSynced (True): the template is at every gateway whose
	// sandboxes use it, at this generation.
	TemplateReasonSynced = "Synced"
	// TemplateReasonUnused (True): no sandbox names the template yet.
	TemplateReasonUnused = "Unused"
	// TemplateReasonImageNotAllowed (False): the namespace's image policy,
	// as a gateway enforces it, does not allow the image; the template is
	// not synced there.
	TemplateReasonImageNotAllowed = "ImageNotAllowed"
	// TemplateReasonUnsupported (False): a gateway that needs it runs a
	// release without workspace templates (0.0.x).
	TemplateReasonUnsupported = "TemplatesUnsupported"
	// TemplateReasonConflict (False): a template of the name exists at the
	// gateway but was not created for this object; it is never adopted.
	TemplateReasonConflict = "TemplateConflict"
	// TemplateReasonGatewayError (False): a gateway refused or did not
	// answer; retried.
	TemplateReasonGatewayError = "GatewayError"
	// TemplateReasonInUse (False, while deleting): sandboxes still name the
	// template; it goes once they are gone.
	TemplateReasonInUse = "InUse"
)

// Reasons of an OpenShellSandbox created from a template.
const (
	// SandboxReasonTemplateNotFound (Ready=False): spec.templateRef names no
	// OpenShellSandboxTemplate of the namespace.
	SandboxReasonTemplateNotFound = "TemplateNotFound"
	// SandboxReasonTemplatePending (Ready=False): the template is not yet
	// at the sandbox's gateway at its current generation (see its status).
	SandboxReasonTemplatePending = "TemplatePending"
	// SandboxReasonTemplateUnsupported (Ready=False): the sandbox's gateway
	// runs a release without workspace templates (0.0.x).
	SandboxReasonTemplateUnsupported = "TemplateUnsupported"
	// SandboxReasonTemplateReplaced (Ready=False): the gateway's template of
	// the name is not the one the operator created (deleted and created
	// again at the gateway directly); nothing is created from it.
	SandboxReasonTemplateReplaced = "TemplateReplaced"
)
