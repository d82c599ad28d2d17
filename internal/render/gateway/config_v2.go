package gateway

import (
	"fmt"
	"slices"
	"strings"

	"github.com/pelletier/go-toml/v2"
	corev1 "k8s.io/api/core/v1"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/gatewayline"
	"github.com/openshell/openshell-operator/internal/sandboxspec"
)

// Schema version 2 of gateway.toml, which 0.1 gateways require: driver
// settings live only in the driver's table, the compute driver is a
// scalar, and unknown keys stop the gateway at every level, so these types
// carry only keys the 0.1 loader defines (shared/reference/openshell-0.1.md
// §2) and omit every unset one. The sidecar topology and its keys are
// gone: 0.1 always runs the two-pod runtime.

type fileV2 struct {
	OpenShell openshellV2 `toml:"openshell"`
}

type openshellV2 struct {
	Version int       `toml:"version"`
	Gateway gatewayV2 `toml:"gateway"`
	Drivers driversV2 `toml:"drivers"`
}

type gatewayV2 struct {
	BindAddress                 string            `toml:"bind_address"`
	HealthBindAddress           string            `toml:"health_bind_address"`
	MetricsBindAddress          string            `toml:"metrics_bind_address"`
	LogLevel                    string            `toml:"log_level"`
	ComputeDriver               string            `toml:"compute_driver"`
	PolicyValidationFailureMode string            `toml:"policy_validation_failure_mode"`
	TLS                         tlsSection        `toml:"tls"`
	GatewayJWT                  jwtSection        `toml:"gateway_jwt"`
	OIDC                        *oidcSection      `toml:"oidc,omitempty"`
	CredentialStorage           credentialStorage `toml:"credential_storage"`
	OTLP                        *otlpSection      `toml:"otlp,omitempty"`
}

// otlpSection is [openshell.gateway.otlp]: its presence turns the export
// on (OTLP/gRPC only).
type otlpSection struct {
	Endpoint    string `toml:"endpoint"`
	ServiceName string `toml:"service_name,omitempty"`
}

type driversV2 struct {
	Kubernetes kubernetesV2 `toml:"kubernetes"`
}

type kubernetesV2 struct {
	WorkspaceMode       string     `toml:"workspace_mode"`
	GatewayID           string     `toml:"gateway_id"`
	Namespace           string     `toml:"namespace"`
	ServiceAccountName  string     `toml:"service_account_name"`
	DefaultImage        string     `toml:"default_image,omitempty"`
	SupervisorImage     string     `toml:"supervisor_image,omitempty"`
	SandboxRuntimeImage string     `toml:"sandbox_runtime_image,omitempty"`
	GRPCEndpoint        string     `toml:"grpc_endpoint"`
	ClientTLSSecretName string     `toml:"client_tls_secret_name"`
	SATokenTTLSecs      int        `toml:"sa_token_ttl_secs"`
	ManagedSSHIngress   sshIngress `toml:"managed_ssh_ingress"`
	HTTPSProxy          string     `toml:"https_proxy,omitempty"`
	NoProxy             string     `toml:"no_proxy,omitempty"`
	ImagePullPolicy     string     `toml:"image_pull_policy,omitempty"`
	ImagePullSecrets    []string   `toml:"image_pull_secrets,omitempty"`
	// SandboxUID and SandboxGID pin the runtime's identity off OpenShift,
	// where the sources disagree on the fallback (10001 or 1000); on
	// OpenShift the driver takes the start of the namespace's UID range,
	// which restricted-v2 requires.
	SandboxUID *int `toml:"sandbox_uid,omitempty"`
	SandboxGID *int `toml:"sandbox_gid,omitempty"`
	// AllowedPodLabels (from 0.1.5) names the template label keys the
	// driver accepts: the operator's tenant labels
	// (sandboxspec.OperatorPodLabels) and the keys the platform admin lets
	// tenants set (spec.managed.sandboxes.allowedPodLabels). The release notes give the key but
	// not its type; a list of keys is assumed (docs/gateway-lines.md). A
	// wrong guess stops the gateway at startup, visibly; it never widens
	// what pods may carry.
	AllowedPodLabels []string `toml:"allowed_pod_labels,omitempty"`
	// OperatorNamespaceFile is the allowlist of workspace mode operator
	// (WorkspacesConfigMap, mounted): exactly one of it and
	// operator_namespace_label, and the operator uses the file.
	OperatorNamespaceFile string `toml:"operator_namespace_file,omitempty"`
}

// SandboxUID is the sandbox pods' UID and GID off OpenShift.
const SandboxUID = 10001

// pullPolicies are schema v2's spellings (Kubernetes' capitalised ones are
// refused by some 0.1 releases).
var pullPolicies = map[corev1.PullPolicy]string{
	corev1.PullAlways: "always", corev1.PullIfNotPresent: "if_not_present", corev1.PullNever: "never",
}

// gatewayTOMLV2 renders gateway.toml for a 0.1 gateway. TLS is always on:
// there is no way to render disable_tls. Settings of the 0.0.x sidecar
// runtime that 0.1 dropped are refused rather than silently lost.
func gatewayTOMLV2(gw *openshellv1alpha1.OpenShellGateway, in Inputs) (string, error) {
	n := NamesFor(gw)
	g := gatewayV2{
		BindAddress:                 fmt.Sprintf("0.0.0.0:%d", PortGRPC),
		HealthBindAddress:           fmt.Sprintf("0.0.0.0:%d", PortHealth),
		MetricsBindAddress:          fmt.Sprintf("0.0.0.0:%d", PortMetrics),
		LogLevel:                    logLevel(gw),
		ComputeDriver:               "kubernetes",
		PolicyValidationFailureMode: "fail_closed",
		TLS:                         serverTLS(gw),
		GatewayJWT:                  gatewayJWT(n),
		OIDC:                        gatewayOIDC(in),
		CredentialStorage:           credentialStorage{KeyEncryptionKeyEnv: KEKEnv},
	}
	k := kubernetesV2{
		WorkspaceMode:       strings.ToLower(string(WorkspaceMode(gw))),
		GatewayID:           n.GatewayID,
		Namespace:           n.SandboxNamespace,
		ServiceAccountName:  n.SandboxSA,
		DefaultImage:        in.Images.Sandbox,
		SupervisorImage:     in.Images.Supervisor,
		SandboxRuntimeImage: in.Images.SandboxRuntime,
		GRPCEndpoint:        grpcEndpoint(gw),
		ClientTLSSecretName: n.ClientTLS,
		SATokenTTLSecs:      3600,
		ManagedSSHIngress:   sshIngress{Enabled: true, GatewayNamespace: gw.Namespace, GatewayPodSelector: SelectorLabels(gw)},
	}
	if m := gw.Spec.Managed; m != nil && m.Telemetry != nil {
		g.OTLP = &otlpSection{Endpoint: m.Telemetry.OTLP.Endpoint, ServiceName: m.Telemetry.OTLP.ServiceName}
	}
	if m := gw.Spec.Managed; m != nil {
		if m.Sandboxes.AppArmorProfile != "" {
			return "", fmt.Errorf("spec.managed.sandboxes.appArmorProfile configures the 0.0.x sidecar runtime, which 0.1 gateways do not have: remove it")
		}
		k.ImagePullPolicy = pullPolicies[m.Sandboxes.ImagePullPolicy]
		k.ImagePullSecrets = m.Sandboxes.ImagePullSecrets
	}
	if OperatorMode(gw) {
		k.OperatorNamespaceFile = WorkspacesDir + "/" + WorkspacesFile
		// The gateway's own pull Secrets are merged into each paired
		// namespace's one (PullSecret), with its tenant's.
		k.ImagePullSecrets = []string{PairedPullSecret}
	}
	k.HTTPSProxy, k.NoProxy = driverProxy(in)
	if in.Version != "" && gatewayline.AtLeast(in.Version, gatewayline.PodLabelAllowlist) {
		k.AllowedPodLabels = allowedPodLabels(gw)
	}
	if !in.OpenShift() {
		uid := SandboxUID
		k.SandboxUID, k.SandboxGID = &uid, &uid
	}
	b, err := toml.Marshal(fileV2{OpenShell: openshellV2{Version: 2, Gateway: g, Drivers: driversV2{Kubernetes: k}}})
	if err != nil {
		return "", fmt.Errorf("render gateway.toml: %w", err)
	}
	return "# Rendered by openshell-operator from OpenShellGateway " + gw.Namespace + "/" + gw.Name + " (schema 2, OpenShell 0.1). Do not edit.\n" + string(b), nil
}

// allowedPodLabels are the operator's pod label keys, then the platform
// admin's, each once.
func allowedPodLabels(gw *openshellv1alpha1.OpenShellGateway) []string {
	out := slices.Clone(sandboxspec.OperatorPodLabels)
	for _, k := range gw.Spec.Managed.Sandboxes.AllowedPodLabels {
		if !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out
}
