package gateway

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/yaml"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/apply"
	"github.com/openshell/openshell-operator/internal/operatorenv"
	"github.com/openshell/openshell-operator/internal/scheme"
)

var update = flag.Bool("update", false, "rewrite the golden files")

var images = operatorenv.RelatedImages{
	Gateway:    "ghcr.io/nvidia/openshell/gateway@sha256:1111111111111111111111111111111111111111111111111111111111111111",
	Supervisor: "ghcr.io/nvidia/openshell/supervisor@sha256:2222222222222222222222222222222222222222222222222222222222222222",
	Sandbox:    "ghcr.io/nvidia/openshell-community/sandboxes/base@sha256:3333333333333333333333333333333333333333333333333333333333333333",
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

var variants = map[string]struct {
	gw *openshellv1alpha1.OpenShellGateway
	in Inputs
}{
	// Vanilla Kubernetes: built-in PKI, no Route, no SCC.
	"vanilla": {gateway(nil), Inputs{Images: images, TLS: TLSBuiltin}},
	// OpenShift with cert-manager: Route, narrow SCC, OIDC configured.
	"openshift": {gateway(func(gw *openshellv1alpha1.OpenShellGateway) {
		gw.Spec.Managed.Route.Host = "openshell.apps.example.com"
	}), Inputs{Images: images, Route: true, SCC: true, TLS: TLSCertManager,
		OIDC: &OIDC{Issuer: "https://openshell-operator-oidc.openshell-operator.svc:8444", Audience: "openshell-gateway/openshell-system/openshell",
			CAPEM: []byte("-----BEGIN CERTIFICATE-----\nMIIBtest\n-----END CERTIFICATE-----\n")}}},
	// Postgres, three replicas, external issuer, sandboxes in another
	// namespace in Managed workspace mode, combined topology.
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
		gw.Spec.Managed.Sandboxes = openshellv1alpha1.SandboxPlacement{Namespace: "openshell-sandboxes", WorkspaceMode: openshellv1alpha1.WorkspaceModeManaged}
		gw.Spec.Managed.SupervisorTopology = openshellv1alpha1.SupervisorTopologyCombined
		gw.Spec.Managed.LogLevel = "debug"
	}), Inputs{Images: images, Route: true, SCC: true, TLS: TLSCertManager}},
}

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
