package images

import (
	"os"
	"path/filepath"
	"testing"
)

// TestBuildsAreDeterministic: the same inputs give the same digest, so a
// committed digest can be recomputed; any change to an input changes it.
func TestBuildsAreDeterministic(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"manifests/a.yaml", "metadata/annotations.yaml", "tests/scorecard/config.yaml"} {
		p := filepath.Join(dir, f)
		_ = os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	digest := func() string {
		img, err := Bundle(dir, map[string]string{"a": "b"})
		if err != nil {
			t.Fatal(err)
		}
		d, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		return d.String()
	}
	first := digest()
	// Touching a file's timestamp does not matter; its content does.
	_ = os.Chtimes(filepath.Join(dir, "manifests/a.yaml"), epoch.AddDate(1, 0, 0), epoch.AddDate(1, 0, 0))
	if again := digest(); again != first {
		t.Fatalf("digest changed without a content change: %s then %s", first, again)
	}
	if err := os.WriteFile(filepath.Join(dir, "manifests/a.yaml"), []byte("changed"), 0o644); err != nil {
		t.Fatal(err)
	}
	if changed := digest(); changed == first {
		t.Fatal("digest did not change with the content")
	}
	a, _ := Operator([]byte("binary"), nil)
	b, _ := Operator([]byte("binary"), nil)
	da, _ := a.Digest()
	db, _ := b.Digest()
	if da != db {
		t.Fatalf("operator image digests differ: %s %s", da, db)
	}
	cf, _ := a.ConfigFile()
	if cf.Config.User != "65532:65532" || cf.Config.Entrypoint[0] != "/manager" {
		t.Fatalf("operator image config = %+v", cf.Config)
	}
}
