package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ImageMirror maps a source repository to the mirrors that serve it, with
// the semantics of config.openshift.io/v1 ImageDigestMirrorSet: a pull by
// digest of an image under Source is redirected to the mirrors.
type ImageMirror struct {
	// Source is a registry host (with optional port) and optional repository
	// path prefix, for example registry.example.com/agents. Prefixes match at
	// path boundaries only.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +required
	Source string `json:"source"`

	// Mirrors serve the source's images, in order of preference.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=512
	// +listType=set
	// +required
	Mirrors []string `json:"mirrors"`
}

// OpenShellImagePolicySpec is a Tenant Admin's allowlist of sandbox image
// locations. Several policies in one namespace combine as a union; they never
// affect other namespaces.
type OpenShellImagePolicySpec struct {
	// AllowedMirrors are registry locations that sandbox images may be pulled
	// from directly: a host (with optional port) and an optional repository
	// path prefix, for example mirror.corp:5000/openshell. Matching respects
	// path boundaries: mirror.corp/openshell does not allow
	// mirror.corp/openshell-evil.
	// +kubebuilder:validation:MaxItems=10000
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=512
	// +listType=set
	// +optional
	AllowedMirrors []string `json:"allowedMirrors,omitempty"`

	// Mirrors are source→mirrors mappings (ImageDigestMirrorSet semantics):
	// an image under a source is allowed because a pull by digest is
	// redirected to a mirror.
	// +kubebuilder:validation:MaxItems=1000
	// +listType=atomic
	// +optional
	Mirrors []ImageMirror `json:"mirrors,omitempty"`

	// PullSecrets name Secrets of this namespace (type
	// kubernetes.io/dockerconfigjson) that this namespace's sandboxes pull
	// images with, on gateways in workspace mode Operator: the operator
	// merges them, after the gateway's own, into one pull Secret of the
	// namespace's paired namespace, which only this namespace's sandboxes
	// use. Whoever writes them must be allowed to read each one. On a
	// gateway in workspace mode Shared, where pull Secrets are
	// gateway-wide, a new sandbox of this namespace is refused
	// (PullSecretsUnsupported). The image policy still decides which images
	// are allowed.
	// +kubebuilder:validation:MaxItems=16
	// +listType=map
	// +listMapKey=name
	// +optional
	PullSecrets []LocalObjectReference `json:"pullSecrets,omitempty"`

	// RequireDigest rejects images referenced only by tag. Mirror sets only
	// redirect pulls by digest, so a tag cannot be trusted to be mirrored.
	// +kubebuilder:default=true
	// +optional
	RequireDigest *bool `json:"requireDigest,omitempty"`
}

// OpenShellImagePolicyStatus is the observed state of an image policy.
type OpenShellImagePolicyStatus struct {
	// Conditions: Ready (False with reason InvalidEntry names the entries
	// that could not be parsed).
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// ObservedGeneration is the spec generation the operator last acted on fully.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// OpenShellImagePolicy is a Tenant Admin's mirror allowlist for sandbox
// images in one namespace.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=osimgpol,categories=openshell
// +kubebuilder:printcolumn:name="Require Digest",type=boolean,JSONPath=`.spec.requireDigest`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type OpenShellImagePolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the allowlist.
	// +optional
	Spec OpenShellImagePolicySpec `json:"spec,omitempty"`
	// Status is the observed state.
	// +optional
	Status OpenShellImagePolicyStatus `json:"status,omitempty"`
}

// OpenShellImagePolicyList contains a list of OpenShellImagePolicy.
// +kubebuilder:object:root=true
type OpenShellImagePolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []OpenShellImagePolicy `json:"items"`
}

func init() {
	objectTypes = append(objectTypes, &OpenShellImagePolicy{}, &OpenShellImagePolicyList{})
}

// Reasons of an OpenShellImagePolicy's Ready.
const (
	// ImagePolicyReasonValid (True): every entry parsed; the message counts
	// the allowed locations.
	ImagePolicyReasonValid = "Valid"
	// ImagePolicyReasonInvalidEntry (False): some entries could not be
	// parsed and are ignored (the message names them); the others stay in
	// effect.
	ImagePolicyReasonInvalidEntry = "InvalidEntry"

	// ImagePolicyConditionPullSecretsResolved says whether every Secret
	// spec.pullSecrets names exists and is a Docker config (set only when
	// it names any).
	ImagePolicyConditionPullSecretsResolved = "PullSecretsResolved"
	// ImagePolicyReasonPullSecretsResolved (True): every pull Secret can be used.
	ImagePolicyReasonPullSecretsResolved = "Resolved"
	// ImagePolicyReasonPullSecretInvalid (False): the message names the
	// Secrets left out (missing, or not of type
	// kubernetes.io/dockerconfigjson).
	ImagePolicyReasonPullSecretInvalid = "PullSecretInvalid"
)
