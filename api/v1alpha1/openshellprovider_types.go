package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ProviderCredentialsReference selects the Secret whose data the gateway
// receives as provider credentials.
type ProviderCredentialsReference struct {
	// Name of the Secret in the provider's namespace.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Name string `json:"name"`

	// Keys limits which Secret keys are sent; empty sends every key.
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=253
	// +listType=set
	// +optional
	Keys []string `json:"keys,omitempty"`
}

// OpenShellProviderSpec is a credential provider (an LLM API, GitHub, ...)
// that sandboxes in the same namespace may attach by name. Consumers never
// see the credentials: the gateway injects them at the network proxy.
type OpenShellProviderSpec struct {
	// Type is the provider profile, for example claude-code or github.
	// Immutable. Aliases (claude, gh, glab, gcp) are refused: OpenShell 0.1
	// removed them (0.0.x resolves the canonical ids alike).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.type is immutable; create a new provider instead"
	// +kubebuilder:validation:XValidation:rule="!(self in ['claude', 'gh', 'glab', 'gcp'])",messageExpression="'spec.type ' + self + ' is an alias that OpenShell 0.1 removed: use the profile id ' + {'claude': 'claude-code', 'gh': 'github', 'glab': 'gitlab', 'gcp': 'google-cloud'}[self]"
	// +required
	Type string `json:"type"`

	// CredentialsSecretRef names the Secret in this namespace that holds the
	// credentials. Rotating the Secret pushes the new values to the gateway.
	// +optional
	CredentialsSecretRef *ProviderCredentialsReference `json:"credentialsSecretRef,omitempty"`

	// Config is non-secret provider configuration.
	// +kubebuilder:validation:MaxProperties=64
	// +optional
	Config map[string]string `json:"config,omitempty"`
}

// ProviderGatewayStatus records what one gateway holds of the provider.
type ProviderGatewayStatus struct {
	// Gateway is the namespace/name of the OpenShellGateway.
	Gateway string `json:"gateway"`
	// Workspace at the gateway.
	Workspace string `json:"workspace"`
	// Name of the provider at the gateway.
	Name string `json:"name"`
	// SecretResourceVersion of the credentials Secret last pushed; a newer
	// one is pushed with UpdateProvider (rotation). Values are never stored.
	// +optional
	SecretResourceVersion string `json:"secretResourceVersion,omitempty"`
	// ObservedGeneration of the provider spec last pushed.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// CredentialKeys are the names (never the values) of the credentials
	// last pushed, so that a key removed from the Secret is removed at the
	// gateway too.
	// +listType=set
	// +optional
	CredentialKeys []string `json:"credentialKeys,omitempty"`
	// GatewayInstance is the gateway's status.instance at the last push: a
	// gateway whose pods were replaced since is checked (and given the
	// provider again if it lost it).
	// +optional
	GatewayInstance string `json:"gatewayInstance,omitempty"`
	// Line is the gateway's release line at the last push (empty: 0.0): a
	// gateway upgraded in place to 0.1 is given the provider again, naming
	// the catalog of its profile.
	// +optional
	Line string `json:"line,omitempty"`
	// ProfileWorkspace is the provider's profile_workspace at the last
	// push (0.1): empty for the gateway's platform catalog, else the
	// workspace whose catalog holds its type's profile.
	// +optional
	ProfileWorkspace string `json:"profileWorkspace,omitempty"`
	// GatewayResourceVersion is the gateway provider's resource_version
	// after the operator's last write there: a newer one means someone
	// else changed it at the gateway (a Tenant Admin's gateway token), and
	// the operator writes it again from the Secret and spec.
	// +optional
	GatewayResourceVersion uint64 `json:"gatewayResourceVersion,omitempty"`
	// GatewayID is the gateway's ID of the provider record the operator
	// created: a record of the name with another ID was created by someone
	// else (its owner labels can be copied, its ID cannot), and the
	// credentials are never written into it.
	// +optional
	GatewayID string `json:"gatewayID,omitempty"`
}

// OpenShellProviderStatus is the observed state of a provider.
type OpenShellProviderStatus struct {
	// Gateways that hold this provider, because sandboxes using them attach it.
	// +listType=map
	// +listMapKey=gateway
	// +optional
	Gateways []ProviderGatewayStatus `json:"gateways,omitempty"`

	// Conditions: Ready, Synced.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// ObservedGeneration is the spec generation the operator last acted on fully.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// OpenShellProvider is a Tenant Admin's credential provider that
// OpenShellSandboxes in the same namespace attach by name.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=osprov,categories=openshell
// +kubebuilder:printcolumn:name="Type",type=string,JSONPath=`.spec.type`
// +kubebuilder:printcolumn:name="Secret",type=string,JSONPath=`.spec.credentialsSecretRef.name`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type OpenShellProvider struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired provider.
	// +required
	Spec OpenShellProviderSpec `json:"spec"`
	// Status is the observed state.
	// +optional
	Status OpenShellProviderStatus `json:"status,omitempty"`
}

// OpenShellProviderList contains a list of OpenShellProvider.
// +kubebuilder:object:root=true
type OpenShellProviderList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []OpenShellProvider `json:"items"`
}

func init() {
	objectTypes = append(objectTypes, &OpenShellProvider{}, &OpenShellProviderList{})
}

// Reasons of an OpenShellProvider's Ready (besides GatewayNotAllowed,
// WorkspaceConflict and ProviderConflict).
const (
	// ProviderReasonSynced (True): the credentials are at every gateway
	// whose sandboxes attach the provider.
	ProviderReasonSynced = "Synced"
	// ProviderReasonUnused (True): no sandbox attaches the provider yet.
	ProviderReasonUnused = "Unused"
	// ProviderReasonSecretNotFound: the credentials Secret or a listed key
	// is missing or unreadable.
	ProviderReasonSecretNotFound = "SecretNotFound"
	// ProviderReasonGatewayError: a push failed; retried.
	ProviderReasonGatewayError = "GatewayError"
	// ProviderReasonAttachedAtGateway: deletion waits until the provider
	// can be deleted at every gateway.
	ProviderReasonAttachedAtGateway = "AttachedAtGateway"
)
