package quickstart

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/operatorenv"
	"github.com/openshell/openshell-operator/internal/pki"
	render "github.com/openshell/openshell-operator/internal/render/gateway"
	"github.com/openshell/openshell-operator/test/framework"
	"github.com/openshell/openshell-operator/test/olmcluster"
	"github.com/openshell/openshell-operator/test/stack"
)

// The page's commands this test does not run, each with the reason; one
// that no longer appears on the page fails the test (the list is kept
// honest with the page).
var notRun = map[string]string{
	"kubectl apply -f https://github.com/kubernetes-sigs/agent-sandbox/releases/download/v1.0.3/sandbox.yaml": "" +
		"this cluster runs the Agent Sandbox controller built from the same pinned release (CI reaches no GitHub)",
	"oc apply -k config/scc":                           "only for a gateway pinned to 0.0.111; the page's runs the default line",
	"oc delete -k config/scc --ignore-not-found":       "the page says: if you applied it",
	"oc get openshellgateway -n openshell-operator -w": "a watch ends only when interrupted; the sandbox's Ready below waits for the gateway",
}

// placeholders are what the page asks the reader to fill in.
var placeholders = map[string]string{"<your key>": "sk-quickstart-not-a-real-key", "<tenant admin>": "tenant-admin"}

// consumer is the developer the page's step 4 binds to
// openshell-sandbox-user in the tenant namespace; shellInput is what they type into the shell the
// page opens, and its answer what they must see.
const (
	consumer     = "dev"
	shellInput   = "echo hello from the quickstart\nexit 0\n"
	shellAnswers = "hello from the quickstart\n"
)

// TestQuickstart follows docs/quickstart.md top to bottom as a new
// platform admin, tenant admin and developer would: every YAML block is
// applied and every shell command run as written (oc is kubectl here).
// The real OLM installs the operator from the page's CatalogSource and
// Subscription and removes it when the page deletes its CSV; the pods of
// the Deployments OLM creates run as processes with exactly the RBAC, the
// environment and the certificates OLM gave them. The gateway is a Managed
// 0.1.5 gateway whose pod the test gateway plays (no 0.1 gateway binary
// exists; test/stack). It must reach a Ready sandbox whose provider uses a
// shipped profile, a developer's `kubectl openshell exec` must print what
// runs in it, and after the uninstall section nothing of the operator's
// may be left: CRDs, CSVs, finalizers, webhooks, the APIService,
// ClusterRoles and bindings.
func TestQuickstart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	page := filepath.Join(framework.RepoRoot(), "docs", "quickstart.md")
	steps, err := framework.DocSteps(page)
	if err != nil {
		t.Fatal(err)
	}
	r := newReader(ctx, t)
	for _, step := range steps {
		for _, o := range step.Objects {
			r.apply(o)
		}
		for _, c := range step.Commands {
			r.run(c)
		}
	}
	for line, why := range notRun {
		if !r.skipped[line] {
			t.Errorf("%q is no longer on the page (not run because %s): drop it from notRun", line, why)
		}
	}
	if !r.sawReady {
		t.Error("the page never checks that the sandbox is Ready")
	}
	if !r.sawShell {
		t.Error("the page never opens a shell in the sandbox")
	}
	if !r.uninstalled {
		t.Error("the page never deletes the operator's CSV")
	}
	r.expectNothingLeft()
}

// reader is the person following the page: what they have started and
// seen so far, and the cluster's pods this test plays for them (kwok runs
// none): the catalog's registry, the operator's and the relay's (from the
// Deployments OLM created) and the gateway's.
type reader struct {
	ctx context.Context
	t   *testing.T
	g   *WithT
	c   client.Client

	namespaces map[string]bool // created by the page or for it
	bin        string          // PATH: oc, kubectl, kubectl-openshell
	admin      *framework.DocShell
	developer  *framework.DocShell

	// services stands in for cluster DNS and the pod network for the
	// operator's and the relay's processes: a CONNECT proxy that sends a
	// Service's address to the process playing its pod.
	services  *framework.PodNetwork
	issuer    *framework.Balancer // the operator's OIDC issuer, as its Service
	issuerCA  *pki.KeyPair
	images    operatorenv.Releases // the operator's operand images, from its Deployment
	operator  func()               // stops the operator's pod
	relay     *olmcluster.Relay
	managed   *stack.ManagedGateway
	installed string // the CSV OLM installed
	// uninstallAt is when the page's uninstall section began.
	uninstallAt time.Time
	operatorNS  string // where: the Subscription's namespace

	skipped                         map[string]bool
	sawReady, sawShell, uninstalled bool
}

func newReader(ctx context.Context, t *testing.T) *reader {
	r := &reader{ctx: ctx, t: t, g: NewWithT(t), c: cluster.Client, namespaces: map[string]bool{}, skipped: map[string]bool{},
		bin: t.TempDir()}
	admin, err := framework.NewDocShell(r.bin, cluster.KubeconfigPath)
	if err != nil {
		t.Fatal(err)
	}
	r.admin = admin
	if err := framework.BuildKubectlPlugin(r.bin); err != nil {
		t.Fatal(err)
	}
	// The developer's kubeconfig: the cluster's, as them.
	cfg, err := clientcmd.LoadFromFile(cluster.KubeconfigPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range cfg.AuthInfos {
		a.Impersonate, a.ImpersonateGroups = consumer, []string{"system:authenticated"}
	}
	r.developer = &framework.DocShell{Bin: r.bin, Kubeconfig: filepath.Join(t.TempDir(), "developer.kubeconfig")}
	if err := clientcmd.WriteToFile(*cfg, r.developer.Kubeconfig); err != nil {
		t.Fatal(err)
	}
	if r.services, err = framework.StartHTTPProxy(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.services.Stop)
	if r.issuer, err = framework.StartBalancer(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.issuer.Stop)
	if r.issuerCA, err = pki.NewCA("quickstart", time.Hour, time.Now()); err != nil {
		t.Fatal(err)
	}
	return r
}

// apply applies one of the page's objects as the cluster admin (oc apply),
// doing first what the cluster provides and after what the page's prose
// asks around it.
func (r *reader) apply(d framework.DocObject) {
	r.t.Helper()
	u := d.Object.DeepCopy()
	if ns := u.GetNamespace(); ns != "" && !r.namespaces[ns] {
		// openshift-marketplace, for the CatalogSource: the cluster's own.
		if err := r.c.Create(r.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
			r.t.Fatal(err)
		}
		r.namespaces[ns] = true
	}
	switch u.GetKind() {
	case "CatalogSource":
		r.serveCatalog(d, u)
	case "OpenShellGateway":
		// The cluster's default storage class would bind the gateway's claim.
		framework.ProvideGatewayVolume(r.ctx, r.t, r.c, u.GetNamespace(), u.GetName())
	}
	r.g.Expect(r.c.Apply(r.ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner("quickstart"), client.ForceOwnership)).
		To(Succeed(), "%s: %s %s", d.Where, u.GetKind(), u.GetName())
	switch u.GetKind() {
	case "Namespace":
		r.namespaces[u.GetName()] = true
	case "CatalogSource":
		r.g.Expect(olmcluster.WaitCatalogReady(r.ctx, r.c, client.ObjectKeyFromObject(u))).To(Succeed(), "%s", d.Where)
	case "Subscription":
		// Step 1's is Agent Sandbox's, from Red Hat's catalog, which this
		// cluster does not serve (it runs the controller already): OLM
		// reports its catalog missing, and nothing else happens.
		if pkg, _, _ := unstructured.NestedString(u.Object, "spec", "name"); pkg == "openshell-operator" {
			r.install(d, u)
		}
	case "OpenShellGateway":
		r.playGateway(d, u)
	}
}

// serveCatalog serves the catalog the page's CatalogSource names. Its image
// is the one `make images` packs catalog/configs into; kwok runs no
// registry pod for it, so opm serves catalog/configs here and the
// CatalogSource names that address instead of the image (the one change
// the test makes to an object of the page). The bundle image the catalog
// names is this repository's bundle/ folder.
func (r *reader) serveCatalog(d framework.DocObject, u *unstructured.Unstructured) {
	r.t.Helper()
	configs := filepath.Join(framework.RepoRoot(), "catalog", "configs")
	image, _, _ := unstructured.NestedString(u.Object, "spec", "image")
	r.g.Expect(image).NotTo(BeEmpty(), "%s: the CatalogSource names no image", d.Where)
	addr, stop, err := olmcluster.ServeConfigs(r.t.TempDir(), u.GetName(), configs)
	r.g.Expect(err).NotTo(HaveOccurred())
	r.t.Cleanup(stop)
	unstructured.RemoveNestedField(u.Object, "spec", "image")
	r.g.Expect(unstructured.SetNestedField(u.Object, addr, "spec", "address")).To(Succeed())
	bundle, err := olmcluster.CatalogBundleImage(configs, bundleCSVName(r.t))
	r.g.Expect(err).NotTo(HaveOccurred())
	lm.ServeBundle(bundle, filepath.Join(framework.RepoRoot(), "bundle"))
}

// install follows OLM through the page's Subscription: it resolves the
// package from the page's CatalogSource, installs the CSV, and the
// Deployments it creates start their pods (the relay's first: OLM holds
// the CSV until the relay's APIService is available).
func (r *reader) install(d framework.DocObject, sub *unstructured.Unstructured) {
	r.t.Helper()
	ns := sub.GetNamespace()
	csv, err := lm.InstalledCSV(r.ctx, ns, sub.GetName())
	r.g.Expect(err).NotTo(HaveOccurred(), "%s", d.Where)
	bin, err := framework.OperatorBinary()
	r.g.Expect(err).NotTo(HaveOccurred())
	// Service names resolve for these processes through r.services, named
	// in the lower-case variable: Go's and gRPC's dialers read it, while
	// the operator's proxy settings for its operands come from OLM's
	// upper-case HTTPS_PROXY only, so nothing the operator renders changes.
	env := []string{"https_proxy=" + r.services.URL()}
	r.relay = olmcluster.RunRelay(r.ctx, r.t, cluster, olmcluster.RelayPod{Namespace: ns, Binary: bin,
		IssuerURL: olmcluster.IssuerURLOf(r.issuer), Env: env})
	_, err = lm.WaitCSV(r.ctx, ns, csv, sub.GetName())
	r.g.Expect(err).NotTo(HaveOccurred(), "%s", d.Where)
	// OLM has installed the operator once its InstallPlan is Complete, not
	// when the CSV first succeeds: the page's uninstall, read at once, must
	// not race OLM still creating the CSV's permission roles.
	r.g.Expect(lm.WaitInstallPlan(r.ctx, ns, sub.GetName())).To(Succeed(), "%s", d.Where)
	r.installed, r.operatorNS = csv, ns
	r.operator, _ = olmcluster.RunOperator(r.ctx, r.t, cluster, olmcluster.OperatorPod{Namespace: ns, Binary: bin, CA: r.issuerCA,
		Issuer: r.issuer, Env: env})
	dep := &appsv1.Deployment{}
	r.g.Expect(r.c.Get(r.ctx, client.ObjectKey{Namespace: ns, Name: olmcluster.OperatorDeployment}, dep)).To(Succeed())
	vars := map[string]string{}
	for _, e := range dep.Spec.Template.Spec.Containers[0].Env {
		vars[e.Name] = e.Value
	}
	r.images = operatorenv.RelatedImagesFromEnv(func(k string) string { return vars[k] })
}

// playGateway plays the pod of the page's Managed gateway once the
// operator has installed it: a test gateway of the release the operator
// rendered (no 0.1 gateway binary exists; test/stack), reached through the
// gateway's Service.
func (r *reader) playGateway(d framework.DocObject, u *unstructured.Unstructured) {
	r.t.Helper()
	gw := &openshellv1alpha1.OpenShellGateway{}
	r.g.Expect(r.c.Get(r.ctx, client.ObjectKeyFromObject(u), gw)).To(Succeed())
	m, err := stack.PlayManaged(r.ctx, r.c, gw, stack.ManagedPod{Config: cluster.Config, IssuerURL: olmcluster.IssuerURLOf(r.issuer),
		IssuerCA: r.issuerCA.CertPEM, Images: r.images, Route: r.services.Route}, "")
	r.g.Expect(err).NotTo(HaveOccurred(), "%s: the gateway's pod", d.Where)
	r.t.Cleanup(m.Stop)
	r.managed = m
}

// podsGone is the kubelet once OLM has removed the CSV: the Deployments go
// with it, and so do their pods (and the gateway's, long deleted).
func (r *reader) podsGone(ns string) {
	r.t.Helper()
	for _, name := range []string{olmcluster.OperatorDeployment, olmcluster.RelayDeployment} {
		r.g.Eventually(func() bool {
			err := r.c.Get(r.ctx, client.ObjectKey{Namespace: ns, Name: name}, &appsv1.Deployment{})
			return apierrors.IsNotFound(err)
		}).WithContext(r.ctx).WithTimeout(2*time.Minute).Should(BeTrue(), "OLM left Deployment %s/%s after its CSV was deleted", ns, name)
	}
	if r.operator != nil {
		r.operator()
	}
	if r.relay != nil {
		_ = r.relay.Process.Stop(30 * time.Second)
	}
	if r.managed != nil {
		r.managed.Stop()
	}
}

var placeholder = regexp.MustCompile(`<[a-z][a-z ]*>`)

// run runs one of the page's commands as written. A trailing comment of
// one word is the output the page promises, which it is given until it
// shows; kubectl openshell runs as the developer, typing shellInput.
func (r *reader) run(cmd framework.DocCommand) {
	r.t.Helper()
	if _, skip := notRun[cmd.Line]; skip {
		r.skipped[cmd.Line] = true
		return
	}
	line := cmd.Line
	for k, v := range placeholders {
		line = strings.ReplaceAll(line, k, v)
	}
	if p := placeholder.FindString(line); p != "" {
		r.t.Fatalf("%s: %q has a placeholder the test does not fill in: %s", cmd.Where, cmd.Line, p)
	}
	as, stdin := r.admin, ""
	if strings.HasPrefix(line, "kubectl openshell ") {
		as, stdin = r.developer, shellInput
	}
	switch want := cmd.Comment; {
	case want != "" && !strings.Contains(want, " "):
		r.g.Eventually(func() (string, error) { return r.shell(as, line, stdin) }).WithContext(r.ctx).
			WithTimeout(3*time.Minute).WithPolling(time.Second).Should(Equal(want+"\n"), "%s: %s", cmd.Where, cmd.Line)
		r.sawReady = r.sawReady || want == string(openshellv1alpha1.SandboxPhaseReady)
	default:
		out, err := r.shell(as, line, stdin)
		r.g.Expect(err).NotTo(HaveOccurred(), "%s: %s\n%s", cmd.Where, cmd.Line, out)
		if strings.HasPrefix(line, "kubectl openshell exec ") {
			r.g.Expect(out).To(Equal(shellAnswers), "%s: what the developer's shell printed", cmd.Where)
			r.sawShell = true
		}
	}
	if strings.HasPrefix(line, "oc delete subscription ") {
		r.uninstallAt = time.Now()
	}
	if strings.HasPrefix(line, "oc delete csv ") {
		// OLM removes the operator with its CSV.
		r.podsGone(r.operatorNS)
		r.uninstalled = true
	}
}

// shell runs line as the page's reader, bounded.
func (r *reader) shell(as *framework.DocShell, line, stdin string) (string, error) {
	ctx, cancel := context.WithTimeout(r.ctx, 2*time.Minute)
	defer cancel()
	return as.Run(ctx, line, stdin)
}

// ours lists, for each kind the operator writes, the objects of the
// cluster it labels as its own.
var ours = []schema.GroupVersionKind{
	rbacv1.SchemeGroupVersion.WithKind("ClusterRoleList"), rbacv1.SchemeGroupVersion.WithKind("ClusterRoleBindingList"),
	rbacv1.SchemeGroupVersion.WithKind("RoleList"), rbacv1.SchemeGroupVersion.WithKind("RoleBindingList"),
	corev1.SchemeGroupVersion.WithKind("ServiceAccountList"), corev1.SchemeGroupVersion.WithKind("SecretList"),
	corev1.SchemeGroupVersion.WithKind("ConfigMapList"), corev1.SchemeGroupVersion.WithKind("ServiceList"),
	{Group: "networking.k8s.io", Version: "v1", Kind: "NetworkPolicyList"},
	{Group: "coordination.k8s.io", Version: "v1", Kind: "LeaseList"},
	{Group: "apps", Version: "v1", Kind: "StatefulSetList"}, {Group: "apps", Version: "v1", Kind: "DeploymentList"},
	{Group: "console.openshift.io", Version: "v1", Kind: "ConsoleYAMLSampleList"},
	{Group: "route.openshift.io", Version: "v1", Kind: "RouteList"},
}

// expectNothingLeft: after the uninstall, none of the operator's CRDs,
// objects, finalizers or registrations remain, nor what OLM made for it
// (CSVs and their copies, webhooks, the APIService, ClusterRoles and
// bindings, the bundle's static objects), and no agents.x-k8s.io Sandbox.
func (r *reader) expectNothingLeft() {
	r.t.Helper()
	g := r.g
	r.expectOLMLeftNothing()
	crds := &apiextensionsv1.CustomResourceDefinitionList{}
	g.Expect(r.c.List(r.ctx, crds)).To(Succeed())
	for _, crd := range crds.Items {
		if crd.Spec.Group != openshellv1alpha1.GroupVersion.Group {
			continue
		}
		// Who made it, and when, says whether it is the one the page
		// deleted (deleting still) or one made again.
		var managers []string
		for _, m := range crd.ManagedFields {
			managers = append(managers, fmt.Sprintf("%s %s at %s", m.Manager, m.Operation, m.Time))
		}
		r.t.Errorf("CRD %s is left: created %s (uninstall began %s), deleting since %v, finalizers %v, labels %v, written by %v",
			crd.Name, crd.CreationTimestamp, r.uninstallAt.Format(time.RFC3339), crd.DeletionTimestamp, crd.Finalizers, crd.Labels, managers)
	}
	for _, ns := range []string{"openshell-operator", "openshell-sandboxes"} {
		err := r.c.Get(r.ctx, client.ObjectKey{Name: ns}, &corev1.Namespace{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "namespace %s is left: %v", ns, err)
	}
	for _, gvk := range ours {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(gvk)
		g.Expect(r.c.List(r.ctx, list, client.MatchingLabels{render.LabelManagedBy: render.ManagedByValue})).To(Succeed(), "%s", gvk.Kind)
		for _, o := range list.Items {
			r.t.Errorf("%s %s/%s of the operator's is left", strings.TrimSuffix(gvk.Kind, "List"), o.GetNamespace(), o.GetName())
		}
	}
	sandboxes := &unstructured.UnstructuredList{}
	sandboxes.SetGroupVersionKind(schema.GroupVersionKind{Group: "agents.x-k8s.io", Version: "v1beta1", Kind: "SandboxList"})
	g.Expect(r.c.List(r.ctx, sandboxes)).To(Succeed())
	g.Expect(sandboxes.Items).To(BeEmpty(), "agents.x-k8s.io Sandboxes are left")
	// The tenant's namespace stays (it is theirs), with nothing of ours
	// holding its objects.
	for _, list := range []client.ObjectList{&corev1.SecretList{}, &corev1.ConfigMapList{}, &corev1.ServiceAccountList{}} {
		g.Expect(r.c.List(r.ctx, list, client.InNamespace("team-a"))).To(Succeed())
		items, err := metaItems(list)
		g.Expect(err).NotTo(HaveOccurred())
		for _, o := range items {
			for _, f := range o.GetFinalizers() {
				g.Expect(f).NotTo(HavePrefix(openshellv1alpha1.GroupVersion.Group), "%s in team-a keeps finalizer %s", o.GetName(), f)
			}
		}
	}
	as := &unstructured.Unstructured{}
	as.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiregistration.k8s.io", Version: "v1", Kind: "APIService"})
	err := r.c.Get(r.ctx, client.ObjectKey{Name: "v1alpha1.access.openshell.ai"}, as)
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the relay's APIService is left: %v", err)
}

// expectOLMLeftNothing: OLM removed with the CSV everything it created for
// it, and the page's commands removed the rest.
func (r *reader) expectOLMLeftNothing() {
	r.t.Helper()
	g := r.g
	g.Expect(r.installed).NotTo(BeEmpty(), "OLM never installed the operator")
	// The page deletes the ClusterRoles and bindings OLM generated for the
	// CSV's permissions, but OLM, still syncing the CSV as it goes, may
	// make one again; it removes those of a deleted CSV when it next wakes
	// (olmOnOpenShift.Interval). Only those are waited for: everything
	// else must be gone at once.
	g.Eventually(func(g Gomega) {
		for _, list := range []client.ObjectList{&rbacv1.ClusterRoleList{}, &rbacv1.ClusterRoleBindingList{}} {
			g.Expect(r.c.List(r.ctx, list, client.MatchingLabels{"olm.owner": r.installed}, client.HasLabels{"olm.permissions.hash"})).To(Succeed())
			items, err := metaItems(list)
			g.Expect(err).NotTo(HaveOccurred())
			for _, o := range items {
				g.Expect(o.GetName()).To(BeEmpty(), "OLM has not removed %T %s of the deleted CSV (created %s, uninstall began %s, labels %v)",
					o, o.GetName(), o.GetCreationTimestamp(), r.uninstallAt.Format(time.RFC3339), o.GetLabels())
			}
		}
	}).WithContext(r.ctx).WithTimeout(90 * time.Second).Should(Succeed())
	csvs := &operatorsv1alpha1.ClusterServiceVersionList{}
	g.Expect(r.c.List(r.ctx, csvs)).To(Succeed())
	for _, csv := range csvs.Items {
		r.t.Errorf("CSV %s/%s is left", csv.Namespace, csv.Name)
	}
	// Everything OLM labels as owned by the CSV, in its namespace or not.
	owned := client.MatchingLabels{"olm.owner": r.installed}
	for _, list := range []client.ObjectList{&rbacv1.ClusterRoleList{}, &rbacv1.ClusterRoleBindingList{}, &rbacv1.RoleBindingList{},
		&admissionregistrationv1.ValidatingWebhookConfigurationList{}, &admissionregistrationv1.MutatingWebhookConfigurationList{}} {
		g.Expect(r.c.List(r.ctx, list, owned)).To(Succeed())
		items, err := metaItems(list)
		g.Expect(err).NotTo(HaveOccurred())
		for _, o := range items {
			r.t.Errorf("%T %s/%s, owned by %s, is left", o, o.GetNamespace(), o.GetName(), r.installed)
		}
	}
	// By name too: the bundle's static ClusterRoles, OLM's aggregated roles
	// for the CRDs, and every binding to an account of the operator's or
	// the sandboxes' namespace (an SCC's use included).
	// OLM's roles for a CRD are owned by it: the cluster's garbage
	// collector removes them once the CRD is gone, and only they are
	// waited for.
	g.Eventually(func(g Gomega) {
		roles := &rbacv1.ClusterRoleList{}
		g.Expect(r.c.List(r.ctx, roles)).To(Succeed())
		for _, role := range roles.Items {
			if strings.HasPrefix(role.Name, "openshell") && ownedByACRD(&role) {
				g.Expect(role.Name).To(BeEmpty(), "the garbage collector has not removed ClusterRole %s of a deleted CRD", role.Name)
			}
		}
	}).WithContext(r.ctx).WithTimeout(time.Minute).Should(Succeed())
	roles := &rbacv1.ClusterRoleList{}
	g.Expect(r.c.List(r.ctx, roles)).To(Succeed())
	for _, role := range roles.Items {
		if strings.HasPrefix(role.Name, "openshell") && !ownedByACRD(&role) {
			r.t.Errorf("ClusterRole %s is left", role.Name)
		}
	}
	gone := map[string]bool{r.operatorNS: true, "openshell-sandboxes": true}
	crbs := &rbacv1.ClusterRoleBindingList{}
	g.Expect(r.c.List(r.ctx, crbs)).To(Succeed())
	for _, b := range crbs.Items {
		for _, s := range b.Subjects {
			if s.Kind == rbacv1.ServiceAccountKind && gone[s.Namespace] || strings.HasPrefix(b.Name, "openshell") {
				r.t.Errorf("ClusterRoleBinding %s (to %s %s/%s) is left", b.Name, s.Kind, s.Namespace, s.Name)
			}
		}
	}
	for _, list := range []client.ObjectList{&admissionregistrationv1.ValidatingWebhookConfigurationList{}, &admissionregistrationv1.MutatingWebhookConfigurationList{}} {
		g.Expect(r.c.List(r.ctx, list)).To(Succeed())
		items, err := metaItems(list)
		g.Expect(err).NotTo(HaveOccurred())
		for _, o := range items {
			if strings.Contains(o.GetName(), "openshell") {
				r.t.Errorf("webhook configuration %s is left", o.GetName())
			}
		}
	}
}

// bundleCSVName is the name of the CSV in bundle/: the catalog's bundle
// the page's Subscription resolves to.
func bundleCSVName(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(framework.RepoRoot(), "bundle", "manifests", "openshell-operator.clusterserviceversion.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	csv := &operatorsv1alpha1.ClusterServiceVersion{}
	if err := yaml.Unmarshal(raw, csv); err != nil {
		t.Fatal(err)
	}
	return csv.Name
}

func metaItems(list client.ObjectList) ([]metav1.Object, error) {
	objs, err := meta.ExtractList(list)
	if err != nil {
		return nil, err
	}
	out := make([]metav1.Object, 0, len(objs))
	for _, o := range objs {
		m, err := meta.Accessor(o)
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, nil
}

// ownedByACRD says whether o names a CustomResourceDefinition among its
// owners (OLM's aggregated roles for the CRDs a CSV owns).
func ownedByACRD(o metav1.Object) bool {
	for _, ref := range o.GetOwnerReferences() {
		if strings.EqualFold(ref.Kind, "CustomResourceDefinition") { // OLM writes it in lower case
			return true
		}
	}
	return false
}
