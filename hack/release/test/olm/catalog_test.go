package olm

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/operator-framework/operator-registry/pkg/api"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/openshell/openshell-operator/hack/release/catalog"
	"github.com/openshell/openshell-operator/test/framework"
)

// TestCatalogServedByOpm runs the real `opm serve` on catalog/configs and
// asks it over the registry gRPC API what OLM's CatalogSource asks: the
// package and its default channel, the bundle of a channel and its
// related images.
func TestCatalogServedByOpm(t *testing.T) {
	g := NewWithT(t)
	dir := filepath.Join(framework.RepoRoot(), "catalog", "configs")
	g.Expect(catalog.ValidateModel(context.Background(), dir)).To(Succeed())

	opm, err := framework.Binary("opm")
	g.Expect(err).NotTo(HaveOccurred())
	port, err := framework.FreePort()
	g.Expect(err).NotTo(HaveOccurred())
	pprof, _ := framework.FreePort()
	tmp := t.TempDir()
	p, err := framework.StartProcess(tmp, "opm", opm, "serve", dir, "--port", strconv.Itoa(port),
		"--cache-dir", filepath.Join(tmp, "cache"), "--cache-enforce-integrity=false", "--pprof-addr", "127.0.0.1:"+strconv.Itoa(pprof),
		"--termination-log", filepath.Join(tmp, "termination-log"))
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = p.Stop(5 * time.Second) }()

	conn, err := grpc.NewClient("127.0.0.1:"+strconv.Itoa(port), grpc.WithTransportCredentials(insecure.NewCredentials()))
	g.Expect(err).NotTo(HaveOccurred())
	defer conn.Close()
	reg := api.NewRegistryClient(conn)
	ctx := context.Background()

	var pkg *api.Package
	g.Eventually(func() error {
		pkg, err = reg.GetPackage(ctx, &api.GetPackageRequest{Name: "openshell-operator"})
		return err
	}).WithTimeout(30*time.Second).Should(Succeed(), func() string { return p.Tail(2000) })
	g.Expect(pkg.DefaultChannelName).To(Equal("candidate-v0"))
	var channels []string
	for _, c := range pkg.Channels {
		channels = append(channels, c.Name)
		g.Expect(c.CsvName).To(Equal("openshell-operator.v0.1.0"))
	}
	g.Expect(channels).To(ConsistOf("candidate-v0"))

	b, err := reg.GetBundle(ctx, &api.GetBundleRequest{PkgName: "openshell-operator", ChannelName: "candidate-v0", CsvName: "openshell-operator.v0.1.0"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(b.CsvName).To(Equal("openshell-operator.v0.1.0"))
	g.Expect(b.BundlePath).To(MatchRegexp(`^quay\.io/openshell/openshell-operator-bundle@sha256:[0-9a-f]{64}$`))
	g.Expect(b.SkipRange).To(Equal(">=0.0.0 <0.1.0"))
	var gvks []string
	for _, api := range b.ProvidedApis {
		gvks = append(gvks, api.Kind)
	}
	g.Expect(gvks).To(ConsistOf("OpenShellGateway", "OpenShellSandbox", "OpenShellPolicy", "OpenShellProvider", "OpenShellProviderProfile", "OpenShellImagePolicy",
		"OpenShellSandboxTemplate"))

	// The catalog lists the bundle image and every image the CSV names.
	raw, err := os.ReadFile(filepath.Join(dir, "openshell-operator", "catalog.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	for _, img := range []string{"openshell-operator-bundle@sha256:", "ghcr.io/nvidia/openshell/gateway", "ghcr.io/nvidia/openshell/supervisor",
		"ghcr.io/nvidia/openshell-community/sandboxes/base", "quay.io/openshell/openshell-operator"} {
		g.Expect(string(raw)).To(ContainSubstring(img))
	}
}
