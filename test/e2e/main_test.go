// Package e2e runs the operator against a local cluster that really runs
// pods: kube-apiserver, etcd, kube-controller-manager, kube-scheduler, kwok
// and the real Agent Sandbox controller, all built from pinned modules.
package e2e

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"

	"github.com/openshell/openshell-operator/test/framework"
)

var cluster *framework.Cluster

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	flag.Parse()
	framework.SetupLogging()
	if testing.Short() {
		fmt.Println("skipping e2e tests in -short mode")
		return 0
	}
	var err error
	cluster, err = framework.StartCluster(context.Background(), framework.ClusterOptions{
		// OpenShift APIs without cert-manager: the built-in PKI issues certificates
		// (no cert-manager controller can run here).
		EnvOptions: framework.EnvOptions{OpenShift: true, AgentSandbox: framework.AgentSandboxBetaOnly},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start e2e cluster:", err)
		return 1
	}
	code := m.Run()
	if code != 0 {
		for _, p := range cluster.Processes {
			fmt.Fprintf(os.Stderr, "--- %s log (tail)\n%s\n", p.Name, p.Tail(3000))
		}
	}
	if err := cluster.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stop e2e cluster:", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}
