package gateway

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/yaml"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/apply"
	"github.com/openshell/openshell-operator/internal/gatewayline"
	"github.com/openshell/openshell-operator/internal/operatorenv"
	"github.com/openshell/openshell-operator/internal/scheme"
)

var update = flag.Bool("update", false, "rewrite the golden files")

var images = operatorenv.RelatedImages{
	Gateway:    "ghcr.io/nvidia/openshell/gateway@sha256:1111111111111111111111111111111111111111111111111111111111111111",
	Supervisor: "ghcr.io/nvidia/openshell/supervisor@sha256:2222222222222222222222222222222222222222222222222222222222222222",
	Sandbox:    "ghcr.io/nvidia/openshell-community/sandboxes/base@sha256:3333333333333333333333333333333333333333333333333333333333333333",
}

// v01Images are a 0.1 release's: the sandbox runtime is new.
var v01Images = operatorenv.RelatedImages{
	Gateway:        "ghcr.io/nvidia/openshell/gateway@sha256:4444444444444444444444444444444444444444444444444444444444444444",
	Supervisor:     "ghcr.io/nvidia/openshell/supervisor@sha256:5555555555555555555555555555555555555555555555555555555555555555",
	Sandbox:        "nvcr.io/nvidia/base/ubuntu@sha256:6666666666666666666666666666666666666666666666666666666666666666",
	SandboxRuntime: "ghcr.io/nvidia/openshell/sandbox@sha256:7777777777777777777777777777777777777777777777777777777777777777",
}

// legacy and v01 complete a variant's inputs for a release.
func legacy(in Inputs) Inputs {
	in.Line, in.Version = gatewayline.Legacy, gatewayline.LegacyManaged
	if in.Images == (operatorenv.RelatedImages{}) {
		in.Images = images
	}
	return in
}

func v01(in Inputs) Inputs {
	in.Line, in.Version, in.Images = gatewayline.V01, gatewayline.DefaultManaged, v01Images
	return in
}

func gateway(mutate func(*openshellv1alpha1.OpenShellGateway)) *openshellv1alpha1.OpenShellGateway {
	gw := &openshellv1alpha1.OpenShellGateway{
		ObjectMeta: metav1.ObjectMeta{Name: "openshell", Namespace: "openshell-system", UID: "8c1e4c3a-1111-2222-3333-444455556666"},
		Spec:       openshellv1alpha1.OpenShellGatewaySpec{Mode: openshellv1alpha1.GatewayModeManaged, Managed: &openshellv1alpha1.ManagedGatewaySpec{}},
	}
	if mutate != nil {
		mutate(gw)
	}
	return gw
}

// Stand-ins for the trust bundle's parts (the render only copies them).
const (
	operatorCA = "-----BEGIN CERTIFICATE-----\nMIIBoperator\n-----END CERTIFICATE-----\n"
	clusterCA  = "-----BEGIN CERTIFICATE-----\nMIIBcluster\n-----END CERTIFICATE-----\n"
)

var variants = map[string]struct {
	gw *openshellv1alpha1.OpenShellGateway
	in Inputs
}{
	// Vanilla Kubernetes: built-in PKI, no Route, no SCC.
	"vanilla": {gateway(nil), legacy(Inputs{TLS: TLSBuiltin})},
	// OpenShift with cert-manager: Route, narrow SCC, OIDC configured.
	"openshift": {gateway(func(gw *openshellv1alpha1.OpenShellGateway) {
		gw.Spec.Managed.Route.Host = "openshell.apps.example.com"
	}), legacy(openshiftInputs)},
	// The same on OpenShell 0.1: the runtime's RBAC, no sandbox
	// NetworkPolicy (the gateway fences its namespace), no SCC binding.
	"openshift-v01": {gateway(func(gw *openshellv1alpha1.OpenShellGateway) {
		gw.Spec.Managed.Route.Host = "openshell.apps.example.com"
	}), v01(openshiftInputs)},
	// Postgres, three replicas, external issuer, sandboxes in another
	// namespace, combined topology.
	"postgres-external-issuer": {gateway(func(gw *openshellv1alpha1.OpenShellGateway) {
		three := int32(3)
		size := resource.MustParse("5Gi")
		_ = size
		gw.Spec.Managed.Replicas = &three
		gw.Spec.Managed.Persistence = &openshellv1alpha1.GatewayPersistence{Postgres: &openshellv1alpha1.PostgresPersistence{
			URISecretRef: openshellv1alpha1.SecretKeyReference{Name: "gw-db", Key: "uri"}}}
		gw.Spec.Managed.Route.Host = "openshell.apps.example.com"
		gw.Spec.Managed.TLS.IssuerRef = &openshellv1alpha1.IssuerReference{Name: "letsencrypt", Kind: "ClusterIssuer", Group: "cert-manager.io"}
		gw.Spec.Managed.TLS.ExternalDNSNames = []string{"openshell.example.com"}
		gw.Spec.Managed.Sandboxes = openshellv1alpha1.SandboxPlacement{Namespace: "openshell-sandboxes",
			ImagePullPolicy: corev1.PullIfNotPresent, ImagePullSecrets: []string{"mirror-pull"}, AppArmorProfile: "RuntimeDefault"}
		gw.Spec.Managed.SupervisorTopology = openshellv1alpha1.SupervisorTopologyCombined
		gw.Spec.Managed.LogLevel = "debug"
	}), legacy(Inputs{Route: true, SCC: true, TLS: TLSCertManager,
		// A cluster proxy, as OLM injects it: passed to the gateway and, as
		// the upstream proxy, to its sandboxes.
		Proxy: operatorenv.Proxy{HTTPProxy: "http://proxy.corp.example:3128", HTTPSProxy: "http://proxy.corp.example:3128",
			NoProxy: ".cluster.local,.svc,10.0.0.0/16,172.30.0.0/16"}})},
}

// openshiftInputs: OpenShift with cert-manager, monitoring and the
// operator's OIDC issuer.
var openshiftInputs = Inputs{Route: true, SCC: true, ServiceMonitor: true, TLS: TLSCertManager,
	OIDC: &OIDC{Issuer: "https://openshell-operator-oidc.openshell-operator.svc:8444", Audience: "openshell-gateway/openshell-system/openshell",
		CAPEM: []byte(operatorCA)},
	TrustBundle: []byte(operatorCA + clusterCA)}

// TestGolden renders every variant and compares each object with its
// golden file (go test ./internal/render/gateway -update rewrites them).
func TestGolden(t *testing.T) {
	s := scheme.New()
	for name, v := range variants {
		t.Run(name, func(t *testing.T) {
			r, err := Render(v.gw, v.in)
			if err != nil {
				t.Fatal(err)
			}
			dir := filepath.Join("testdata", name)
			want := map[string]bool{}
			for _, o := range r.Objects {
				u, err := apply.ToUnstructured(s, o)
				if err != nil {
					t.Fatal(err)
				}
				b, err := yaml.Marshal(u.Object)
				if err != nil {
					t.Fatal(err)
				}
				gvk, _ := apiutil.GVKForObject(o, s)
				file := fmt.Sprintf("%s_%s.yaml", strings.ToLower(gvk.Kind), o.GetName())
				if o.GetNamespace() != "" && o.GetNamespace() != v.gw.Namespace {
					file = o.GetNamespace() + "_" + file
				}
				want[file] = true
				compare(t, filepath.Join(dir, file), b)
			}
			compare(t, filepath.Join(dir, "gateway.toml"), []byte(r.Config))
			want["gateway.toml"] = true
			entries, _ := os.ReadDir(dir)
			for _, e := range entries {
				if !want[e.Name()] {
					if *update {
						_ = os.Remove(filepath.Join(dir, e.Name()))
					} else {
						t.Errorf("stale golden file %s: the renderer no longer produces it", e.Name())
					}
				}
			}
		})
	}
}

func compare(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if string(want) != string(got) {
		t.Errorf("%s differs from the rendered object (run with -update after checking):\n--- got\n%s", path, got)
	}
}

// TestTrustStore: the gateway's SSL_CERT_FILE names the whole bundle the
// controller resolved (never the issuer CA alone, which would replace the
// public roots), and on OpenShift the operator asks for the cluster's
// trusted CA bundle without ever owning its data.
func TestTrustStore(t *testing.T) {
	for name, v := range variants {
		r, err := Render(v.gw, v.in)
		if err != nil {
			t.Fatal(err)
		}
		var bundle, injected *corev1.ConfigMap
		var env []corev1.EnvVar
		for _, o := range r.Objects {
			switch o := o.(type) {
			case *corev1.ConfigMap:
				switch o.Name {
				case NamesFor(v.gw).TrustBundle:
					bundle = o
				case NamesFor(v.gw).TrustedCA:
					injected = o
				}
			case *appsv1.StatefulSet:
				env = o.Spec.Template.Spec.Containers[0].Env
			case *appsv1.Deployment:
				env = o.Spec.Template.Spec.Containers[0].Env
			}
		}
		if bundle == nil || bundle.Data[TrustFile] != string(v.in.TrustBundle) {
			t.Errorf("%s: trust bundle ConfigMap = %+v, want the resolved bundle", name, bundle)
		}
		if !slices.Contains(env, corev1.EnvVar{Name: "SSL_CERT_FILE", Value: TrustDir + "/" + TrustFile}) {
			t.Errorf("%s: SSL_CERT_FILE does not name the trust bundle: %+v", name, env)
		}
		switch {
		case v.in.OpenShift() && (injected == nil || injected.Labels[LabelInjectTrustedCABundle] != "true" || injected.Data != nil):
			t.Errorf("%s: want an empty ConfigMap labelled %s, got %+v", name, LabelInjectTrustedCABundle, injected)
		case !v.in.OpenShift() && injected != nil:
			t.Errorf("%s: no trusted-CA ConfigMap outside OpenShift", name)
		}
	}
}

func TestUpstreamProxy(t *testing.T) {
	for _, tc := range []struct {
		in   operatorenv.Proxy
		want string
		err  string
	}{
		{operatorenv.Proxy{}, "", ""},
		{operatorenv.Proxy{HTTPSProxy: "http://proxy:3128"}, "http://proxy:3128", ""},
		{operatorenv.Proxy{HTTPProxy: "http://plain:8080", HTTPSProxy: " http://proxy:3128/ "}, "http://proxy:3128", ""},
		{operatorenv.Proxy{HTTPProxy: "http://plain:8080"}, "http://plain:8080", ""},
		{operatorenv.Proxy{HTTPSProxy: "https://proxy:3129"}, "", "only an http:// proxy"},
		{operatorenv.Proxy{HTTPSProxy: "http://user:pass@proxy:3128"}, "", "credentials in its URL"},
		{operatorenv.Proxy{HTTPSProxy: "http://proxy"}, "", "no explicit port"},
		{operatorenv.Proxy{HTTPSProxy: "http://proxy:3128/path"}, "", "path, query or fragment"},
	} {
		got, err := UpstreamProxy(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%+v: err %v, want %q", tc.in, err, tc.err)
			}
			if got != "" {
				t.Errorf("%+v: got %q with an error", tc.in, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%+v: got %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

// TestTemplateVersionReadsWhatIsRendered: the release the pod template
// records is read back as rendered, 0.0.111 included (recorded by leaving
// the annotation out).
func TestTemplateVersionReadsWhatIsRendered(t *testing.T) {
	for _, v := range []string{gatewayline.LegacyManaged, gatewayline.DefaultManaged, "0.1.9"} {
		if got := TemplateVersion(podAnnotations("hash", v)); got != v {
			t.Errorf("rendered %s, read back %s", v, got)
		}
	}
}

// TestPostgresGatewayIsRecreatedAcrossReleases: a Postgres gateway's
// replicas share its database, which a new release migrates: a move
// between releases stops every old pod before a new one starts, instead
// of running both releases against it; any other change still rolls.
func TestPostgresGatewayIsRecreatedAcrossReleases(t *testing.T) {
	v := variants["postgres-external-issuer"]
	for name, tc := range map[string]struct {
		replaces string
		want     appsv1.DeploymentStrategyType
	}{
		"a new release":    {gatewayline.LegacyManaged, appsv1.RecreateDeploymentStrategyType},
		"the same release": {"", ""},
	} {
		t.Run(name, func(t *testing.T) {
			in := v.in
			in.Version, in.Replaces = gatewayline.DefaultManaged, tc.replaces
			d, ok := Workload(v.gw, in, "hash").(*appsv1.Deployment)
			if !ok {
				t.Fatal("a Postgres gateway renders no Deployment")
			}
			if d.Spec.Strategy.Type != tc.want {
				t.Fatalf("strategy %q, want %q", d.Spec.Strategy.Type, tc.want)
			}
		})
	}
}
