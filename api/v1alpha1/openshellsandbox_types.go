package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// GatewayReference names an OpenShellGateway. The gateway usually lives in
// the Platform Admin's namespace, so a namespace may be given.
type GatewayReference struct {
	// Name of the OpenShellGateway.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Name string `json:"name"`

	// Namespace of the OpenShellGateway; defaults to the sandbox's namespace.
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Namespace string `json:"namespace,omitempty"`
}

// SandboxEnvVar is one environment variable of the agent process.
// +kubebuilder:validation:XValidation:rule="has(self.value) != has(self.valueFrom)",message="set exactly one of value or valueFrom"
type SandboxEnvVar struct {
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
	Value *string `json:"value,omitempty"`

	// ValueFrom reads the value from a Secret in the sandbox's namespace.
	// +optional
	ValueFrom *SandboxEnvVarSource `json:"valueFrom,omitempty"`
}

// SandboxEnvVarSource is where an environment variable's value comes from.
type SandboxEnvVarSource struct {
	// SecretKeyRef selects a key of a Secret in the sandbox's namespace.
	// +required
	SecretKeyRef SecretKeyReference `json:"secretKeyRef"`
}

// SandboxGPU requests GPUs for the agent container.
type SandboxGPU struct {
	// Count of GPUs.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=16
	// +optional
	Count int32 `json:"count,omitempty"`
}

// OpenShellSandboxSpec is the desired state of an agent sandbox.
// +kubebuilder:validation:XValidation:rule="has(self.command) == has(oldSelf.command) && (!has(self.command) || self.command == oldSelf.command)",message="spec.command is immutable; create a new sandbox instead"
// +kubebuilder:validation:XValidation:rule="has(self.templateRef) == has(oldSelf.templateRef) && (!has(self.templateRef) || self.templateRef == oldSelf.templateRef)",message="spec.templateRef is immutable; create a new sandbox instead"
// +kubebuilder:validation:XValidation:rule="!has(self.templateRef) || (!has(self.image) && !has(self.resources) && !has(self.gpu))",message="spec.templateRef supplies the image, resources and GPUs: leave spec.image, spec.resources and spec.gpu unset"
type OpenShellSandboxSpec struct {
	// GatewayRef names the OpenShellGateway that runs this sandbox. It cannot
	// be changed: create a new sandbox to move to another gateway.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.gatewayRef is immutable"
	// +required
	GatewayRef GatewayReference `json:"gatewayRef"`

	// TemplateRef names an OpenShellSandboxTemplate in the same namespace
	// whose image, environment, resources and GPUs the sandbox is created
	// with, through the gateway's workspace template (OpenShell 0.1).
	// The sandbox keeps what the template held when it was created.
	// Immutable.
	// +optional
	TemplateRef *LocalObjectReference `json:"templateRef,omitempty"`

	// PolicyRef names an OpenShellPolicy in the same namespace whose
	// filesystem, process and network rules the supervisor enforces. Without
	// one, the gateway's default policy applies.
	// +optional
	PolicyRef *LocalObjectReference `json:"policyRef,omitempty"`

	// Image is the agent's OCI image. It must be allowed by the namespace's
	// OpenShellImagePolicy; empty uses the gateway's default sandbox image.
	// Changing it recreates the sandbox.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Image string `json:"image,omitempty"`

	// Command is the agent's main process argv, with no shell parsing.
	// Empty runs an interactive login shell. Immutable.
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=32768
	// +listType=atomic
	// +optional
	Command []string `json:"command,omitempty"`

	// Env are environment variables for the agent process. Changing them
	// recreates the sandbox.
	// +kubebuilder:validation:MaxItems=128
	// +listType=map
	// +listMapKey=name
	// +optional
	Env []SandboxEnvVar `json:"env,omitempty"`

	// RestartOnSecretChange recreates the sandbox when a Secret its env
	// reads changes, so that it runs with the new values (no release can
	// change a running sandbox's environment in place). What the agent holds
	// only in the sandbox is lost with it. Without it, such a change is
	// reported (EnvSecretsCurrent False, reason EnvSecretChanged) and the
	// sandbox keeps the values it was created with.
	// +optional
	RestartOnSecretChange bool `json:"restartOnSecretChange,omitempty"`

	// Providers name OpenShellProviders in the same namespace whose
	// credentials the sandbox may use. Changing the list attaches or detaches
	// providers in place.
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=253
	// +listType=set
	// +optional
	Providers []string `json:"providers,omitempty"`

	// GPU requests GPUs for the agent. Changing it recreates the sandbox.
	// +optional
	GPU *SandboxGPU `json:"gpu,omitempty"`

	// Resources are the agent container's requests and limits. Changing them
	// recreates the sandbox.
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`

	// RuntimeClassName runs the agent's pod with this RuntimeClass (e.g. a
	// VM-isolated one), which the gateway must allow
	// (spec.sandboxControls.allowedRuntimeClasses); empty uses the gateway's
	// default. Changing it recreates the sandbox.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +optional
	RuntimeClassName string `json:"runtimeClassName,omitempty"`

	// LogLevel of the supervisor inside the sandbox.
	// +kubebuilder:validation:Enum=trace;debug;info;warn;error
	// +optional
	LogLevel string `json:"logLevel,omitempty"`

	// PodLabels are added to the agent's pod (for NetworkPolicies, cost
	// attribution, monitoring). Keys under openshell.ai/, openshell.io/,
	// agents.x-k8s.io/ and app.kubernetes.io/ are reserved to the operator,
	// the gateway and the Agent Sandbox controller: the operator's
	// NetworkPolicies and PodDisruptionBudget select gateway pods by
	// app.kubernetes.io labels, which an agent must not wear. Changing them
	// recreates the sandbox.
	// +kubebuilder:validation:MaxProperties=32
	// +kubebuilder:validation:XValidation:rule="self.all(k, !k.startsWith('openshell.ai/') && !k.startsWith('openshell.io/') && !k.startsWith('agents.x-k8s.io/') && !k.startsWith('app.kubernetes.io/'))",message="podLabels keys under openshell.ai/, openshell.io/, agents.x-k8s.io/ and app.kubernetes.io/ are reserved (the operator selects gateway pods by app.kubernetes.io labels)"
	// +kubebuilder:validation:XValidation:rule="self.all(k, k.matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$'))",message="podLabels keys must be qualified names (optional DNS prefix/, then a name of at most 63 characters)"
	// +optional
	PodLabels map[string]PodLabelValue `json:"podLabels,omitempty"`

	// PodAnnotations are added to the agent's pod. The operator's, the
	// gateway's and the Agent Sandbox controller's prefixes are reserved, and
	// annotations that would loosen the pod's confinement are refused:
	// AppArmor and seccomp profiles, pod networks (Multus, OVN), mesh
	// opt-outs, SCC pinning, container-runtime annotations (CRI-O, Kata,
	// containerd, OCI, io.openshift.builder and kin), which a runtime handler
	// with allowed_annotations honours, and workload-partitioning annotations
	// (target.workload.openshift.io/), which pin the pod to CPUs reserved for
	// the platform. A gateway's sandboxControls.allowedPodAnnotations narrows them
	// further to the prefixes a Platform Admin lists.
	// Changing them recreates the sandbox.
	// +kubebuilder:validation:MaxProperties=32
	// +kubebuilder:validation:XValidation:rule="self.all(k, !k.startsWith('openshell.ai/') && !k.startsWith('openshell.io/') && !k.startsWith('agents.x-k8s.io/'))",message="podAnnotations keys under openshell.ai/, openshell.io/ and agents.x-k8s.io/ are reserved"
	// +kubebuilder:validation:XValidation:rule="self.all(k, !k.startsWith('container.apparmor.security.beta.kubernetes.io/') && !k.startsWith('seccomp.security.alpha.kubernetes.io/') && !k.startsWith('container.seccomp.security.alpha.kubernetes.io/') && !k.startsWith('k8s.v1.cni.cncf.io/') && !k.startsWith('v1.multus-cni.io/') && !k.startsWith('k8s.ovn.org/') && !k.startsWith('sidecar.istio.io/') && !k.startsWith('kubectl.kubernetes.io/'))",message="podAnnotations may not set security profiles, pod networks or mesh opt-outs (container.apparmor.security.beta.kubernetes.io/, seccomp.security.alpha.kubernetes.io/, container.seccomp.security.alpha.kubernetes.io/, k8s.v1.cni.cncf.io/, v1.multus-cni.io/, k8s.ovn.org/, sidecar.istio.io/, kubectl.kubernetes.io/)"
	// +kubebuilder:validation:XValidation:rule="self.all(k, !k.startsWith('openshift.io/') && !k.startsWith('security.openshift.io/') && !k.startsWith('io.kubernetes.cri-o.') && !k.startsWith('io.kubernetes.cri.') && !k.startsWith('io.katacontainers.') && !k.startsWith('io.containerd.') && !k.startsWith('run.oci.') && !k.startsWith('io.podman.') && !k.startsWith('io.openshift.') && !k.contains('crio.io') && !k.contains('workload.openshift.io/'))",message="podAnnotations may not pin an SCC, speak to the container runtime or choose CPUs (openshift.io/, security.openshift.io/, io.kubernetes.cri-o., io.kubernetes.cri., io.katacontainers., io.containerd., run.oci., io.podman., io.openshift., *crio.io, *workload.openshift.io/): a runtime handler that allows them adds devices or changes confinement, and workload partitioning moves the pod onto reserved CPUs"
	// +optional
	PodAnnotations map[string]PodAnnotationValue `json:"podAnnotations,omitempty"`

	// Suspend stops the agent's runtime and keeps its workspace volume
	// (phase Suspended); setting it back to false starts a new runtime on
	// the same workspace. Deleting the sandbox still deletes everything.
	// +optional
	Suspend bool `json:"suspend,omitempty"`

	// TTLSecondsAfterFinished deletes the sandbox (its gateway sandbox and
	// this object) that many seconds after its agent exited, as a Job's
	// field of the same name does: counted from status.completionTime.
	// Unset keeps a finished sandbox until it is deleted.
	// +kubebuilder:validation:Minimum=0
	// +optional
	TTLSecondsAfterFinished *int32 `json:"ttlSecondsAfterFinished,omitempty"`
}

// SandboxFinalizer keeps an OpenShellSandbox until the operator has deleted
// its sandbox at the gateway. The operator's mutating webhook sets it at
// admission (so the normal path costs no write of its own); the controller
// adds it where no webhook runs.
const SandboxFinalizer = "openshell.ai/sandbox-cleanup"

// AnnotationForceRelease, set to "true" on an OpenShellSandbox being deleted
// whose gateway cannot be reached (or is being deleted itself), releases it
// without deleting the sandbox at the gateway, which may then keep running
// there: the escape hatch for a decommissioned gateway. Setting it needs
// the same right as removing the finalizer (update
// openshellsandboxes/finalizers), which the admission webhook checks.
const AnnotationForceRelease = "openshell.ai/force-release"

// PodLabelValue is a Kubernetes label value.
// +kubebuilder:validation:MaxLength=63
// +kubebuilder:validation:Pattern=`^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$`
type PodLabelValue string

// PodAnnotationValue is a pod annotation value, bounded so the sandbox
// stays small.
// +kubebuilder:validation:MaxLength=4096
type PodAnnotationValue string

// AppliedResources is what a namespace budget charges a running sandbox
// for (spec.sandboxControls.namespaceBudget of its gateway).
type AppliedResources struct {
	// Devices counts its GPUs and device-like extended resources, as
	// maxGPUs does.
	// +optional
	Devices int64 `json:"devices,omitempty"`
	// Requests are its requests (a limit where no request is set).
	// +optional
	Requests corev1.ResourceList `json:"requests,omitempty"`
}

// SandboxPhase summarises a sandbox's conditions.
// +kubebuilder:validation:Enum=Pending;Provisioning;Ready;Rejected;Error;Stopped;Suspended;Completed;Deleting
type SandboxPhase string

const (
	// SandboxPhasePending means the sandbox waits for a prerequisite.
	SandboxPhasePending SandboxPhase = "Pending"
	// SandboxPhaseProvisioning means the gateway is creating the sandbox.
	SandboxPhaseProvisioning SandboxPhase = "Provisioning"
	// SandboxPhaseReady means the agent runs under its policy.
	SandboxPhaseReady SandboxPhase = "Ready"
	// SandboxPhaseRejected means validation refused the spec (see Accepted).
	SandboxPhaseRejected SandboxPhase = "Rejected"
	// SandboxPhaseError means the sandbox failed at the gateway.
	SandboxPhaseError SandboxPhase = "Error"
	// SandboxPhaseStopped means the sandbox is suspended.
	SandboxPhaseStopped SandboxPhase = "Stopped"
	// SandboxPhaseSuspended means spec.suspend stopped the runtime; the
	// workspace volume is kept.
	SandboxPhaseSuspended SandboxPhase = "Suspended"
	// SandboxPhaseCompleted means the agent ran to completion: its command
	// exited 0 (status.exitCode). An agent that exits otherwise is Error,
	// with its exit code. 0.1 gateways report it; 0.0.x ones do not.
	SandboxPhaseCompleted SandboxPhase = "Completed"
	// SandboxPhaseDeleting means the sandbox is being removed at the gateway.
	SandboxPhaseDeleting SandboxPhase = "Deleting"
)

// AgentSandboxReference identifies the agents.x-k8s.io Sandbox object that
// the gateway created for this sandbox.
type AgentSandboxReference struct {
	// APIVersion of the Sandbox object, for example agents.x-k8s.io/v1beta1.
	// +optional
	APIVersion string `json:"apiVersion,omitempty"`
	// Namespace of the Sandbox object.
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// Name of the Sandbox object.
	// +optional
	Name string `json:"name,omitempty"`
}

// OpenShellSandboxStatus is the observed state of an agent sandbox.
type OpenShellSandboxStatus struct {
	// Phase summarises the conditions for display.
	// +optional
	Phase SandboxPhase `json:"phase,omitempty"`

	// SandboxID is the gateway's ID (UUID) of the sandbox.
	// +optional
	SandboxID string `json:"sandboxID,omitempty"`

	// ReplacedSandboxID is the gateway sandbox the next (or current) one
	// replaces: one the gateway lost, or one recreated after an immutable
	// change. It makes each incarnation's create idempotency key
	// (request_id) its own, so that a create is never answered with the
	// replayed result of an earlier incarnation's.
	// +optional
	ReplacedSandboxID string `json:"replacedSandboxID,omitempty"`

	// GatewaySandboxName is the sandbox's name at the gateway, derived from
	// namespace and name so that two namespaces never collide.
	// +optional
	GatewaySandboxName string `json:"gatewaySandboxName,omitempty"`

	// Workspace is the gateway workspace this namespace maps to.
	// +optional
	Workspace string `json:"workspace,omitempty"`

	// AgentSandbox is the agents.x-k8s.io Sandbox the gateway created.
	// +optional
	AgentSandbox *AgentSandboxReference `json:"agentSandbox,omitempty"`

	// Gateway is the namespace/name of the OpenShellGateway that holds the
	// sandbox; deletion cleans up there even if spec.gatewayRef is gone.
	// +optional
	Gateway string `json:"gateway,omitempty"`

	// Defaults are the namespace's sandbox defaults this sandbox took, and
	// from where: set while it is not yet created at the gateway (they
	// follow the defaults until then), kept once it is.
	// +optional
	Defaults *AppliedDefaults `json:"defaults,omitempty"`

	// Template is what the sandbox took from its OpenShellSandboxTemplate:
	// followed until the gateway sandbox is created, then kept.
	// +optional
	Template *AppliedTemplate `json:"template,omitempty"`

	// EnvSecretVersions are the resourceVersions of the Secrets the env read
	// (by name) when the gateway sandbox was created: the values it runs
	// with. A Secret at another version has changed since (EnvSecretsCurrent).
	// +optional
	EnvSecretVersions map[string]string `json:"envSecretVersions,omitempty"`

	// AppliedSpecHash is the hash of the immutable parts of the spec (image,
	// command, env, GPU, resources, log level) the gateway sandbox was
	// created from; a different hash recreates it.
	// +optional
	AppliedSpecHash string `json:"appliedSpecHash,omitempty"`

	// AppliedPolicyHash is the hash of the policy last applied in place.
	// +optional
	AppliedPolicyHash string `json:"appliedPolicyHash,omitempty"`

	// AppliedResources is what the gateway sandbox was created with, as a
	// namespace budget counts it. While the sandbox runs, the budget charges
	// it the larger of this and its spec: an edit that lowers its resources
	// frees nothing until the gateway has applied it.
	// +optional
	AppliedResources *AppliedResources `json:"appliedResources,omitempty"`

	// PolicyVersion is the gateway's version of the applied policy.
	// +optional
	PolicyVersion int64 `json:"policyVersion,omitempty"`

	// ProposalsEnabled is the value the operator last gave the gateway
	// sandbox's agent_policy_proposals_enabled setting (its policy's
	// spec.advisor.enabled; 0.1 gateways).
	// +optional
	ProposalsEnabled bool `json:"proposalsEnabled,omitempty"`

	// ExitCode is the agent's exit code once its command exited, as the
	// gateway reports it (0: phase Completed).
	// +optional
	ExitCode *int32 `json:"exitCode,omitempty"`

	// CompletionTime is when the operator first saw the agent exited;
	// spec.ttlSecondsAfterFinished counts from it.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`

	// AttachedProviders are the providers attached at the gateway.
	// +listType=set
	// +optional
	AttachedProviders []string `json:"attachedProviders,omitempty"`

	// Conditions: Accepted, ImageAllowed, PolicyResolved, ProvidersResolved,
	// GatewayReachable, Synced, Ready.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// ObservedGeneration is the spec generation the operator last acted on fully.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// OpenShellSandbox is a policy-enforced agent sandbox run by an OpenShell
// gateway.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=ossb,categories=openshell
// +kubebuilder:printcolumn:name="Gateway",type=string,JSONPath=`.spec.gatewayRef.name`
// +kubebuilder:printcolumn:name="Image",type=string,JSONPath=`.spec.image`,priority=1
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Sandbox ID",type=string,JSONPath=`.status.sandboxID`,priority=1
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type OpenShellSandbox struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired state.
	// +required
	Spec OpenShellSandboxSpec `json:"spec"`
	// Status is the observed state.
	// +optional
	Status OpenShellSandboxStatus `json:"status,omitempty"`
}

// OpenShellSandboxList contains a list of OpenShellSandbox.
// +kubebuilder:object:root=true
type OpenShellSandboxList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []OpenShellSandbox `json:"items"`
}

func init() {
	objectTypes = append(objectTypes, &OpenShellSandbox{}, &OpenShellSandboxList{})
}

// Reasons of an OpenShellSandbox's Accepted and Ready conditions.
const (
	// SandboxReasonAccepted: every check passed; the sandbox may be created.
	SandboxReasonAccepted = "Accepted"
	// SandboxReasonAgentSandboxCRDMissing: the agents.x-k8s.io Sandbox CRD is
	// missing, not established or serves no supported version. The sandbox
	// waits (phase Pending, even one that ran: the CRD's deletion took its
	// runtime object) and is re-queued when the CRD appears.
	SandboxReasonAgentSandboxCRDMissing = "AgentSandboxCRDMissing"
	// SandboxReasonPreflightPending: the operator has not probed the cluster yet.
	SandboxReasonPreflightPending = "PreflightPending"
	// SandboxReasonGatewayNotFound: spec.gatewayRef names no OpenShellGateway.
	SandboxReasonGatewayNotFound = "GatewayNotFound"
	// SandboxReasonPolicyNotFound: spec.policyRef names no OpenShellPolicy.
	SandboxReasonPolicyNotFound = "PolicyNotFound"
	// SandboxReasonProviderNotFound: spec.providers names a missing provider.
	SandboxReasonProviderNotFound = "ProviderNotFound"
	// SandboxReasonResourceLimitExceeded: spec.resources or spec.gpu exceed
	// the gateway's spec.sandboxControls (maxResources, maxGPUs).
	SandboxReasonResourceLimitExceeded = "ResourceLimitExceeded"
	// SandboxReasonPodAnnotationNotAllowed: a pod annotation outside the
	// gateway's sandboxControls.allowedPodAnnotations.
	SandboxReasonPodAnnotationNotAllowed = "PodAnnotationNotAllowed"
	// SandboxReasonInvalidResources: a request or limit is negative.
	SandboxReasonInvalidResources = "InvalidResources"
	// SandboxReasonRuntimeClassNotAllowed: spec.runtimeClassName is not in
	// the gateway's spec.sandboxControls.allowedRuntimeClasses.
	SandboxReasonRuntimeClassNotAllowed = "RuntimeClassNotAllowed"
	// SandboxReasonProviderNotAllowed: an attached OpenShellProvider's type
	// is not in the gateway's spec.sandboxControls.allowedProviderTypes.
	SandboxReasonProviderNotAllowed = "ProviderNotAllowed"
	// SandboxReasonNamespaceBudgetExceeded: the namespace's sandboxes on the
	// gateway would exceed spec.sandboxControls.namespaceBudget.
	SandboxReasonNamespaceBudgetExceeded = "NamespaceBudgetExceeded"
	// SandboxReasonSecretNotFound: an env secretKeyRef cannot be read.
	SandboxReasonSecretNotFound = "SecretNotFound"
	// SandboxReasonEnvTooLarge: env reads more Secrets, or more bytes, than
	// one sandbox may (sandboxspec.MaxEnvSecrets, MaxEnvBytes).
	SandboxReasonEnvTooLarge = "EnvTooLarge"
	// SandboxReasonWaitingForGateway: accepted, not yet created at the gateway.
	SandboxReasonWaitingForGateway = "WaitingForGateway"
	// SandboxReasonWorkspaceNamespacePending (workspace mode Operator): the
	// namespace's paired namespace is being created, or is not yet on the
	// gateway's allowlist.
	SandboxReasonWorkspaceNamespacePending = "WorkspaceNamespacePending"
	// SandboxReasonWorkspaceNamespaceConflict (workspace mode Operator): a
	// namespace of the paired name exists that the operator did not create
	// for this namespace and gateway; it is never adopted.
	SandboxReasonWorkspaceNamespaceConflict = "WorkspaceNamespaceConflict"
	// SandboxReasonWorkspaceModeUnsupported: the gateway is in workspace
	// mode Operator but the operator does not watch every namespace.
	SandboxReasonWorkspaceModeUnsupported = "WorkspaceModeUnsupported"
	// SandboxReasonQuotaExceeded: a ResourceQuota refused the sandbox's
	// pods; the message is the API server's, naming the quota.
	SandboxReasonQuotaExceeded = "QuotaExceeded"
	// SandboxReasonPullSecretsUnsupported: the namespace's image policies
	// name pull Secrets, which the sandbox's gateway cannot give its pods
	// (workspace mode Shared, or External: pull Secrets are gateway-wide).
	SandboxReasonPullSecretsUnsupported = "PullSecretsUnsupported"
)

// Condition types an OpenShellSandbox reports besides Accepted, Ready,
// Synced, ImageAllowed and GatewayReachable.
const (
	// SandboxConditionPolicyResolved is True when spec.policyRef names an
	// existing OpenShellPolicy (or there is none to resolve).
	SandboxConditionPolicyResolved = "PolicyResolved"
	// SandboxConditionProvidersResolved is True when every provider exists
	// and has been pushed to the sandbox's gateway.
	SandboxConditionProvidersResolved = "ProvidersResolved"
	// SandboxConditionEnvSecretsCurrent is True, on a sandbox whose env
	// reads Secrets, while the gateway sandbox runs with their current
	// values, and False (SandboxReasonEnvSecretChanged) once one changed.
	SandboxConditionEnvSecretsCurrent = "EnvSecretsCurrent"
)

// Reasons of an OpenShellSandbox's EnvSecretsCurrent.
const (
	// SandboxReasonEnvSecretsCurrent (True): the Secrets are as they were at creation.
	SandboxReasonEnvSecretsCurrent = "Current"
	// SandboxReasonEnvSecretChanged (False; also an event): a Secret the env
	// reads changed after the gateway sandbox was created, and the sandbox
	// still runs with the old values; spec.restartOnSecretChange recreates it.
	SandboxReasonEnvSecretChanged = "EnvSecretChanged"
)

// Reasons of an OpenShellSandbox's PolicyResolved and ProvidersResolved.
const (
	// SandboxReasonResolved: the reference resolved.
	SandboxReasonResolved = "Resolved"
	// SandboxReasonNoPolicy: no spec.policyRef; the gateway's default policy applies.
	SandboxReasonNoPolicy = "NoPolicy"
	// SandboxReasonDefaultPolicy: no spec.policyRef; the namespace's default
	// OpenShellPolicy (spec.default) applies.
	SandboxReasonDefaultPolicy = "NamespaceDefaultPolicy"
	// SandboxReasonPolicyRequired: no spec.policyRef and no namespace
	// default, on a gateway that requires a policy.
	SandboxReasonPolicyRequired = "PolicyRequired"
	// SandboxReasonDefaultPolicyAmbiguous: no spec.policyRef and several
	// policies of the namespace say spec.default.
	SandboxReasonDefaultPolicyAmbiguous = "DefaultPolicyAmbiguous"
	// SandboxReasonProviderSyncing: a provider exists but is not at the gateway yet.
	SandboxReasonProviderSyncing = "ProviderSyncing"
)

// Reasons of an OpenShellSandbox's GatewayReachable, Synced and Ready that
// come from talking to the gateway.
const (
	// SandboxReasonReachable (GatewayReachable=True): the gateway answered.
	SandboxReasonReachable = "Reachable"
	// SandboxReasonForceReleased (event): the sandbox was released with
	// AnnotationForceRelease while its gateway could not be reached.
	SandboxReasonForceReleased = "ForceReleased"
	// SandboxReasonUnavailable (GatewayReachable=False): the gateway did not
	// answer in time or refused the connection; retried with backoff.
	SandboxReasonUnavailable = "Unavailable"
	// SandboxReasonUnauthorized (GatewayReachable=False): the gateway
	// refused the operator's token.
	SandboxReasonUnauthorized = "Unauthorized"
	// SandboxReasonConnectionFailed (GatewayReachable=False): no connection
	// could be set up (endpoint, CA or credentials).
	SandboxReasonConnectionFailed = "ConnectionFailed"
	// SandboxReasonGatewayError (Synced=False): the gateway answered with an
	// error other than a refusal; retried with backoff.
	SandboxReasonGatewayError = "GatewayError"
	// SandboxReasonInSync (Synced=True): the gateway holds the current spec,
	// policy and providers.
	SandboxReasonInSync = "InSync"
	// SandboxReasonRecreating (Synced and Ready False): an immutable field
	// changed; the gateway sandbox is deleted and created anew.
	SandboxReasonRecreating = "Recreating"
	// SandboxReasonNameConflict (Synced and Ready False, phase Error): a
	// gateway sandbox of the derived name exists and is not this object's;
	// it is never adopted.
	SandboxReasonNameConflict = "NameConflict"
	// SandboxReasonRejectedByGateway (Synced False): the gateway refused the
	// sandbox or policy: as invalid (not retried until the spec changes), or
	// for a precondition it lacks now, such as a provider's profile (asked
	// again every 30 s).
	SandboxReasonRejectedByGateway = "RejectedByGateway"
	// SandboxReasonReady (Ready=True): the agent runs under its policy.
	SandboxReasonReady = "SandboxReady"
	// SandboxReasonError (Ready=False, phase Error): the gateway reports the
	// sandbox failed.
	SandboxReasonError = "SandboxError"
	// SandboxReasonStopped (Ready=False, phase Stopped): the gateway stopped it.
	SandboxReasonStopped = "SandboxStopped"
	// SandboxReasonCompleted (Ready=False): the agent's command exited 0;
	// the sandbox is finished (status.exitCode).
	SandboxReasonCompleted = "Completed"
	// SandboxReasonExited (Ready=False, phase Error): the agent's command
	// exited with a non-zero code or a signal (status.exitCode).
	SandboxReasonExited = "Exited"
	// SandboxReasonExpired (event): spec.ttlSecondsAfterFinished passed
	// after the agent exited; the operator deletes the sandbox.
	SandboxReasonExpired = "Expired"
	// SandboxConditionSuspended reports spec.suspend: True once the runtime
	// is stopped, False while it stops or starts again, or runs.
	SandboxConditionSuspended = "Suspended"
	// SandboxConditionUpstreamSandboxReady is set, False, only while the
	// agents.x-k8s.io Sandbox that status.agentSandbox names is gone although
	// the gateway still reports the sandbox running (deleted by hand, or lost
	// with its CRD or namespace); it goes once the gateway has re-created it.
	SandboxConditionUpstreamSandboxReady = "UpstreamSandboxReady"
	// SandboxReasonUpstreamSandboxMissing: see SandboxConditionUpstreamSandboxReady.
	SandboxReasonUpstreamSandboxMissing = "UpstreamSandboxMissing"
	// SandboxReasonSessionStarted (event): a consumer started an exec or a
	// log read through the relay (who, and the command).
	SandboxReasonSessionStarted = "SessionStarted"
	// SandboxReasonSessionEnded (event): that session ended (exit code,
	// duration, bytes each way).
	SandboxReasonSessionEnded = "SessionEnded"
	// SandboxReasonGatewayGone (event, Warning): the sandbox was released
	// without asking its gateway because the OpenShellGateway object is
	// gone (an External gateway's sandbox may still run there).
	SandboxReasonGatewayGone = "GatewayGone"
	// SandboxReasonSuspended: the runtime is stopped, the workspace kept.
	SandboxReasonSuspended = "Suspended"
	// SandboxReasonSuspending: the gateway is stopping the runtime.
	SandboxReasonSuspending = "Suspending"
	// SandboxReasonResuming: the gateway is starting a new runtime.
	SandboxReasonResuming = "Resuming"
	// SandboxReasonRunning: not suspended; the runtime runs.
	SandboxReasonRunning = "Running"
	// SandboxConditionPolicyLoaded reports whether the sandbox's supervisor
	// enforces the policy version the gateway accepted (status.policyVersion),
	// from the gateway's current_policy_version and policy revision status:
	// Synced says the gateway took the policy, PolicyLoaded that it is in force.
	SandboxConditionPolicyLoaded = "PolicyLoaded"
	// SandboxReasonPolicyLoaded: the supervisor enforces the current version.
	SandboxReasonPolicyLoaded = "Loaded"
	// SandboxReasonPolicyLoadPending: the supervisor has not loaded it yet.
	SandboxReasonPolicyLoadPending = "LoadPending"
	// SandboxReasonPolicyLoadFailed: the supervisor rejected the version;
	// the message has its load error.
	SandboxReasonPolicyLoadFailed = "LoadFailed"
	// SandboxReasonProvisioning (Ready=False): the gateway is starting it.
	SandboxReasonProvisioning = "Provisioning"
)

// GatewayKey is the namespaced name of the referenced gateway; the namespace
// defaults to the sandbox's own.
func (s *OpenShellSandbox) GatewayKey() types.NamespacedName {
	ns := s.Spec.GatewayRef.Namespace
	if ns == "" {
		ns = s.Namespace
	}
	return types.NamespacedName{Namespace: ns, Name: s.Spec.GatewayRef.Name}
}

// AppliedTemplate is what a sandbox took from its template.
type AppliedTemplate struct {
	// Name of the OpenShellSandboxTemplate.
	Name string `json:"name"`
	// Generation of the template taken.
	Generation int64 `json:"generation"`
	// GatewayName is the template's name at the gateway.
	// +optional
	GatewayName string `json:"gatewayName,omitempty"`
	// GatewayID is the gateway's ID of that template, as the operator
	// created it.
	// +optional
	GatewayID string `json:"gatewayID,omitempty"`
	// ResourceVersion is the gateway's resource version of the template
	// the gateway sandbox was created from.
	// +optional
	ResourceVersion string `json:"resourceVersion,omitempty"`
	// Image taken.
	// +optional
	Image string `json:"image,omitempty"`
	// Resources taken, as request and limit.
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`
	// GPU taken.
	// +optional
	GPU *SandboxGPU `json:"gpu,omitempty"`
}

// AppliedDefaults are the namespace defaults a sandbox took (only the
// fields its spec left empty).
type AppliedDefaults struct {
	// From is the default OpenShellPolicy they came from.
	From string `json:"from"`
	// SandboxDefaults are the values taken.
	SandboxDefaults `json:",inline"`
}
