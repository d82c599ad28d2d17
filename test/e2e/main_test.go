// Package e2e runs the operator against a local cluster that really runs
// pods: kube-apiserver, etcd, kube-controller-manager, kube-scheduler, kwok
// and the real Agent Sandbox controller, all built from pinned modules.
package e2e

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/openshell/openshell-operator/test/framework"
)

var cluster *framework.Cluster

func TestMain(m *testing.M) {
	// OpenShift APIs without cert-manager: the built-in PKI issues
	// certificates (cert-manager's controllers run in controllers/gateway).
	os.Exit(framework.RunWithCluster(m, framework.ClusterOptions{
		EnvOptions: framework.EnvOptions{OpenShift: true, GatewayAPI: true, AgentSandbox: framework.AgentSandboxBetaOnly, FrontProxy: true},
		// Four tests run the operator as a process (SIGKILLed, proxied).
		OperatorBinary: true,
	}, &cluster, func(*framework.Cluster) (func(), []*framework.Process, error) {
		return func() {}, nil, applyClusterAdminManifests(context.Background())
	}))
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
