// Package e2e runs the operator against a local cluster that really runs
// pods: kube-apiserver, etcd, kube-controller-manager, kube-scheduler, kwok
// and the real Agent Sandbox controller, all built from pinned modules.
package e2e

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
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
	if err := applyClusterAdminManifests(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "apply the cluster admin's manifests:", err)
		_ = cluster.Stop()
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

// applyClusterAdminManifests does what an OLM install and its one manual
// step do before anything else runs: OLM creates the bundle's static
// ClusterRoles (config/operand, the SCC's use role), and a cluster admin
// applies the sandbox SCC from config/scc (the operator never creates SCCs).
func applyClusterAdminManifests(ctx context.Context) error {
	for _, f := range []string{"config/operand/cluster_roles.yaml", "config/scc/use_role.yaml", "config/scc/scc.yaml"} {
		if err := framework.ApplyManifests(ctx, cluster.Client, filepath.Join(framework.RepoRoot(), f)); err != nil {
			return err
		}
	}
	return nil
}
