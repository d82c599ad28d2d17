// Package gateway renders every object of a managed OpenShell gateway as
// pure functions of the OpenShellGateway and resolved Inputs: the same
// inputs always give the same objects, which golden files pin down.
package gateway

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/gatewayline"
	"github.com/openshell/openshell-operator/internal/operatorenv"
)

// Ports of the gateway container.
const (
	PortGRPC    = 8080
	PortHealth  = 8081
	PortMetrics = 9090
	// SandboxSSHPort is where the gateway reaches sandbox pods.
	SandboxSSHPort = 2222
)

// Labels on every object the operator renders for a gateway.
const (
	LabelName      = "app.kubernetes.io/name"
	LabelInstance  = "app.kubernetes.io/instance"
	LabelComponent = "app.kubernetes.io/component"
	LabelManagedBy = "app.kubernetes.io/managed-by"
	LabelPartOf    = "app.kubernetes.io/part-of"
	// LabelGatewayNamespace and LabelGatewayName find a gateway's children
	// in other namespaces and at cluster scope, where owner references
	// cannot point at it.
	LabelGatewayNamespace = "openshell.ai/gateway-namespace"
	LabelGatewayName      = "openshell.ai/gateway-name"

	// AnnotationConfigHash on the pod template rolls the gateway when its
	// configuration changes, and only then.
	AnnotationConfigHash = "openshell.ai/config-hash"
	// AnnotationVersion on the pod template records the OpenShell release
	// it runs: once every pod runs the template, that is the gateway's
	// version (status.version). Templates without it are 0.0.111's, the
	// only release operators before it installed.
	AnnotationVersion = "openshell.ai/gateway-version"

	// AgentSandboxPodLabel is set by the Agent Sandbox controller on every
	// pod it creates; the sandbox NetworkPolicy selects on it.
	AgentSandboxPodLabel = "agents.x-k8s.io/sandbox-name-hash"

	ManagedByValue = "openshell-operator"
	// AppName is the app.kubernetes.io/name of the gateway's pods.
	AppName = "openshell-gateway"
)

// TLSSource says who issues the gateway's internal certificates.
type TLSSource string

const (
	// TLSCertManager: cert-manager issues them from a per-gateway CA.
	TLSCertManager TLSSource = "cert-manager"
	// TLSBuiltin: the operator's built-in PKI issues them.
	TLSBuiltin TLSSource = "built-in PKI"
)

// OIDC is the identity provider the gateway trusts for user tokens.
type OIDC struct {
	Issuer   string
	Audience string
	// CAPEM signs the issuer's serving certificate; the gateway trusts it
	// (through the trust bundle) to fetch discovery and JWKS.
	CAPEM []byte
}

// Inputs are everything rendering needs besides the gateway itself,
// resolved by the controller beforehand.
type Inputs struct {
	// Line is the gateway's release line, which decides the config schema,
	// the gateway's RBAC, the sandbox NetworkPolicy and the SCC (empty:
	// gatewayline.Legacy).
	Line gatewayline.Line
	// Version is the release rendered (its images are Images); the pod
	// template records it, and features a release added within its line
	// (0.1.5's pod label allowlist) follow it.
	Version string
	// Replaces is the release the gateway's pods run while they move to
	// Version (empty when they run it, or before the first install).
	Replaces string
	// Images are the operand images (gateway spec overrides applied).
	Images operatorenv.RelatedImages
	// Route and SCC report the OpenShift APIs (from preflight).
	Route, SCC bool
	// Proxy is the cluster's egress proxy (from the operator's own
	// environment, which OLM sets): the gateway process gets it, and its
	// sandboxes' network supervisors get it as their upstream proxy.
	Proxy operatorenv.Proxy
	// ServiceMonitor reports the Prometheus Operator's scrape API: the
	// gateway's metrics port gets a ServiceMonitor.
	ServiceMonitor bool
	// TLS is the certificate source.
	TLS TLSSource
	// OIDC is nil until the operator's identity is configured.
	OIDC *OIDC
	// Workspaces (Operator workspace mode) are the paired namespaces ready
	// for sandboxes: the driver's allowlist. A change reaches the running
	// gateway without a restart (not part of the config hash).
	Workspaces []string
	// TrustBundle is every root the gateway trusts for outbound TLS
	// (internal/trust.Bundle of public roots, the OIDC issuer's CA and, on
	// OpenShift, the cluster's trusted CA bundle); SSL_CERT_FILE names it
	// because that file replaces the gateway's built-in store.
	TrustBundle []byte
}

// OpenShift is true when the OpenShift security APIs are served; pods then
// leave UIDs and fsGroup to the restricted-v2 SCC.
func (in Inputs) OpenShift() bool { return in.SCC }

// DesiredVersion is the release a Managed gateway should run: its
// spec.managed.version, else the operator's default.
func DesiredVersion(gw *openshellv1alpha1.OpenShellGateway) string {
	if m := gw.Spec.Managed; m != nil && m.Version != "" {
		return m.Version
	}
	return gatewayline.DefaultManaged
}

// ResolveImages are the operand images of a release: the operator's own
// for the releases it ships (RELATED_IMAGE_* for its default,
// RELATED_IMAGE_LEGACY_* for gatewayline.LegacyManaged), none for any
// other, with the gateway's image overrides applied over either.
func ResolveImages(gw *openshellv1alpha1.OpenShellGateway, releases operatorenv.Releases, version string) operatorenv.RelatedImages {
	var out operatorenv.RelatedImages
	switch version {
	case gatewayline.DefaultManaged:
		out = releases.Default
	case gatewayline.LegacyManaged:
		out = releases.Legacy
	}
	if m := gw.Spec.Managed; m != nil {
		for _, o := range []struct {
			dst *string
			v   string
		}{
			{&out.Gateway, m.Images.Gateway}, {&out.Supervisor, m.Images.Supervisor},
			{&out.Sandbox, m.Images.Sandbox}, {&out.SandboxRuntime, m.Images.SandboxRuntime},
		} {
			if o.v != "" {
				*o.dst = o.v
			}
		}
	}
	return out
}

// MissingImages names the images a release's gateway needs that images
// lacks (0.1 also needs the sandbox runtime).
func MissingImages(images operatorenv.RelatedImages, line gatewayline.Line) []string {
	var out []string
	for _, i := range []struct{ name, v string }{{"gateway", images.Gateway}, {"supervisor", images.Supervisor}} {
		if i.v == "" {
			out = append(out, i.name)
		}
	}
	if line == gatewayline.V01 && images.SandboxRuntime == "" {
		out = append(out, "sandboxRuntime")
	}
	return out
}

// Names are the names of a gateway's objects.
type Names struct {
	// Fullname names the workload, Service, Route and gateway ServiceAccount.
	Fullname string
	Config   string
	// TrustBundle holds the gateway's CA bundle; TrustedCA, on OpenShift,
	// is the empty ConfigMap the Cluster Network Operator injects the
	// cluster's trusted CA bundle into.
	TrustBundle    string
	TrustedCA      string
	JWT            string
	KEK            string
	CA             string
	ServerTLS      string
	ServerExternal string
	ClientTLS      string
	SandboxSA      string
	// GatewayBinding binds the gateway to ClusterRoleGatewaySandboxes in
	// the sandbox namespace; RuntimeBinding (0.1) to
	// ClusterRoleGatewayRuntime.
	GatewayBinding, RuntimeBinding string
	// SandboxPolicy names the NetworkPolicy of the sandbox pods.
	SandboxPolicy    string
	SandboxNamespace string
	// ClusterScoped names this gateway's ClusterRole and ClusterRoleBinding;
	// it includes the namespace so gateways of the same name never collide.
	ClusterScoped string
	// GatewayID is the gateway's DNS-1123 identity (JWT issuer/audience,
	// managed namespace prefix).
	GatewayID string
	// Workspaces (Operator mode) is the ConfigMap of the driver's
	// namespace allowlist; WorkspacesBinding binds the gateway to
	// ClusterRoleGatewayWorkspaces; ClientTLSReader is the Role (and its
	// binding) that lets the driver read its client certificate.
	Workspaces, WorkspacesBinding, ClientTLSReader string
}

// NamesFor derives object names from the gateway.
func NamesFor(gw *openshellv1alpha1.OpenShellGateway) Names {
	n := gw.Name
	sandboxNS := gw.Namespace
	if m := gw.Spec.Managed; m != nil && m.Sandboxes.Namespace != "" {
		sandboxNS = m.Sandboxes.Namespace
	}
	// Names outside the gateway's namespace carry a hash of namespace/name:
	// two gateways of one name in different namespaces may share a sandbox
	// namespace, and server-side apply with forced ownership would let each
	// take the other's objects.
	sandboxPrefix := n
	if sandboxNS != gw.Namespace {
		sandboxPrefix = strings.TrimRight(n[:min(len(n), 40)], "-.") + "-" + shortHash(gw.Namespace+"/"+n)
	}
	return Names{
		Fullname:         n,
		Config:           n + "-config",
		TrustBundle:      n + "-trust-bundle",
		TrustedCA:        n + "-trusted-ca",
		JWT:              n + "-jwt-keys",
		KEK:              n + "-credential-kek",
		CA:               n + "-ca-tls",
		ServerTLS:        n + "-server-tls",
		ServerExternal:   n + "-server-external-tls",
		ClientTLS:        n + "-client-tls",
		SandboxSA:        sandboxPrefix + "-sandbox",
		GatewayBinding:   sandboxPrefix + "-gateway",
		RuntimeBinding:   sandboxPrefix + "-gateway-runtime",
		SandboxPolicy:    sandboxPrefix + "-sandboxes",
		SandboxNamespace: sandboxNS,
		// Namespaces hold no dots, so "<namespace>.<name>" is unambiguous
		// ("team-a"/"prod" and "team"/"a-prod" no longer meet).
		ClusterScoped: truncateHashed("openshell-gateway-"+gw.Namespace+"."+n, gw.Namespace+"/"+n, 253),
		GatewayID:     GatewayID(gw.Namespace, gw.Name),
		Workspaces:    n + "-workspaces",
		// ":" appears in no namespace or gateway name, so this never meets
		// another gateway's ClusterScoped name.
		WorkspacesBinding: truncateHashed("openshell-gateway:workspaces:"+gw.Namespace+"."+n, "workspaces:"+gw.Namespace+"/"+n, 253),
		ClientTLSReader:   n + "-client-tls-reader",
	}
}

// GatewayID is a DNS-1123 label of at most 32 characters, unique per
// namespace/name (always a hash of both, so gateways of one name in two
// namespaces differ): in managed workspace mode the gateway prefixes
// namespaces with "openshell-<id>-", and 19 more characters must still fit
// in 63.
func GatewayID(namespace, name string) string {
	prefix := strings.Map(func(r rune) rune {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			return r
		}
		return '-'
	}, name)
	if len(prefix) > 23 {
		prefix = prefix[:23]
	}
	prefix = strings.Trim(prefix, "-")
	if prefix == "" {
		prefix = "gw"
	}
	return prefix + "-" + shortHash(namespace+"/"+name)
}

// shortHash is 8 hex characters of sha256(key).
func shortHash(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])[:8]
}

// truncateHashed returns s if it fits max, else a prefix of s and a short
// hash of key, so that truncated names stay unique and deterministic.
func truncateHashed(s, key string, max int) string {
	if len(s) <= max {
		return s
	}
	sum := sha256.Sum256([]byte(key))
	h := hex.EncodeToString(sum[:])[:8]
	prefix := strings.TrimRight(s[:max-len(h)-1], "-.")
	return fmt.Sprintf("%s-%s", prefix, h)
}

// Labels are the common labels of every child.
func Labels(gw *openshellv1alpha1.OpenShellGateway, component string) map[string]string {
	return map[string]string{
		LabelName:             AppName,
		LabelInstance:         gw.Name,
		LabelComponent:        component,
		LabelManagedBy:        ManagedByValue,
		LabelPartOf:           "openshell",
		LabelGatewayNamespace: gw.Namespace,
		LabelGatewayName:      truncateHashed(gw.Name, gw.Namespace+"/"+gw.Name, 63),
	}
}

// SelectorLabels select the gateway pods.
func SelectorLabels(gw *openshellv1alpha1.OpenShellGateway) map[string]string {
	return map[string]string{LabelName: AppName, LabelInstance: gw.Name}
}

// Replicas is the desired gateway replica count.
func Replicas(gw *openshellv1alpha1.OpenShellGateway) int32 {
	if m := gw.Spec.Managed; m != nil && m.Replicas != nil {
		return *m.Replicas
	}
	return 1
}

// UsesPostgres reports whether the gateway uses an external database.
func UsesPostgres(gw *openshellv1alpha1.OpenShellGateway) bool {
	m := gw.Spec.Managed
	return m != nil && m.Persistence != nil && m.Persistence.Postgres != nil
}

// Topology is the supervisor topology, Sidecar by default.
func Topology(gw *openshellv1alpha1.OpenShellGateway) openshellv1alpha1.SupervisorTopology {
	if m := gw.Spec.Managed; m != nil && m.SupervisorTopology != "" {
		return m.SupervisorTopology
	}
	return openshellv1alpha1.SupervisorTopologySidecar
}

// WorkspaceMode is the driver workspace mode, Shared by default.
func WorkspaceMode(gw *openshellv1alpha1.OpenShellGateway) openshellv1alpha1.WorkspaceMode {
	if m := gw.Spec.Managed; m != nil && m.Sandboxes.WorkspaceMode != "" {
		return m.Sandboxes.WorkspaceMode
	}
	return openshellv1alpha1.WorkspaceModeShared
}

// RouteEnabled reports whether a Route is wanted (and the API exists).
func RouteEnabled(gw *openshellv1alpha1.OpenShellGateway, in Inputs) bool {
	if !in.Route {
		return false
	}
	m := gw.Spec.Managed
	return m == nil || m.Route.Enabled == nil || *m.Route.Enabled
}

// RouteHost is the configured Route host, possibly empty.
func RouteHost(gw *openshellv1alpha1.OpenShellGateway) string {
	if m := gw.Spec.Managed; m != nil {
		return m.Route.Host
	}
	return ""
}

// ServiceDNSNames are the in-cluster names of the gateway Service.
func ServiceDNSNames(gw *openshellv1alpha1.OpenShellGateway) []string {
	n := NamesFor(gw).Fullname
	return []string{n, n + "." + gw.Namespace, n + "." + gw.Namespace + ".svc", n + "." + gw.Namespace + ".svc.cluster.local"}
}

// ExternalIssuer is the admin's issuer for the external certificate, if any.
func ExternalIssuer(gw *openshellv1alpha1.OpenShellGateway) *openshellv1alpha1.IssuerReference {
	if m := gw.Spec.Managed; m != nil {
		return m.TLS.IssuerRef
	}
	return nil
}
