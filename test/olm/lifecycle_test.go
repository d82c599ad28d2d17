package olm

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	operatorsv1 "github.com/operator-framework/api/pkg/operators/v1"
	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openshell/openshell-operator/test/framework"
)

// olmNamespace holds OLM's own operators, its CatalogSources and the
// bundle-unpack Jobs.
const olmNamespace = "olm"

// lifecycleManager is OLM running against the cluster: its two operators
// as processes, and what the bundle-unpack pods would do.
type lifecycleManager struct {
	processes []*framework.Process
	cancel    context.CancelFunc
	done      chan struct{}

	mu       sync.Mutex
	bundles  map[string]string // bundle image → local bundle folder
	unpacked map[types.UID]bool
	errs     []error
}

func startLifecycleManager(ctx context.Context, c *framework.Cluster) (_ *lifecycleManager, retErr error) {
	for _, ns := range []string{olmNamespace, "operators"} {
		if err := c.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return nil, err
		}
	}
	// The OperatorGroups an OLM install ships: olm's own, and the global
	// one for operators installed in all namespaces.
	for _, og := range []*operatorsv1.OperatorGroup{
		{ObjectMeta: metav1.ObjectMeta{Name: "olm-operators", Namespace: olmNamespace}, Spec: operatorsv1.OperatorGroupSpec{TargetNamespaces: []string{olmNamespace}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "global-operators", Namespace: "operators"}},
	} {
		if err := c.Client.Create(ctx, og); err != nil {
			return nil, err
		}
	}
	olmBin, err := framework.Binary("olm")
	if err != nil {
		return nil, err
	}
	catalogBin, err := framework.Binary("catalog")
	if err != nil {
		return nil, err
	}
	lm := &lifecycleManager{bundles: map[string]string{}, unpacked: map[types.UID]bool{}, done: make(chan struct{})}
	defer func() {
		if retErr != nil {
			lm.stop()
		}
	}()
	env := []string{"KUBECONFIG=" + c.KubeconfigPath}
	// No packageserver (an aggregated API the console reads): nothing here
	// needs it, and its status is not written.
	p, err := framework.StartProcessEnv(c.Dir, "olm", olmBin, env,
		"--namespace", olmNamespace, "--writeStatusName", "", "--writePackageServerStatusName", "")
	if err != nil {
		return nil, err
	}
	lm.processes = append(lm.processes, p)
	// The images are only named in the unpack Jobs' pods, which kwok never
	// runs (the unpacker below does their work).
	p, err = framework.StartProcessEnv(c.Dir, "catalog", catalogBin, env, "--kubeconfig", c.KubeconfigPath,
		"--namespace", olmNamespace, "--writeStatusName", "",
		"--opmImage", "quay.io/operator-framework/opm:v1.64.0", "--util-image", "quay.io/operator-framework/olm:v0.41.0")
	if err != nil {
		return nil, err
	}
	lm.processes = append(lm.processes, p)
	uctx, cancel := context.WithCancel(context.Background())
	lm.cancel = cancel
	go lm.unpack(uctx, c)
	return lm, nil
}

func (lm *lifecycleManager) stop() {
	if lm.cancel != nil {
		lm.cancel()
		<-lm.done
	}
	for i := len(lm.processes) - 1; i >= 0; i-- {
		_ = lm.processes[i].Stop(10 * time.Second)
	}
}

// serveBundle says which local folder holds the bundle image OLM names.
func (lm *lifecycleManager) serveBundle(image, dir string) {
	lm.mu.Lock()
	defer lm.mu.Unlock()
	lm.bundles[image] = dir
}

// unpackErrors are the unpack attempts that failed so far.
func (lm *lifecycleManager) unpackErrors() []error {
	lm.mu.Lock()
	defer lm.mu.Unlock()
	return slices.Clone(lm.errs)
}

// unpack does what the pod of each bundle-unpack Job does: run
// `opm alpha bundle extract` on the bundle's content into the Job's
// ConfigMap, with the command and environment of the Job's container.
func (lm *lifecycleManager) unpack(ctx context.Context, c *framework.Cluster) {
	defer close(lm.done)
	opm, err := framework.Binary("opm")
	if err != nil {
		lm.fail(err)
		return
	}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		jobs := &batchv1.JobList{}
		if err := c.Client.List(ctx, jobs, client.InNamespace(olmNamespace)); err != nil {
			continue
		}
		for _, job := range jobs.Items {
			lm.mu.Lock()
			done := lm.unpacked[job.UID]
			lm.mu.Unlock()
			if done {
				continue
			}
			if err := lm.extract(ctx, c, opm, &job); err != nil {
				lm.fail(fmt.Errorf("unpack job %s: %w", job.Name, err))
				continue
			}
			lm.mu.Lock()
			lm.unpacked[job.UID] = true
			lm.mu.Unlock()
		}
	}
}

func (lm *lifecycleManager) extract(ctx context.Context, c *framework.Cluster, opm string, job *batchv1.Job) error {
	var extract *corev1.Container
	for i := range job.Spec.Template.Spec.Containers {
		if job.Spec.Template.Spec.Containers[i].Name == "extract" {
			extract = &job.Spec.Template.Spec.Containers[i]
		}
	}
	if extract == nil || len(extract.Command) < 4 || extract.Command[0] != "opm" {
		return nil // not an unpack Job
	}
	var image string
	for _, e := range extract.Env {
		if e.Name == "CONTAINER_IMAGE" {
			image = e.Value
		}
	}
	lm.mu.Lock()
	dir, ok := lm.bundles[image]
	lm.mu.Unlock()
	if !ok {
		return fmt.Errorf("no local bundle for image %q", image)
	}
	// The container's own arguments, with the bundle mount replaced by the
	// local folder and the in-cluster config by the kubeconfig.
	args := slices.Clone(extract.Command[1:])
	for i := range args {
		if args[i] == "-m" && i+1 < len(args) {
			args[i+1] = dir + "/"
		}
	}
	args = append(args, "-k", c.KubeconfigPath)
	cmd := exec.CommandContext(ctx, opm, args...)
	cmd.Env = append(cmd.Environ(), "CONTAINER_IMAGE="+image)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%v: %s", err, out)
	}
	return nil
}

func (lm *lifecycleManager) fail(err error) {
	lm.mu.Lock()
	defer lm.mu.Unlock()
	if len(lm.errs) < 20 {
		lm.errs = append(lm.errs, err)
	}
}

// serveCatalog serves a File-Based Catalog folder with opm and registers it
// as a CatalogSource in OLM's namespace; both go when the test ends.
func serveCatalog(ctx context.Context, t *testing.T, name, configs string) {
	t.Helper()
	opm, err := framework.Binary("opm")
	if err != nil {
		t.Fatal(err)
	}
	port, err := framework.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	// No startup profiling endpoint: opm binds it on a fixed port
	// (localhost:6060), so a second opm on the machine (another suite, a
	// test run before this one has wound down) exits and the CatalogSource
	// never becomes READY.
	p, err := framework.StartProcess(t.TempDir(), "opm-"+name, opm, "serve", configs, "-p", strconv.Itoa(port), "--pprof-addr=")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop(5 * time.Second) })
	cs := &operatorsv1alpha1.CatalogSource{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: olmNamespace},
		Spec: operatorsv1alpha1.CatalogSourceSpec{SourceType: operatorsv1alpha1.SourceTypeGrpc, Address: "127.0.0.1:" + strconv.Itoa(port),
			DisplayName: "OpenShell (e2e)", Publisher: "e2e"}}
	if err := cluster.Client.Create(ctx, cs); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cluster.Client.Delete(context.Background(), cs) })
	ready, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	err = framework.WaitFor(ready, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		cur := &operatorsv1alpha1.CatalogSource{}
		if err := cluster.Client.Get(ctx, client.ObjectKeyFromObject(cs), cur); err != nil {
			return false, err
		}
		return cur.Status.GRPCConnectionState != nil && cur.Status.GRPCConnectionState.LastObservedState == "READY", nil
	})
	if err != nil {
		t.Fatalf("CatalogSource %s never READY: %v\n%s", name, err, p.Tail(2000))
	}
}

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

// waitCSV waits until the named CSV is Succeeded.
func waitCSV(ctx context.Context, t *testing.T, ns, name string) *operatorsv1alpha1.ClusterServiceVersion {
	t.Helper()
	csv := &operatorsv1alpha1.ClusterServiceVersion{}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	err := framework.WaitFor(ctx, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		if err := cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, csv); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		return csv.Status.Phase == operatorsv1alpha1.CSVPhaseSucceeded, nil
	})
	if err != nil {
		t.Fatalf("CSV %s/%s not Succeeded (phase %q: %s): %v\n%s\nunpack errors: %v", ns, name, csv.Status.Phase, csv.Status.Message, err,
			describeSubscription(context.Background(), ns), lm.unpackErrors())
	}
	return csv
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

// describeSubscription is what a user would look at when an install hangs.
func describeSubscription(ctx context.Context, ns string) string {
	out := ""
	sub := &operatorsv1alpha1.Subscription{}
	if err := cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "openshell-operator"}, sub); err == nil {
		out += fmt.Sprintf("subscription state=%q installed=%q current=%q conditions=%v\n", sub.Status.State, sub.Status.InstalledCSV, sub.Status.CurrentCSV, sub.Status.Conditions)
	} else if !apierrors.IsNotFound(err) {
		out += err.Error() + "\n"
	}
	plans := &operatorsv1alpha1.InstallPlanList{}
	if err := cluster.Client.List(ctx, plans, client.InNamespace(ns)); err == nil {
		for _, ip := range plans.Items {
			out += fmt.Sprintf("installplan %s phase=%q csvs=%v approved=%v conditions=%v\n", ip.Name, ip.Status.Phase, ip.Spec.ClusterServiceVersionNames, ip.Spec.Approved, ip.Status.Conditions)
		}
	}
	return out
}

// bundleDir is the repository's bundle folder.
func bundleDir() string { return filepath.Join(framework.RepoRoot(), "bundle") }
