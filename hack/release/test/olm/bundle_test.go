// Package olm tests the OLM packaging against a real API server with the
// OLM CRDs installed.
package olm

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/openshell/openshell-operator/test/framework"
)

var env *framework.Env

func TestMain(m *testing.M) {
	os.Exit(framework.RunWithEnv(m, framework.EnvOptions{OLM: true, WithoutOwnCRDs: true}, &env))
}

// TestBundleAppliesToAnAPIServer creates every manifest of the committed
// bundle (the CSV through the real OLM CRD schema, our CRDs, the extra
// objects) on a real API server.
func TestBundleAppliesToAnAPIServer(t *testing.T) {
	ctx := context.Background()
	ns := framework.CreateNamespace(ctx, t, env.Client, "olm")
	files, err := filepath.Glob(filepath.Join(framework.RepoRoot(), "bundle", "manifests", "*.yaml"))
	if err != nil || len(files) < 7 {
		t.Fatalf("bundle manifests: %v (%d files)", err, len(files))
	}
	kinds := map[string]int{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(b, &u.Object); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		switch u.GetKind() {
		case "CustomResourceDefinition", "ClusterRole":
		default:
			u.SetNamespace(ns)
		}
		if err := env.Client.Create(ctx, u); err != nil {
			t.Errorf("%s: %v", filepath.Base(f), err)
		}
		kinds[u.GetKind()]++
	}
	if kinds["ClusterServiceVersion"] != 1 || kinds["CustomResourceDefinition"] != 7 {
		t.Fatalf("bundle kinds = %v: want one CSV and seven CRDs", kinds)
	}
}
