package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ProviderProfileCategory groups profiles in the gateway's catalog.
// +kubebuilder:validation:Enum=Other;Inference;Agent;SourceControl;Messaging;Data;Knowledge
type ProviderProfileCategory string

// ProviderProfileCredential is one credential a provider of this profile
// carries and where the gateway's proxy places it. The value never reaches
// the sandbox: its env vars hold a placeholder the proxy swaps on the wire.
type ProviderProfileCredential struct {
	// Name is the credential key, as in the provider's credentials Secret.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	// +required
	Name string `json:"name"`

	// Description for people choosing a profile.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Description string `json:"description,omitempty"`

	// EnvVars are the sandbox environment variables that carry the
	// credential's placeholder.
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=128
	// +kubebuilder:validation:items:Pattern=`^[A-Za-z_][A-Za-z0-9_]*$`
	// +listType=set
	// +optional
	EnvVars []string `json:"envVars,omitempty"`

	// Required credentials must be in the provider's Secret.
	// +optional
	Required bool `json:"required,omitempty"`

	// AuthStyle is how the proxy places the credential (the release's
	// profile schema; e.g. bearer). From 0.1.8 a credential for a header
	// other than Authorization needs it, with headerName.
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^[a-z][a-z0-9_-]*$`
	// +optional
	AuthStyle string `json:"authStyle,omitempty"`

	// HeaderName is the HTTP header the credential goes in.
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9!#$%&'*+.^_|~-]+$`
	// +optional
	HeaderName string `json:"headerName,omitempty"`

	// QueryParam is the query parameter the credential goes in.
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[-._~A-Za-z0-9]+$`
	// +optional
	QueryParam string `json:"queryParam,omitempty"`

	// PathTemplate places the credential in the request path.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	PathTemplate string `json:"pathTemplate,omitempty"`
}

// OpenShellProviderProfileSpec is what a provider type means at an
// OpenShell 0.1 gateway: its credentials and where they may be sent. The
// object's name is the profile id, which OpenShellProviders name in
// spec.type.
//
// Token refresh and token grants (a gateway-side fetch from a URL the
// profile names) and profile files are deliberately not offered: a URL a
// tenant chooses would be fetched from the gateway's network position.
type OpenShellProviderProfileSpec struct {
	// DisplayName is the profile's human name.
	// +kubebuilder:validation:MaxLength=128
	// +optional
	DisplayName string `json:"displayName,omitempty"`

	// Description of the profile.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Description string `json:"description,omitempty"`

	// Category of the profile in the gateway's catalog (default Other).
	// +optional
	Category ProviderProfileCategory `json:"category,omitempty"`

	// Credentials a provider of this profile carries.
	// +kubebuilder:validation:MaxItems=16
	// +listType=map
	// +listMapKey=name
	// +optional
	Credentials []ProviderProfileCredential `json:"credentials,omitempty"`

	// Endpoints are where sandboxes attaching a provider of this profile may
	// connect, and where its credentials are placed.
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	// +optional
	Endpoints []NetworkEndpoint `json:"endpoints,omitempty"`

	// Binaries restrict the endpoints to these executables; empty means any.
	// +kubebuilder:validation:MaxItems=32
	// +listType=atomic
	// +optional
	Binaries []NetworkBinary `json:"binaries,omitempty"`

	// InferenceCapable marks a profile usable for inference routing.
	// +optional
	InferenceCapable bool `json:"inferenceCapable,omitempty"`
}

// ProfileScope is where at a gateway a profile is imported.
// +kubebuilder:validation:Enum=Platform;Workspace
type ProfileScope string

const (
	// ProfileScopePlatform: the gateway's own catalog, for every workspace
	// (a gateway's spec.providerProfiles).
	ProfileScopePlatform ProfileScope = "Platform"
	// ProfileScopeWorkspace: the catalog of the profile's namespace's
	// workspace only.
	ProfileScopeWorkspace ProfileScope = "Workspace"
)

// ProviderProfileGatewayStatus records a profile at one gateway and scope.
type ProviderProfileGatewayStatus struct {
	// Gateway is the namespace/name of the OpenShellGateway.
	Gateway string `json:"gateway"`
	// Scope is Platform or Workspace.
	Scope ProfileScope `json:"scope"`
	// Workspace at the gateway (Workspace scope).
	// +optional
	Workspace string `json:"workspace,omitempty"`
	// ObservedGeneration of the spec imported; 0 records only the intent
	// to import (so that a deletion withdraws a profile whose import's
	// status write was lost).
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// GatewayInstance is the gateway's status.instance at the import: a
	// gateway whose pods were replaced is given the profile again if it
	// lost it.
	// +optional
	GatewayInstance string `json:"gatewayInstance,omitempty"`
	// GatewayResourceVersion is the gateway profile's resource_version
	// after the operator's import or update: a newer one means someone
	// else changed it at the gateway, and the operator imports it again.
	// +optional
	GatewayResourceVersion uint64 `json:"gatewayResourceVersion,omitempty"`
}

// OpenShellProviderProfileStatus is the observed state of a profile.
type OpenShellProviderProfileStatus struct {
	// Gateways where the profile is imported, by gateway and scope.
	// +listType=map
	// +listMapKey=gateway
	// +listMapKey=scope
	// +optional
	Gateways []ProviderProfileGatewayStatus `json:"gateways,omitempty"`

	// Conditions: Ready.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// ObservedGeneration is the spec generation the operator last acted on fully.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// OpenShellProviderProfile declares a provider profile. In a tenant
// namespace it is imported into that namespace's workspace at the 0.1
// gateways where the namespace's providers of this type are used; in a
// gateway's namespace, naming it in the gateway's spec.providerProfiles
// imports it into the gateway's platform catalog. Tenant Admins own the
// first kind, Platform Admins the second. 0.0.x gateways build their
// profiles in and ignore it.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=osprof,categories=openshell
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 64 && self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="metadata.name is the profile id: at most 64 lowercase letters, digits and '-'"
// +kubebuilder:validation:XValidation:rule="!(self.metadata.name in ['claude', 'gh', 'glab', 'gcp'])",message="metadata.name is an alias that OpenShell 0.1 removed: name the profile by its canonical id (claude-code, github, gitlab, google-cloud)"
// +kubebuilder:printcolumn:name="Category",type=string,JSONPath=`.spec.category`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type OpenShellProviderProfile struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired profile.
	// +optional
	Spec OpenShellProviderProfileSpec `json:"spec,omitempty"`
	// Status is the observed state.
	// +optional
	Status OpenShellProviderProfileStatus `json:"status,omitempty"`
}

// OpenShellProviderProfileList contains a list of OpenShellProviderProfile.
// +kubebuilder:object:root=true
type OpenShellProviderProfileList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []OpenShellProviderProfile `json:"items"`
}

func init() {
	objectTypes = append(objectTypes, &OpenShellProviderProfile{}, &OpenShellProviderProfileList{})
}

// Reasons of an OpenShellProviderProfile's Ready.
const (
	// ProfileReasonImported (True): the profile is at every gateway and
	// scope that needs it, at this generation.
	ProfileReasonImported = "Imported"
	// ProfileReasonUnused (True): no 0.1 gateway needs the profile yet (no
	// provider of this type is used there, and no gateway names it in
	// spec.providerProfiles).
	ProfileReasonUnused = "Unused"
	// ProfileReasonRejected: a gateway refused the profile; the message
	// carries the gateway's diagnostics. Fix the spec.
	ProfileReasonRejected = "Rejected"
	// ProfileReasonConflict: the gateway holds a profile of this id at this
	// scope that the operator did not import for this object; it is never
	// overwritten. Delete it at the gateway, or use another id.
	ProfileReasonConflict = "ProfileConflict"
	// ProfileReasonGatewayError: an import failed; retried.
	ProfileReasonGatewayError = "GatewayError"
	// ProfileReasonShadowed (False): the gateway names a platform profile of
	// this id, which the namespace's providers use instead; a tenant
	// cannot replace a profile the platform defines.
	ProfileReasonShadowed = "ShadowedByPlatform"
)

// Reasons of an OpenShellProvider's Ready about its profile (0.1 gateways).
const (
	// ProviderReasonProfileMissing: no profile of the provider's type is
	// declared (an OpenShellProviderProfile in the namespace, or one the
	// gateway names in spec.providerProfiles) nor in the gateway's
	// platform catalog. The message names the profile id.
	ProviderReasonProfileMissing = "ProfileMissing"
	// ProviderReasonProfilePending: the declared profile is not imported at
	// the gateway yet (see the profile's status).
	ProviderReasonProfilePending = "ProfilePending"
)
