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

	"github.com/openshell/openshell-operator/internal/trust"
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
	// Link, when set, makes the file a symbolic link to it.
	Link string
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
		if f.Link != "" {
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: strings.TrimPrefix(f.Path, "/"), Linkname: f.Link,
				Mode: 0o777, ModTime: epoch, Format: tar.FormatPAX}); err != nil {
				return nil, err
			}
			continue
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
	// Arch is the GOARCH the image runs on (default amd64).
	Arch string
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
	cf.OS, cf.Architecture = "linux", cfg.Arch
	if cf.Architecture == "" {
		cf.Architecture = "amd64"
	}
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

// Platforms are the architectures the operator image is built for (a
// static Go binary builds for each in seconds); the CSV's
// operatorframework.io/arch.* labels name the same.
var Platforms = []string{"amd64", "arm64", "ppc64le", "s390x"}

// OperatorFiles are what the operator image carries besides the binary.
type OperatorFiles struct {
	// License goes to /licenses/LICENSE, where Red Hat's certification
	// looks for the image's licenses.
	License []byte
	// Roots are the CA roots for outbound TLS, at the RHEL bundle path Go
	// reads: a scratch image has none, and External gateways' OAuth2 token
	// URLs need them. On OpenShift the Deployment mounts the cluster's
	// trusted bundle over this folder.
	Roots []byte
}

// RepoOperatorFiles are the repository's LICENSE and the Mozilla roots the
// operator binary also carries (internal/trust), so the image and the
// binary trust the same roots.
func RepoOperatorFiles(repoRoot string) (OperatorFiles, error) {
	license, err := os.ReadFile(filepath.Join(repoRoot, "LICENSE"))
	if err != nil {
		return OperatorFiles{}, fmt.Errorf("read the license: %w", err)
	}
	return OperatorFiles{License: license, Roots: trust.BuiltinPEM()}, nil
}

// GatherPath is the must-gather entry point in the operator image.
const GatherPath = "/usr/bin/gather"

// RootsPath is where the operator image keeps its CA roots.
const RootsPath = "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem"

// Operator is the operator image for one architecture: one static binary
// (also the must-gather entry point), its license and CA roots, run as a
// non-root UID.
func Operator(binary []byte, arch string, files OperatorFiles, labels map[string]string) (v1.Image, error) {
	if len(files.License) == 0 || len(files.Roots) == 0 {
		return nil, fmt.Errorf("the operator image needs a license and CA roots")
	}
	l, err := Layer([]File{{Path: "/manager", Data: binary, Mode: 0o755}, {Path: "/licenses/LICENSE", Data: files.License, Mode: 0o644},
		{Path: RootsPath, Data: files.Roots, Mode: 0o644},
		// `oc adm must-gather --image=<operator image>` runs /usr/bin/gather;
		// the manager binary collects when called by that name.
		{Path: GatherPath, Link: "/manager"}})
	if err != nil {
		return nil, err
	}
	return Build(Config{Entrypoint: []string{"/manager"}, User: "65532:65532", Labels: labels, Arch: arch}, l)
}

// OperatorIndex is the multi-architecture operator image: one image per
// entry of binaries (GOARCH → static binary), in Platforms order.
func OperatorIndex(binaries map[string][]byte, files OperatorFiles, labels map[string]string) (v1.ImageIndex, error) {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, arch := range Platforms {
		bin, ok := binaries[arch]
		if !ok {
			return nil, fmt.Errorf("no operator binary for linux/%s", arch)
		}
		img, err := Operator(bin, arch, files, labels)
		if err != nil {
			return nil, err
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img,
			Descriptor: v1.Descriptor{MediaType: types.OCIManifestSchema1, Platform: &v1.Platform{OS: "linux", Architecture: arch}}})
	}
	return idx, nil
}

// OperatorLabels are the image labels Red Hat's preflight `check container`
// requires (name, vendor, version, release, summary, description,
// maintainer) and the OpenShift and OCI ones that describe the image.
func OperatorLabels(version string) map[string]string {
	const summary = "Runs NVIDIA OpenShell AI agents in policy-enforced sandboxes on OpenShift and Kubernetes"
	const description = "The OpenShell Operator installs the OpenShell gateway with TLS always on, a narrow SCC for " +
		"sandbox pods, and declarative sandboxes, policies, providers and image allowlists for tenants."
	return map[string]string{
		"name": "openshell/openshell-operator", "vendor": "OpenShell Operator community", "version": "v" + version, "release": version,
		"summary": summary, "description": description, "maintainer": "OpenShell Operator maintainers <maintainers@openshell.ai>",
		"url":                 "https://github.com/openshell/openshell-operator",
		"io.k8s.display-name": "OpenShell Operator", "io.k8s.description": description,
		"io.openshift.tags":                 "openshell,ai,agents,sandbox,operator",
		"org.opencontainers.image.source":   "https://github.com/openshell/openshell-operator",
		"org.opencontainers.image.licenses": "Apache-2.0",
		"org.opencontainers.image.version":  version,
	}
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
