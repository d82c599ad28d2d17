package olm

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	. "github.com/onsi/gomega"
	configv1 "github.com/openshift/api/config/v1"
	"github.com/operator-framework/operator-registry/alpha/declcfg"
	"sigs.k8s.io/yaml"

	"github.com/openshell/openshell-operator/hack/release/images"
	"github.com/openshell/openshell-operator/test/framework"
)

// upstream hosts the test's source registry stands in for.
var upstream = []string{"quay.io", "ghcr.io"}

// hostRewrite sends requests for the upstream hosts to the source registry,
// so images keep their real names.
type hostRewrite struct {
	to   *url.URL
	next http.RoundTripper
}

func (h hostRewrite) RoundTrip(r *http.Request) (*http.Response, error) {
	for _, u := range upstream {
		if r.URL.Host == u {
			r = r.Clone(r.Context())
			r.URL.Scheme, r.URL.Host, r.Host = h.to.Scheme, h.to.Host, h.to.Host
		}
	}
	return h.next.RoundTrip(r)
}

// TestDisconnectedMirror does what oc-mirror does for this package: it
// copies the catalog's relatedImages closure from the source registries to
// a mirror, writes the ImageDigestMirrorSet, and proves that every digest
// the bundle names resolves from the mirror alone once the source is gone.
// The operator image is rebuilt from this checkout and stands in for the
// committed operator reference: its digest is pinned at release time (make
// images, docs/releasing.md), like the operand images, so a source change
// does not need a re-pin commit. The bundle image is rebuilt from the
// committed bundle, so its digest must equal the catalog's.
func TestDisconnectedMirror(t *testing.T) {
	g := NewWithT(t)
	root := framework.RepoRoot()
	source := httptest.NewServer(registry.New())
	mirror := httptest.NewServer(registry.New())
	defer mirror.Close()
	srcURL, _ := url.Parse(source.URL)
	mirrorHost := strings.TrimPrefix(mirror.URL, "http://")
	viaSource := remote.WithTransport(hostRewrite{to: srcURL, next: http.DefaultTransport})

	// The images this repository builds, pushed to the "upstream" registry.
	bin := filepath.Join(t.TempDir(), "manager")
	g.Expect(framework.BuildOperator(bin, "GOOS=linux", "GOARCH=amd64")).To(Succeed())
	binary, err := os.ReadFile(bin)
	g.Expect(err).NotTo(HaveOccurred())
	files, err := images.RepoOperatorFiles(root)
	g.Expect(err).NotTo(HaveOccurred())
	operator, err := images.Operator(binary, "amd64", files, images.OperatorLabels("0.1.0"))
	g.Expect(err).NotTo(HaveOccurred())
	raw, err := os.ReadFile(filepath.Join(root, "bundle", "metadata", "annotations.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	var meta struct {
		Annotations map[string]string `json:"annotations"`
	}
	g.Expect(yaml.Unmarshal(raw, &meta)).To(Succeed())
	bundleImg, err := images.Bundle(filepath.Join(root, "bundle"), meta.Annotations)
	g.Expect(err).NotTo(HaveOccurred())
	built := map[string]v1.Image{
		operatorRepo: operator,
		"quay.io/openshell/openshell-operator-bundle": bundleImg,
	}
	for repo, img := range built {
		d, _ := img.Digest()
		ref, err := name.ParseReference(repo + "@" + d.String())
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(remote.Write(ref, img, viaSource)).To(Succeed())
	}

	// The closure oc-mirror copies: the bundle image and its relatedImages.
	cfg, err := declcfg.LoadFS(context.Background(), os.DirFS(filepath.Join(root, "catalog", "configs")))
	g.Expect(err).NotTo(HaveOccurred())
	var pinned, unpinned []string
	for _, b := range cfg.Bundles {
		for _, ri := range append([]declcfg.RelatedImage{{Image: b.Image}}, b.RelatedImages...) {
			if strings.Contains(ri.Image, "@sha256:") {
				pinned = append(pinned, ri.Image)
			} else {
				unpinned = append(unpinned, ri.Image)
			}
		}
	}
	g.Expect(pinned).To(ContainElement(HavePrefix(operatorRepo+"@sha256:")), "the catalog pins the operator image by digest")
	opDigest, err := operator.Digest()
	g.Expect(err).NotTo(HaveOccurred())
	for i, img := range pinned {
		if strings.HasPrefix(img, operatorRepo+"@") {
			pinned[i] = operatorRepo + "@" + opDigest.String() // this checkout's build, see above
		}
	}
	pinned = dedupe(pinned)
	// Operand images are not pinned yet (they need registry access; see
	// docs/releasing.md). When they are, this list empties and this test
	// covers them too.
	// The default release's (0.1) and the 0.0.111 images gateways pinned
	// to it keep running.
	g.Expect(dedupe(unpinned)).To(ConsistOf(
		"ghcr.io/nvidia/openshell/gateway:0.1.5", "ghcr.io/nvidia/openshell/supervisor:0.1.5", "ghcr.io/nvidia/openshell/sandbox:0.1.5",
		"nvcr.io/nvidia/base/ubuntu:24.04",
		"ghcr.io/nvidia/openshell/gateway:0.0.111", "ghcr.io/nvidia/openshell/supervisor:0.0.111",
		"ghcr.io/nvidia/openshell-community/sandboxes/base:0.0.111"))

	idms := &configv1.ImageDigestMirrorSet{}
	idms.APIVersion, idms.Kind, idms.Name = "config.openshift.io/v1", "ImageDigestMirrorSet", "openshell-operator"
	mirrored := map[string]string{}
	for _, img := range pinned {
		ref, err := name.NewDigest(img)
		g.Expect(err).NotTo(HaveOccurred())
		desc, err := remote.Get(ref, viaSource)
		g.Expect(err).NotTo(HaveOccurred(), "%s is not in the source registry", img)
		repo := ref.Context().Name()
		target := mirrorHost + "/" + ref.Context().RepositoryStr()
		dst, err := name.NewDigest(target+"@"+ref.DigestStr(), name.Insecure)
		g.Expect(err).NotTo(HaveOccurred())
		image, err := desc.Image()
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(remote.Write(dst, image)).To(Succeed())
		mirrored[repo] = target
	}
	var repos []string
	for repo := range mirrored {
		repos = append(repos, repo)
	}
	sort.Strings(repos)
	for _, repo := range repos {
		idms.Spec.ImageDigestMirrors = append(idms.Spec.ImageDigestMirrors, configv1.ImageDigestMirrors{
			Source: repo, Mirrors: []configv1.ImageMirror{configv1.ImageMirror(mirrored[repo])}})
	}
	g.Expect(idms.Spec.ImageDigestMirrors).To(HaveLen(len(repos)))

	// The source is gone: every pinned image resolves through the IDMS.
	source.Close()
	for _, img := range pinned {
		ref, _ := name.NewDigest(img)
		var resolved bool
		for _, m := range idms.Spec.ImageDigestMirrors {
			if m.Source != ref.Context().Name() {
				continue
			}
			mref, err := name.NewDigest(string(m.Mirrors[0])+"@"+ref.DigestStr(), name.Insecure)
			g.Expect(err).NotTo(HaveOccurred())
			d, err := remote.Head(mref)
			g.Expect(err).NotTo(HaveOccurred(), "%s does not resolve from the mirror", img)
			g.Expect(d.Digest.String()).To(Equal(ref.DigestStr()))
			resolved = true
		}
		g.Expect(resolved).To(BeTrue(), "no ImageDigestMirrorSet entry covers %s", img)
	}
}

// operatorRepo is where the operator image is published.
const operatorRepo = "quay.io/openshell/openshell-operator"

// TestOperatorImageIsReproducible builds the operator image twice, from
// separate output folders, and requires the same digest: release-time
// pinning (make images) relies on the digest following from the source
// alone (-trimpath, no build ID, fixed timestamps in the image).
func TestOperatorImageIsReproducible(t *testing.T) {
	g := NewWithT(t)
	var digests []string
	for range 2 {
		bin := filepath.Join(t.TempDir(), "manager")
		g.Expect(framework.BuildOperator(bin, "GOOS=linux", "GOARCH=amd64")).To(Succeed())
		binary, err := os.ReadFile(bin)
		g.Expect(err).NotTo(HaveOccurred())
		files, err := images.RepoOperatorFiles(framework.RepoRoot())
		g.Expect(err).NotTo(HaveOccurred())
		img, err := images.Operator(binary, "amd64", files, images.OperatorLabels("0.1.0"))
		g.Expect(err).NotTo(HaveOccurred())
		d, err := img.Digest()
		g.Expect(err).NotTo(HaveOccurred())
		digests = append(digests, d.String())
	}
	g.Expect(digests[1]).To(Equal(digests[0]))
}

func dedupe(in []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range in {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	sort.Strings(out)
	return out
}
