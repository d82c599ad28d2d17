package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/gatewayline"
	"github.com/openshell/openshell-operator/internal/operatorenv"
	render "github.com/openshell/openshell-operator/internal/render/gateway"
	"github.com/openshell/openshell-operator/internal/scc"
	"github.com/openshell/openshell-operator/operator"
	"github.com/openshell/openshell-operator/test/framework"
)

// TestManagedGatewayBecomesAvailable runs the operator against the local
// cluster: the gateway StatefulSet is scheduled onto the kwok node with its
// SQLite volume bound, becomes Ready, and the gateway reports Available.
// On 0.0.111 the NetworkPolicies select the gateway pod and the pods the
// Agent Sandbox controller creates (0.1 gateways fence their sandbox
// namespace themselves: TestManagedGatewayUpgradesTo01).
func TestManagedGatewayBecomesAvailable(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := cluster.Client
	ns := framework.CreatePlatformNamespace(ctx, t, c, "gateway")
	createVolume(ctx, t, ns, "openshell")
	framework.StartManager(t, cluster.Config, operator.Options{WatchNamespaces: []string{ns}})

	gw := &openshellv1alpha1.OpenShellGateway{ObjectMeta: metav1.ObjectMeta{Name: "openshell", Namespace: ns},
		Spec: openshellv1alpha1.OpenShellGatewaySpec{Managed: &openshellv1alpha1.ManagedGatewaySpec{Version: gatewayline.LegacyManaged}}}
	g.Expect(c.Create(ctx, gw)).To(Succeed())

	g.Eventually(func(g Gomega) {
		cur := &openshellv1alpha1.OpenShellGateway{}
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(gw), cur)).To(Succeed())
		g.Expect(meta.IsStatusConditionTrue(cur.Status.Conditions, openshellv1alpha1.ConditionAvailable)).To(BeTrue(),
			"conditions: %+v", cur.Status.Conditions)
		g.Expect(cur.Status.Phase).To(Equal(openshellv1alpha1.GatewayPhaseAvailable))
		g.Expect(meta.IsStatusConditionTrue(cur.Status.Conditions, "SCCReady")).To(BeTrue())
	}).WithContext(ctx).WithTimeout(2*time.Minute).WithPolling(500*time.Millisecond).Should(Succeed(), cluster.CheckProcessesMessage)

	sts := &appsv1.StatefulSet{}
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "openshell"}, sts)).To(Succeed())
	g.Expect(sts.Status.ReadyReplicas).To(Equal(int32(1)))
	pod := &corev1.Pod{}
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "openshell-0"}, pod)).To(Succeed())
	g.Expect(pod.Status.Phase).To(Equal(corev1.PodRunning))

	// The gateway NetworkPolicy selects the gateway pod.
	gwPolicy := &networkingv1.NetworkPolicy{}
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "openshell-gateway"}, gwPolicy)).To(Succeed())
	sel, err := metav1.LabelSelectorAsSelector(&gwPolicy.Spec.PodSelector)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(sel.Matches(labels.Set(pod.Labels))).To(BeTrue(), "gateway policy %s does not select %v", sel, pod.Labels)

	// The sandbox NetworkPolicy selects a pod the Agent Sandbox controller
	// creates, and admits the gateway pod as its only peer.
	sb := &unstructured.Unstructured{}
	sb.SetGroupVersionKind(sandboxGVK)
	sb.SetNamespace(ns)
	sb.SetName("np-probe")
	g.Expect(unstructured.SetNestedField(sb.Object, map[string]any{
		"spec": map[string]any{"containers": []any{map[string]any{"name": "agent", "image": "registry.example/agent@sha256:" + sha("c")}}},
	}, "spec", "podTemplate")).To(Succeed())
	g.Expect(c.Create(ctx, sb)).To(Succeed())
	sbPod := &corev1.Pod{}
	g.Eventually(func() error { return c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "np-probe"}, sbPod) }).
		WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
	sbPolicy := &networkingv1.NetworkPolicy{}
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "openshell-sandboxes"}, sbPolicy)).To(Succeed())
	sel, err = metav1.LabelSelectorAsSelector(&sbPolicy.Spec.PodSelector)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(sel.Matches(labels.Set(sbPod.Labels))).To(BeTrue(), "sandbox policy %s does not select %v", sel, sbPod.Labels)
	g.Expect(sel.Matches(labels.Set(pod.Labels))).To(BeFalse(), "sandbox policy must not select the gateway pod")
	peer := sbPolicy.Spec.Ingress[0].From[0]
	peerSel, err := metav1.LabelSelectorAsSelector(peer.PodSelector)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(peerSel.Matches(labels.Set(pod.Labels))).To(BeTrue(), "the gateway pod is not the sandbox policy's peer")
	nsObj := &corev1.Namespace{}
	g.Expect(c.Get(ctx, client.ObjectKey{Name: ns}, nsObj)).To(Succeed())
	nsSel, _ := metav1.LabelSelectorAsSelector(peer.NamespaceSelector)
	g.Expect(nsSel.Matches(labels.Set(nsObj.Labels))).To(BeTrue())
}

// createVolume is framework.ProvideGatewayVolume for a test.
func createVolume(ctx context.Context, t *testing.T, ns, gateway string) {
	t.Helper()
	framework.ProvideGatewayVolume(ctx, t, cluster.Client, ns, gateway)
}

// TestManagedGatewayUpgradesTo01 moves a running 0.0.111 gateway to the
// operator's default release by unpinning its version, as an operator
// upgrade that moves the default does: the objects of the 0.0.x sidecar
// runtime (narrow SCC binding, sandbox NetworkPolicy, schema-1 config)
// give way to the 0.1 runtime's (its RBAC in the sandbox namespace, a
// schema-2 config, the new images), status.version follows the pods once
// they all run it, and a move back to 0.0 is refused with the gateway
// left running 0.1.
func TestManagedGatewayUpgradesTo01(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := cluster.Client
	ns := framework.CreatePlatformNamespace(ctx, t, c, "upgrade")
	createVolume(ctx, t, ns, "openshell")
	framework.StartManager(t, cluster.Config, operator.Options{WatchNamespaces: []string{ns}})

	gw := &openshellv1alpha1.OpenShellGateway{ObjectMeta: metav1.ObjectMeta{Name: "openshell", Namespace: ns},
		Spec: openshellv1alpha1.OpenShellGatewaySpec{Managed: &openshellv1alpha1.ManagedGatewaySpec{Version: gatewayline.LegacyManaged}}}
	g.Expect(c.Create(ctx, gw)).To(Succeed())
	n := render.NamesFor(gw)
	sccBinding := scc.RoleBinding(n.SandboxNamespace, n.SandboxSA, nil, nil).Name
	exists := func(g Gomega, o client.Object, ns, name string) bool {
		err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, o)
		g.Expect(client.IgnoreNotFound(err)).To(Succeed())
		return err == nil
	}
	runs := func(version string, images operatorenv.RelatedImages) func(g Gomega) {
		return func(g Gomega) {
			cur := &openshellv1alpha1.OpenShellGateway{}
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(gw), cur)).To(Succeed())
			g.Expect(cur.Status.Version).To(Equal(version))
			current := meta.FindStatusCondition(cur.Status.Conditions, openshellv1alpha1.GatewayConditionVersionCurrent)
			g.Expect(current).NotTo(BeNil())
			g.Expect(current.Reason).To(Equal(openshellv1alpha1.GatewayReasonAtTarget), "VersionCurrent: %s", current.Message)
			g.Expect(meta.IsStatusConditionTrue(cur.Status.Conditions, openshellv1alpha1.ConditionAvailable)).To(BeTrue(), "conditions: %+v", cur.Status.Conditions)
			sts := &appsv1.StatefulSet{}
			g.Expect(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: n.Fullname}, sts)).To(Succeed())
			// 0.0.111 is a template without the annotation (as earlier
			// operators rendered it: no roll when this one is installed).
			recorded := version
			if version == gatewayline.LegacyManaged {
				recorded = ""
			}
			g.Expect(sts.Spec.Template.Annotations[render.AnnotationVersion]).To(Equal(recorded))
			g.Expect(sts.Spec.Template.Spec.Containers[0].Image).To(Equal(images.Gateway))
		}
	}
	g.Eventually(runs(gatewayline.LegacyManaged, framework.TestImages.Legacy)).WithContext(ctx).WithTimeout(2*time.Minute).
		WithPolling(500*time.Millisecond).Should(Succeed(), cluster.CheckProcessesMessage)
	g.Expect(exists(g, &networkingv1.NetworkPolicy{}, n.SandboxNamespace, n.SandboxPolicy)).To(BeTrue(), "0.0.x sandbox NetworkPolicy")
	g.Expect(exists(g, &rbacv1.RoleBinding{}, n.SandboxNamespace, sccBinding)).To(BeTrue(), "0.0.x narrow SCC binding")
	g.Expect(exists(g, &rbacv1.RoleBinding{}, n.SandboxNamespace, n.RuntimeBinding)).To(BeFalse(), "0.1 runtime grants on a 0.0.x gateway")

	// As an earlier operator left it: no status.version. The release is
	// read from the workload and recorded before anything is rendered.
	cur := &openshellv1alpha1.OpenShellGateway{}
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(gw), cur)).To(Succeed())
	patch := client.MergeFrom(cur.DeepCopy())
	cur.Status.Version = ""
	g.Expect(c.Status().Patch(ctx, cur, patch)).To(Succeed())
	poke(ctx, g, gw)
	g.Eventually(runs(gatewayline.LegacyManaged, framework.TestImages.Legacy)).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())

	// Unpinned, with upgradePolicy Manual (the default): it stays on what
	// it runs, and says the operator's default is available.
	setManagedVersion(ctx, g, client.ObjectKeyFromObject(gw), "")
	g.Eventually(func(g Gomega) {
		cur := &openshellv1alpha1.OpenShellGateway{}
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(gw), cur)).To(Succeed())
		g.Expect(cur.Spec.Managed.UpgradePolicy).To(Equal(openshellv1alpha1.UpgradePolicyManual), "the default policy")
		g.Expect(cur.Status.ObservedGeneration).To(Equal(cur.Generation))
		vc := meta.FindStatusCondition(cur.Status.Conditions, openshellv1alpha1.GatewayConditionVersionCurrent)
		g.Expect(vc).NotTo(BeNil())
		g.Expect(vc.Reason).To(Equal(openshellv1alpha1.GatewayReasonUpgradeAvailable), "%+v", vc)
		g.Expect(vc.Message).To(ContainSubstring(gatewayline.DefaultManaged))
		g.Expect(cur.Status.Version).To(Equal(gatewayline.LegacyManaged))
		// Rendered for this generation, and still for 0.0.111: no restart.
		sts := &appsv1.StatefulSet{}
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: n.Fullname}, sts)).To(Succeed())
		g.Expect(sts.Spec.Template.Annotations).NotTo(HaveKey(render.AnnotationVersion), "the workload was rendered for another release")
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())

	// The page's usual way: the platform admin names the new release, with
	// docs/upgrading-gateways.md's own command. (Automatic, the other way,
	// is TestManagedGatewayUpgradeKeepsTenants'.)
	runUpgradePageCommand(ctx, t, map[string]string{"<name>": gw.Name, "<ns>": ns})
	g.Eventually(runs(gatewayline.DefaultManaged, framework.TestImages.Default)).WithContext(ctx).WithTimeout(2*time.Minute).
		WithPolling(500*time.Millisecond).Should(Succeed(), cluster.CheckProcessesMessage)
	g.Eventually(func(g Gomega) {
		g.Expect(exists(g, &networkingv1.NetworkPolicy{}, n.SandboxNamespace, n.SandboxPolicy)).To(BeFalse(), "the 0.0.x sandbox NetworkPolicy outlives the upgrade")
		g.Expect(exists(g, &rbacv1.RoleBinding{}, n.SandboxNamespace, sccBinding)).To(BeFalse(), "the narrow SCC binding outlives the upgrade")
	}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
	rb := &rbacv1.RoleBinding{}
	g.Expect(exists(g, rb, n.SandboxNamespace, n.RuntimeBinding)).To(BeTrue(), "the 0.1 runtime's grants")
	g.Expect(rb.RoleRef.Name).To(Equal(render.ClusterRoleGatewayRuntime))
	cm := &corev1.ConfigMap{}
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: n.Config}, cm)).To(Succeed())
	g.Expect(cm.Data[render.ConfigFile]).To(And(ContainSubstring("version = 2"), ContainSubstring("sandbox_runtime_image = '"+framework.TestImages.Default.SandboxRuntime+"'")))
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(gw), cur)).To(Succeed())
	sccReady := meta.FindStatusCondition(cur.Status.Conditions, openshellv1alpha1.GatewayConditionSCCReady)
	g.Expect(sccReady).NotTo(BeNil())
	g.Expect(sccReady.Reason).To(Equal(openshellv1alpha1.GatewayReasonSCCRestrictedV2))

	// Back to 0.0: refused, and 0.1 keeps running.
	setManagedVersion(ctx, g, client.ObjectKeyFromObject(gw), gatewayline.LegacyManaged)
	g.Eventually(func(g Gomega) {
		cur := &openshellv1alpha1.OpenShellGateway{}
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(gw), cur)).To(Succeed())
		g.Expect(cur.Status.ObservedGeneration).To(Equal(cur.Generation))
		current := meta.FindStatusCondition(cur.Status.Conditions, openshellv1alpha1.GatewayConditionVersionCurrent)
		g.Expect(current).NotTo(BeNil())
		g.Expect(current.Reason).To(Equal(openshellv1alpha1.GatewayReasonDowngradeRefused))
		g.Expect(current.Message).To(ContainSubstring("docs/upgrading-gateways.md"))
		g.Expect(cur.Status.Version).To(Equal(gatewayline.DefaultManaged))
		g.Expect(meta.IsStatusConditionTrue(cur.Status.Conditions, openshellv1alpha1.ConditionAvailable)).To(BeTrue())
	}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
	sts := &appsv1.StatefulSet{}
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: n.Fullname}, sts)).To(Succeed())
	g.Expect(sts.Spec.Template.Annotations).To(HaveKeyWithValue(render.AnnotationVersion, gatewayline.DefaultManaged))
}

// runUpgradePageCommand runs docs/upgrading-gateways.md's one
// `oc patch openshellgateway` command as written, its placeholders filled
// in, as the cluster admin; the release it names must be the operator's
// default (the page would otherwise tell admins to move elsewhere).
func runUpgradePageCommand(ctx context.Context, t *testing.T, fill map[string]string) {
	t.Helper()
	cmds, err := framework.DocCommandsStarting(filepath.Join(framework.RepoRoot(), "docs", "upgrading-gateways.md"), "oc patch openshellgateway ")
	if err != nil {
		t.Fatal(err)
	}
	if len(cmds) != 1 {
		t.Fatalf("docs/upgrading-gateways.md has %d oc patch openshellgateway commands, want its one", len(cmds))
	}
	line := cmds[0].Line
	if !strings.Contains(line, `"version":"`+gatewayline.DefaultManaged+`"`) {
		t.Fatalf("%s: %s does not name the operator's default %s", cmds[0].Where, line, gatewayline.DefaultManaged)
	}
	for k, v := range fill {
		line = strings.ReplaceAll(line, k, v)
	}
	sh, err := framework.NewDocShell(t.TempDir(), cluster.KubeconfigPath)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := sh.Run(ctx, line, ""); err != nil {
		t.Fatalf("%s: %v\n%s", cmds[0].Where, err, out)
	}
}

// setManagedVersion sets a Managed gateway's spec.managed.version (""
// unpins it: the operator's default).
func setManagedVersion(ctx context.Context, g Gomega, key client.ObjectKey, version string) {
	editGateway(ctx, g, key, func(cur *openshellv1alpha1.OpenShellGateway) { cur.Spec.Managed.Version = version })
}
