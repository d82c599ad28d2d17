// Package olmcluster runs the Operator Lifecycle Manager on a local control
// plane, as a cluster runs it: the olm and catalog operators built from
// their module, a File-Based Catalog served by the opm we build, and what
// kwok's pods cannot do done by processes here: the bundle-unpack Job's
// extraction (what its pod runs), and the pods of the Deployments OLM
// creates from the CSV (the operator and the relay, run from the
// Deployments' own arguments, environment, ServiceAccount tokens and
// mounted certificates). test/olm and test/quickstart share it; nothing
// in the ecosystem runs OLM without a kubelet.
package olmcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	operatorsv1 "github.com/operator-framework/api/pkg/operators/v1"
	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/openshell/openshell-operator/test/framework"
)

// Options place OLM's namespaces.
type Options struct {
	// Namespace is the olm operator's own ("olm" upstream,
	// openshift-operator-lifecycle-manager on OpenShift).
	Namespace string
	// CatalogNamespace is the global catalog namespace: a Subscription in
	// any namespace may name a CatalogSource here ("olm" upstream,
	// openshift-marketplace on OpenShift). Default: Namespace.
	CatalogNamespace string
	// GlobalOperatorsNamespace holds the OperatorGroup of operators
	// installed for all namespaces ("operators" upstream,
	// openshift-operators on OpenShift).
	GlobalOperatorsNamespace string
	// Interval is the olm operator's wake-up (resync) interval, when it
	// removes what a deleted CSV left (0: OLM's default, 5 minutes).
	Interval time.Duration
}

// Manager is OLM running against the cluster: its two operators as
// processes, and what the bundle-unpack pods would do.
type Manager struct {
	opts      Options
	cluster   *framework.Cluster
	processes []*framework.Process
	cancel    context.CancelFunc
	done      chan struct{}

	mu       sync.Mutex
	bundles  map[string]string // bundle image → local bundle folder
	unpacked map[types.UID]bool
	errs     []error
}

// Start creates OLM's namespaces and OperatorGroups and starts its
// operators; Stop ends them.
func Start(ctx context.Context, c *framework.Cluster, opts Options) (_ *Manager, retErr error) {
	if opts.CatalogNamespace == "" {
		opts.CatalogNamespace = opts.Namespace
	}
	for _, ns := range []string{opts.Namespace, opts.CatalogNamespace, opts.GlobalOperatorsNamespace} {
		err := c.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, err
		}
	}
	// The OperatorGroups an OLM install ships: olm's own, and the global
	// one for operators installed in all namespaces.
	for _, og := range []*operatorsv1.OperatorGroup{
		{ObjectMeta: metav1.ObjectMeta{Name: "olm-operators", Namespace: opts.Namespace}, Spec: operatorsv1.OperatorGroupSpec{TargetNamespaces: []string{opts.Namespace}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "global-operators", Namespace: opts.GlobalOperatorsNamespace}},
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
	m := &Manager{opts: opts, cluster: c, bundles: map[string]string{}, unpacked: map[types.UID]bool{}, done: make(chan struct{})}
	defer func() {
		if retErr != nil {
			m.Stop()
		}
	}()
	env := []string{"KUBECONFIG=" + c.KubeconfigPath}
	// No packageserver (an aggregated API the console reads): nothing here
	// needs it, and its status is not written.
	args := []string{"--namespace", opts.Namespace, "--writeStatusName", "", "--writePackageServerStatusName", ""}
	if opts.Interval > 0 {
		args = append(args, "--interval", opts.Interval.String())
	}
	p, err := framework.StartProcessEnv(c.Dir, "olm", olmBin, env, args...)
	if err != nil {
		return nil, err
	}
	m.processes = append(m.processes, p)
	// The images are only named in the unpack Jobs' pods, which kwok never
	// runs (the unpacker below does their work).
	p, err = framework.StartProcessEnv(c.Dir, "catalog", catalogBin, env, "--kubeconfig", c.KubeconfigPath,
		"--namespace", opts.CatalogNamespace, "--writeStatusName", "",
		"--opmImage", "quay.io/operator-framework/opm:v1.64.0", "--util-image", "quay.io/operator-framework/olm:v0.41.0")
	if err != nil {
		return nil, err
	}
	m.processes = append(m.processes, p)
	uctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	go m.unpack(uctx)
	return m, nil
}

// Stop ends OLM's operators and the unpacker.
func (m *Manager) Stop() {
	if m.cancel != nil {
		m.cancel()
		<-m.done
		m.cancel = nil
	}
	for i := len(m.processes) - 1; i >= 0; i-- {
		_ = m.processes[i].Stop(10 * time.Second)
	}
}

// Processes are OLM's operators, for a cluster to watch.
func (m *Manager) Processes() []*framework.Process { return m.processes }

// CatalogNamespace is the global catalog namespace.
func (m *Manager) CatalogNamespace() string { return m.opts.CatalogNamespace }

// ServeBundle says which local folder holds the bundle image OLM names.
func (m *Manager) ServeBundle(image, dir string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.bundles[image] = dir
}

// UnpackErrors are the unpack attempts that failed so far.
func (m *Manager) UnpackErrors() []error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.errs)
}

// unpack does what the pod of each bundle-unpack Job does (the Jobs go
// into the namespace of the CatalogSource the bundle comes from): run
// `opm alpha bundle extract` on the bundle's content into the Job's
// ConfigMap, with the command and environment of the Job's container.
func (m *Manager) unpack(ctx context.Context) {
	defer close(m.done)
	opm, err := framework.Binary("opm")
	if err != nil {
		m.fail(err)
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
		if err := m.cluster.Client.List(ctx, jobs); err != nil {
			continue
		}
		for _, job := range jobs.Items {
			m.mu.Lock()
			done := m.unpacked[job.UID]
			m.mu.Unlock()
			if done {
				continue
			}
			if err := m.extract(ctx, opm, &job); err != nil {
				m.fail(fmt.Errorf("unpack job %s/%s: %w", job.Namespace, job.Name, err))
				continue
			}
			m.mu.Lock()
			m.unpacked[job.UID] = true
			m.mu.Unlock()
		}
	}
}

func (m *Manager) extract(ctx context.Context, opm string, job *batchv1.Job) error {
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
	m.mu.Lock()
	dir, ok := m.bundles[image]
	m.mu.Unlock()
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
	args = append(args, "-k", m.cluster.KubeconfigPath)
	cmd := exec.CommandContext(ctx, opm, args...)
	cmd.Env = append(cmd.Environ(), "CONTAINER_IMAGE="+image)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%v: %s", err, out)
	}
	return nil
}

func (m *Manager) fail(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.errs) < 20 {
		m.errs = append(m.errs, err)
	}
}

// ServeConfigs serves a File-Based Catalog folder with opm, as the
// registry pod of a CatalogSource would, and returns its address (for a
// CatalogSource's spec.address); it stops with the returned function.
func ServeConfigs(dir, name, configs string) (address string, stop func(), err error) {
	opm, err := framework.Binary("opm")
	if err != nil {
		return "", nil, err
	}
	port, err := framework.FreePort()
	if err != nil {
		return "", nil, err
	}
	// No startup profiling endpoint: opm binds it on a fixed port
	// (localhost:6060), so a second opm on the machine (another suite, a
	// test run before this one has wound down) exits and the CatalogSource
	// never becomes READY.
	p, err := framework.StartProcess(dir, "opm-"+name, opm, "serve", configs, "-p", strconv.Itoa(port), "--pprof-addr=")
	if err != nil {
		return "", nil, err
	}
	return "127.0.0.1:" + strconv.Itoa(port), func() { _ = p.Stop(5 * time.Second) }, nil
}

// WaitCatalogReady waits until OLM's catalog operator is connected to the
// CatalogSource's registry.
func WaitCatalogReady(ctx context.Context, c client.Client, key client.ObjectKey) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cur := &operatorsv1alpha1.CatalogSource{}
	err := framework.WaitFor(ctx, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, key, cur); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		return cur.Status.GRPCConnectionState != nil && cur.Status.GRPCConnectionState.LastObservedState == "READY", nil
	})
	if err != nil {
		return fmt.Errorf("CatalogSource %s never READY (%+v): %w", key, cur.Status.GRPCConnectionState, err)
	}
	return nil
}

// ServeCatalog serves a File-Based Catalog folder and registers it as
// CatalogSource name in the global catalog namespace, returning once OLM
// reads it; both go with stop.
func (m *Manager) ServeCatalog(ctx context.Context, dir, name, configs string) (stop func(), err error) {
	addr, stopServing, err := ServeConfigs(dir, name, configs)
	if err != nil {
		return nil, err
	}
	cs := &operatorsv1alpha1.CatalogSource{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: m.opts.CatalogNamespace},
		Spec: operatorsv1alpha1.CatalogSourceSpec{SourceType: operatorsv1alpha1.SourceTypeGrpc, Address: addr,
			DisplayName: "OpenShell (e2e)", Publisher: "e2e"}}
	stop = func() {
		_ = m.cluster.Client.Delete(context.Background(), cs)
		stopServing()
	}
	if err := m.cluster.Client.Create(ctx, cs); err != nil {
		stopServing()
		return nil, err
	}
	if err := WaitCatalogReady(ctx, m.cluster.Client, client.ObjectKeyFromObject(cs)); err != nil {
		stop()
		return nil, err
	}
	return stop, nil
}

// CatalogBundleImage is the image of the named bundle in a File-Based
// Catalog folder.
func CatalogBundleImage(configs, bundle string) (string, error) {
	raw, err := os.ReadFile(filepath.Join(configs, "openshell-operator", "catalog.yaml"))
	if err != nil {
		return "", err
	}
	for _, doc := range strings.Split(string(raw), "\n---") {
		var b struct {
			Schema string `json:"schema"`
			Name   string `json:"name"`
			Image  string `json:"image"`
		}
		if err := yaml.Unmarshal([]byte(doc), &b); err == nil && b.Schema == "olm.bundle" && b.Name == bundle {
			return b.Image, nil
		}
	}
	return "", fmt.Errorf("bundle %s not in the catalog %s", bundle, configs)
}

// WaitCSV waits until the named CSV is Succeeded; its error says what the
// Subscription subscription in ns and OLM's unpacker saw.
func (m *Manager) WaitCSV(ctx context.Context, ns, name, subscription string) (*operatorsv1alpha1.ClusterServiceVersion, error) {
	csv := &operatorsv1alpha1.ClusterServiceVersion{}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	err := framework.WaitFor(ctx, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		if err := m.cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, csv); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		return csv.Status.Phase == operatorsv1alpha1.CSVPhaseSucceeded, nil
	})
	if err != nil {
		return nil, fmt.Errorf("CSV %s/%s not Succeeded (phase %q: %s): %w\n%s\nunpack errors: %v", ns, name, csv.Status.Phase, csv.Status.Message, err,
			m.Describe(context.Background(), ns, subscription), errors.Join(m.UnpackErrors()...))
	}
	return csv, nil
}

// WaitInstallPlan waits until the InstallPlan of the Subscription in ns is
// Complete. A CSV can be Succeeded before it: until then OLM's catalog
// operator may still create the CSV's resources (its generated permission
// roles among them), and an uninstall that begins earlier leaves behind
// what it creates next, owned by a CSV that is gone.
func (m *Manager) WaitInstallPlan(ctx context.Context, ns, subscription string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	phase := operatorsv1alpha1.InstallPlanPhase("")
	err := framework.WaitFor(ctx, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		sub := &operatorsv1alpha1.Subscription{}
		if err := m.cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: subscription}, sub); err != nil {
			return false, err
		}
		if sub.Status.InstallPlanRef == nil {
			return false, nil
		}
		ip := &operatorsv1alpha1.InstallPlan{}
		if err := m.cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: sub.Status.InstallPlanRef.Name}, ip); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		phase = ip.Status.Phase
		return phase == operatorsv1alpha1.InstallPlanPhaseComplete, nil
	})
	if err != nil {
		return fmt.Errorf("the InstallPlan of Subscription %s/%s is not Complete (phase %q): %w\n%s", ns, subscription, phase, err,
			m.Describe(context.Background(), ns, subscription))
	}
	return nil
}

// InstalledCSV waits until the Subscription has installed a CSV and
// returns its name.
func (m *Manager) InstalledCSV(ctx context.Context, ns, subscription string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	name := ""
	err := framework.WaitFor(ctx, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		cur := &operatorsv1alpha1.Subscription{}
		if err := m.cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: subscription}, cur); err != nil {
			return false, err
		}
		name = cur.Status.InstalledCSV
		return name != "", nil
	})
	if err != nil {
		return "", fmt.Errorf("the Subscription %s/%s never installed a CSV: %w\n%s\nunpack errors: %v", ns, subscription, err,
			m.Describe(context.Background(), ns, subscription), errors.Join(m.UnpackErrors()...))
	}
	return name, nil
}

// Describe is what a user would look at when an install hangs: the
// Subscription's state and the namespace's InstallPlans.
func (m *Manager) Describe(ctx context.Context, ns, subscription string) string {
	c := m.cluster.Client
	out := ""
	sub := &operatorsv1alpha1.Subscription{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: subscription}, sub); err == nil {
		out += fmt.Sprintf("subscription state=%q installed=%q current=%q conditions=%v\n", sub.Status.State, sub.Status.InstalledCSV, sub.Status.CurrentCSV, sub.Status.Conditions)
	} else if !apierrors.IsNotFound(err) {
		out += err.Error() + "\n"
	}
	plans := &operatorsv1alpha1.InstallPlanList{}
	if err := c.List(ctx, plans, client.InNamespace(ns)); err == nil {
		for _, ip := range plans.Items {
			out += fmt.Sprintf("installplan %s phase=%q csvs=%v approved=%v conditions=%v\n", ip.Name, ip.Status.Phase, ip.Spec.ClusterServiceVersionNames, ip.Spec.Approved, ip.Status.Conditions)
		}
	}
	return out
}
