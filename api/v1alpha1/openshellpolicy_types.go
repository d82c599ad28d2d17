package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// OpenShellPolicySpec is the sandbox policy the supervisor enforces: the
// shape of the gateway's openshell.sandbox.v1.SandboxPolicy.
//
// Filesystem and process rules are static for a running sandbox, so the API
// only lets them grow (filesystem) or not change at all (process); network
// rules are dynamic and may change freely.
// +kubebuilder:validation:XValidation:rule="has(self.process) == has(oldSelf.process) && (!has(self.process) || self.process == oldSelf.process)",message="spec.process is immutable after creation; create a new policy instead"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.filesystem) || has(self.filesystem)",message="spec.filesystem cannot be removed once set; filesystem rules are additive-only"
// +kubebuilder:validation:XValidation:rule="!has(self.sandboxDefaults) || (has(self.default) && self.default)",message="spec.sandboxDefaults are the namespace's defaults: set them on its default policy (spec.default: true)"
// +kubebuilder:validation:XValidation:rule="!has(self.advisor) || !has(self.advisor.decisions) || self.advisor.decisions.all(d, d.decision != 'Approved' || (has(self.networkPolicies) && self.networkPolicies.exists(n, n.name == d.networkPolicy)))",message="an Approved decision's networkPolicy must name an entry of spec.networkPolicies"
type OpenShellPolicySpec struct {
	// Default makes this the policy of the namespace's sandboxes that name
	// none (spec.policyRef empty), which is how a gateway that requires a
	// policy admits them. At most one policy per namespace should be the
	// default; with several, such sandboxes are refused
	// (DefaultPolicyAmbiguous).
	// +optional
	Default bool `json:"default,omitempty"`

	// SandboxDefaults are the namespace's defaults for its sandboxes, on its
	// default policy only (spec.default): each fills a field a sandbox
	// leaves empty, when the sandbox is created (status.defaults records
	// what came from here; a running sandbox keeps what it was created
	// with). They never widen the gateway's controls: a sandbox the
	// defaults would take past a ceiling is refused as if it had set them.
	// +optional
	SandboxDefaults *SandboxDefaults `json:"sandboxDefaults,omitempty"`

	// Filesystem lists the paths the agent may read or write. Entries can be
	// added but not removed: a running sandbox cannot lose access safely.
	// +optional
	Filesystem *FilesystemPolicy `json:"filesystem,omitempty"`

	// Landlock controls how strictly the kernel's Landlock LSM is required.
	// +optional
	Landlock *LandlockPolicy `json:"landlock,omitempty"`

	// Process sets the identity the agent runs as. Immutable after creation.
	// +optional
	Process *ProcessPolicy `json:"process,omitempty"`

	// NetworkPolicies are named egress rules: which hosts and ports the
	// agent (optionally only some binaries) may reach, and how. They can be
	// changed at any time and apply to running sandboxes in place.
	// +kubebuilder:validation:MaxItems=64
	// +listType=map
	// +listMapKey=name
	// +optional
	NetworkPolicies []NetworkPolicyRule `json:"networkPolicies,omitempty"`

	// Advisor turns on OpenShell's policy advisor for the sandboxes that use
	// this policy (0.1 gateways) and holds the Tenant Admin's decisions on
	// what they propose (status.advisor.proposals). An approved rule lands
	// here, in spec.networkPolicies, never at the gateway alone: this object
	// stays the policy's source of truth.
	// +optional
	Advisor *PolicyAdvisor `json:"advisor,omitempty"`
}

// PolicyAdvisor configures the policy advisor of the policy's sandboxes.
type PolicyAdvisor struct {
	// Enabled sets the sandbox setting agent_policy_proposals_enabled on
	// each 0.1 sandbox that uses this policy: its agent may then propose a
	// network rule after a denied request. A proposal grants nothing until
	// it is decided here. A gateway-wide value of the setting, which a
	// Platform Admin may set, wins over it.
	// +optional
	Enabled bool `json:"enabled,omitempty"`

	// Decisions are the Tenant Admin's answers to proposals. Approved names
	// the spec.networkPolicies entry that carries the rule (as proposed, or
	// edited); the proposal is closed at the gateway once that rule is in
	// effect in the sandbox. Rejected closes it with the reason, which the
	// agent reads. Kept in the spec, so GitOps holds every decision.
	// +kubebuilder:validation:MaxItems=64
	// +listType=map
	// +listMapKey=proposal
	// +optional
	Decisions []ProposalDecision `json:"decisions,omitempty"`
}

// ProposalDecisionType is what the Tenant Admin decided.
// +kubebuilder:validation:Enum=Approved;Rejected
type ProposalDecisionType string

const (
	// ProposalApproved adopts the proposal as a spec.networkPolicies entry.
	ProposalApproved ProposalDecisionType = "Approved"
	// ProposalRejected turns it down, with guidance for the agent.
	ProposalRejected ProposalDecisionType = "Rejected"
)

// ProposalDecision is a decision on one proposal.
// +kubebuilder:validation:XValidation:rule="self.decision != 'Approved' || has(self.networkPolicy)",message="an Approved decision names the spec.networkPolicies entry that carries the rule (networkPolicy)"
// +kubebuilder:validation:XValidation:rule="self.decision != 'Rejected' || !has(self.networkPolicy)",message="a Rejected decision adopts no rule: remove networkPolicy"
type ProposalDecision struct {
	// Proposal is the proposal's ID, as status.advisor.proposals shows it.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][-_.:A-Za-z0-9]*$`
	// +required
	Proposal string `json:"proposal"`

	// Sandbox is the OpenShellSandbox, in this namespace, that proposed it.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +required
	Sandbox string `json:"sandbox"`

	// Decision is Approved or Rejected.
	// +required
	Decision ProposalDecisionType `json:"decision"`

	// NetworkPolicy is the name of the spec.networkPolicies entry that
	// carries an Approved rule.
	// +kubebuilder:validation:MaxLength=63
	// +optional
	NetworkPolicy string `json:"networkPolicy,omitempty"`

	// Reason is recorded with the proposal at the gateway, where the agent
	// reads it: for a Rejected proposal, the guidance it revises its
	// request by.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Reason string `json:"reason,omitempty"`
}

// FilesystemPolicy lists readable and writable paths.
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.readOnly) || (has(self.readOnly) && oldSelf.readOnly.all(p, p in self.readOnly))",message="spec.filesystem.readOnly is additive-only: entries cannot be removed"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.readWrite) || (has(self.readWrite) && oldSelf.readWrite.all(p, p in self.readWrite))",message="spec.filesystem.readWrite is additive-only: entries cannot be removed"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.includeWorkdir) || (has(self.includeWorkdir) && (self.includeWorkdir || !oldSelf.includeWorkdir))",message="spec.filesystem.includeWorkdir cannot be turned off once on; filesystem rules are additive-only"
// +kubebuilder:validation:XValidation:rule="(has(self.readOnly) ? size(self.readOnly) : 0) + (has(self.readWrite) ? size(self.readWrite) : 0) <= 256",message="at most 256 filesystem paths in total"
type FilesystemPolicy struct {
	// IncludeWorkdir grants read-write access to the sandbox's working
	// directory.
	// +kubebuilder:default=true
	// +optional
	IncludeWorkdir *bool `json:"includeWorkdir,omitempty"`

	// ReadOnly are absolute paths the agent may read.
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=4096
	// +kubebuilder:validation:items:XValidation:rule="self.startsWith('/') && !self.contains('/../') && !self.endsWith('/..')",message="filesystem paths must be absolute and must not contain '..'"
	// +listType=set
	// +optional
	ReadOnly []string `json:"readOnly,omitempty"`

	// ReadWrite are absolute paths the agent may write. "/" is not allowed.
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=4096
	// +kubebuilder:validation:items:XValidation:rule="self.startsWith('/') && !self.contains('/../') && !self.endsWith('/..')",message="filesystem paths must be absolute and must not contain '..'"
	// +kubebuilder:validation:items:XValidation:rule="self != '/'",message="readWrite must not contain '/': grant narrower paths"
	// +listType=set
	// +optional
	ReadWrite []string `json:"readWrite,omitempty"`
}

// LandlockCompatibility is how strictly Landlock is required.
// +kubebuilder:validation:Enum=BestEffort;HardRequirement
type LandlockCompatibility string

const (
	// LandlockBestEffort applies Landlock where the kernel supports it.
	LandlockBestEffort LandlockCompatibility = "BestEffort"
	// LandlockHardRequirement refuses to start without Landlock.
	LandlockHardRequirement LandlockCompatibility = "HardRequirement"
)

// LandlockPolicy configures Landlock.
type LandlockPolicy struct {
	// Compatibility is BestEffort (default) or HardRequirement.
	// +kubebuilder:default=BestEffort
	// +optional
	Compatibility LandlockCompatibility `json:"compatibility,omitempty"`
}

// ProcessPolicy sets the agent's identity.
type ProcessPolicy struct {
	// RunAsUser is "sandbox" (the namespace-derived sandbox UID) or a numeric
	// UID from 1 to 4294967294. Root (0) is not allowed.
	// +kubebuilder:validation:MaxLength=10
	// +kubebuilder:validation:XValidation:rule="self == 'sandbox' || (self.matches('^[0-9]{1,10}$') && int(self) >= 1 && int(self) <= 4294967294)",message="runAsUser must be 'sandbox' or a numeric ID from 1 to 4294967294"
	// +optional
	RunAsUser string `json:"runAsUser,omitempty"`

	// RunAsGroup is "sandbox" or a numeric GID from 1 to 4294967294.
	// +kubebuilder:validation:MaxLength=10
	// +kubebuilder:validation:XValidation:rule="self == 'sandbox' || (self.matches('^[0-9]{1,10}$') && int(self) >= 1 && int(self) <= 4294967294)",message="runAsGroup must be 'sandbox' or a numeric ID from 1 to 4294967294"
	// +optional
	RunAsGroup string `json:"runAsGroup,omitempty"`
}

// NetworkPolicyRule is one named egress rule.
type NetworkPolicyRule struct {
	// Name of the rule, unique within the policy.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-_a-z0-9]*[a-z0-9])?$`
	// +required
	Name string `json:"name"`

	// Endpoints the rule allows.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	// +required
	Endpoints []NetworkEndpoint `json:"endpoints"`

	// Binaries restrict the rule to these executables; empty means any.
	// +kubebuilder:validation:MaxItems=32
	// +listType=atomic
	// +optional
	Binaries []NetworkBinary `json:"binaries,omitempty"`
}

// NetworkEndpoint is a host and port(s) and how traffic to it is treated.
// +kubebuilder:validation:XValidation:rule="has(self.port) || has(self.ports)",message="set port or ports"
// +kubebuilder:validation:XValidation:rule="!(has(self.access) && has(self.rules))",message="access cannot be combined with rules: use one or the other"
// +kubebuilder:validation:XValidation:rule="!has(self.mcp) || (has(self.protocol) && self.protocol == 'mcp')",message="mcp options apply to an endpoint of protocol mcp"
type NetworkEndpoint struct {
	// Host name or glob (*.example.com, **.example.com); case-insensitive.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9*]([-A-Za-z0-9*.]*[A-Za-z0-9])?$`
	// +required
	Host string `json:"host"`

	// Port is a single port.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	// +optional
	Port *int32 `json:"port,omitempty"`

	// Ports are several ports; they win over port.
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:Minimum=1
	// +kubebuilder:validation:items:Maximum=65535
	// +listType=set
	// +optional
	Ports []int32 `json:"ports,omitempty"`

	// Protocol is tcp (L4 only) or an L7 protocol the proxy inspects.
	// +kubebuilder:validation:Enum=tcp;rest;websocket;graphql;sql;json-rpc;mcp
	// +optional
	Protocol string `json:"protocol,omitempty"`

	// Enforcement is enforce (block violations) or audit (log them).
	// +kubebuilder:validation:Enum=enforce;audit
	// +optional
	Enforcement string `json:"enforcement,omitempty"`

	// Access is a preset for L7 protocols: read-only, read-write or full.
	// +kubebuilder:validation:Enum=read-only;read-write;full
	// +optional
	Access string `json:"access,omitempty"`

	// Rules allow specific L7 requests.
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	// +optional
	Rules []L7Rule `json:"rules,omitempty"`

	// DenyRules block specific L7 requests; deny wins over allow.
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	// +optional
	DenyRules []L7Rule `json:"denyRules,omitempty"`

	// AllowedIPs are IPs or CIDRs the host may resolve to (SSRF override).
	// Loopback and link-local addresses stay blocked.
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=64
	// +kubebuilder:validation:items:XValidation:rule="isCIDR(self) || isIP(self)",message="allowedIPs entries must be IP addresses or CIDRs"
	// +listType=set
	// +optional
	AllowedIPs []string `json:"allowedIPs,omitempty"`

	// Path is a path glob that selects among endpoints sharing host:port.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Path string `json:"path,omitempty"`

	// MCP tunes the proxy's inspection of an MCP endpoint (protocol mcp;
	// OpenShell 0.1, the endpoint's McpOptions). A 0.0.x gateway refuses a
	// policy that sets it.
	// +optional
	MCP *MCPOptions `json:"mcp,omitempty"`
}

// MCPOptions are the release's McpOptions of an MCP endpoint, passed as
// they are (the 0.1.5 documentation says no more of them than their
// names).
type MCPOptions struct {
	// StrictToolNames is the endpoint's strict_tool_names.
	// +optional
	StrictToolNames *bool `json:"strictToolNames,omitempty"`
	// AllowAllKnownMCPMethods is the endpoint's allow_all_known_mcp_methods.
	// +optional
	AllowAllKnownMCPMethods *bool `json:"allowAllKnownMCPMethods,omitempty"`
	// Versions are the MCP protocol versions of the endpoint's versions,
	// e.g. 2025-06-18.
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=32
	// +kubebuilder:validation:items:Pattern=`^[A-Za-z0-9._-]+$`
	// +listType=set
	// +optional
	Versions []string `json:"versions,omitempty"`
}

// NetworkBinary names an executable.
type NetworkBinary struct {
	// Path of the executable, absolute.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4096
	// +kubebuilder:validation:XValidation:rule="self.startsWith('/')",message="binary paths must be absolute"
	// +required
	Path string `json:"path"`
}

// L7Rule matches requests of an L7 protocol.
type L7Rule struct {
	// Method is the HTTP method (or glob), e.g. GET.
	// +kubebuilder:validation:MaxLength=32
	// +optional
	Method string `json:"method,omitempty"`
	// Path is the request path glob.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Path string `json:"path,omitempty"`
	// Command is the SQL or JSON-RPC command.
	// +kubebuilder:validation:MaxLength=256
	// +optional
	Command string `json:"command,omitempty"`
	// OperationType is the GraphQL operation type (query, mutation, subscription).
	// +kubebuilder:validation:MaxLength=32
	// +optional
	OperationType string `json:"operationType,omitempty"`
	// OperationName is the GraphQL operation name.
	// +kubebuilder:validation:MaxLength=256
	// +optional
	OperationName string `json:"operationName,omitempty"`
}

// OpenShellPolicyStatus is the observed state of a policy.
type OpenShellPolicyStatus struct {
	// Conditions: Ready.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// SandboxCount is how many OpenShellSandboxes reference this policy.
	// +optional
	SandboxCount int32 `json:"sandboxCount,omitempty"`

	// ObservedGeneration is the spec generation the operator last acted on fully.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Advisor is what the policy's sandboxes propose and what became of
	// the decisions (spec.advisor).
	// +optional
	Advisor *PolicyAdvisorStatus `json:"advisor,omitempty"`
}

// PolicyAdvisorStatus lists pending proposals and decisions' outcomes.
type PolicyAdvisorStatus struct {
	// Proposals are the pending proposals of the policy's sandboxes, taken
	// in turn from each sandbox (its oldest first), so that one agent's
	// flood does not hide another's. The gateway's draft history (every proposal and decision, with
	// times) stays at the gateway: see drafts.
	// +kubebuilder:validation:MaxItems=32
	// +listType=atomic
	// +optional
	Proposals []PolicyProposal `json:"proposals,omitempty"`

	// Omitted counts pending proposals not listed (more than 32).
	// +optional
	Omitted int32 `json:"omitted,omitempty"`

	// Drafts link each sandbox with pending proposals or decisions to its
	// draft at the gateway: the gateway's sandbox name and draft version,
	// under which GetDraftHistory (`openshell policy` on the CLI) shows its
	// whole history.
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	// +optional
	Drafts []DraftReference `json:"drafts,omitempty"`

	// Decisions are the outcome of each spec.advisor.decisions entry.
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	// +optional
	Decisions []ProposalOutcome `json:"decisions,omitempty"`
}

// PolicyProposal is one pending proposal: a network rule an agent asks for.
type PolicyProposal struct {
	// ID names the proposal in spec.advisor.decisions.
	ID string `json:"id"`
	// Sandbox is the OpenShellSandbox that proposed it.
	Sandbox string `json:"sandbox"`
	// RuleName is the name the agent gave the rule.
	// +optional
	RuleName string `json:"ruleName,omitempty"`
	// Rule is the proposed rule as a spec.networkPolicies entry (YAML), to
	// adopt as it is or edited.
	// +optional
	Rule string `json:"rule,omitempty"`
	// NotExpressible lists what the proposed rule holds that
	// spec.networkPolicies cannot carry (left out of rule).
	// +optional
	NotExpressible string `json:"notExpressible,omitempty"`
	// Binary is the executable the proposal names (agent-written).
	// +optional
	Binary string `json:"binary,omitempty"`
	// Rationale is the agent's reason (supporting context; the rule is the
	// contract).
	// +optional
	Rationale string `json:"rationale,omitempty"`
	// SecurityNotes are the gateway's notes on the rule's risk (they may
	// not cover every endpoint: read the rule).
	// +optional
	SecurityNotes string `json:"securityNotes,omitempty"`
	// ValidationResult is the gateway's check of the rule.
	// +optional
	ValidationResult string `json:"validationResult,omitempty"`
	// HitCount is how many denied requests the proposal covers.
	// +optional
	HitCount int32 `json:"hitCount,omitempty"`
	// Proposed is when the agent proposed it.
	// +optional
	Proposed *metav1.Time `json:"proposed,omitempty"`
}

// DraftReference links a sandbox to its draft at the gateway.
type DraftReference struct {
	// Sandbox is the OpenShellSandbox.
	Sandbox string `json:"sandbox"`
	// Gateway is the namespace/name of its OpenShellGateway.
	Gateway string `json:"gateway"`
	// GatewaySandbox is its name at the gateway.
	GatewaySandbox string `json:"gatewaySandbox"`
	// DraftVersion is the gateway's draft version last read.
	// +optional
	DraftVersion int64 `json:"draftVersion,omitempty"`
	// Pending counts the sandbox's pending proposals, listed or not.
	// +optional
	Pending int32 `json:"pending,omitempty"`
}

// ProposalState is where a decision stands.
type ProposalState string

const (
	// ProposalStateClosed: the proposal is decided at the gateway.
	ProposalStateClosed ProposalState = "Closed"
	// ProposalStateWaiting: the decision is not carried out yet (an
	// Approved rule is not in force in the sandbox, or the gateway's
	// answer is to be read again); the message says which.
	ProposalStateWaiting ProposalState = "Waiting"
	// ProposalStateNotFound: no pending proposal of that ID was seen for
	// the sandbox.
	ProposalStateNotFound ProposalState = "NotFound"
	// ProposalStateFailed: closing it at the gateway failed (message).
	ProposalStateFailed ProposalState = "Failed"
)

// ProposalOutcome is what became of one decision.
type ProposalOutcome struct {
	// Proposal is the decision's proposal ID.
	Proposal string `json:"proposal"`
	// Sandbox is the decision's sandbox.
	Sandbox string `json:"sandbox"`
	// State is Closed, Waiting, NotFound or Failed.
	State ProposalState `json:"state"`
	// Edited says an Approved rule differs from the proposed one.
	// +optional
	Edited bool `json:"edited,omitempty"`
	// Message says why, for Waiting, NotFound and Failed.
	// +optional
	Message string `json:"message,omitempty"`
}

// Condition type and reasons of the advisor on an OpenShellPolicy.
const (
	// ConditionProposalsSynced is True when every pending proposal of the
	// policy's sandboxes is listed and every decision is closed at the
	// gateway.
	ConditionProposalsSynced = "ProposalsSynced"
	// ProposalsReasonSynced (True): listed and closed.
	ProposalsReasonSynced = "Synced"
	// ProposalsReasonWaiting (False): a decision is not carried out yet
	// (an approved rule not in force in a sandbox).
	ProposalsReasonWaiting = "Waiting"
	// ProposalsReasonUnknownProposal (False): a decision names a proposal
	// that no sandbox of this policy has pending.
	ProposalsReasonUnknownProposal = "UnknownProposal"
	// ProposalsReasonGatewayError (False): a gateway call failed (message).
	ProposalsReasonGatewayError = "GatewayError"
	// ProposalsReasonUnsupported (False): a sandbox of this policy runs on
	// a 0.0.x gateway, where the operator does not read proposals.
	ProposalsReasonUnsupported = "Unsupported"
)

// OpenShellPolicy is a Tenant Admin's sandbox policy (filesystem, process
// and network rules) that OpenShellSandboxes in the same namespace reference.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=ospol,categories=openshell
// +kubebuilder:printcolumn:name="Sandboxes",type=integer,JSONPath=`.status.sandboxCount`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type OpenShellPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired policy.
	// +optional
	Spec OpenShellPolicySpec `json:"spec,omitempty"`
	// Status is the observed state.
	// +optional
	Status OpenShellPolicyStatus `json:"status,omitempty"`
}

// OpenShellPolicyList contains a list of OpenShellPolicy.
// +kubebuilder:object:root=true
type OpenShellPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []OpenShellPolicy `json:"items"`
}

func init() {
	objectTypes = append(objectTypes, &OpenShellPolicy{}, &OpenShellPolicyList{})
}

// Reasons of an OpenShellPolicy's Ready.
const (
	// PolicyReasonValid (True): the policy is valid; the message counts its users.
	PolicyReasonValid = "Valid"
	// PolicyReasonInUse (False): deletion waits until no sandbox references
	// the policy; the message names them.
	PolicyReasonInUse = "InUse"
)

// SandboxDefaults are a namespace's defaults for the sandbox fields of the
// same names.
type SandboxDefaults struct {
	// RuntimeClassName, for sandboxes that name none (the gateway must allow it).
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +optional
	RuntimeClassName string `json:"runtimeClassName,omitempty"`

	// Resources, for sandboxes that set none.
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`

	// TTLSecondsAfterFinished, for sandboxes that set none.
	// +kubebuilder:validation:Minimum=0
	// +optional
	TTLSecondsAfterFinished *int32 `json:"ttlSecondsAfterFinished,omitempty"`

	// Providers, for sandboxes that name none: OpenShellProviders of this
	// namespace.
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=253
	// +listType=set
	// +optional
	Providers []string `json:"providers,omitempty"`
}
