package framework

import (
	"flag"
	"fmt"
	"os"
	"testing"
)

// RunWithEnv is the body of a TestMain that needs one envtest control plane:
// it parses flags, routes logs, skips in -short mode, starts the control
// plane into *env, runs the tests and stops it. Use it as
// os.Exit(framework.RunWithEnv(m, opts, &env)).
func RunWithEnv(m *testing.M, opts EnvOptions, env **Env) int {
	flag.Parse()
	SetupLogging()
	if testing.Short() {
		fmt.Println("skipping tests that need kube-apiserver in -short mode")
		return 0
	}
	e, err := StartEnv(opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	*env = e
	code := m.Run()
	if err := e.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stop envtest:", err)
	}
	return code
}

// RequireControlPlane skips a test that needs kube-apiserver in -short
// mode, so that a package's TestMain can run its pure tests there instead
// of skipping the whole package.
func RequireControlPlane(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs kube-apiserver (run without -short)")
	}
}
