package images

import (
	"archive/tar"
	"bytes"
	"crypto/x509"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
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
	files := OperatorFiles{License: []byte("license"), Roots: []byte("roots")}
	a, _ := Operator([]byte("binary"), "amd64", files, nil)
	b, _ := Operator([]byte("binary"), "amd64", files, nil)
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

// TestOperatorIndex: one image per platform, each for its architecture,
// carrying the binary for it, the license under /licenses, the CA roots
// and the labels Red Hat's preflight requires; the CSV claims exactly
// these architectures.
func TestOperatorIndex(t *testing.T) {
	files, err := RepoOperatorFiles(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	bins := map[string][]byte{}
	for _, arch := range Platforms {
		bins[arch] = []byte("binary for " + arch)
	}
	idx, err := OperatorIndex(bins, files, OperatorLabels("0.1.0"))
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != len(Platforms) {
		t.Fatalf("%d manifests, want %d", len(im.Manifests), len(Platforms))
	}
	for i, m := range im.Manifests {
		arch := Platforms[i]
		if m.Platform == nil || m.Platform.OS != "linux" || m.Platform.Architecture != arch {
			t.Fatalf("manifest %d platform %+v, want linux/%s", i, m.Platform, arch)
		}
		img, err := idx.Image(m.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.Architecture != arch || cf.OS != "linux" {
			t.Errorf("%s: config says %s/%s", arch, cf.OS, cf.Architecture)
		}
		for _, l := range []string{"name", "vendor", "version", "release", "summary", "description", "maintainer"} {
			if cf.Config.Labels[l] == "" {
				t.Errorf("%s: preflight's required label %q is missing", arch, l)
			}
		}
		got, links := imageFiles(t, img)
		if string(got["manager"]) != "binary for "+arch {
			t.Errorf("%s: /manager is %q", arch, got["manager"])
		}
		if !bytes.Contains(got["licenses/LICENSE"], []byte("Apache License")) {
			t.Errorf("%s: /licenses/LICENSE missing or not the Apache license", arch)
		}
		if links[strings.TrimPrefix(GatherPath, "/")] != "/manager" {
			t.Errorf("%s: %s is not a link to /manager: %v", arch, GatherPath, links)
		}
		if pool := x509.NewCertPool(); !pool.AppendCertsFromPEM(got[strings.TrimPrefix(RootsPath, "/")]) {
			t.Errorf("%s: no CA roots at %s", arch, RootsPath)
		}
	}
	if _, err := OperatorIndex(map[string][]byte{"amd64": nil}, files, nil); err == nil {
		t.Error("an index missing platforms was built")
	}

	// The CSV base claims the same architectures, and only them.
	raw, err := os.ReadFile(filepath.Join("..", "..", "..", "config", "manifests", "bases", "openshell-operator.clusterserviceversion.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var claimed []string
	for _, line := range strings.Split(string(raw), "\n") {
		if a, ok := strings.CutPrefix(strings.TrimSpace(line), "operatorframework.io/arch."); ok {
			claimed = append(claimed, strings.SplitN(a, ":", 2)[0])
		}
	}
	if strings.Join(claimed, ",") != strings.Join(Platforms, ",") {
		t.Fatalf("CSV arch labels %v, images built for %v", claimed, Platforms)
	}
}

// imageFiles reads every regular file and symbolic link of img by path
// (no leading slash).
func imageFiles(t *testing.T, img v1.Image) (map[string][]byte, map[string]string) {
	t.Helper()
	rc := mutate.Extract(img)
	defer func() { _ = rc.Close() }()
	out, links := map[string][]byte{}, map[string]string{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out, links
		}
		if h.Typeflag == tar.TypeSymlink {
			links[h.Name] = h.Linkname
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			out[h.Name] = b
		}
	}
}
