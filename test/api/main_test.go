// Package api tests the CRDs against a real kube-apiserver: every CEL rule
// accepts a valid object and rejects an invalid one with its message,
// defaults are applied, and printer columns, short names and categories are
// served.
package api

import (
	"os"
	"testing"

	"github.com/openshell/openshell-operator/test/framework"
)

var env *framework.Env

func TestMain(m *testing.M) {
	os.Exit(framework.RunWithEnv(m, framework.EnvOptions{OpenShift: true, OLM: true, GatewayAPI: true}, &env))
}
