package gateway

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/pelletier/go-toml/v2"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/gatewayline"
	"github.com/openshell/openshell-operator/internal/oidc"
)

// Paths inside the gateway container.
const (
	ConfigDir         = "/etc/openshell"
	ConfigFile        = "gateway.toml"
	JWTDir            = "/etc/openshell-jwt"
	ServerTLSDir      = "/etc/openshell-tls/server"
	ServerExternalDir = "/etc/openshell-tls/server-external"
	ClientCADir       = "/etc/openshell-tls/client-ca"
	TrustDir          = "/etc/openshell-tls/trust"
	// TrustFile is the bundle SSL_CERT_FILE names.
	TrustFile = "ca-bundle.crt"
	DataDir   = "/var/openshell"
	KEKEnv    = "OPENSHELL_GATEWAY_CREDENTIAL_KEY_ENCRYPTION_KEY"
	// JWTTTLSeconds bounds sandbox JWTs; upstream warns about non-expiring ones.
	JWTTTLSeconds = 3600
	// ProxyUID is the network sidecar's UID in relaxed mode (upstream default).
	ProxyUID = 1337
)

// The gateway rejects unknown keys in gateway.toml, so these types carry
// only keys its upstream configuration schema defines, and omit every
// unset one.
type gatewayFile struct {
	OpenShell openshellSection `toml:"openshell"`
}

type openshellSection struct {
	Version int            `toml:"version"`
	Gateway gatewaySection `toml:"gateway"`
	Drivers driversSection `toml:"drivers"`
}

type gatewaySection struct {
	BindAddress                 string            `toml:"bind_address"`
	HealthBindAddress           string            `toml:"health_bind_address"`
	MetricsBindAddress          string            `toml:"metrics_bind_address"`
	LogLevel                    string            `toml:"log_level"`
	ComputeDrivers              []string          `toml:"compute_drivers"`
	SandboxNamespace            string            `toml:"sandbox_namespace"`
	DefaultImage                string            `toml:"default_image,omitempty"`
	SupervisorImage             string            `toml:"supervisor_image,omitempty"`
	ClientTLSSecretName         string            `toml:"client_tls_secret_name"`
	PolicyValidationFailureMode string            `toml:"policy_validation_failure_mode"`
	TLS                         tlsSection        `toml:"tls"`
	GatewayJWT                  jwtSection        `toml:"gateway_jwt"`
	OIDC                        *oidcSection      `toml:"oidc,omitempty"`
	CredentialStorage           credentialStorage `toml:"credential_storage"`
}

type tlsSection struct {
	CertPath            string   `toml:"cert_path"`
	KeyPath             string   `toml:"key_path"`
	ClientCAPath        string   `toml:"client_ca_path"`
	ExternalCertPath    string   `toml:"external_cert_path,omitempty"`
	ExternalKeyPath     string   `toml:"external_key_path,omitempty"`
	ExternalServerNames []string `toml:"external_server_names,omitempty"`
}

type jwtSection struct {
	SigningKeyPath string `toml:"signing_key_path"`
	PublicKeyPath  string `toml:"public_key_path"`
	KIDPath        string `toml:"kid_path"`
	GatewayID      string `toml:"gateway_id"`
	TTLSecs        int    `toml:"ttl_secs"`
}

type oidcSection struct {
	Issuer     string `toml:"issuer"`
	Audience   string `toml:"audience"`
	RolesClaim string `toml:"roles_claim"`
	AdminRole  string `toml:"admin_role"`
	UserRole   string `toml:"user_role"`
}

type credentialStorage struct {
	KeyEncryptionKeyEnv string `toml:"key_encryption_key_env"`
}

type driversSection struct {
	Kubernetes kubernetesDriver `toml:"kubernetes"`
}

type kubernetesDriver struct {
	WorkspaceMode            string       `toml:"workspace_mode"`
	GatewayID                string       `toml:"gateway_id"`
	Namespace                string       `toml:"namespace"`
	ServiceAccountName       string       `toml:"service_account_name"`
	Topology                 string       `toml:"topology"`
	GRPCEndpoint             string       `toml:"grpc_endpoint"`
	ClientTLSSecretName      string       `toml:"client_tls_secret_name"`
	SupervisorSideloadMethod string       `toml:"supervisor_sideload_method"`
	SATokenTTLSecs           int          `toml:"sa_token_ttl_secs"`
	Sidecar                  *sidecarOpts `toml:"sidecar,omitempty"`
	// ManagedSSHIngress makes the driver give every namespace it manages
	// the same SSH NetworkPolicy the operator gives the shared sandbox
	// namespace; rendered always (as the chart does) so that no workspace
	// mode leaves sandbox SSH open.
	ManagedSSHIngress sshIngress `toml:"managed_ssh_ingress"`
	// HTTPSProxy and NoProxy are the upstream proxy the network supervisor
	// sends policy-approved CONNECT egress through.
	HTTPSProxy string `toml:"https_proxy,omitempty"`
	NoProxy    string `toml:"no_proxy,omitempty"`
	// Pod settings the gateway applies to every sandbox pod.
	ImagePullPolicy  string   `toml:"image_pull_policy,omitempty"`
	ImagePullSecrets []string `toml:"image_pull_secrets,omitempty"`
	AppArmorProfile  string   `toml:"app_armor_profile,omitempty"`
}

type sshIngress struct {
	Enabled            bool              `toml:"enabled"`
	GatewayNamespace   string            `toml:"gateway_namespace"`
	GatewayPodSelector map[string]string `toml:"gateway_pod_selector"`
}

type sidecarOpts struct {
	ProxyUID                        int  `toml:"proxy_uid"`
	ProcessBinaryAwareNetworkPolicy bool `toml:"process_binary_aware_network_policy"`
}

// GatewayTOML renders gateway.toml in the schema of the gateway's release
// line (in.Line): version 1 for 0.0.x, version 2 for 0.1.
func GatewayTOML(gw *openshellv1alpha1.OpenShellGateway, in Inputs) (string, error) {
	if in.Line == gatewayline.V01 {
		return gatewayTOMLV2(gw, in)
	}
	return gatewayTOMLV1(gw, in)
}

// gatewayTOMLV1 renders schema version 1 for a 0.0.x gateway. TLS is
// always on: there is no way to render disable_tls.
func gatewayTOMLV1(gw *openshellv1alpha1.OpenShellGateway, in Inputs) (string, error) {
	n := NamesFor(gw)
	g := gatewaySection{
		BindAddress:                 fmt.Sprintf("0.0.0.0:%d", PortGRPC),
		HealthBindAddress:           fmt.Sprintf("0.0.0.0:%d", PortHealth),
		MetricsBindAddress:          fmt.Sprintf("0.0.0.0:%d", PortMetrics),
		LogLevel:                    logLevel(gw),
		ComputeDrivers:              []string{"kubernetes"},
		SandboxNamespace:            n.SandboxNamespace,
		DefaultImage:                in.Images.Sandbox,
		SupervisorImage:             in.Images.Supervisor,
		ClientTLSSecretName:         n.ClientTLS,
		PolicyValidationFailureMode: "fail_closed",
		TLS:                         serverTLS(gw),
		GatewayJWT:                  gatewayJWT(n),
		OIDC:                        gatewayOIDC(in),
		CredentialStorage:           credentialStorage{KeyEncryptionKeyEnv: KEKEnv},
	}
	k := kubernetesDriver{
		WorkspaceMode:       strings.ToLower(string(WorkspaceMode(gw))),
		GatewayID:           n.GatewayID,
		Namespace:           n.SandboxNamespace,
		ServiceAccountName:  n.SandboxSA,
		Topology:            strings.ToLower(string(Topology(gw))),
		GRPCEndpoint:        grpcEndpoint(gw),
		ClientTLSSecretName: n.ClientTLS,
		// Image volumes need Kubernetes 1.35 and a volume type outside the
		// narrow SCC; the init container copy works everywhere.
		SupervisorSideloadMethod: "init-container",
		SATokenTTLSecs:           3600,
		ManagedSSHIngress:        sshIngress{Enabled: true, GatewayNamespace: gw.Namespace, GatewayPodSelector: SelectorLabels(gw)},
	}
	if m := gw.Spec.Managed; m != nil && m.Telemetry != nil {
		// Nothing documents an OTLP table in the 0.0.x schema, which
		// rejects unknown keys.
		return "", fmt.Errorf("spec.managed.telemetry needs an OpenShell 0.1 gateway: the 0.0.x configuration has no OTLP export")
	}
	if m := gw.Spec.Managed; m != nil {
		k.ImagePullPolicy = string(m.Sandboxes.ImagePullPolicy)
		k.ImagePullSecrets = m.Sandboxes.ImagePullSecrets
		k.AppArmorProfile = m.Sandboxes.AppArmorProfile
	}
	k.HTTPSProxy, k.NoProxy = driverProxy(in)
	if Topology(gw) == openshellv1alpha1.SupervisorTopologySidecar {
		k.Sidecar = &sidecarOpts{ProxyUID: ProxyUID, ProcessBinaryAwareNetworkPolicy: true}
	}
	b, err := toml.Marshal(gatewayFile{OpenShell: openshellSection{Version: 1, Gateway: g, Drivers: driversSection{Kubernetes: k}}})
	if err != nil {
		return "", fmt.Errorf("render gateway.toml: %w", err)
	}
	return "# Rendered by openshell-operator from OpenShellGateway " + gw.Namespace + "/" + gw.Name + ". Do not edit.\n" + string(b), nil
}

// gatewayOIDC is the identity provider the gateway trusts (nil until the
// operator's identity is configured), with the roles the operator's issuer
// puts in its tokens.
func gatewayOIDC(in Inputs) *oidcSection {
	if in.OIDC == nil {
		return nil
	}
	return &oidcSection{Issuer: in.OIDC.Issuer, Audience: in.OIDC.Audience,
		RolesClaim: oidc.RolesClaim, AdminRole: oidc.AdminRole, UserRole: oidc.UserRole}
}

// driverProxy is the upstream proxy the sandboxes' policy-approved egress
// goes through (the cluster's), and what bypasses it.
func driverProxy(in Inputs) (proxy, noProxy string) {
	if p, err := UpstreamProxy(in.Proxy); err == nil && p != "" {
		return p, strings.TrimSpace(in.Proxy.NoProxy)
	}
	return "", ""
}

// logLevel is the gateway's log level (info unless the spec names one).
func logLevel(gw *openshellv1alpha1.OpenShellGateway) string {
	if m := gw.Spec.Managed; m != nil && m.LogLevel != "" {
		return m.LogLevel
	}
	return "info"
}

// serverTLS is the listener's certificate, the client CA, and with an
// external issuer the certificate presented by SNI to external names.
func serverTLS(gw *openshellv1alpha1.OpenShellGateway) tlsSection {
	t := tlsSection{CertPath: ServerTLSDir + "/tls.crt", KeyPath: ServerTLSDir + "/tls.key", ClientCAPath: ClientCADir + "/ca.crt"}
	if ExternalIssuer(gw) != nil {
		t.ExternalCertPath = ServerExternalDir + "/tls.crt"
		t.ExternalKeyPath = ServerExternalDir + "/tls.key"
		t.ExternalServerNames = ExternalDNSNames(gw)
	}
	return t
}

// gatewayJWT is the gateway's own token signing (sandbox and session JWTs).
func gatewayJWT(n Names) jwtSection {
	return jwtSection{SigningKeyPath: JWTDir + "/signing.pem", PublicKeyPath: JWTDir + "/public.pem", KIDPath: JWTDir + "/kid",
		GatewayID: n.GatewayID, TTLSecs: JWTTTLSeconds}
}

// grpcEndpoint is where sandboxes reach the gateway: its Service.
func grpcEndpoint(gw *openshellv1alpha1.OpenShellGateway) string {
	return fmt.Sprintf("https://%s.%s.svc.cluster.local:%d", NamesFor(gw).Fullname, gw.Namespace, PortGRPC)
}

// ExternalDNSNames are the names on the externally presented certificate.
func ExternalDNSNames(gw *openshellv1alpha1.OpenShellGateway) []string {
	var out []string
	if h := RouteHost(gw); h != "" {
		out = append(out, h)
	}
	if m := gw.Spec.Managed; m != nil {
		for _, d := range m.TLS.ExternalDNSNames {
			if d != RouteHost(gw) {
				out = append(out, d)
			}
		}
	}
	return out
}

// ConfigHash is the pod template annotation value for a configuration and
// the trust bundle the gateway reads at start-up.
func ConfigHash(config string, trustBundle []byte) string {
	sum := sha256.Sum256(append([]byte(config+"\x00"), trustBundle...))
	return hex.EncodeToString(sum[:])
}
