package v1alpha1

// LocalObjectReference names an object in the same namespace as the referrer.
// Cross-namespace references are deliberately impossible: a tenant can only
// use what exists in its own namespace.
type LocalObjectReference struct {
	// Name of the referenced object in the same namespace.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Name string `json:"name"`
}

// SecretKeyReference selects one key of a Secret in the same namespace as the
// referrer.
type SecretKeyReference struct {
	// Name of the Secret in the same namespace.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Name string `json:"name"`

	// Key within the Secret's data.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	// +required
	Key string `json:"key"`
}

// Condition types shared by several kinds. Each kind documents which of them
// it reports.
const (
	// ConditionReady is True when the object is fully reconciled and usable.
	ConditionReady = "Ready"
	// ConditionAvailable is True when the gateway serves requests.
	ConditionAvailable = "Available"
	// ConditionProgressing is True while the operator is rolling out a change.
	ConditionProgressing = "Progressing"
	// ConditionDegraded is True when something the object needs is failing.
	ConditionDegraded = "Degraded"
	// ConditionAccepted is True when a sandbox passed validation and may be
	// created at the gateway.
	ConditionAccepted = "Accepted"
	// ConditionSynced is True when the gateway holds exactly what the spec asks for.
	ConditionSynced = "Synced"
	// ConditionAgentSandboxAvailable reports whether the agents.x-k8s.io
	// Sandbox CRD is installed, established and serves a supported version.
	ConditionAgentSandboxAvailable = "AgentSandboxAvailable"
	// ConditionImageAllowed reports the image policy decision for a sandbox.
	ConditionImageAllowed = "ImageAllowed"
	// ConditionGatewayReachable reports whether the gateway answered its last call.
	ConditionGatewayReachable = "GatewayReachable"
)

// Reasons shared by several kinds.
const (
	// ReasonGatewayNotAllowed (OpenShellSandbox Accepted and Ready,
	// OpenShellProvider Ready): the gateway's spec.tenancy does not admit the
	// object's namespace, or the gateway lives in a namespace where the
	// operator does not serve gateways. A sandbox not yet created is
	// Rejected; one that runs keeps running and reports this until access is
	// granted again or it is deleted. Providers are not pushed there.
	ReasonGatewayNotAllowed = "GatewayNotAllowed"
	// ReasonWorkspaceConflict (OpenShellSandbox Synced and Ready,
	// OpenShellProvider Ready): the gateway has a workspace of the name the
	// operator derives for this namespace, but it was not created for this
	// namespace (its owner labels differ). Nothing is adopted: a gateway
	// admin must remove that workspace.
	ReasonWorkspaceConflict = "WorkspaceConflict"
	// ReasonProviderConflict (OpenShellProvider Ready): the gateway has a
	// provider of this name in the namespace's workspace that was not
	// created for this OpenShellProvider. It is never updated or merged
	// into: delete it at the gateway, or rename the OpenShellProvider.
	ReasonProviderConflict = "ProviderConflict"
	// ReasonDriftReverted (event, Warning, on the object whose state at the
	// gateway was changed directly, or on the gateway for workspace members
	// and services): the operator put back what its objects declare.
	ReasonDriftReverted = "DriftReverted"
)
