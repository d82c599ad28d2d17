package v1alpha1

import (
	"slices"

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
// +kubebuilder:validation:XValidation:rule="!has(self.credentialsSecretRef) || (has(self.credentialsSecretRef.keys) && size(self.credentialsSecretRef.keys) > 0) || !has(self.refresh) || self.refresh.all(r, r.materialSecretRef.name != self.credentialsSecretRef.name)",message="a Secret that holds refresh material may be the credentials Secret only with credentialsSecretRef.keys: otherwise the refresh token and client secret would be sent as credentials too"
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

	// Refresh hands credentials to 0.1 gateways to mint and refresh
	// themselves (an OAuth access token from a refresh token, for example).
	// The gateway refreshes each one before it expires, from the material
	// in a Secret of this namespace; the token endpoint is the provider
	// profile's, never the tenant's. A refreshed credential is the
	// gateway's: the operator never writes it from credentialsSecretRef
	// again (it may give its first value). The annotation
	// openshell.ai/rotate-credentials asks for a refresh now. The gateway's
	// sandboxControls.allowedRefreshStrategies must allow the strategy.
	// +kubebuilder:validation:MaxItems=8
	// +listType=map
	// +listMapKey=credentialKey
	// +optional
	Refresh []CredentialRefresh `json:"refresh,omitempty"`
}

// CredentialRefreshStrategy is how a gateway mints a credential: the
// strategies the 0.1 wire names that the gateway mints itself.
// +kubebuilder:validation:Enum=OAuth2RefreshToken;OAuth2ClientCredentials;GoogleServiceAccountJWT;AWSSTSAssumeRole
type CredentialRefreshStrategy string

const (
	// RefreshOAuth2RefreshToken: material client_id, refresh_token and
	// optionally client_secret; the profile's token URL (or tenant_id).
	RefreshOAuth2RefreshToken CredentialRefreshStrategy = "OAuth2RefreshToken"
	// RefreshOAuth2ClientCredentials: material client_id and client_secret.
	RefreshOAuth2ClientCredentials CredentialRefreshStrategy = "OAuth2ClientCredentials"
	// RefreshGoogleServiceAccountJWT: material client_email, private_key
	// and scopes.
	RefreshGoogleServiceAccountJWT CredentialRefreshStrategy = "GoogleServiceAccountJWT"
	// RefreshAWSSTSAssumeRole: material role_arn and the source key pair
	// aws_access_key_id and aws_secret_access_key (required here: without
	// them the gateway would assume the role as itself).
	RefreshAWSSTSAssumeRole CredentialRefreshStrategy = "AWSSTSAssumeRole"
)

// CredentialRefresh is one credential a gateway refreshes.
type CredentialRefresh struct {
	// CredentialKey is the credential the gateway mints: an environment
	// variable name, as the profile's credential names it.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[A-Za-z_][A-Za-z0-9_]*$`
	// +required
	CredentialKey string `json:"credentialKey"`

	// Strategy is how the gateway mints it.
	// +required
	Strategy CredentialRefreshStrategy `json:"strategy"`

	// MaterialSecretRef names the Secret in this namespace whose keys are
	// the refresh material (refresh_token, client_id, client_secret, scopes,
	// refresh_before_seconds, ...). Every key is sent as secret material,
	// which the gateway never returns; a rotation of the Secret configures
	// the refresh again. Keys naming a token endpoint (token_url, token_uri,
	// sts_endpoint_url) are refused.
	// +required
	MaterialSecretRef LocalObjectReference `json:"materialSecretRef"`
}

// SecretNames are the Secrets the provider reads: its credentials' and
// its refresh material's, each once.
func (p *OpenShellProvider) SecretNames() []string {
	var names []string
	if ref := p.Spec.CredentialsSecretRef; ref != nil {
		names = append(names, ref.Name)
	}
	for _, r := range p.Spec.Refresh {
		if !slices.Contains(names, r.MaterialSecretRef.Name) {
			names = append(names, r.MaterialSecretRef.Name)
		}
	}
	return names
}

// AnnotationRotateCredentials asks the operator to have every refreshed
// credential of a provider minted again now, at each gateway: set it to a
// new value (a timestamp, say) each time. The value handled last is in
// status.gateways[].rotation.
const AnnotationRotateCredentials = "openshell.ai/rotate-credentials"

// MaxRotationRequest bounds the annotation's value.
const MaxRotationRequest = 128

// CredentialRefreshStatus is what one gateway reports of one refreshed
// credential; never its value or secret material.
type CredentialRefreshStatus struct {
	// CredentialKey is the refreshed credential.
	CredentialKey string `json:"credentialKey"`
	// Strategy configured.
	Strategy CredentialRefreshStrategy `json:"strategy"`
	// MaterialSecret is the material Secret last configured. Only a change
	// of it, of its data or of the strategy configures the refresh again:
	// configuring sends the Secret's refresh token, which may be older than
	// one the gateway got back from the token endpoint since.
	// +optional
	MaterialSecret string `json:"materialSecret,omitempty"`
	// MaterialResourceVersion is that Secret's resourceVersion then.
	// +optional
	MaterialResourceVersion string `json:"materialResourceVersion,omitempty"`
	// OutputKeys are the other credentials a mint writes (the profile's
	// additional outputs, e.g. AWS_SECRET_ACCESS_KEY): the gateway's too.
	// +listType=atomic
	// +optional
	OutputKeys []string `json:"outputKeys,omitempty"`
	// State is the gateway's word for the refresh (configured, refreshed,
	// error, ...).
	// +optional
	State string `json:"state,omitempty"`
	// LastRefreshTime is when the gateway last minted the credential.
	// +optional
	LastRefreshTime *metav1.Time `json:"lastRefreshTime,omitempty"`
	// NextRefreshTime is when it mints it next.
	// +optional
	NextRefreshTime *metav1.Time `json:"nextRefreshTime,omitempty"`
	// ExpirationTime is when the current credential expires.
	// +optional
	ExpirationTime *metav1.Time `json:"expirationTime,omitempty"`
	// FailureCode is the gateway's code for the last failure.
	// +optional
	FailureCode string `json:"failureCode,omitempty"`
	// RecoveryAction is what the gateway says recovers from it: Retry,
	// Reauthorize (new material), FixConfiguration or Investigate.
	// +optional
	RecoveryAction string `json:"recoveryAction,omitempty"`
	// LastError is the gateway's text of the last failure, every material
	// value in it masked.
	// +optional
	LastError string `json:"lastError,omitempty"`
	// LastErrorTime is when it failed.
	// +optional
	LastErrorTime *metav1.Time `json:"lastErrorTime,omitempty"`
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
	// Refresh is what the gateway reports of the credentials it refreshes.
	// +listType=map
	// +listMapKey=credentialKey
	// +optional
	Refresh []CredentialRefreshStatus `json:"refresh,omitempty"`
	// Rotation is the last openshell.ai/rotate-credentials value acted on.
	// +optional
	Rotation string `json:"rotation,omitempty"`
}

// OpenShellProviderStatus is the observed state of a provider.
type OpenShellProviderStatus struct {
	// Gateways that hold this provider, because sandboxes using them attach it.
	// +listType=map
	// +listMapKey=gateway
	// +optional
	Gateways []ProviderGatewayStatus `json:"gateways,omitempty"`

	// Conditions: Ready, Synced, and Refreshed when spec.refresh is set.
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

// ConditionRefreshed reports the credentials the gateways refresh
// (spec.refresh); absent without it.
const ConditionRefreshed = "Refreshed"

// Reasons of an OpenShellProvider's Refreshed (besides ProviderConflict:
// the record at the gateway is not the operator's, and nothing is sent
// there; and Unused, with status Unknown, while no gateway refreshes the
// provider yet).
const (
	// RefreshReasonRefreshed (True): every gateway minted every credential.
	RefreshReasonRefreshed = "Refreshed"
	// RefreshReasonPending: configured, the gateway's first mint to come.
	RefreshReasonPending = "RefreshPending"
	// RefreshReasonFailed: a gateway's last mint failed (its failure code
	// and recovery action in the message and status).
	RefreshReasonFailed = "RefreshFailed"
	// RefreshReasonNotAllowed: the gateway's
	// sandboxControls.allowedRefreshStrategies does not allow the strategy.
	RefreshReasonNotAllowed = "RefreshNotAllowed"
	// RefreshReasonNotSupported: the gateway runs the 0.0 line.
	RefreshReasonNotSupported = "RefreshNotSupported"
	// RefreshReasonMaterialInvalid: the material Secret is missing,
	// unreadable, or holds a refused or incomplete key set.
	RefreshReasonMaterialInvalid = "MaterialInvalid"
	// RefreshReasonRotationInvalid: the rotate annotation's value is too long.
	RefreshReasonRotationInvalid = "RotationInvalid"
	// RefreshReasonGatewayError: a refresh call failed; retried.
	RefreshReasonGatewayError = "GatewayError"
	// RefreshReasonRejected: the gateway refused the configuration
	// (InvalidArgument, FailedPrecondition: a malformed knob, a profile
	// that does not bind the strategy); tried again when the Secret,
	// strategy or Secret name changes, or a sweep later.
	RefreshReasonRejected = "RefreshRejected"
	// RefreshReasonProviderNotSynced: the provider is not in sync at a
	// gateway (Ready says why); its refreshes there wait.
	RefreshReasonProviderNotSynced = "ProviderNotSynced"
)
