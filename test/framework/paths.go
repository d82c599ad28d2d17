package framework

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
)

// RepoRoot is the repository's top folder, found from this source file so
// that tests work from any package directory.
func RepoRoot() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		panic("framework: cannot locate source file")
	}
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// BinDir is where `make tools` puts binaries; OPENSHELL_BIN overrides it.
func BinDir() string {
	if d := os.Getenv("OPENSHELL_BIN"); d != "" {
		return d
	}
	return filepath.Join(RepoRoot(), "bin")
}

// Binary returns the path of a tool built by `make tools`, or an error that
// tells the reader how to build it.
func Binary(name string) (string, error) {
	p := filepath.Join(BinDir(), name)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%s not found in %s: run `make tools` first: %w", name, BinDir(), err)
	}
	return p, nil
}

// UpstreamCRDs are the folders (under bin/upstream/crds) of upstream CRD
// manifests copied from the module cache by hack/upstream-assets.sh.
const (
	CRDsOpenShift   = "openshift"
	CRDsCertManager = "cert-manager"
	CRDsOLM         = "olm"
	CRDsMonitoring  = "monitoring"
	CRDsGatewayAPI  = "gateway-api"
)

// AgentSandbox releases whose CRDs are available, one per API shape.
const (
	// AgentSandboxAlphaOnly serves agents.x-k8s.io/v1alpha1 only.
	AgentSandboxAlphaOnly = "v0.4.6"
	// AgentSandboxAlphaBeta serves v1alpha1 and v1beta1 with a conversion webhook.
	AgentSandboxAlphaBeta = "v0.5.6"
	// AgentSandboxBetaOnly serves v1beta1 only.
	AgentSandboxBetaOnly = "v1.0.3"
)

// UpstreamDir is a folder under bin/upstream.
func UpstreamDir(parts ...string) string {
	return filepath.Join(append([]string{BinDir(), "upstream"}, parts...)...)
}

// AgentSandboxCRDDir is the CRD folder of one Agent Sandbox release.
func AgentSandboxCRDDir(version string) string {
	return UpstreamDir("crds", "agent-sandbox", version)
}

// OwnCRDDir is the folder of this project's generated CRDs.
func OwnCRDDir() string { return filepath.Join(RepoRoot(), "config", "crd", "bases") }

// BuildOperator builds cmd/ into out the way `make images` builds the
// image's binary (static, no paths or build ID, so the same source gives
// the same bytes); env adds e.g. GOOS and GOARCH.
func BuildOperator(out string, env ...string) error {
	build := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w -buildid=", "-o", out, "./cmd")
	build.Dir = RepoRoot()
	build.Env = append(append(os.Environ(), "CGO_ENABLED=0"), env...)
	if msg, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("build the operator: %w\n%s", err, msg)
	}
	return nil
}

// operatorBinary is the one operator binary of a test process.
var operatorBinary struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// OperatorBinary builds the operator once per test process (as
// BuildOperator does) and returns its path. A package whose tests run it
// as a process sets ClusterOptions.OperatorBinary, so that the build
// happens in TestMain before the cluster starts: a cold build takes
// minutes on a loaded two-core machine, and inside a test it spent the
// test's own deadline (TestLeaderFailover/killed ran out of its five
// minutes in a Lease GET after building within them) while competing with
// the control plane it was timing.
func OperatorBinary() (string, error) {
	operatorBinary.once.Do(func() {
		if operatorBinary.dir, operatorBinary.err = os.MkdirTemp("", "openshell-operator-bin-"); operatorBinary.err != nil {
			return
		}
		path := filepath.Join(operatorBinary.dir, "manager")
		if operatorBinary.err = BuildOperator(path); operatorBinary.err == nil {
			operatorBinary.path = path
		}
	})
	return operatorBinary.path, operatorBinary.err
}

// removeOperatorBinary deletes what OperatorBinary built; called once the
// package's tests are done.
func removeOperatorBinary() {
	if operatorBinary.dir != "" {
		_ = os.RemoveAll(operatorBinary.dir)
	}
}
