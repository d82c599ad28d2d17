// Package olm installs the bundle with the real Operator Lifecycle Manager,
// as OperatorHub does, on a local control plane: the olm and catalog
// operators built from their module, the File-Based Catalog served by the
// opm we build, OperatorGroup → Subscription → InstallPlan → CSV in each
// install mode, then the operator run as the pod OLM created would run it
// (its ServiceAccount's token, its Deployment's env and args, the webhook
// certificate OLM issued, reached by the API server through the
// pod network) driving a sandbox to Ready.
//
// kwok runs no containers, so two things a pod would do are done here: the
// bundle-unpack Job's extraction (opm alpha bundle extract, what its pod
// runs) and the operator process itself.
package olm

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"

	"github.com/openshell/openshell-operator/test/framework"
)

var (
	cluster *framework.Cluster
	lm      *lifecycleManager
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	flag.Parse()
	framework.SetupLogging()
	if testing.Short() {
		fmt.Println("skipping OLM tests in -short mode")
		return 0
	}
	ctx := context.Background()
	var err error
	cluster, err = framework.StartCluster(ctx, framework.ClusterOptions{
		// OLM installs the operator's CRDs from the bundle.
		EnvOptions: framework.EnvOptions{OLM: true, WithoutOwnCRDs: true, AgentSandbox: framework.AgentSandboxBetaOnly},
		PodNetwork: true,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start cluster:", err)
		return 1
	}
	lm, err = startLifecycleManager(ctx, cluster)
	if err != nil {
		fmt.Fprintln(os.Stderr, "start OLM:", err)
		_ = cluster.Stop()
		return 1
	}
	code := m.Run()
	if code != 0 {
		for _, p := range append(cluster.Processes, lm.processes...) {
			fmt.Fprintf(os.Stderr, "--- %s log (tail)\n%s\n", p.Name, p.Tail(3000))
		}
	}
	lm.stop()
	if err := cluster.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stop cluster:", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}
