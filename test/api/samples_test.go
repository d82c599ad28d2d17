package api

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/openshell/openshell-operator/internal/console"
	"github.com/openshell/openshell-operator/internal/profilecatalog"
	"github.com/openshell/openshell-operator/test/framework"
)

// TestSamplesAreValid creates every sample in config/samples: what the
// README, the demo and the CSV's alm-examples show must pass admission.
func TestSamplesAreValid(t *testing.T) {
	ctx := context.Background()
	files, err := filepath.Glob(filepath.Join(framework.RepoRoot(), "config", "samples", "openshell_*.yaml"))
	if err != nil || len(files) != 7 {
		t.Fatalf("want one sample per kind (7), found %d (%v)", len(files), err)
	}
	ns := createNamespace(ctx, t, "samples")
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			u := &unstructured.Unstructured{}
			if err := yaml.UnmarshalStrict(b, &u.Object); err != nil {
				t.Fatal(err)
			}
			u.SetNamespace(ns)
			if err := env.Client.Create(ctx, u); err != nil {
				t.Fatalf("sample rejected: %v", err)
			}
		})
	}
}

// TestConsoleSamplesAreValid creates the object of every ConsoleYAMLSample
// the operator installs: what the console's YAML editor offers must pass
// admission as it stands.
func TestConsoleSamplesAreValid(t *testing.T) {
	ctx := context.Background()
	samples, err := console.Samples()
	if err != nil {
		t.Fatal(err)
	}
	ns := createNamespace(ctx, t, "console")
	for _, s := range samples {
		t.Run(s.Name, func(t *testing.T) {
			u := &unstructured.Unstructured{}
			if err := yaml.UnmarshalStrict([]byte(s.Spec.YAML), &u.Object); err != nil {
				t.Fatal(err)
			}
			u.SetNamespace(ns)
			if err := env.Client.Create(ctx, u); err != nil {
				t.Fatalf("console sample rejected: %v", err)
			}
		})
	}
}

// TestShippedProfilesAreValid creates every provider profile the operator
// ships (internal/profilecatalog) as an object: what it imports into
// gateways must be what a Platform Admin could have declared.
func TestShippedProfilesAreValid(t *testing.T) {
	ctx := context.Background()
	c, err := profilecatalog.Load()
	if err != nil {
		t.Fatal(err)
	}
	ns := createNamespace(ctx, t, "shipped-profiles")
	for _, p := range c.Profiles {
		t.Run(p.Name, func(t *testing.T) {
			obj := p.DeepCopy()
			obj.Namespace = ns
			if err := env.Client.Create(ctx, obj); err != nil {
				t.Fatalf("shipped profile rejected: %v", err)
			}
		})
	}
}
