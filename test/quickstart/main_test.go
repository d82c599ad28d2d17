// Package quickstart runs docs/quickstart.md on a cluster of its own, as a
// new platform admin meets it: an OpenShift-like control plane (the
// OpenShift APIs, no SCC applied), the real Agent Sandbox controller and
// kwok, and the real Operator Lifecycle Manager installing the operator
// from the page's CatalogSource and Subscription (test/olmcluster: OLM's
// operators, with the catalog's registry, the bundle unpacking and the
// operator's pods played by processes here). Nothing of ours is on the
// cluster before the page's steps. Its own cluster because the page's
// uninstall deletes the CRDs, which would take every other test's objects
// with them.
package quickstart

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/openshell/openshell-operator/test/framework"
	"github.com/openshell/openshell-operator/test/olmcluster"
)

var (
	cluster *framework.Cluster
	lm      *olmcluster.Manager
)

// OLM's namespaces as OpenShift places them: the page's Subscription names
// its CatalogSource in openshift-marketplace, the global catalog namespace.
// OLM wakes every 20 s instead of 5 min, so that what it removes of a
// deleted CSV at its next wake-up goes within the test.
var olmOnOpenShift = olmcluster.Options{Namespace: "openshift-operator-lifecycle-manager",
	CatalogNamespace: "openshift-marketplace", GlobalOperatorsNamespace: "openshift-operators", Interval: 20 * time.Second}

func TestMain(m *testing.M) {
	os.Exit(framework.RunWithCluster(m, framework.ClusterOptions{
		// OLM installs the operator's CRDs from the bundle; the front proxy
		// serves the relay's APIService; the pod network lets the API server
		// reach the webhook and the relay through the Services OLM created.
		EnvOptions: framework.EnvOptions{OpenShift: true, OLM: true, WithoutOwnCRDs: true, AgentSandbox: framework.AgentSandboxBetaOnly, FrontProxy: true},
		PodNetwork: true,
		// The operator and the relay run as the processes OLM's Deployments
		// would start.
		OperatorBinary: true,
	}, &cluster, func(c *framework.Cluster) (func(), []*framework.Process, error) {
		var err error
		if lm, err = olmcluster.Start(context.Background(), c, olmOnOpenShift); err != nil {
			return nil, nil, err
		}
		return lm.Stop, lm.Processes(), nil
	}))
}
