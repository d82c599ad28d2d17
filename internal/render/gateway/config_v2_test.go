package gateway

import (
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/pelletier/go-toml/v2"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/sandboxspec"
)

// v2Keys are the keys schema version 2 defines, table by table, as the
// reference restates them from the 0.1 loader and its documentation
// (shared/reference/openshell-0.1.md §2.2, §2.3; the config reference's
// Kubernetes example). The loader rejects any other key in these tables,
// so a key the renderer adds must be found here first. Keys the reference
// marks as later than the pinned release (enable_gateway_service_routing,
// 0.1.10; mutation_* keys, 0.1.9; [openshell.supervisor.network], 0.1.7)
// or conflicting between sources (sandbox_runtime.network_policy_enforced)
// are deliberately absent.
var v2Keys = map[string][]string{
	"":          {"openshell"},
	"openshell": {"version", "gateway", "drivers"},
	"openshell.gateway": {"name", "bind_address", "health_bind_address", "metrics_bind_address", "log_level", "compute_driver",
		"credential_drivers", "credential_storage", "ssh_session_ttl_secs", "grpc_rate_limit_requests", "grpc_rate_limit_window_seconds",
		"policy_validation_failure_mode", "server_sans", "enable_loopback_service_http", "guest_tls_ca", "guest_tls_cert", "guest_tls_key",
		"disable_tls", "provider_profile_sources", "tls", "oidc", "auth", "gateway_jwt", "otlp"},
	"openshell.gateway.tls": {"cert_path", "key_path", "client_ca_path", "external_cert_path", "external_key_path", "external_server_names"},
	"openshell.gateway.oidc": {"issuer", "audience", "jwks_ttl_secs", "jwks_allowed_origins", "dangerously_allow_insecure_http",
		"roles_claim", "admin_role", "user_role", "scopes_claim"},
	"openshell.gateway.gateway_jwt":        {"signing_key_path", "public_key_path", "kid_path", "gateway_id", "ttl_secs"},
	"openshell.gateway.otlp":               {"endpoint", "service_name"},
	"openshell.gateway.credential_storage": {"key_encryption_key_path", "key_encryption_key_env"},
	"openshell.drivers":                    {"kubernetes"},
	"openshell.drivers.kubernetes": {"allow_driver_config", "resource_admission", "workspace_mode", "gateway_id", "namespace",
		"operator_namespace_label", "operator_namespace_file", "service_account_name", "default_image", "image_pull_policy",
		"image_pull_secrets", "managed_ssh_ingress", "sandbox_runtime_image", "sandbox_runtime_image_pull_policy", "supervisor_image",
		"supervisor_image_pull_policy", "sandbox_runtime", "https_proxy", "no_proxy", "proxy_auth_secret_name", "proxy_auth_secret_key",
		"proxy_auth_allow_insecure", "proxy_connect_by_hostname", "proxy_ca_bundle", "grpc_endpoint", "client_tls_secret_name",
		"enable_user_namespaces", "workspace_default_storage_size", "workspace_storage_class", "default_runtime_class_name",
		"ssh_socket_path", "host_gateway_ip", "sa_token_ttl_secs", "provider_spiffe_workload_api_socket_path", "sandbox_uid", "sandbox_gid",
		// 0.1.5 (#4497, release notes; its type is assumed, see
		// gatewayline.PodLabelAllowlist and docs/gateway-lines.md).
		"allowed_pod_labels"},
	"openshell.drivers.kubernetes.managed_ssh_ingress": {"enabled", "gateway_namespace", "gateway_pod_selector"},
	// A map of label key to value: any key.
	"openshell.drivers.kubernetes.managed_ssh_ingress.gateway_pod_selector": nil,
}

// TestV2ConfigHasOnlyKeysTheReleaseAccepts renders every golden variant in
// schema 2 and walks every table: a key the 0.1 loader would reject (it
// stops the gateway) fails here.
func TestV2ConfigHasOnlyKeysTheReleaseAccepts(t *testing.T) {
	for name, v := range variants {
		in := v01(v.in)
		gw := v.gw.DeepCopy()
		if gw.Spec.Managed != nil {
			gw.Spec.Managed.Sandboxes.AppArmorProfile = "" // refused in schema 2 (TestV2ConfigRefusesSidecarSettings)
		}
		cfg, err := GatewayTOML(gw, in)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var doc map[string]any
		if err := toml.Unmarshal([]byte(cfg), &doc); err != nil {
			t.Fatalf("%s: the rendered config is not TOML: %v", name, err)
		}
		for _, bad := range unknownKeys("", doc) {
			t.Errorf("%s: key %s is not in schema 2: the gateway would refuse to start", name, bad)
		}
		if doc["openshell"].(map[string]any)["version"] != int64(2) {
			t.Errorf("%s: version is not 2", name)
		}
	}
}

func unknownKeys(table string, m map[string]any) []string {
	allowed, known := v2Keys[table]
	var out []string
	for k, v := range m {
		path := strings.TrimPrefix(table+"."+k, ".")
		if known && allowed == nil {
			continue // a free-form map
		}
		if !known || !slices.Contains(allowed, k) {
			out = append(out, path)
			continue
		}
		if sub, ok := v.(map[string]any); ok {
			out = append(out, unknownKeys(path, sub)...)
		}
	}
	sort.Strings(out)
	return out
}

// TestV2KeyCheckFindsWhatV1Renders: the schema-1 config fails the check on
// the keys schema 2 removed, so the check above can fail.
func TestV2KeyCheckFindsWhatV1Renders(t *testing.T) {
	v := variants["openshift"]
	cfg, err := GatewayTOML(v.gw, v.in)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := toml.Unmarshal([]byte(cfg), &doc); err != nil {
		t.Fatal(err)
	}
	got := unknownKeys("", doc)
	for _, removed := range []string{"openshell.gateway.compute_drivers", "openshell.gateway.sandbox_namespace",
		"openshell.drivers.kubernetes.topology", "openshell.drivers.kubernetes.supervisor_sideload_method", "openshell.drivers.kubernetes.sidecar"} {
		if !slices.Contains(got, removed) {
			t.Errorf("the check does not find %s in a schema-1 config (found %v)", removed, got)
		}
	}
}

// TestV2ConfigGolden pins the schema-2 config of every variant
// (testdata/v2/<variant>.toml; -update rewrites them).
func TestV2ConfigGolden(t *testing.T) {
	for name, v := range variants {
		in := v01(v.in)
		gw := v.gw.DeepCopy()
		gw.Spec.Managed.Sandboxes.AppArmorProfile = ""
		cfg, err := GatewayTOML(gw, in)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		path := filepath.Join("testdata", "v2", name+".toml")
		if *update {
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%s: %v (run with -update)", name, err)
		}
		if cfg != string(want) {
			t.Errorf("%s: the schema-2 config differs from %s (run with -update and review the diff)\n%s", name, path, cfg)
		}
	}
}

// TestV2ConfigRefusesSidecarSettings: a setting of the 0.0.x sidecar
// runtime that 0.1 has no key for is an error naming it, never dropped.
func TestV2ConfigRefusesSidecarSettings(t *testing.T) {
	gw := gateway(func(gw *openshellv1alpha1.OpenShellGateway) {
		gw.Spec.Managed.Sandboxes.AppArmorProfile = "RuntimeDefault"
	})
	_, err := GatewayTOML(gw, v01(Inputs{}))
	if err == nil || !strings.Contains(err.Error(), "appArmorProfile") {
		t.Fatalf("err = %v, want a refusal naming appArmorProfile", err)
	}
}

// TestOTLPExport: spec.managed.telemetry renders [openshell.gateway.otlp]
// in schema 2 with only the keys the release defines; schema 1 has no
// such table, so a 0.0.x gateway refuses it with a reason.
func TestOTLPExport(t *testing.T) {
	v := variants["openshift"]
	gw := v.gw.DeepCopy()
	gw.Spec.Managed.Sandboxes.AppArmorProfile = ""
	gw.Spec.Managed.Telemetry = &openshellv1alpha1.GatewayTelemetry{OTLP: openshellv1alpha1.OTLPExport{
		Endpoint: "https://otel-collector.observability.svc:4317", ServiceName: "openshell-gateway-prod"}}
	cfg, err := GatewayTOML(gw, v01(v.in))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := toml.Unmarshal([]byte(cfg), &doc); err != nil {
		t.Fatal(err)
	}
	if bad := unknownKeys("", doc); len(bad) > 0 {
		t.Errorf("keys outside schema 2: %v", bad)
	}
	otlp, _ := doc["openshell"].(map[string]any)["gateway"].(map[string]any)["otlp"].(map[string]any)
	if otlp["endpoint"] != "https://otel-collector.observability.svc:4317" || otlp["service_name"] != "openshell-gateway-prod" {
		t.Errorf("otlp table %v", otlp)
	}
	gw.Spec.Managed.Telemetry.OTLP.ServiceName = ""
	if cfg, err = GatewayTOML(gw, v01(v.in)); err != nil || strings.Contains(cfg, "service_name") {
		t.Errorf("an empty service name is rendered: %v\n%s", err, cfg)
	}
	if _, err := GatewayTOML(gw, v.in); err == nil || !strings.Contains(err.Error(), "needs an OpenShell 0.1 gateway") {
		t.Errorf("schema 1 with telemetry: %v", err)
	}
}

// TestAllowedPodLabelsAddTheTenantsKeys: the platform admin's keys join
// the operator's own in allowed_pod_labels, once each.
func TestAllowedPodLabelsAddTheTenantsKeys(t *testing.T) {
	gw := &openshellv1alpha1.OpenShellGateway{Spec: openshellv1alpha1.OpenShellGatewaySpec{Managed: &openshellv1alpha1.ManagedGatewaySpec{
		Sandboxes: openshellv1alpha1.SandboxPlacement{AllowedPodLabels: []string{"app", sandboxspec.TemplateLabel, "example.com/team"}}}}}
	got := allowedPodLabels(gw)
	want := append(slices.Clone(sandboxspec.OperatorPodLabels), "app", "example.com/team")
	if !slices.Equal(got, want) {
		t.Fatalf("allowed_pod_labels %v, want %v", got, want)
	}
}
