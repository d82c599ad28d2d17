// Package images builds the operator, bundle and catalog images without a
// container engine, with go-containerregistry: every file has a fixed
// owner, mode and timestamp and layers are written in sorted order, so the
// same inputs always give the same digest. Digests committed to the repo
// can therefore be recomputed by anyone with `make images`.
package images

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// epoch is the timestamp of every file and of the image config.
var epoch = time.Unix(0, 0).UTC()

// File is one file (or, with Dir, one directory) of a layer.
type File struct {
	Path string // absolute path in the image
	Data []byte
	Mode int64
	UID  int
	Dir  bool
}

// Layer builds a deterministic tar layer (parent directories included).
func Layer(files []File) (v1.Layer, error) {
	sort.Slice(files, func(i, j int) bool { return files[i].Path < files[j].Path })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	for _, f := range files {
		var parents []string
		for d := path.Dir(f.Path); d != "/" && d != "." && !dirs[d]; d = path.Dir(d) {
			parents = append([]string{d}, parents...)
			dirs[d] = true
		}
		for _, d := range parents {
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(d, "/") + "/", Mode: 0o755,
				ModTime: epoch, Format: tar.FormatPAX}); err != nil {
				return nil, err
			}
		}
		if f.Dir {
			dirs[f.Path] = true
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(f.Path, "/") + "/", Mode: f.Mode,
				Uid: f.UID, Gid: f.UID, ModTime: epoch, Format: tar.FormatPAX}); err != nil {
				return nil, err
			}
			continue
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(f.Path, "/"), Mode: f.Mode,
			Size: int64(len(f.Data)), Uid: f.UID, Gid: f.UID, ModTime: epoch, Format: tar.FormatPAX}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.Data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil },
		tarball.WithMediaType(types.OCILayer))
}

// Config is the image configuration beyond the layers.
type Config struct {
	Entrypoint []string
	Cmd        []string
	User       string
	Labels     map[string]string
}

// Build makes an OCI image from layers and a config, timestamped at epoch.
func Build(cfg Config, layers ...v1.Layer) (v1.Image, error) {
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err := mutate.AppendLayers(img, layers...)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Config.Entrypoint, cf.Config.Cmd, cf.Config.User, cf.Config.Labels = cfg.Entrypoint, cfg.Cmd, cfg.User, cfg.Labels
	cf.Created = v1.Time{Time: epoch}
	cf.History = nil
	return mutate.ConfigFile(img, cf)
}

// Dir collects the files under root, mapped to prefix in the image.
func Dir(root, prefix string) ([]File, error) {
	var out []File
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		out = append(out, File{Path: path.Join(prefix, filepath.ToSlash(rel)), Data: data, Mode: 0o644})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", root, err)
	}
	return out, nil
}

// Bundle is the bundle image: FROM scratch, the three folders, a label per
// annotation.
func Bundle(bundleDir string, annotations map[string]string) (v1.Image, error) {
	var files []File
	for _, sub := range []string{"manifests", "metadata", filepath.Join("tests", "scorecard")} {
		fs, err := Dir(filepath.Join(bundleDir, sub), "/"+filepath.ToSlash(sub))
		if err != nil {
			return nil, err
		}
		files = append(files, fs...)
	}
	l, err := Layer(files)
	if err != nil {
		return nil, err
	}
	return Build(Config{Labels: annotations}, l)
}

// Operator is the operator image: one static binary, run as a non-root UID.
func Operator(binary []byte, labels map[string]string) (v1.Image, error) {
	l, err := Layer([]File{{Path: "/manager", Data: binary, Mode: 0o755}})
	if err != nil {
		return nil, err
	}
	return Build(Config{Entrypoint: []string{"/manager"}, User: "65532:65532", Labels: labels}, l)
}

// CatalogCmd is the catalog image's command. The cache is built when the
// pod starts (the catalog is small): opm enforces a cache's integrity by
// default and refuses to start on an empty one, which is what an image
// without a pre-built cache has (found by running the image as the
// registry pod does).
var CatalogCmd = []string{"serve", "/configs", "--cache-dir=/tmp/cache", "--cache-enforce-integrity=false"}

// Catalog is the catalog image as OLM's registry pod runs it: opm serving
// the FBC under /configs (the label oc-mirror and OLM read names it), with
// its cache in a /tmp the non-root user may write, and grpc_health_probe,
// which the pod's readiness and liveness probes exec.
func Catalog(opm, healthProbe []byte, configsDir string) (v1.Image, error) {
	configs, err := Dir(configsDir, "/configs")
	if err != nil {
		return nil, err
	}
	l, err := Layer(append(configs, File{Path: "/bin/opm", Data: opm, Mode: 0o755},
		File{Path: "/bin/grpc_health_probe", Data: healthProbe, Mode: 0o755}, File{Path: "/tmp", Mode: 0o1777, Dir: true}))
	if err != nil {
		return nil, err
	}
	return Build(Config{Entrypoint: []string{"/bin/opm"}, Cmd: CatalogCmd, User: "65532:65532",
		Labels: map[string]string{"operators.operatorframework.io.index.configs.v1": "/configs"}}, l)
}
