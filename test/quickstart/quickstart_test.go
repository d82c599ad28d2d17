package quickstart

import (
	"context"
	"io"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
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
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/operatorenv"
	render "github.com/openshell/openshell-operator/internal/render/gateway"
	"github.com/openshell/openshell-operator/internal/tenancy"
	"github.com/openshell/openshell-operator/operator"
	"github.com/openshell/openshell-operator/test/framework"
	"github.com/openshell/openshell-operator/test/stack"
)

// The page's commands this test does not run, each with the reason; one
// that no longer appears on the page fails the test (the list is kept
// honest with the page).
var notRun = map[string]string{
	"kubectl apply -f https://github.com/kubernetes-sigs/agent-sandbox/releases/download/v1.0.3/sandbox.yaml": "" +
		"this cluster runs the Agent Sandbox controller built from the same pinned release (CI reaches no GitHub)",
	"oc apply -k config/scc":                           "only for a gateway pinned to 0.0.111; the page's runs the default line",
	"oc delete -k config/scc":                          "the page says: if you applied it",
	"oc get openshellgateway -n openshell-operator -w": "a watch ends only when interrupted; the sandbox's Ready below waits for the gateway",
}

// placeholders are what the page asks the reader to fill in.
var placeholders = map[string]string{"<your key>": "sk-quickstart-not-a-real-key"}

// consumer is the developer the page's step 4 gives openshell-sandbox-user
// in the tenant namespace; shellInput is what they type into the shell the
// page opens, and its answer what they must see.
const (
	// tenantLabel is the label the page's gateway selects tenants by.
	tenantLabel  = "openshell.ai/tenant"
	consumer     = "dev"
	shellInput   = "echo hello from the quickstart\nexit 0\n"
	shellAnswers = "hello from the quickstart\n"
)

// TestQuickstart follows docs/quickstart.md top to bottom as a new
// platform admin, tenant admin and developer would: every YAML block is
// applied and every shell command run as written (oc is kubectl here),
// with the operator started when the page's Subscription would have OLM
// start it (its environment from that Subscription) and stopped when the
// page deletes its CSV. The gateway is a Managed 0.1.5 gateway whose pod
// the test gateway plays (no 0.1 gateway binary exists; test/stack). It
// must reach a Ready sandbox whose provider uses a shipped profile, a
// developer's `kubectl openshell exec` must print what runs in it, and
// after the uninstall section nothing the operator made may be left.
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
// seen so far.
type reader struct {
	ctx context.Context
	t   *testing.T
	g   *WithT
	c   client.Client

	namespaces map[string]bool // created by the page or for it
	bin        string          // PATH: oc, kubectl, kubectl-openshell
	admin      *framework.DocShell
	developer  *framework.DocShell

	st      *stack.Stack
	relay   *stack.Relay
	managed *stack.ManagedGateway

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
	t.Cleanup(r.stopOperator)
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
	if u.GetKind() == "OpenShellGateway" {
		// The cluster's default storage class would bind the gateway's claim.
		framework.ProvideGatewayVolume(r.ctx, r.t, r.c, u.GetNamespace(), u.GetName())
	}
	r.g.Expect(r.c.Apply(r.ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner("quickstart"), client.ForceOwnership)).
		To(Succeed(), "%s: %s %s", d.Where, u.GetKind(), u.GetName())
	switch u.GetKind() {
	case "Namespace":
		r.namespaces[u.GetName()] = true
		if u.GetLabels()[tenantLabel] == "true" {
			// Step 4's prose: the developers get openshell-sandbox-user.
			r.g.Expect(r.c.Create(r.ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: consumer, Namespace: u.GetName()},
				Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: consumer}},
				RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "openshell-sandbox-user"}})).To(Succeed())
		}
	case "Subscription":
		// Step 1's is Agent Sandbox's, which this cluster already runs.
		if pkg, _, _ := unstructured.NestedString(u.Object, "spec", "name"); pkg == "openshell-operator" {
			r.startOperator(d, u)
		}
	case "OpenShellGateway":
		gw := &openshellv1alpha1.OpenShellGateway{}
		r.g.Expect(r.c.Get(r.ctx, client.ObjectKeyFromObject(u), gw)).To(Succeed())
		g, err := r.st.PlayManagedGateway(r.ctx, r.c, gw, "")
		r.g.Expect(err).NotTo(HaveOccurred(), "%s: the gateway's pod", d.Where)
		r.managed = g
	}
}

// startOperator runs the operator and its relay as OLM would install them
// from the page's Subscription: in its namespace, watching all namespaces
// (the page's OperatorGroup), with the Subscription's environment.
func (r *reader) startOperator(d framework.DocObject, sub *unstructured.Unstructured) {
	r.t.Helper()
	env := map[string]string{operatorenv.EnvOperatorNamespace: sub.GetNamespace()}
	vars, _, _ := unstructured.NestedSlice(sub.Object, "spec", "config", "env")
	for _, v := range vars {
		if m, ok := v.(map[string]any); ok {
			name, _ := m["name"].(string)
			value, _ := m["value"].(string)
			env[name] = value
		}
	}
	platform, err := tenancy.PlatformFromEnv(func(k string) string { return env[k] })
	r.g.Expect(err).NotTo(HaveOccurred(), "%s: the Subscription's environment", d.Where)
	r.st, err = stack.Start(r.ctx, cluster.Config, r.c, stack.Options{GatewayNamespace: sub.GetNamespace(), NoExternalGateway: true,
		PlayManagedGateways: true, Manager: operator.Options{Controllers: operator.ControllerOptions{Platform: platform}}})
	r.g.Expect(err).NotTo(HaveOccurred())
	r.relay, err = r.st.StartRelay(r.ctx, cluster.Config, sub.GetNamespace(), zap.New(zap.WriteTo(io.Discard)))
	r.g.Expect(err).NotTo(HaveOccurred())
}

// stopOperator is OLM removing the CSV: its Deployments, its APIService
// and the bundle's static objects.
func (r *reader) stopOperator() {
	if r.uninstalled {
		return
	}
	if r.relay != nil {
		r.g.Expect(r.relay.Stop(context.Background(), r.c)).To(Succeed())
		r.relay = nil
	}
	if r.st != nil {
		r.g.Expect(r.st.Stop()).To(Succeed())
		r.st = nil
	}
	for _, f := range bundleManifests {
		r.g.Expect(framework.DeleteManifests(context.Background(), r.c, filepath.Join(framework.RepoRoot(), f))).To(Succeed())
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
	if strings.HasPrefix(line, "oc delete csv ") {
		// OLM removes the operator with its CSV.
		r.stopOperator()
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
// objects, finalizers or registrations remain, and no agents.x-k8s.io
// Sandbox. (On a cluster OLM also removes the bundle's webhooks, APIService
// and ClusterRoles with the CSV: test/olm checks those.)
func (r *reader) expectNothingLeft() {
	r.t.Helper()
	g := r.g
	crds := &apiextensionsv1.CustomResourceDefinitionList{}
	g.Expect(r.c.List(r.ctx, crds)).To(Succeed())
	for _, crd := range crds.Items {
		g.Expect(crd.Spec.Group).NotTo(Equal(openshellv1alpha1.GroupVersion.Group), "CRD %s is left", crd.Name)
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
