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
	"os"
	"path/filepath"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openshell/openshell-operator/test/framework"
	"github.com/openshell/openshell-operator/test/olmcluster"
)

var (
	cluster *framework.Cluster
	lm      *olmcluster.Manager
)

func TestMain(m *testing.M) {
	os.Exit(framework.RunWithCluster(m, framework.ClusterOptions{
		// OLM installs the operator's CRDs from the bundle.
		// The front proxy: the relay's APIService is served through it.
		EnvOptions: framework.EnvOptions{OLM: true, WithoutOwnCRDs: true, AgentSandbox: framework.AgentSandboxBetaOnly, FrontProxy: true},
		PodNetwork: true,
		// The operator runs as the process OLM's Deployment would start.
		OperatorBinary: true,
	}, &cluster, func(c *framework.Cluster) (func(), []*framework.Process, error) {
		if err := serveGroups(context.Background(), c); err != nil {
			return nil, nil, err
		}
		var err error
		if lm, err = olmcluster.Start(context.Background(), c, olmcluster.Options{Namespace: olmNamespace, GlobalOperatorsNamespace: "operators"}); err != nil {
			return nil, nil, err
		}
		return lm.Stop, lm.Processes(), nil
	}))
}

// serveGroups serves user.openshift.io Groups (testdata: a CRD standing in
// for OpenShift's API server), so that the relay, under the CSV's RBAC,
// follows them as on OpenShift; it returns once they are served.
func serveGroups(ctx context.Context, c *framework.Cluster) error {
	if err := framework.ApplyManifests(ctx, c.Client, filepath.Join(framework.RepoRoot(), "test", "olm", "testdata", "groups.user.openshift.io.yaml")); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return framework.WaitFor(ctx, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := c.Client.Get(ctx, client.ObjectKey{Name: "groups.user.openshift.io"}, crd); err != nil {
			return false, err
		}
		for _, cond := range crd.Status.Conditions {
			if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
}
