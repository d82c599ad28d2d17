// Package quickstart runs docs/quickstart.md on a cluster of its own, as a
// new platform admin meets it: an OpenShift-like control plane (the
// OpenShift and OLM APIs, no SCC applied), the real Agent Sandbox
// controller and kwok, and nothing of ours but what OLM creates from the
// bundle before the operator starts. Its own cluster because the page's
// uninstall deletes the CRDs, which would take every other test's objects
// with them.
package quickstart

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/openshell/openshell-operator/test/framework"
)

var cluster *framework.Cluster

func TestMain(m *testing.M) {
	os.Exit(framework.RunWithCluster(m, framework.ClusterOptions{
		EnvOptions: framework.EnvOptions{OpenShift: true, OLM: true, AgentSandbox: framework.AgentSandboxBetaOnly, FrontProxy: true},
	}, &cluster, func(*framework.Cluster) (func(), []*framework.Process, error) {
		return func() {}, nil, bundleStaticObjects(context.Background())
	}))
}

// bundleManifests are the bundle's static objects, by source file.
var bundleManifests = []string{"config/operand/cluster_roles.yaml", "config/tenancy/openshell_tenant_admin_role.yaml",
	"config/tenancy/openshell_sandbox_user_role.yaml", "config/tenancy/openshell_view_role.yaml"}

// bundleStaticObjects creates what OLM creates from the bundle's manifests
// before the operator runs: its static ClusterRoles (the operands', the
// tenant roles). Not the SCC: the default line needs none, and the page
// says to apply it only for a gateway pinned to 0.0.111.
func bundleStaticObjects(ctx context.Context) error {
	for _, f := range bundleManifests {
		if err := framework.ApplyManifests(ctx, cluster.Client, filepath.Join(framework.RepoRoot(), f)); err != nil {
			return err
		}
	}
	return nil
}
