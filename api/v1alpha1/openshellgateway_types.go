package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// GatewayMode says who runs the gateway.
// +kubebuilder:validation:Enum=Managed;External
type GatewayMode string

const (
	// GatewayModeManaged makes the operator install and keep the gateway in sync.
	GatewayModeManaged GatewayMode = "Managed"
	// GatewayModeExternal connects to a gateway that runs elsewhere.
	GatewayModeExternal GatewayMode = "External"
)

// WorkspaceMode is the gateway's Kubernetes driver workspace mode: where the
// agents.x-k8s.io Sandbox objects of each workspace are created.
// +kubebuilder:validation:Enum=Shared;Managed;Operator
type WorkspaceMode string

const (
	// WorkspaceModeShared puts every workspace's sandboxes in one namespace.
	WorkspaceModeShared WorkspaceMode = "Shared"
	// WorkspaceModeManaged lets the gateway create a namespace per workspace.
	WorkspaceModeManaged WorkspaceMode = "Managed"
	// WorkspaceModeOperator uses namespaces the operator prepares and allowlists.
	WorkspaceModeOperator WorkspaceMode = "Operator"
)

// SupervisorTopology selects how the OpenShell supervisor runs next to the agent.
// +kubebuilder:validation:Enum=Sidecar;Combined
type SupervisorTopology string

const (
	// SupervisorTopologySidecar runs network enforcement in a separate sidecar,
	// so the agent container needs no SYS_ADMIN and no root. Works with the
	// operator's narrow SCC.
	SupervisorTopologySidecar SupervisorTopology = "Sidecar"
	// SupervisorTopologyCombined runs the supervisor inside the agent container
	// as root with SYS_ADMIN; on OpenShift it needs the privileged SCC.
	SupervisorTopologyCombined SupervisorTopology = "Combined"
)

// ImagePolicyMode is what happens when a sandbox image is not allowed.
// +kubebuilder:validation:Enum=Enforce;Warn;Disabled
type ImagePolicyMode string

const (
	// ImagePolicyEnforce rejects sandboxes whose image is not allowed.
	ImagePolicyEnforce ImagePolicyMode = "Enforce"
	// ImagePolicyWarn admits them with an admission warning and a False condition.
	ImagePolicyWarn ImagePolicyMode = "Warn"
	// ImagePolicyDisabled skips image checks.
	ImagePolicyDisabled ImagePolicyMode = "Disabled"
)

// NoPolicyAction is what happens in a namespace that has no OpenShellImagePolicy.
// +kubebuilder:validation:Enum=Allow;Deny
type NoPolicyAction string

const (
	// NoPolicyAllow allows any image in namespaces without an image policy
	// (connected clusters).
	NoPolicyAllow NoPolicyAction = "Allow"
	// NoPolicyDeny denies every image in namespaces without an image policy
	// (disconnected clusters, where only mirrored images can be pulled).
	NoPolicyDeny NoPolicyAction = "Deny"
)

// OpenShellGatewaySpec is the desired state of an OpenShell gateway.
// +kubebuilder:validation:XValidation:rule="self.mode == 'External' ? has(self.external) : true",message="spec.external is required when spec.mode is External"
// +kubebuilder:validation:XValidation:rule="self.mode == 'External' ? !has(self.managed) : !has(self.external)",message="set spec.managed for mode Managed or spec.external for mode External, not both"
type OpenShellGatewaySpec struct {
	// Mode selects whether the operator installs and runs the gateway
	// (Managed) or connects to a gateway that runs elsewhere (External).
	// It cannot be changed after creation: create a new OpenShellGateway instead.
	// +kubebuilder:default=Managed
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.mode is immutable; create a new OpenShellGateway instead"
	// +optional
	Mode GatewayMode `json:"mode,omitempty"`

	// Managed holds the settings of a gateway the operator installs. When
	// omitted in mode Managed, every setting takes its default.
	// +optional
	Managed *ManagedGatewaySpec `json:"managed,omitempty"`

	// External holds the connection settings of a gateway that runs elsewhere.
	// +optional
	External *ExternalGatewaySpec `json:"external,omitempty"`

	// ImagePolicy decides how the images of sandboxes that use this gateway
	// are checked against the OpenShellImagePolicy allowlists of their namespace.
	// +kubebuilder:default={}
	// +optional
	ImagePolicy ImagePolicyEnforcement `json:"imagePolicy,omitempty"`

	// Tenancy decides which namespaces may run sandboxes on this gateway and
	// push providers to it. The default admits only the gateway's own
	// namespace: the Platform Admin opens a gateway to tenants explicitly.
	// +kubebuilder:default={}
	// +optional
	Tenancy GatewayTenancy `json:"tenancy,omitempty"`

	// SandboxControls are the platform's defaults and ceilings for the
	// sandboxes of this gateway, checked at admission and in status
	// (reasons ResourceLimitExceeded, RuntimeClassNotAllowed,
	// ProviderNotAllowed). A change applies to new sandboxes and to changes
	// of existing ones; running sandboxes are not recreated.
	// +kubebuilder:default={}
	// +optional
	SandboxControls SandboxControls `json:"sandboxControls,omitempty"`

	// NetworkPolicyEnforcement is what the Platform Admin states about the
	// cluster's network plugin, where the operator cannot read it (anywhere
	// but OpenShift with OVN-Kubernetes or OpenShift SDN): condition
	// NetworkPolicyEnforced.
	// +optional
	NetworkPolicyEnforcement NetworkPolicyEnforcement `json:"networkPolicyEnforcement,omitempty"`

	// ProviderProfiles names OpenShellProviderProfiles in this gateway's
	// namespace to import into the gateway's platform catalog (0.1
	// gateways; 0.0.x builds its profiles in). Every workspace's providers
	// of such a type use the platform's profile: a tenant namespace's
	// profile of the same id is not imported here (ShadowedByPlatform).
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=64
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +listType=set
	// +optional
	ProviderProfiles []string `json:"providerProfiles,omitempty"`

	// BuiltinProviderProfiles chooses which of the provider profiles the
	// operator ships (docs/provider-profiles.md lists them) it imports into
	// this gateway's platform catalog, so that providers of those types
	// work on an OpenShell 0.1 gateway without anyone writing a profile.
	// They are defaults: a tenant namespace's OpenShellProviderProfile of
	// the same id replaces one for that namespace's providers, and an id in
	// spec.providerProfiles replaces it for every tenant. A profile of the
	// same id that someone else imported at the gateway is never
	// overwritten. Operator upgrades bring the new catalog's content.
	// +optional
	BuiltinProviderProfiles *BuiltinProviderProfiles `json:"builtinProviderProfiles,omitempty"`

	// ExternalPorts publishes outside the cluster the ports that tenants
	// list in their OpenShellSandboxTemplates (spec.externalPorts), for the
	// sandboxes of this gateway created from them. Off by default.
	// +optional
	ExternalPorts *ExternalPorts `json:"externalPorts,omitempty"`
}

// ExternalPortsExposure is how a gateway's sandboxes' external ports are
// published.
// +kubebuilder:validation:Enum=None;Route;HTTPRoute
type ExternalPortsExposure string

const (
	// ExternalPortsNone publishes none: the ports are reached in the
	// cluster only, through openshellsandboxes/proxy.
	ExternalPortsNone ExternalPortsExposure = "None"
	// ExternalPortsRoute publishes them through an OpenShift Route.
	ExternalPortsRoute ExternalPortsExposure = "Route"
	// ExternalPortsHTTPRoute publishes them through a Gateway API
	// HTTPRoute on a Gateway the Platform Admin names.
	ExternalPortsHTTPRoute ExternalPortsExposure = "HTTPRoute"
)

// ExternalPorts is the Platform Admin's choice of how the ports tenants
// list are reached from outside the cluster.
// +kubebuilder:validation:XValidation:rule="self.expose != 'HTTPRoute' || (has(self.host) && has(self.parentRef))",message="expose HTTPRoute needs host and parentRef: a Gateway API route has no host a router assigns, and attaches to the Gateway listener you name"
// +kubebuilder:validation:XValidation:rule="self.expose == 'HTTPRoute' || !has(self.parentRef)",message="parentRef is for expose HTTPRoute only"
type ExternalPorts struct {
	// Expose is None (the default), Route or HTTPRoute, each to the relay's
	// external port listener over TLS. Route: one OpenShift Route in the
	// operator's namespace, reencrypt TLS and no plain HTTP. HTTPRoute:
	// one Gateway API HTTPRoute in the operator's namespace attached to
	// the listener parentRef names, which must be HTTPS (the route is
	// reported Published only then), and a BackendTLSPolicy by which the
	// Gateway verifies the relay's certificate (off OpenShift the operator
	// issues that certificate and its CA). The relay admits a request only
	// with a bearer token the cluster authenticates (TokenReview) whose
	// user may create openshellsandboxes/proxy on the sandbox, and only to
	// a port the sandbox's template lists. Paths are those of the proxy
	// subresource: /apis/access.openshell.ai/v1alpha1/namespaces/NS/openshellsandboxes/NAME/proxy/PORT/.
	// +kubebuilder:default=None
	// +optional
	Expose ExternalPortsExposure `json:"expose,omitempty"`

	// Host is the Route's host; empty lets the router assign one
	// (ROUTE-NAMESPACE under the cluster's apps domain, whose wildcard
	// certificate covers it while it is one DNS label of at most 63
	// characters: set a host where the operator's namespace name is long).
	// Required for HTTPRoute: the HTTPRoute's hostname, which the
	// listener's hostname must be exactly, and its certificate cover.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*$`
	// +optional
	Host string `json:"host,omitempty"`

	// ParentRef is the Gateway API Gateway and listener the HTTPRoute
	// attaches to (expose HTTPRoute only). The listener must admit routes
	// from the operator's namespace (allowedRoutes).
	// +optional
	ParentRef *ExternalPortsParentRef `json:"parentRef,omitempty"`
}

// ExternalPortsParentRef names a Gateway API Gateway's listener.
type ExternalPortsParentRef struct {
	// Namespace is the Gateway's namespace.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Namespace string `json:"namespace"`
	// Name is the Gateway's name.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// SectionName is the listener's name: one listener, so that the
	// route never lands on a plain HTTP one of the same Gateway.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	SectionName string `json:"sectionName"`
}

// UpgradePolicy is how an unpinned Managed gateway follows the operator's
// default release.
// +kubebuilder:validation:Enum=Automatic;Manual
type UpgradePolicy string

const (
	// UpgradePolicyAutomatic moves the gateway to each new default.
	UpgradePolicyAutomatic UpgradePolicy = "Automatic"
	// UpgradePolicyManual keeps it on what it runs until the Platform
	// Admin moves it.
	UpgradePolicyManual UpgradePolicy = "Manual"
)

// BuiltinProfilesPolicy says whether a gateway imports the operator's
// shipped provider profiles.
// +kubebuilder:validation:Enum=All;None
type BuiltinProfilesPolicy string

const (
	// BuiltinProfilesAll imports every shipped profile except the excluded.
	BuiltinProfilesAll BuiltinProfilesPolicy = "All"
	// BuiltinProfilesNone imports none (and withdraws what was imported).
	BuiltinProfilesNone BuiltinProfilesPolicy = "None"
)

// BuiltinProviderProfiles narrows or turns off the shipped profiles.
type BuiltinProviderProfiles struct {
	// Policy is All (import every shipped profile not excluded) or None.
	// Without spec.builtinProviderProfiles, Managed gateways import All and
	// External ones None (an External gateway's admin may keep a catalog
	// of their own).
	// +kubebuilder:default=All
	// +optional
	Policy BuiltinProfilesPolicy `json:"policy,omitempty"`

	// Exclude names shipped profiles not to import.
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=64
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +listType=set
	// +optional
	Exclude []string `json:"exclude,omitempty"`
}

// NetworkPolicyEnforcement is the Platform Admin's statement about
// NetworkPolicy enforcement. OpenShell 0.1 fences every sandbox with
// NetworkPolicies (only its supervisor may reach the workload, which may
// reach nothing), and they are only a suggestion unless the network plugin
// enforces ingress and egress; Kubernetes accepts them either way, and
// upstream's chart refuses to install 0.1 until this is acknowledged.
type NetworkPolicyEnforcement struct {
	// Acknowledged states that the network plugin enforces NetworkPolicy
	// ingress and egress (node-local and metadata destinations included) in
	// every sandbox namespace of this gateway. Verify it before you set it.
	// +optional
	Acknowledged bool `json:"acknowledged,omitempty"`
}

// SandboxControls are what the Platform Admin allows a gateway's sandboxes.
// +kubebuilder:validation:XValidation:rule="!has(self.defaultRuntimeClass) || !has(self.allowedRuntimeClasses) || self.defaultRuntimeClass in self.allowedRuntimeClasses",message="defaultRuntimeClass must be one of allowedRuntimeClasses"
type SandboxControls struct {
	// RequirePolicy (the default) refuses sandboxes that name no
	// OpenShellPolicy and whose namespace has no default one (reason
	// PolicyRequired): a Sandbox Consumer cannot escape the Tenant Admin's
	// policy by dropping spec.policyRef. False lets such sandboxes run
	// under the gateway's own default policy.
	// +kubebuilder:default=true
	// +optional
	RequirePolicy *bool `json:"requirePolicy,omitempty"`

	// MaxResources caps the CPU and memory a sandbox's agent may request or
	// be limited to (each of spec.resources.requests and .limits is
	// compared), e.g. cpu: "4", memory: 16Gi.
	// +kubebuilder:validation:XValidation:rule="self.all(k, k == 'cpu' || k == 'memory')",message="maxResources takes only cpu and memory; cap GPUs with maxGPUs"
	// +optional
	MaxResources corev1.ResourceList `json:"maxResources,omitempty"`

	// MaxGPUs caps the GPUs and devices a sandbox asks for: spec.gpu.count
	// (or a */gpu resource) plus every other extended resource (MIG slices,
	// shared GPUs, KVM, RDMA); 0 allows none.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=16
	// +optional
	MaxGPUs *int32 `json:"maxGPUs,omitempty"`

	// AllowedRuntimeClasses are the RuntimeClasses sandboxes may name in
	// spec.runtimeClassName (e.g. kata); empty allows only
	// defaultRuntimeClass (or none): a RuntimeClass picks the node's runtime
	// handler, which may honour annotations that add devices.
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=253
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +listType=set
	// +optional
	AllowedRuntimeClasses []string `json:"allowedRuntimeClasses,omitempty"`

	// DefaultRuntimeClass is the RuntimeClass of sandboxes that name none.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +optional
	DefaultRuntimeClass string `json:"defaultRuntimeClass,omitempty"`

	// AllowedPodAnnotations, when set, are the only annotation key prefixes
	// sandboxes may put in spec.podAnnotations (e.g. "example.com/",
	// "prometheus.io/"); empty allows every key the CRD does not refuse
	// (security profiles, pod networks, SCC pinning and runtime annotations
	// are refused everywhere).
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=253
	// +listType=set
	// +optional
	AllowedPodAnnotations []string `json:"allowedPodAnnotations,omitempty"`

	// AllowedProviderTypes are the OpenShellProvider types (spec.type, e.g.
	// claude-code, github) sandboxes may attach; empty allows every type.
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=63
	// +listType=set
	// +optional
	AllowedProviderTypes []string `json:"allowedProviderTypes,omitempty"`

	// AllowedRefreshStrategies are the OpenShellProvider spec.refresh
	// strategies this gateway may run for its tenants (0.1 line); empty
	// allows none. A refresh makes the gateway call a token endpoint with
	// the tenant's material, from its own network position; the endpoint
	// is the provider profile's (the gateway refuses one in material).
	// +kubebuilder:validation:MaxItems=4
	// +listType=set
	// +optional
	AllowedRefreshStrategies []CredentialRefreshStrategy `json:"allowedRefreshStrategies,omitempty"`

	// NamespaceBudget caps what the sandboxes of each tenant namespace use
	// together on this gateway (reason NamespaceBudgetExceeded). Sandbox pods
	// run in the gateway's sandbox namespace, where the tenant's own
	// ResourceQuota and LimitRange never reach them.
	// +optional
	NamespaceBudget *NamespaceBudget `json:"namespaceBudget,omitempty"`
}

// NamespaceBudget is one namespace's share of a gateway. A sandbox counts
// from its admission until it is deleted, unless it was rejected.
type NamespaceBudget struct {
	// MaxSandboxes caps the namespace's sandboxes on this gateway.
	// +kubebuilder:validation:Minimum=0
	// +optional
	MaxSandboxes *int32 `json:"maxSandboxes,omitempty"`

	// MaxRequests caps the summed CPU and memory requests of the
	// namespace's sandboxes on this gateway (a sandbox without a request
	// counts its limit, as Kubernetes defaults it).
	// +kubebuilder:validation:XValidation:rule="self.all(k, k == 'cpu' || k == 'memory')",message="namespaceBudget.maxRequests takes only cpu and memory; cap GPUs with maxGPUs"
	// +optional
	MaxRequests corev1.ResourceList `json:"maxRequests,omitempty"`

	// MaxGPUs caps the summed GPUs and devices (as in sandboxControls.maxGPUs).
	// +kubebuilder:validation:Minimum=0
	// +optional
	MaxGPUs *int32 `json:"maxGPUs,omitempty"`
}

// NamespacesFrom says which namespaces a gateway admits, in the style of
// Gateway API's allowedRoutes.namespaces.from.
// +kubebuilder:validation:Enum=Same;All;Selector
type NamespacesFrom string

const (
	// NamespacesFromSame admits only the gateway's own namespace.
	NamespacesFromSame NamespacesFrom = "Same"
	// NamespacesFromAll admits every namespace the operator watches.
	NamespacesFromAll NamespacesFrom = "All"
	// NamespacesFromSelector admits namespaces whose labels match the selector.
	NamespacesFromSelector NamespacesFrom = "Selector"
)

// GatewayTenancy is the Platform Admin's access control for a gateway.
type GatewayTenancy struct {
	// AllowedNamespaces selects the namespaces whose OpenShellSandboxes and
	// OpenShellProviders may use this gateway. Checked at admission (reason
	// GatewayNotAllowed) and again by the operator before every gateway
	// call; revoking access stops new sandboxes and reports existing ones.
	// +kubebuilder:default={}
	// +optional
	AllowedNamespaces AllowedNamespaces `json:"allowedNamespaces,omitempty"`
}

// AllowedNamespaces selects namespaces by origin or by label.
// +kubebuilder:validation:XValidation:rule="(has(self.from) && self.from == 'Selector') == has(self.selector)",message="set allowedNamespaces.selector exactly when allowedNamespaces.from is Selector"
type AllowedNamespaces struct {
	// From is Same (only the gateway's namespace, the default), All (every
	// namespace) or Selector (namespaces whose labels match selector).
	// Namespace labels are set by whoever may update Namespaces (a cluster
	// admin); OpenShift project admins and self-provisioners cannot set them.
	// +kubebuilder:default=Same
	// +optional
	From NamespacesFrom `json:"from,omitempty"`

	// Selector matches the labels of admitted namespaces, e.g.
	// kubernetes.io/metadata.name or a team label a cluster admin sets.
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`
}

// ManagedGatewaySpec configures a gateway installed by the operator.
// +kubebuilder:validation:XValidation:rule="has(self.sandboxes) && has(self.sandboxes.__namespace__) ? (has(oldSelf.sandboxes) && has(oldSelf.sandboxes.__namespace__) && oldSelf.sandboxes.__namespace__ == self.sandboxes.__namespace__) : !(has(oldSelf.sandboxes) && has(oldSelf.sandboxes.__namespace__))",message="spec.managed.sandboxes.namespace is immutable: the gateway's grants and sandboxes live there; create a new OpenShellGateway instead"
// +kubebuilder:validation:XValidation:rule="!has(self.sandboxes) || !has(self.sandboxes.appArmorProfile) || (has(self.version) && self.version.startsWith('0.0.'))",message="spec.managed.sandboxes.appArmorProfile is for the OpenShell 0.0.x sidecar runtime only (set spec.managed.version to 0.0.111): on the 0.1 line, the default, the gateway builds the sandbox pods itself with seccomp RuntimeDefault and offers no AppArmor or seccomp setting; remove it"
// +kubebuilder:validation:XValidation:rule="(has(self.sandboxes) && has(self.sandboxes.workspaceMode) ? self.sandboxes.workspaceMode : 'Shared') == (has(oldSelf.sandboxes) && has(oldSelf.sandboxes.workspaceMode) ? oldSelf.sandboxes.workspaceMode : 'Shared')",message="spec.managed.sandboxes.workspaceMode is immutable: its sandboxes run in the namespaces of that mode and would have to be recreated elsewhere; create a new OpenShellGateway for the other mode and move tenants to it"
// +kubebuilder:validation:XValidation:rule="!has(self.sandboxes) || !has(self.sandboxes.workspaceMode) || self.sandboxes.workspaceMode != 'Operator' || !has(self.version) || self.version.startsWith('0.1.')",message="spec.managed.sandboxes.workspaceMode Operator needs the OpenShell 0.1 line (the 0.0.x driver has no workspace modes): unpin spec.managed.version or set a 0.1 release"
// +kubebuilder:validation:XValidation:rule="!has(self.sandboxes) || !has(self.sandboxes.tenantEgress) || (has(self.sandboxes.workspaceMode) && self.sandboxes.workspaceMode == 'Operator')",message="spec.managed.sandboxes.tenantEgress needs workspaceMode Operator: in Shared mode every tenant's sandbox pods share one namespace, so no tenant's egress policies can be told apart"
// +kubebuilder:validation:XValidation:rule="!has(self.sandboxes) || !has(self.sandboxes.workspaceMode) || self.sandboxes.workspaceMode != 'Operator' || !has(self.sandboxes.__namespace__)",message="spec.managed.sandboxes.namespace is for workspace mode Shared: in Operator mode each tenant namespace's sandboxes run in a namespace of their own that the operator creates"
// +kubebuilder:validation:XValidation:rule="!has(self.replicas) || self.replicas <= 1 || (has(self.persistence) && has(self.persistence.postgres))",message="spec.managed.replicas > 1 needs spec.managed.persistence.postgres: replicas must share one database"
// +kubebuilder:validation:XValidation:rule="!has(self.telemetry) || !has(self.version) || self.version.startsWith('0.1.')",message="spec.managed.telemetry needs the OpenShell 0.1 line (the 0.0.x configuration has no OTLP export): unpin spec.managed.version or set a 0.1 release"
type ManagedGatewaySpec struct {
	// Version is the OpenShell release the gateway runs, for example
	// "0.1.5" or "0.0.111". Empty means the operator's default for a new
	// gateway; once installed, an unpinned gateway moves to a later
	// operator's default only as upgradePolicy says
	// (docs/upgrading-gateways.md). The operator ships images for
	// its default and for 0.0.111; any other version needs
	// spec.managed.images. Moving from 0.1.x back to 0.0.x is refused: the
	// 0.1 gateway has migrated its database.
	// +kubebuilder:validation:Pattern=`^0\.(0|1)\.[0-9]{1,4}$`
	// +kubebuilder:validation:MaxLength=16
	// +optional
	Version string `json:"version,omitempty"`

	// UpgradePolicy says whether an installed gateway without
	// spec.managed.version moves to a new operator's default release by
	// itself (Automatic) or stays on the release it runs until the
	// Platform Admin sets spec.managed.version or Automatic (Manual, the
	// default): an operator upgrade, often approved automatically, then
	// restarts no tenant's gateway. VersionCurrent says, with reason
	// UpgradeAvailable, when a newer default is there.
	// +kubebuilder:default=Manual
	// +optional
	UpgradePolicy UpgradePolicy `json:"upgradePolicy,omitempty"`

	// Images overrides the operand images. Each defaults to the operator's
	// digest-pinned RELATED_IMAGE_* value; overrides should be pinned by
	// digest too so that disconnected mirrors keep working.
	// +optional
	Images GatewayImages `json:"images,omitempty"`

	// Replicas is the number of gateway pods. More than one needs Postgres.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`

	// Persistence selects the gateway database: a SQLite file on a
	// PersistentVolumeClaim (default) or an external PostgreSQL database.
	// +optional
	Persistence *GatewayPersistence `json:"persistence,omitempty"`

	// TLS configures the gateway's certificates. TLS is always on; there is
	// no setting to turn it off.
	// +optional
	TLS GatewayTLS `json:"tls,omitempty"`

	// Route configures the OpenShift Route (passthrough TLS) that exposes the
	// gateway outside the cluster. Ignored where the Route API does not exist.
	// +optional
	Route GatewayRoute `json:"route,omitempty"`

	// Sandboxes decides where the gateway creates agent sandboxes.
	// +optional
	Sandboxes SandboxPlacement `json:"sandboxes,omitempty"`

	// SupervisorTopology selects how the supervisor runs beside the agent
	// on 0.0.x gateways. Sidecar (the default) runs under the operator's
	// narrow SCC; Combined requires the privileged SCC on OpenShift. 0.1
	// gateways ignore it: they always run the two-pod runtime, without
	// capabilities, under restricted-v2.
	// +kubebuilder:default=Sidecar
	// +optional
	SupervisorTopology SupervisorTopology `json:"supervisorTopology,omitempty"`

	// Resources are the gateway container's compute requests and limits.
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`

	// NodeSelector constrains the gateway pods to matching nodes.
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`

	// Tolerations let the gateway pods schedule onto tainted nodes.
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	// +optional
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`

	// LogLevel is the gateway's log level.
	// +kubebuilder:validation:Enum=trace;debug;info;warn;error
	// +kubebuilder:default=info
	// +optional
	LogLevel string `json:"logLevel,omitempty"`

	// Telemetry exports the gateway's traces (OpenShell 0.1).
	// +optional
	Telemetry *GatewayTelemetry `json:"telemetry,omitempty"`
}

// GatewayTelemetry is where a gateway sends its traces.
type GatewayTelemetry struct {
	// OTLP exports traces over OTLP/gRPC (the gateway's
	// [openshell.gateway.otlp]); new sandboxes are given a relayed OTLP
	// endpoint too, so every tenant's sandboxes can send spans there: the
	// collector must be the platform's. With https:// the gateway verifies
	// the collector's certificate against its trust bundle: public roots,
	// the operator's issuer CA and, on OpenShift, the cluster's trusted CA
	// bundle; http:// is plaintext.
	// +required
	OTLP OTLPExport `json:"otlp"`
}

// OTLPExport is an OTLP/gRPC collector.
type OTLPExport struct {
	// Endpoint is the collector's OTLP/gRPC address, e.g.
	// https://otel-collector.observability.svc:4317.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="isURL(self) && (self.startsWith('https://') || self.startsWith('http://')) && url(self).getHostname() != '' && url(self).getEscapedPath() in ['', '/'] && url(self).getQuery().size() == 0",message="spec.managed.telemetry.otlp.endpoint must be an http:// or https:// URL with a host and nothing after the port"
	// +required
	Endpoint string `json:"endpoint"`

	// ServiceName is the service.name of the gateway's spans (the
	// gateway's default when empty).
	// +kubebuilder:validation:MaxLength=128
	// +optional
	ServiceName string `json:"serviceName,omitempty"`
}

// GatewayImages overrides operand images. Empty fields use the operator's
// RELATED_IMAGE_* defaults.
type GatewayImages struct {
	// Gateway is the OpenShell gateway image.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Gateway string `json:"gateway,omitempty"`

	// Supervisor is the OpenShell supervisor image injected into sandbox pods.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Supervisor string `json:"supervisor,omitempty"`

	// Sandbox is the default agent image for sandboxes that name none.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Sandbox string `json:"sandbox,omitempty"`

	// SandboxRuntime is the image that provides openshell-sandbox, the
	// agent container's first process, on OpenShell 0.1 gateways.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	SandboxRuntime string `json:"sandboxRuntime,omitempty"`
}

// GatewayPersistence selects exactly one database backend.
// +kubebuilder:validation:XValidation:rule="!(has(self.sqlite) && has(self.postgres))",message="persistence.sqlite and persistence.postgres are mutually exclusive"
type GatewayPersistence struct {
	// SQLite stores the gateway database on a PersistentVolumeClaim of a
	// single-replica StatefulSet.
	// +optional
	SQLite *SQLitePersistence `json:"sqlite,omitempty"`

	// Postgres uses an external PostgreSQL database; the gateway then runs as
	// a Deployment and may have several replicas.
	// +optional
	Postgres *PostgresPersistence `json:"postgres,omitempty"`
}

// SQLitePersistence sizes the gateway's SQLite volume.
type SQLitePersistence struct {
	// Size of the PersistentVolumeClaim.
	// +kubebuilder:default="1Gi"
	// +optional
	Size *resource.Quantity `json:"size,omitempty"`

	// StorageClassName of the PersistentVolumeClaim; empty uses the cluster default.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	StorageClassName string `json:"storageClassName,omitempty"`
}

// PostgresPersistence points at a Secret holding the database URI.
type PostgresPersistence struct {
	// URISecretRef selects the Secret key (in the gateway's namespace) that
	// holds the postgresql:// connection URI.
	// +required
	URISecretRef SecretKeyReference `json:"uriSecretRef"`
}

// GatewayTLS configures certificates. Without an issuerRef the operator
// builds an internal CA: with cert-manager when it is installed, otherwise
// with its own small PKI.
type GatewayTLS struct {
	// IssuerRef names a cert-manager Issuer or ClusterIssuer that signs the
	// externally presented server certificate (served by SNI for the Route
	// host). The internal CA still signs the in-cluster and client certificates.
	// +optional
	IssuerRef *IssuerReference `json:"issuerRef,omitempty"`

	// ExternalDNSNames are extra DNS names for the externally presented
	// certificate. The Route host is always included.
	// +kubebuilder:validation:MaxItems=16
	// +listType=set
	// +optional
	ExternalDNSNames []string `json:"externalDNSNames,omitempty"`
}

// IssuerReference names a cert-manager issuer.
type IssuerReference struct {
	// Name of the issuer.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Name string `json:"name"`

	// Kind of the issuer.
	// +kubebuilder:validation:Enum=Issuer;ClusterIssuer
	// +kubebuilder:default=Issuer
	// +optional
	Kind string `json:"kind,omitempty"`

	// Group of the issuer; external issuers use their own API group.
	// +kubebuilder:default="cert-manager.io"
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Group string `json:"group,omitempty"`
}

// GatewayRoute configures the OpenShift Route in front of the gateway.
type GatewayRoute struct {
	// Enabled creates a passthrough Route when the Route API exists.
	// +kubebuilder:default=true
	// +optional
	Enabled *bool `json:"enabled,omitempty"`

	// Host is the Route host; empty lets the router assign one.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +optional
	Host string `json:"host,omitempty"`
}

// SandboxPlacement decides where agent sandboxes run.
type SandboxPlacement struct {
	// Namespace where sandboxes run in Shared mode; defaults to the
	// gateway's namespace.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +optional
	Namespace string `json:"namespace,omitempty"`

	// WorkspaceMode is where the gateway's sandboxes run. Shared (the
	// default): every tenant's sandbox pods in spec.managed.sandboxes.namespace.
	// Operator (0.1 line only): each tenant namespace's sandboxes in a
	// namespace of their own that the operator creates, named after the
	// tenant's workspace (status.workspaceNamespace of the tenant's
	// sandboxes), where the gateway holds rights and tenants hold none
	// (docs/tenancy.md). Managed is refused: the gateway would create
	// namespaces and copy Secrets cluster-wide itself. The mode cannot
	// change once set: the sandboxes would have to move namespace.
	// +kubebuilder:default=Shared
	// +kubebuilder:validation:XValidation:rule="self != 'Managed'",message="spec.managed.sandboxes.workspaceMode Managed is not supported: the gateway would create namespaces and copy Secrets cluster-wide itself; use Operator (a namespace per tenant the operator prepares, with rights only there) or Shared"
	// +optional
	WorkspaceMode WorkspaceMode `json:"workspaceMode,omitempty"`

	// ImagePullPolicy of the agent container of every sandbox (the gateway
	// sets it gateway-wide; there is no per-sandbox setting); empty leaves
	// the Kubernetes default.
	// +kubebuilder:validation:Enum=Always;IfNotPresent;Never
	// +optional
	ImagePullPolicy corev1.PullPolicy `json:"imagePullPolicy,omitempty"`

	// ImagePullSecrets name Secrets that every sandbox pod of this gateway
	// pulls images with (gateway-wide, as the gateway takes them; a
	// Platform Admin creates them): in the sandbox namespace in workspace
	// mode Shared; in the gateway's namespace in workspace mode Operator,
	// where each paired namespace gets them merged with its tenant's
	// OpenShellImagePolicy pullSecrets.
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=253
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +listType=set
	// +optional
	ImagePullSecrets []string `json:"imagePullSecrets,omitempty"`

	// AppArmorProfile of the sandbox pods' containers on nodes that use
	// AppArmor: RuntimeDefault, Unconfined or Localhost/<profile>. Empty
	// leaves the field out. Only for gateways pinned to 0.0.111 (the sidecar
	// runtime); refused on the 0.1 line, whose driver builds both sandbox
	// pods itself with seccomp RuntimeDefault and has no AppArmor or seccomp
	// key. (Seccomp on 0.0.111: on OpenShift the operator's SCC gives
	// sandbox pods runtime/default; the gateway sets no seccomp profile, its
	// supervisor installs its own filters.)
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self in ['RuntimeDefault', 'Unconfined'] || (self.startsWith('Localhost/') && self.size() > 10)",message="appArmorProfile must be RuntimeDefault, Unconfined or Localhost/<profile>"
	// +optional
	AppArmorProfile string `json:"appArmorProfile,omitempty"`

	// AllowedPodLabels are the label keys tenants' sandboxes may set in
	// spec.podLabels on gateways of 0.1.5 and later, whose driver refuses
	// template labels it does not allowlist (the operator's own are always
	// allowed). Tenant NetworkPolicies, cost reports and tenantEgress
	// select sandboxes by them.
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=317
	// +kubebuilder:validation:items:Pattern=`^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`
	// +kubebuilder:validation:XValidation:rule="self.all(k, !k.contains('/') || !['openshell.ai', 'openshell.io', 'agents.x-k8s.io', 'app.kubernetes.io', 'kubernetes.io', 'k8s.io'].exists(p, k.split('/')[0] == p || k.split('/')[0].endsWith('.' + p)))",message="allowedPodLabels cannot name keys under openshell.ai/, openshell.io/, agents.x-k8s.io/, app.kubernetes.io/, kubernetes.io/ or k8s.io/ (or their subdomains): the operator, the gateway, Agent Sandbox and Kubernetes set those, and no agent may wear them"
	// +listType=set
	// +optional
	AllowedPodLabels []string `json:"allowedPodLabels,omitempty"`

	// TenantEgress makes each tenant namespace's egress
	// NetworkPolicies bind its agents (workspace mode Operator only). The
	// gateway's own fence allows its supervisors all egress and its driver
	// refuses a changed fence, and Kubernetes admits what any policy
	// selecting a pod allows, so no NetworkPolicy can narrow it: the
	// operator writes AdminNetworkPolicies for each paired namespace
	// instead (policy.networking.k8s.io/v1alpha1, OVN-Kubernetes on
	// OpenShift 4.16 and later; one per group of sandboxes that the same
	// policies select), which pass what the tenant's policies allow, DNS
	// and the gateway to NetworkPolicy evaluation and deny the rest.
	// The operator holds no right to AdminNetworkPolicies until a cluster
	// admin applies config/tenant-egress (docs/tenancy.md); the
	// TenantEgressEnforced condition says whether it is in force.
	// +optional
	TenantEgress *TenantEgress `json:"tenantEgress,omitempty"`
}

// TenantEgress is how tenant egress NetworkPolicies are made to bind
// agents in workspace mode Operator.
type TenantEgress struct {
	// Priority of the AdminNetworkPolicies of every paired namespace (a
	// tenant's never select another tenant's pods, so they may share it). Policies with a lower
	// number are evaluated first, and these end every supervisor
	// connection (Pass or Deny), so any platform AdminNetworkPolicy with a
	// higher number never applies to supervisors: keep it above every
	// platform policy that selects sandbox namespaces. OVN-Kubernetes
	// supports 0 to 99; the ValidatingAdmissionPolicy of config/tenant-egress
	// admits 99 and 98 only (edit both together). Where a tenant's policies
	// select sandboxes by label, the per-sandbox groups take the priority
	// one below (98 by default), so that they are evaluated before the
	// namespace's default policy, which always covers every supervisor.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=99
	// +kubebuilder:default=99
	// +optional
	Priority int32 `json:"priority,omitempty"`
}

// ExternalGatewaySpec connects to a gateway that the operator does not run.
type ExternalGatewaySpec struct {
	// Endpoint is the gateway's gRPC address. TLS is always on, so it must be
	// an https:// URL.
	// +kubebuilder:validation:MinLength=9
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self.startsWith('https://') && isURL(self)",message="spec.external.endpoint must be an https:// URL: TLS cannot be turned off"
	// +required
	Endpoint string `json:"endpoint"`

	// ServerName overrides the TLS server name (SNI) used to verify the
	// gateway certificate; defaults to the endpoint's host.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	ServerName string `json:"serverName,omitempty"`

	// CASecretRef selects the PEM CA bundle (in this namespace) that signs the
	// gateway's server certificate.
	// +required
	CASecretRef SecretKeyReference `json:"caSecretRef"`

	// CredentialsSecretRef names a Secret (in this namespace) with the
	// operator's platform-admin credentials for this gateway: keys
	// client-id, client-secret and token-url for the OAuth2
	// client-credentials grant.
	// +optional
	CredentialsSecretRef *LocalObjectReference `json:"credentialsSecretRef,omitempty"`
}

// ImagePolicyEnforcement is the Platform Admin's choice of how image
// allowlists apply to sandboxes of one gateway.
type ImagePolicyEnforcement struct {
	// Mode is Enforce (reject), Warn (admit with a warning and a False
	// ImageAllowed condition) or Disabled.
	// +kubebuilder:default=Enforce
	// +optional
	Mode ImagePolicyMode `json:"mode,omitempty"`

	// WhenNoPolicy decides namespaces that have no OpenShellImagePolicy:
	// Allow any image (connected clusters) or Deny every image
	// (disconnected clusters).
	// +kubebuilder:default=Allow
	// +optional
	WhenNoPolicy NoPolicyAction `json:"whenNoPolicy,omitempty"`

	// PlatformAllowlist, when set, is the most a tenant's allowlist may
	// allow on this gateway: an image that a namespace's
	// OpenShellImagePolicy allows, or that no policy governs, must also be
	// under one of these registry locations (the same form as
	// allowedMirrors) — reason ImageNotAllowedByPlatform. List the
	// locations images are named by (a mirrored source such as ghcr.io/org
	// as well as the mirror itself, if tenants name either).
	// +kubebuilder:validation:MaxItems=1000
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=512
	// +listType=set
	// +optional
	PlatformAllowlist []string `json:"platformAllowlist,omitempty"`

	// HonorClusterMirrors adds the cluster's ImageDigestMirrorSets (which
	// oc-mirror writes) to every namespace's allowlist on this gateway: an
	// image under a mirrored source, pinned by digest, is allowed without
	// the Tenant Admin retyping the mapping. Ignored where the
	// ImageDigestMirrorSet API is not served.
	// +optional
	HonorClusterMirrors bool `json:"honorClusterMirrors,omitempty"`
}

// GatewayPhase summarises the gateway's conditions.
// +kubebuilder:validation:Enum=Pending;Installing;Available;Degraded;Deleting
type GatewayPhase string

const (
	// GatewayPhasePending means prerequisites are missing.
	GatewayPhasePending GatewayPhase = "Pending"
	// GatewayPhaseInstalling means the operator is rolling the gateway out.
	GatewayPhaseInstalling GatewayPhase = "Installing"
	// GatewayPhaseAvailable means the gateway serves requests.
	GatewayPhaseAvailable GatewayPhase = "Available"
	// GatewayPhaseDegraded means the gateway or something it needs is failing.
	GatewayPhaseDegraded GatewayPhase = "Degraded"
	// GatewayPhaseDeleting means the gateway waits, before it goes, for the
	// OpenShellSandboxes that use it to be deleted (reason Draining).
	GatewayPhaseDeleting GatewayPhase = "Deleting"
)

// OpenShellGatewayStatus is the observed state of an OpenShell gateway.
type OpenShellGatewayStatus struct {
	// Conditions: Available, Progressing, Degraded, AgentSandboxAvailable,
	// CertManagerAvailable, RouteAPIAvailable, TLSReady, RouteAdmitted,
	// SCCReady, GatewayReachable.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// Phase summarises the conditions for display.
	// +optional
	Phase GatewayPhase `json:"phase,omitempty"`

	// Endpoint is the externally reachable gateway address.
	// +optional
	Endpoint string `json:"endpoint,omitempty"`

	// Version is the gateway version: what an External gateway reports,
	// or the release a Managed gateway's pods all run (during an upgrade,
	// the one being left until every pod runs the next).
	// +optional
	Version string `json:"version,omitempty"`

	// Instance identifies the pods of a Managed gateway that serve (a hash
	// of their UIDs, recorded when all are ready). It changes when a pod is
	// replaced, which may come back with another database (a new volume, a
	// restored backup): the operator then checks that the gateway still
	// holds every provider, policy and sandbox declared for it, and puts
	// back what it lost.
	// +optional
	Instance string `json:"instance,omitempty"`

	// BuiltinProviderProfiles records the import of the operator's shipped
	// provider profiles into the gateway's platform catalog.
	// +optional
	BuiltinProviderProfiles *BuiltinProfilesStatus `json:"builtinProviderProfiles,omitempty"`

	// ExternalPorts is where the ports in spec.externalPorts are reached.
	// The operator's external ports controller alone writes it.
	// +optional
	ExternalPorts *ExternalPortsStatus `json:"externalPorts,omitempty"`

	// ObservedGeneration is the spec generation the operator last acted on fully.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// OpenShellGateway installs (Managed) or connects to (External) an OpenShell
// gateway, the control plane that creates policy-enforced agent sandboxes.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=osgw,categories=openshell
// +kubebuilder:printcolumn:name="Mode",type=string,JSONPath=`.spec.mode`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Endpoint",type=string,JSONPath=`.status.endpoint`
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.status.version`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type OpenShellGateway struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired state.
	// +kubebuilder:default={mode: Managed}
	// +optional
	Spec OpenShellGatewaySpec `json:"spec,omitempty"`
	// Status is the observed state.
	// +optional
	Status OpenShellGatewayStatus `json:"status,omitempty"`
}

// OpenShellGatewayList contains a list of OpenShellGateway.
// +kubebuilder:object:root=true
type OpenShellGatewayList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []OpenShellGateway `json:"items"`
}

func init() {
	objectTypes = append(objectTypes, &OpenShellGateway{}, &OpenShellGatewayList{})
}

// Condition types an OpenShellGateway reports besides Available,
// Progressing, Degraded, GatewayReachable and the preflight conditions.
const (
	// GatewayConditionTLSReady is True when the gateway's server and client
	// certificates are issued and valid.
	GatewayConditionTLSReady = "TLSReady"
	// GatewayConditionRouteAdmitted is True when a router admitted the
	// gateway's passthrough Route.
	GatewayConditionRouteAdmitted = "RouteAdmitted"
	// GatewayConditionSCCReady is True when sandbox pods can be admitted
	// without the privileged SCC (or the cluster has no SCCs).
	GatewayConditionSCCReady = "SCCReady"
	// GatewayConditionNetworkPolicyEnforced says whether NetworkPolicy
	// ingress and egress are enforced for the gateway's sandboxes, as the
	// OpenShell 0.1 runtime requires: True when the cluster's network
	// plugin is known to (or the Platform Admin acknowledged it), False
	// when it is known not to, Unknown otherwise.
	GatewayConditionNetworkPolicyEnforced = "NetworkPolicyEnforced"
	// GatewayConditionVersionCurrent (Managed) is True when every gateway
	// pod runs the release spec.managed.version (or the operator's
	// default) asks for; False while it moves there (Upgrading), or with
	// the reason that holds it on status.version.
	GatewayConditionVersionCurrent = "VersionCurrent"
	// GatewayConditionTenantEgressEnforced (gateways with
	// spec.managed.sandboxes.tenantEgress) is True when every paired
	// namespace's AdminNetworkPolicy matches its tenant's egress
	// NetworkPolicies, False with the reason when one cannot be written.
	GatewayConditionTenantEgressEnforced = "TenantEgressEnforced"
)

// Reasons of TenantEgressEnforced.
const (
	// GatewayReasonTenantEgressApplied (True): each tenant with egress
	// NetworkPolicies has its AdminNetworkPolicies.
	GatewayReasonTenantEgressApplied = "Applied"
	// GatewayReasonAdminNetworkPolicyUnavailable (False): the cluster does
	// not serve policy.networking.k8s.io/v1alpha1 AdminNetworkPolicies
	// (OVN-Kubernetes on OpenShift 4.16 or later serves them).
	GatewayReasonAdminNetworkPolicyUnavailable = "AdminNetworkPolicyUnavailable"
	// GatewayReasonTenantEgressNotWritten (False): an AdminNetworkPolicy
	// could not be written (typically: config/tenant-egress is not applied,
	// so the operator holds no right to them); the message names the
	// tenant and the API's answer.
	GatewayReasonTenantEgressNotWritten = "NotWritten"
	// GatewayReasonTenantEgressPending (Unknown): a paired namespace's
	// tenant egress has not been evaluated yet (its namespace stays off
	// the allowlist until it has, if it is new).
	GatewayReasonTenantEgressPending = "Pending"
)

// Reasons of NetworkPolicyEnforced.
const (
	// GatewayReasonNetworkPluginEnforces (True): OpenShift reports a
	// network plugin that enforces NetworkPolicy ingress and egress
	// (OVN-Kubernetes).
	GatewayReasonNetworkPluginEnforces = "NetworkPluginEnforces"
	// GatewayReasonNetworkPluginLacksEgress (False): OpenShift reports
	// OpenShift SDN, which does not enforce egress NetworkPolicy; migrate
	// the cluster to OVN-Kubernetes.
	GatewayReasonNetworkPluginLacksEgress = "NetworkPluginLacksEgress"
	// GatewayReasonEnforcementAcknowledged (True): the Platform Admin set
	// spec.networkPolicyEnforcement.acknowledged.
	GatewayReasonEnforcementAcknowledged = "Acknowledged"
	// GatewayReasonEnforcementNotVerified (Unknown): the operator cannot
	// tell; verify the network plugin, then acknowledge it on the gateway.
	GatewayReasonEnforcementNotVerified = "NotVerified"
)

// Reasons of an OpenShellGateway's Available, Progressing and Degraded.
const (
	// GatewayReasonAgentSandboxUnavailable (Degraded, phase Pending): the
	// Agent Sandbox CRD is missing or serves no supported version.
	GatewayReasonAgentSandboxUnavailable = "AgentSandboxUnavailable"
	// GatewayReasonKubernetesTooOld (Degraded): the cluster is older than
	// the supported minimum.
	GatewayReasonKubernetesTooOld = "KubernetesTooOld"
	// GatewayReasonAsExpected (Degraded=False): nothing is degraded.
	GatewayReasonAsExpected = "AsExpected"
	// GatewayReasonInstalling (Progressing): the workload is rolling out, or
	// the operator's OIDC issuer is starting.
	GatewayReasonInstalling = "Installing"
	// GatewayReasonConnecting (Progressing): an External gateway has not
	// answered yet.
	GatewayReasonConnecting = "Connecting"
	// GatewayReasonWorkloadReady (Available=True): the gateway serves.
	GatewayReasonWorkloadReady = "WorkloadReady"
	// GatewayReasonRelatedImagesMissing (Degraded): the operator has no
	// gateway or supervisor image (RELATED_IMAGE_*).
	GatewayReasonRelatedImagesMissing = "RelatedImagesMissing"
	// GatewayReasonApplyFailed (Degraded): an object could not be written;
	// the message says which and why.
	GatewayReasonApplyFailed = "ApplyFailed"
	// GatewayReasonNamespaceNotServed (Degraded, phase Pending): the gateway
	// is in a namespace where the operator does not reconcile gateways (a
	// cluster admin designates them); nothing was installed or connected to.
	GatewayReasonNamespaceNotServed = "NamespaceNotServed"
	// GatewayReasonSandboxNamespaceNotServed (Degraded):
	// spec.managed.sandboxes.namespace is not a namespace where gateways
	// are served; the operator writes only into those (and sandbox pods
	// must run where tenants cannot create pods).
	GatewayReasonSandboxNamespaceNotServed = "SandboxNamespaceNotServed"
	// GatewayReasonDraining (Available=False, phase Deleting): the gateway
	// is being deleted and still has OpenShellSandboxes; it keeps running,
	// with its RBAC, until they are gone, so that their deletion can clean
	// up at the gateway.
	GatewayReasonDraining = "Draining"
	// GatewayReasonVersionNotShipped (VersionCurrent False; Degraded too
	// while nothing is installed yet): spec.managed.version names a release
	// the operator has no images for, and spec.managed.images does not name
	// them.
	GatewayReasonVersionNotShipped = "VersionNotShipped"
	// GatewayReasonDowngradeRefused (VersionCurrent False):
	// spec.managed.version would move a gateway that runs 0.1.x back to
	// 0.0.x; the gateway keeps running its version.
	GatewayReasonDowngradeRefused = "DowngradeRefused"
	// GatewayReasonUpgradeAvailable (VersionCurrent True): the gateway runs
	// the release it was installed or last moved to, and the operator's
	// default is another; with upgradePolicy Manual it moves only when the
	// Platform Admin sets spec.managed.version or Automatic.
	GatewayReasonUpgradeAvailable = "UpgradeAvailable"
	// GatewayReasonNetworkPolicyNotEnforced (VersionCurrent False; Degraded
	// too while nothing is installed yet): a 0.1 gateway is not installed,
	// or not upgraded to, while NetworkPolicyEnforced is not True: its
	// sandbox fence would not hold.
	GatewayReasonNetworkPolicyNotEnforced = "NetworkPolicyNotEnforced"
	// GatewayReasonAtTarget (VersionCurrent=True): the gateway runs the
	// release its spec asks for.
	GatewayReasonAtTarget = "AtTarget"
	// GatewayReasonProviderProfilesRequired (VersionCurrent=False): the
	// operator's default would move the gateway to 0.1, but sandboxes on it
	// attach providers whose type no OpenShellProviderProfile declares (0.1
	// has no built-in profiles); it stays on 0.0.x until each is declared
	// (then moves and has them imported before its providers are given
	// again), or until spec.managed.version names the release.
	GatewayReasonProviderProfilesRequired = "ProviderProfilesRequired"
	// GatewayReasonUpgrading (Progressing): the gateway's pods are moving
	// from status.version to spec.managed.version (or the default).
	GatewayReasonUpgrading = "Upgrading"
	// GatewayReasonImageOverrideNotAllowed (Degraded): spec.managed.images is
	// set but the platform allows only the operator's RELATED_IMAGE_* images.
	GatewayReasonImageOverrideNotAllowed = "ImageOverrideNotAllowed"
)

// Reasons of an OpenShellGateway's TLSReady.
const (
	// GatewayReasonCertificatesReady: the certificates are issued and valid.
	GatewayReasonCertificatesReady = "CertificatesReady"
	// GatewayReasonCertificatesPending: waiting for the built-in PKI or
	// cert-manager to write the certificate Secrets.
	GatewayReasonCertificatesPending = "CertificatesPending"
	// GatewayReasonCertificateInvalid: a certificate Secret is unusable or expired.
	GatewayReasonCertificateInvalid = "CertificateInvalid"
	// GatewayReasonCARotating (TLSReady=True): the built-in PKI is rotating
	// the gateway CA in phases; old and new CA are both trusted until it
	// completes. The operator reports itself not upgradeable meanwhile.
	GatewayReasonCARotating = "CARotating"
	// GatewayReasonCertManagerRequired: spec.managed.tls.issuerRef needs
	// cert-manager, which is not installed.
	GatewayReasonCertManagerRequired = "CertManagerRequired"
)

// Reasons of an OpenShellGateway's RouteAdmitted and SCCReady.
const (
	// GatewayReasonRouteAPIUnavailable: route.openshift.io is not served.
	GatewayReasonRouteAPIUnavailable = "RouteAPIUnavailable"
	// GatewayReasonRouteDisabled: spec.managed.route.enabled is false.
	GatewayReasonRouteDisabled = "RouteDisabled"
	// GatewayReasonRouteAdmitted: a router admitted the Route.
	GatewayReasonRouteAdmitted = "Admitted"
	// GatewayReasonRouteNotAdmitted: no router admitted the Route (yet).
	GatewayReasonRouteNotAdmitted = "NotAdmitted"
	// GatewayReasonSCCNotApplicable: security.openshift.io is not served;
	// Pod Security admission applies instead.
	GatewayReasonSCCNotApplicable = "NotApplicable"
	// GatewayConditionPodSecurityAdmitted (Kubernetes without SCCs, Managed
	// gateways): whether the sandbox namespace's Pod Security Admission
	// level admits sandbox pods. The sidecar supervisor adds NET_ADMIN and
	// other capabilities, which only the privileged level allows; the
	// operator does not label namespaces (that would need the right to
	// relabel every namespace), it says what to set.
	GatewayConditionPodSecurityAdmitted = "PodSecurityAdmitted"
	// GatewayReasonPodSecurityAnyLevel: the gateway's sandbox pods (0.1)
	// meet the restricted level, which every level admits.
	GatewayReasonPodSecurityAnyLevel = "RestrictedPods"
	// GatewayReasonSCCRestrictedV2 (SCCReady=True): the gateway's sandbox
	// pods (0.1) need no SCC beyond the default restricted-v2.
	GatewayReasonSCCRestrictedV2 = "RestrictedV2"
	// GatewayReasonPodSecurityPrivileged: enforce=privileged is set.
	GatewayReasonPodSecurityPrivileged = "Privileged"
	// GatewayReasonPodSecurityRestricted: enforce is baseline or restricted:
	// sandbox pods are refused.
	GatewayReasonPodSecurityRestricted = "PodSecurityTooStrict"
	// GatewayReasonPodSecurityUnset: no enforce label: the cluster default
	// decides, which the operator cannot read; set it explicitly.
	GatewayReasonPodSecurityUnset = "PodSecurityUnset"
	// GatewayReasonSCCApplied: the narrow SCC a cluster admin applied from
	// config/scc matches the reviewed one and is granted to the sandbox
	// ServiceAccount.
	GatewayReasonSCCApplied = "Applied"
	// GatewayReasonSCCMissing (also Degraded): the narrow SCC does not
	// exist; the operator never creates SCCs, a cluster admin applies
	// config/scc.
	GatewayReasonSCCMissing = "SCCMissing"
	// GatewayReasonSCCModified (also Degraded): the live SCC differs from
	// config/scc in the fields the message names.
	GatewayReasonSCCModified = "SCCModified"
	// GatewayReasonPrivilegedRequired (also Degraded): the Combined topology
	// needs the privileged SCC, which the operator never grants.
	GatewayReasonPrivilegedRequired = "PrivilegedRequired"
)

// Reasons of an External OpenShellGateway's GatewayReachable.
const (
	// GatewayReasonHealthy: the gateway's Health call answered SERVING.
	GatewayReasonHealthy = "Healthy"
	// GatewayReasonVersionNotSupported: the gateway reports a version on a
	// line the operator does not speak; no sandbox or provider call is sent.
	GatewayReasonVersionNotSupported = "VersionNotSupported"
	// GatewayReasonUnreachable: the Health call failed; retried each minute.
	GatewayReasonUnreachable = "Unreachable"
	// GatewayReasonOrphansSwept (event): the operator deleted, at the
	// gateway, sandboxes it created whose OpenShellSandbox is gone (left by
	// a force-release, or a create that landed after its object went).
	GatewayReasonOrphansSwept = "OrphansSwept"
	// GatewayReasonBuiltinProfilesImported (event): the set of the
	// operator's shipped provider profiles the gateway's platform catalog
	// holds changed (status.builtinProviderProfiles).
	GatewayReasonBuiltinProfilesImported = "BuiltinProfilesImported"
	// GatewayReasonSweepNotPermitted (event, Warning): a sweep was due (a
	// sandbox was released without the gateway confirming) but the
	// operator's identity at this External gateway is not its platform
	// admin, so what the release left there cannot be listed or deleted
	// by the operator: the event names it for a gateway admin.
	GatewayReasonSweepNotPermitted = "SweepNotPermitted"
)

// BuiltinProfilesStatus is what the operator imported of its shipped
// provider profiles at one gateway.
type BuiltinProfilesStatus struct {
	// Catalog is the shipped catalog's version (a hash of its content)
	// that Imported and Skipped describe.
	// +optional
	Catalog string `json:"catalog,omitempty"`
	// GatewayInstance is the gateway's status.instance at the import: a
	// gateway whose pods were replaced is given the profiles again.
	// +optional
	GatewayInstance string `json:"gatewayInstance,omitempty"`
	// Imported are the profile ids the operator holds in the platform
	// catalog.
	// +listType=set
	// +optional
	Imported []string `json:"imported,omitempty"`
	// Skipped are the wanted ids the gateway already holds from someone
	// else (imported by hand, or spec.providerProfiles), left as they are.
	// +listType=set
	// +optional
	Skipped []string `json:"skipped,omitempty"`
	// Message says why the last import did not complete, if it did not.
	// +optional
	Message string `json:"message,omitempty"`
}

// ExternalPortsStatus is where a gateway's sandboxes' external ports are
// reached, and whether they are.
type ExternalPortsStatus struct {
	// URL is the Route's (or HTTPRoute's) address. A port is reached at
	// URL/apis/access.openshell.ai/v1alpha1/namespaces/NS/openshellsandboxes/NAME/proxy/PORT/,
	// with a bearer token.
	// +optional
	URL string `json:"url,omitempty"`
	// Conditions: Published.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// ObservedGeneration is the gateway generation these describe.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// ExternalPortsConditionPublished is True when a router admitted the
// external ports' Route, or the Gateway accepted their HTTPRoute and
// BackendTLSPolicy on an HTTPS listener (status.externalPorts.conditions).
const ExternalPortsConditionPublished = "Published"

// Reasons of status.externalPorts' Published condition.
const (
	// ExternalPortsReasonAdmitted: a router admitted the Route.
	ExternalPortsReasonAdmitted = GatewayReasonRouteAdmitted
	// ExternalPortsReasonNotAdmitted: no router admitted the Route (yet),
	// or one refused it (the message says why).
	ExternalPortsReasonNotAdmitted = GatewayReasonRouteNotAdmitted
	// ExternalPortsReasonRouteAPIUnavailable: route.openshift.io is not
	// served (Kubernetes without OpenShift's router): nothing is published.
	ExternalPortsReasonRouteAPIUnavailable = GatewayReasonRouteAPIUnavailable
	// ExternalPortsReasonNamespaceNotServed: the gateway's namespace is not
	// one the platform serves: nothing is published for it.
	ExternalPortsReasonNamespaceNotServed = GatewayReasonNamespaceNotServed
	// ExternalPortsReasonNoOperatorNamespace: the operator runs outside a
	// cluster namespace (a development run), where the relay's Service is
	// not.
	ExternalPortsReasonNoOperatorNamespace = "NoOperatorNamespace"
	// ExternalPortsReasonApplyFailed: the Route (or the HTTPRoute, its
	// BackendTLSPolicy, the relay's certificate) could not be written.
	ExternalPortsReasonApplyFailed = GatewayReasonApplyFailed
	// ExternalPortsReasonAccepted: the Gateway accepted the HTTPRoute on
	// its HTTPS listener, and the BackendTLSPolicy by which it verifies
	// the relay.
	ExternalPortsReasonAccepted = "Accepted"
	// ExternalPortsReasonGatewayAPIUnavailable: HTTPRoutes or
	// BackendTLSPolicies (gateway.networking.k8s.io/v1) are not served, or
	// were not when the operator started: nothing is published.
	ExternalPortsReasonGatewayAPIUnavailable = "GatewayAPIUnavailable"
	// ExternalPortsReasonRouteNotAccepted: the Gateway has not accepted
	// the HTTPRoute (yet), or has not resolved its backend; the message
	// gives the Gateway's reason.
	ExternalPortsReasonRouteNotAccepted = "RouteNotAccepted"
	// ExternalPortsReasonListenerNotHTTPS: the Gateway or its listener
	// named by parentRef is missing, or the listener does not terminate
	// HTTPS: callers' bearer tokens would cross the network in plain text.
	ExternalPortsReasonListenerNotHTTPS = "ListenerNotHTTPS"
	// ExternalPortsReasonBackendTLSNotAccepted: the Gateway has not
	// accepted the BackendTLSPolicy (an implementation without it would
	// not reach the relay, which speaks only TLS).
	ExternalPortsReasonBackendTLSNotAccepted = "BackendTLSNotAccepted"
	// ExternalPortsReasonListenerShared: the named listener could serve
	// another party's route for the host (a hostname other than exactly
	// the host, routes admitted from other namespaces, listeners of other
	// namespaces on the Gateway), which could take the callers' tokens.
	ExternalPortsReasonListenerShared = "ListenerShared"
	// ExternalPortsReasonHostConflict: another served gateway keeps this
	// host (it is published there, or neither is and it was created
	// first): this one publishes nothing (the relay tells gateways apart
	// by host).
	ExternalPortsReasonHostConflict = "HostConflict"
	// ExternalPortsReasonRelayCertificateNotReady: the relay's external
	// certificate is missing, or does not verify against the CA bundle
	// for the Service's DNS name.
	ExternalPortsReasonRelayCertificateNotReady = "RelayCertificateNotReady"
)
