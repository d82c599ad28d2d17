package framework

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
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

// RunWithCluster is the body of a TestMain that needs one local cluster
// (StartCluster): it parses flags, routes logs, skips in -short mode,
// starts the cluster into *c, runs setup (whose processes' logs are
// printed with the cluster's when a test fails), runs the tests and stops
// everything. Use it as os.Exit(framework.RunWithCluster(m, opts, &c, setup)).
func RunWithCluster(m *testing.M, opts ClusterOptions, c **Cluster, setup func(*Cluster) (stop func(), logs []*Process, err error)) int {
	flag.Parse()
	SetupLogging()
	if testing.Short() {
		fmt.Println("skipping tests that need a cluster in -short mode")
		return 0
	}
	if opts.OperatorBinary {
		defer removeOperatorBinary()
		if _, err := OperatorBinary(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	cl, err := StartCluster(context.Background(), opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "start cluster:", err)
		return 1
	}
	*c = cl
	stop, logs := func() {}, []*Process(nil)
	if setup != nil {
		if stop, logs, err = setup(cl); err != nil {
			fmt.Fprintln(os.Stderr, "set up the cluster:", err)
			_ = cl.Stop()
			return 1
		}
	}
	code := m.Run()
	if code != 0 {
		for _, p := range append(slices.Clone(cl.Processes), logs...) {
			fmt.Fprintf(os.Stderr, "--- %s log (tail)\n%s\n", p.Name, p.Tail(3000))
		}
	}
	stop()
	if err := cl.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stop cluster:", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}
