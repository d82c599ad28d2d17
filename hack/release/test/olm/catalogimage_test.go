package olm

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/mutate"
	. "github.com/onsi/gomega"

	"github.com/openshell/openshell-operator/hack/release/images"
	"github.com/openshell/openshell-operator/test/framework"
)

// TestCatalogImageRunsAsTheRegistryPod builds the catalog image as make
// images does, unpacks its layers, and runs it the way OLM's registry pod
// does: its entrypoint and command as the image's non-root user, in its own
// root, then grpc_health_probe from the image against it, as the pod's
// probes do. The labels OLM and oc-mirror read are checked too.
func TestCatalogImageRunsAsTheRegistryPod(t *testing.T) {
	g := NewWithT(t)
	read := func(name string) []byte {
		p, err := framework.Binary(name)
		g.Expect(err).NotTo(HaveOccurred())
		b, err := os.ReadFile(p)
		g.Expect(err).NotTo(HaveOccurred())
		return b
	}
	img, err := images.Catalog(read("opm"), read("grpc_health_probe"), filepath.Join(framework.RepoRoot(), "catalog", "configs"))
	g.Expect(err).NotTo(HaveOccurred())
	cf, err := img.ConfigFile()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cf.Config.Labels).To(HaveKeyWithValue("operators.operatorframework.io.index.configs.v1", "/configs"))
	g.Expect(cf.Config.User).To(Equal("65532:65532"), "the registry pod runs it as a non-root user")

	root := t.TempDir()
	g.Expect(unpack(mutate.Extract(img), root)).To(Succeed())
	for _, f := range []string{"bin/opm", "bin/grpc_health_probe", "configs/openshell-operator/catalog.yaml"} {
		g.Expect(filepath.Join(root, f)).To(BeAnExistingFile())
	}

	// What the kubelet gives every pod.
	g.Expect(os.MkdirAll(filepath.Join(root, "etc"), 0o755)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(root, "etc", "hosts"), []byte("127.0.0.1 localhost\n::1 localhost\n"), 0o644)).To(Succeed())
	// The registry pod serves on the image's default ports; here free ones
	// are added to the command, as every process shares this host's network.
	port, err := framework.FreePort()
	g.Expect(err).NotTo(HaveOccurred())
	pprof, err := framework.FreePort()
	g.Expect(err).NotTo(HaveOccurred())
	uid, gid, _ := strings.Cut(cf.Config.User, ":")
	inImage := func(args ...string) *exec.Cmd {
		return exec.Command("unshare", append([]string{"--map-user=" + uid, "--map-group=" + gid, "--root=" + root}, args...)...)
	}
	argv := append(append(append([]string{}, cf.Config.Entrypoint...), cf.Config.Cmd...), "--port", strconv.Itoa(port),
		"--pprof-addr", "localhost:"+strconv.Itoa(pprof))
	serve := inImage(argv...)
	log, err := os.Create(filepath.Join(t.TempDir(), "opm.log"))
	g.Expect(err).NotTo(HaveOccurred())
	serve.Stdout, serve.Stderr = log, log
	g.Expect(serve.Start()).To(Succeed())
	t.Cleanup(func() { _ = serve.Process.Kill(); _ = serve.Wait() })
	tail := func() string { b, _ := os.ReadFile(log.Name()); return string(b) }

	g.Eventually(func() error {
		if serve.ProcessState != nil {
			return errors.New("opm exited")
		}
		out, err := inImage("/bin/grpc_health_probe", "-addr=localhost:"+strconv.Itoa(port)).CombinedOutput()
		if err != nil {
			return errors.New(string(out))
		}
		return nil
	}).WithTimeout(time.Minute).Should(Succeed(), tail)
	// It wrote its cache where the command says, as the image's user.
	g.Expect(filepath.Join(root, "tmp", "cache")).To(BeADirectory(), tail())
}

// unpack writes an image's flattened filesystem into root.
func unpack(rc io.ReadCloser, root string) error {
	defer func() { _ = rc.Close() }()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		p := filepath.Join(root, filepath.Clean("/"+h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				return err
			}
			if err := os.Chmod(p, os.FileMode(h.Mode).Perm()|modeBits(h.Mode)); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode).Perm())
			if err != nil {
				return err
			}
			if _, err := io.Copy(f, tr); err != nil {
				_ = f.Close()
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
		}
	}
}

// modeBits carries the sticky bit of a tar mode (a world-writable /tmp).
func modeBits(m int64) os.FileMode {
	if m&0o1000 != 0 {
		return os.ModeSticky
	}
	return 0
}
