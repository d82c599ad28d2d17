package olm

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"testing"
	"time"

	operatorsv1 "github.com/operator-framework/api/pkg/operators/v1"
	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openshell/openshell-operator/internal/pki"
	"github.com/openshell/openshell-operator/test/framework"
	"github.com/openshell/openshell-operator/test/olmcluster"
)

// olmNamespace holds OLM's own operators, its CatalogSources and the
// bundle-unpack Jobs.
const olmNamespace = "olm"

// subscriptionName is the Subscription the tests create, as the console names it.
const subscriptionName = "openshell-operator"

// serveCatalog serves a File-Based Catalog folder with opm and registers it
// as CatalogSource name in OLM's namespace; both go when the test ends.
func serveCatalog(ctx context.Context, t *testing.T, name, configs string) {
	t.Helper()
	stop, err := lm.ServeCatalog(ctx, t.TempDir(), name, configs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
}

// catalogBundleImage is the image of the named bundle in a File-Based
// Catalog folder.
func catalogBundleImage(t *testing.T, configs, bundle string) string {
	t.Helper()
	image, err := olmcluster.CatalogBundleImage(configs, bundle)
	if err != nil {
		t.Fatal(err)
	}
	return image
}

// waitCSV waits until the named CSV is Succeeded.
func waitCSV(ctx context.Context, t *testing.T, ns, name string) *operatorsv1alpha1.ClusterServiceVersion {
	t.Helper()
	csv, err := lm.WaitCSV(ctx, ns, name, subscriptionName)
	if err != nil {
		t.Fatal(err)
	}
	return csv
}

// describeSubscription is what a user would look at when an install hangs.
func describeSubscription(ctx context.Context, ns string) string {
	return lm.Describe(ctx, ns, subscriptionName)
}

// runAsPodStoppable starts the operator as the pod of the Deployment OLM
// created would run (olmcluster.RunOperator), its OIDC issuer serving
// under a certificate from ca and reached through issuer when set; it
// returns a function stopping the process, as the pod's deletion does, and
// the issuer URL.
func runAsPodStoppable(ctx context.Context, t *testing.T, opNS, bin string, ca *pki.KeyPair, issuer *framework.Balancer) (func(), string) {
	t.Helper()
	return olmcluster.RunOperator(ctx, t, cluster, olmcluster.OperatorPod{Namespace: opNS, Binary: bin, CA: ca, Issuer: issuer})
}

// runRelayAsPod starts a relay pod of the Deployment OLM created
// (olmcluster.RunRelay) and records it for the tests that read its
// metrics or replace it.
func runRelayAsPod(ctx context.Context, t *testing.T, opNS string, run pods) {
	t.Helper()
	r := olmcluster.RunRelay(ctx, t, cluster, olmcluster.RelayPod{Namespace: opNS, Binary: run.bin, IssuerURL: run.issuerURL})
	relayMetrics.Store(opNS, r.MetricsURL)
	relayProcesses.Store(opNS, r.Process)
}

// issuerURLOf is the operator's OIDC issuer URL behind the balancer.
func issuerURLOf(lb *framework.Balancer) string { return olmcluster.IssuerURLOf(lb) }

// pods is what runs the pods of the Deployments OLM creates: the manager
// binary, and the operator's OIDC issuer URL (the relay mints gateway
// tokens under it).
type pods struct{ bin, issuerURL string }

// subscribe creates the OperatorGroup and the Subscription a user creates in
// the console, runs the relay as its pod would (OLM holds the CSV until the
// relay's APIService is served) and waits until the CSV OLM installs is
// Succeeded.
func subscribe(ctx context.Context, t *testing.T, opNS string, targets []string, catalog, channel, startingCSV string,
	approval operatorsv1alpha1.Approval, run pods) *operatorsv1alpha1.ClusterServiceVersion {
	t.Helper()
	return subscribeWith(ctx, t, opNS, targets, catalog, channel, startingCSV, approval, nil, run)
}

// subscribeWith is subscribe with the Subscription's config (the
// environment an admin gives the operator).
func subscribeWith(ctx context.Context, t *testing.T, opNS string, targets []string, catalog, channel, startingCSV string,
	approval operatorsv1alpha1.Approval, config *operatorsv1alpha1.SubscriptionConfig, run pods) *operatorsv1alpha1.ClusterServiceVersion {
	t.Helper()
	c := cluster.Client
	og := &operatorsv1.OperatorGroup{ObjectMeta: metav1.ObjectMeta{Name: "openshell", Namespace: opNS},
		Spec: operatorsv1.OperatorGroupSpec{TargetNamespaces: targets}}
	if err := c.Create(ctx, og); err != nil {
		t.Fatal(err)
	}
	sub := &operatorsv1alpha1.Subscription{ObjectMeta: metav1.ObjectMeta{Name: "openshell-operator", Namespace: opNS},
		Spec: &operatorsv1alpha1.SubscriptionSpec{CatalogSource: catalog, CatalogSourceNamespace: olmNamespace,
			Package: "openshell-operator", Channel: channel, StartingCSV: startingCSV, InstallPlanApproval: approval, Config: config}}
	if err := c.Create(ctx, sub); err != nil {
		t.Fatal(err)
	}
	if approval == operatorsv1alpha1.ApprovalManual {
		approveInstallPlan(ctx, t, opNS, startingCSV)
	}
	name := startingCSV
	if name == "" {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		err := framework.WaitFor(ctx, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
			cur := &operatorsv1alpha1.Subscription{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(sub), cur); err != nil {
				return false, err
			}
			name = cur.Status.InstalledCSV
			return name != "", nil
		})
		if err != nil {
			t.Fatalf("the Subscription never installed a CSV: %v\n%s", err, describeSubscription(context.Background(), opNS))
		}
	}
	runRelayAsPod(ctx, t, opNS, run)
	return waitCSV(ctx, t, opNS, name)
}

// approveInstallPlan approves, as a user does in the console, the
// InstallPlan the Subscription points at once it waits for approval to
// install csv (OLM may replace a plan it is still writing).
func approveInstallPlan(ctx context.Context, t *testing.T, ns, csv string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	err := framework.WaitFor(ctx, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		sub := &operatorsv1alpha1.Subscription{}
		if err := cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "openshell-operator"}, sub); err != nil {
			return false, err
		}
		if sub.Status.InstallPlanRef == nil {
			return false, nil
		}
		ip := &operatorsv1alpha1.InstallPlan{}
		if err := cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: sub.Status.InstallPlanRef.Name}, ip); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		if !slices.Contains(ip.Spec.ClusterServiceVersionNames, csv) {
			return false, nil
		}
		if ip.Spec.Approved {
			return true, nil
		}
		if ip.Status.Phase != operatorsv1alpha1.InstallPlanPhaseRequiresApproval {
			return false, nil
		}
		ip.Spec.Approved = true
		return false, client.IgnoreNotFound(cluster.Client.Update(ctx, ip))
	})
	if err != nil {
		t.Fatalf("no InstallPlan for %s to approve: %v\n%s", csv, err, describeSubscription(context.Background(), ns))
	}
}

// unsubscribe uninstalls as the documentation says: the Subscription, the
// CSV, then the OperatorGroup; OLM leaves the CRDs.
func unsubscribe(ctx context.Context, t *testing.T, opNS string) {
	t.Helper()
	c := cluster.Client
	var errs []error
	errs = append(errs, client.IgnoreNotFound(c.Delete(ctx, &operatorsv1alpha1.Subscription{ObjectMeta: metav1.ObjectMeta{Name: "openshell-operator", Namespace: opNS}})))
	csvs := &operatorsv1alpha1.ClusterServiceVersionList{}
	errs = append(errs, c.List(ctx, csvs, client.InNamespace(opNS)))
	for i := range csvs.Items {
		errs = append(errs, client.IgnoreNotFound(c.Delete(ctx, &csvs.Items[i])))
	}
	errs = append(errs, client.IgnoreNotFound(c.Delete(ctx, &operatorsv1.OperatorGroup{ObjectMeta: metav1.ObjectMeta{Name: "openshell", Namespace: opNS}})))
	if err := errors.Join(errs...); err != nil {
		t.Error(err)
	}
	// Wait for OLM to clean up: copied CSVs and the webhooks go with the CSV.
	err := framework.WaitFor(ctx, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		all := &operatorsv1alpha1.ClusterServiceVersionList{}
		if err := c.List(ctx, all); err != nil {
			return false, err
		}
		return len(all.Items) == 0, nil
	})
	if err != nil {
		t.Errorf("CSVs left after uninstall: %v", err)
	}
}

// bundleDir is the repository's bundle folder.
func bundleDir() string { return filepath.Join(framework.RepoRoot(), "bundle") }
