package bundle_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/openshell/openshell-operator/internal/bundle"
	"github.com/openshell/openshell-operator/test/framework"
)

func generate(t *testing.T) string {
	t.Helper()
	root := framework.RepoRoot()
	raw, err := os.ReadFile(filepath.Join(root, "config", "manifests", "images.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var imgs bundle.Images
	if err := yaml.UnmarshalStrict(raw, &imgs); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	if err := bundle.Generate(bundle.Options{ManifestsDir: filepath.Join(root, "config", "manifests"), OutputDir: filepath.Join(out, "bundle"),
		Dockerfile: filepath.Join(out, "bundle.Dockerfile"), Package: "openshell-operator", Version: "0.1.0",
		Channels: []string{"candidate-v0", "stable-v0"}, DefaultChannel: "stable-v0", SkipRange: ">=0.0.0 <0.1.0",
		Images: imgs, OpenShiftVersions: "v4.16-v4.21"}); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestCommittedBundleIsCurrent regenerates the bundle and compares it with
// the committed one (make verify does the same through git).
func TestCommittedBundleIsCurrent(t *testing.T) {
	out := generate(t)
	root := framework.RepoRoot()
	err := filepath.WalkDir(filepath.Join(out, "bundle"), func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(out, p)
		want, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Errorf("%s is generated but not committed: run make bundle", rel)
			return nil
		}
		got, _ := os.ReadFile(p)
		if string(got) != string(want) {
			t.Errorf("%s differs from the committed file: run make bundle", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestOperatorFrameworkValidators: the default bundle validators plus
// OperatorHub v2, capabilities, categories, good practices and deprecated
// APIs report nothing, and our own consistency checks pass. Digest pinning
// is left to make bundle-validate until the operand images are pinned
// (it needs registry access; see docs/releasing.md).
func TestOperatorFrameworkValidators(t *testing.T) {
	out := generate(t)
	r, err := bundle.Validate(filepath.Join(out, "bundle"), "1.34")
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range r.Warnings {
		t.Errorf("warning: %s", w)
	}
	for _, e := range r.Errors {
		if !strings.Contains(e, "is not pinned by digest") {
			t.Errorf("error: %s", e)
		}
	}
}
