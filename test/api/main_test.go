// Package api tests the CRDs against a real kube-apiserver: every CEL rule
// accepts a valid object and rejects an invalid one with its message,
// defaults are applied, and printer columns, short names and categories are
// served.
package api

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"github.com/openshell/openshell-operator/test/framework"
)

var env *framework.Env

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	flag.Parse()
	framework.SetupLogging()
	if testing.Short() {
		fmt.Println("skipping API tests in -short mode: they need kube-apiserver")
		return 0
	}
	var err error
	if env, err = framework.StartEnv(framework.EnvOptions{}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	code := m.Run()
	if err := env.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stop envtest:", err)
	}
	return code
}
