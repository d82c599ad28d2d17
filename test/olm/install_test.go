package olm

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/controllers/platform"
	"github.com/openshell/openshell-operator/internal/apply"
	"github.com/openshell/openshell-operator/internal/pki"
	"github.com/openshell/openshell-operator/test/framework"
	"github.com/openshell/openshell-operator/test/olmcluster"
	"github.com/openshell/openshell-operator/test/stack"
	"github.com/openshell/openshell-operator/test/testgateway"
)

const (
	deploymentName = olmcluster.OperatorDeployment
	catalogName    = "openshell"
	channel        = "candidate-v0"
)

// TestInstallModes installs the bundle from the catalog in each install
// mode, as a user does in the console (OperatorGroup, Subscription,
// automatic InstallPlan), checks what OLM created from the CSV, runs the
// operator as the pod OLM created would, drives a sandbox to Ready through
// it with only the RBAC OLM granted, and uninstalls.
func TestInstallModes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	configs := filepath.Join(framework.RepoRoot(), "catalog", "configs")
	lm.ServeBundle(catalogBundleImage(t, configs, "openshell-operator.v0.1.0"), bundleDir())
	serveCatalog(ctx, t, catalogName, configs)
	bin, err := framework.OperatorBinary()
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []operatorsv1alpha1.InstallModeType{
		operatorsv1alpha1.InstallModeTypeOwnNamespace, operatorsv1alpha1.InstallModeTypeSingleNamespace,
		operatorsv1alpha1.InstallModeTypeMultiNamespace, operatorsv1alpha1.InstallModeTypeAllNamespaces,
	} {
		t.Run(string(mode), func(t *testing.T) { installAndRun(ctx, t, mode, bin) })
	}
}

func installAndRun(ctx context.Context, t *testing.T, mode operatorsv1alpha1.InstallModeType, bin string) {
	g := NewWithT(t)
	c := cluster.Client
	opNS := framework.CreateNamespace(ctx, t, c, "op")
	a := framework.CreateNamespace(ctx, t, c, "team-a")
	b := framework.CreateNamespace(ctx, t, c, "team-b")
	outside := framework.CreateNamespace(ctx, t, c, "outside")
	var targets []string
	tenant := a
	switch mode {
	case operatorsv1alpha1.InstallModeTypeOwnNamespace:
		targets, tenant = []string{opNS}, opNS
	case operatorsv1alpha1.InstallModeTypeSingleNamespace:
		targets = []string{a}
	case operatorsv1alpha1.InstallModeTypeMultiNamespace:
		targets = []string{a, b}
	}
	issuerLB, err := framework.StartBalancer()
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(issuerLB.Stop)
	csv := subscribe(ctx, t, opNS, targets, catalogName, channel, "", operatorsv1alpha1.ApprovalAutomatic,
		pods{bin: bin, issuerURL: issuerURLOf(issuerLB)})
	t.Cleanup(func() { unsubscribe(context.Background(), t, opNS) })

	expectWhatOLMCreated(ctx, t, csv, opNS, targets, outside)
	ca, err := pki.NewCA("olm-e2e", time.Hour, time.Now())
	g.Expect(err).NotTo(HaveOccurred())
	_, issuerURL := runAsPodStoppable(ctx, t, opNS, bin, ca, issuerLB)
	expectAPIServerIngress(ctx, g, opNS)

	// Admitted by the webhook OLM registered, reached through the Service
	// OLM created. A 0.1 gateway: consumers use their sandbox through it.
	gw, gwObj, sb, _ := startDataPlane(ctx, t, opNS, tenant, "first", issuerURL, ca, "0.1.5")
	expectConsumerAccess(ctx, t, gw, opNS, tenant, sb.Name)

	// OLM's aggregated roles let a namespace editor write the tenant kinds;
	// the operator's webhook, reached through the Service OLM created,
	// refuses what only Tenant Admins may do.
	editor := impersonate(ctx, t, tenant, "alice", "edit")
	g.Eventually(func() string {
		err := editor.Create(ctx, &openshellv1alpha1.OpenShellPolicy{ObjectMeta: metav1.ObjectMeta{Name: "by-an-editor", Namespace: tenant}})
		if err == nil {
			return "created"
		}
		return err.Error()
	}).WithContext(ctx).WithTimeout(30*time.Second).Should(ContainSubstring("TenantAdminRequired"),
		"an editor's policy create must reach the webhook (RBAC from OLM's aggregated edit role) and be refused by it")

	// The same aggregated role lets an editor create an OpenShellGateway in
	// their namespace: it stays inert there, refused before anything is
	// rendered (only platform namespaces are served).
	if tenant != opNS {
		rogue := &openshellv1alpha1.OpenShellGateway{ObjectMeta: metav1.ObjectMeta{Name: "rogue", Namespace: tenant},
			Spec: openshellv1alpha1.OpenShellGatewaySpec{Managed: &openshellv1alpha1.ManagedGatewaySpec{}}}
		g.Expect(editor.Create(ctx, rogue)).To(Succeed(), "OLM's aggregated edit role should let an editor create gateways")
		g.Eventually(func(g Gomega) {
			cur := &openshellv1alpha1.OpenShellGateway{}
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(rogue), cur)).To(Succeed())
			d := meta.FindStatusCondition(cur.Status.Conditions, openshellv1alpha1.ConditionDegraded)
			g.Expect(d).NotTo(BeNil())
			g.Expect(d.Reason).To(Equal(openshellv1alpha1.GatewayReasonNamespaceNotServed))
			g.Expect(cur.Finalizers).To(BeEmpty())
		}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
		for _, list := range []client.ObjectList{&appsv1.StatefulSetList{}, &appsv1.DeploymentList{}, &corev1.SecretList{}, &corev1.ServiceAccountList{}} {
			g.Expect(c.List(ctx, list, client.InNamespace(tenant), client.MatchingLabels{"app.kubernetes.io/managed-by": "openshell-operator"})).To(Succeed())
			g.Expect(meta.LenList(list)).To(BeZero(), "the operator created %T for an editor's gateway", list)
		}
		g.Expect(editor.Delete(ctx, rogue)).To(Succeed())
	}

	// Uninstall in the documented order: tenants' objects, gateways, then
	// the operator.
	g.Expect(c.Delete(ctx, sb)).To(Succeed())
	g.Expect(c.Delete(ctx, gwObj)).To(Succeed())
	for _, o := range []client.Object{sb, gwObj} {
		g.Eventually(func() bool { return isGone(ctx, o) }).WithContext(ctx).WithTimeout(time.Minute).Should(BeTrue(),
			"%s was not released by the operator", o.GetName())
	}
}

// impersonate binds user to the ClusterRole role in ns and returns a
// client acting as them.
func impersonate(ctx context.Context, t *testing.T, ns, user, role string) client.Client {
	t.Helper()
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: user + "-" + role, Namespace: ns},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role}}
	if err := cluster.Client.Create(ctx, rb); err != nil {
		t.Fatal(err)
	}
	cfg := rest.CopyConfig(cluster.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:authenticated"}}
	c, err := client.New(cfg, client.Options{Scheme: cluster.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// startDataPlane starts a test gateway registered as External gateway "gw"
// in opNS (trusting the operator's issuer at issuerURL, its certificate
// from ca, reporting version; "": 0.0.111) and creates sandbox name in
// tenant on it, returning once the sandbox is Ready.
func startDataPlane(ctx context.Context, t *testing.T, opNS, tenant, name, issuerURL string, ca *pki.KeyPair, version string) (
	*testgateway.Gateway, *openshellv1alpha1.OpenShellGateway, *openshellv1alpha1.OpenShellSandbox, string) {
	t.Helper()
	g := NewWithT(t)
	c := cluster.Client
	sbNS := framework.CreateNamespace(ctx, t, c, "sandboxes")
	kube, err := client.NewWithWatch(cluster.Config, client.Options{Scheme: cluster.Scheme})
	g.Expect(err).NotTo(HaveOccurred())
	gw, gwObj, err := stack.StartExternalGateway(ctx, c, kube, stack.ExternalGateway{Namespace: opNS, Name: "gw", SandboxNamespace: sbNS,
		IssuerURL: issuerURL, CA: ca, Version: version})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(gw.Stop)
	sb := &openshellv1alpha1.OpenShellSandbox{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: tenant},
		Spec: openshellv1alpha1.OpenShellSandboxSpec{GatewayRef: openshellv1alpha1.GatewayReference{Name: gwObj.Name, Namespace: opNS}}}
	g.Expect(c.Create(ctx, sb)).To(Succeed())
	waitReady(ctx, g, sb)
	return gw, gwObj, sb, sbNS
}

func isGone(ctx context.Context, o client.Object) bool {
	err := cluster.Client.Get(ctx, client.ObjectKeyFromObject(o), o)
	return err != nil && client.IgnoreNotFound(err) == nil
}

// expectWhatOLMCreated checks the objects OLM derived from the CSV: the
// CRDs, the Deployment with the environment OLM injects, RBAC that reaches
// the target namespaces and nothing else, the webhooks with OLM's CA, and
// the aggregated roles that give namespace editors the tenant kinds.
func expectWhatOLMCreated(ctx context.Context, t *testing.T, csv *operatorsv1alpha1.ClusterServiceVersion, opNS string, targets []string, outside string) {
	t.Helper()
	g := NewWithT(t)
	c := cluster.Client
	for _, owned := range csv.Spec.CustomResourceDefinitions.Owned {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		g.Expect(c.Get(ctx, client.ObjectKey{Name: owned.Name}, crd)).To(Succeed(), "OLM did not create CRD %s", owned.Name)
		// OLM adds these for every provided API once the OperatorGroup
		// lists it (shortly after the CSV succeeds).
		for _, suffix := range []string{"admin", "edit", "view"} {
			g.Eventually(func(g Gomega) {
				role := &rbacv1.ClusterRole{}
				g.Expect(c.Get(ctx, client.ObjectKey{Name: owned.Name + "-" + owned.Version + "-" + suffix}, role)).To(Succeed())
				g.Expect(role.Labels).To(HaveKeyWithValue("rbac.authorization.k8s.io/aggregate-to-"+suffix, "true"))
			}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
		}
	}
	dep := &appsv1.Deployment{}
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: opNS, Name: deploymentName}, dep)).To(Succeed())
	env := map[string]string{}
	for _, e := range dep.Spec.Template.Spec.Containers[0].Env {
		env[e.Name] = e.Value
	}
	g.Expect(env).To(HaveKeyWithValue("OPERATOR_CONDITION_NAME", csv.Name))
	g.Expect(dep.Spec.Template.Annotations).To(HaveKeyWithValue("olm.targetNamespaces", strings.Join(targets, ",")))
	expectNetworkPolicy(ctx, g, dep)
	relay := &appsv1.Deployment{}
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: opNS, Name: relayDeployment}, relay)).To(Succeed())
	expectNetworkPolicy(ctx, g, relay)

	// The ServiceAccount reaches its target namespaces, and only those.
	sa := "system:serviceaccount:" + opNS + ":" + dep.Spec.Template.Spec.ServiceAccountName
	can := func(ns, verb, resource string) bool {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: sa,
			Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + opNS, "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: verb, Group: openshellv1alpha1.GroupVersion.Group, Resource: resource}}}
		g.Expect(c.Create(ctx, sar)).To(Succeed())
		return sar.Status.Allowed
	}
	watched := targets
	if len(targets) == 0 {
		watched = []string{outside}
	}
	for _, ns := range watched {
		g.Expect(can(ns, "watch", "openshellsandboxes")).To(BeTrue(), "OLM did not grant the operator its target namespace %s", ns)
	}
	if len(targets) > 0 {
		g.Expect(can(outside, "watch", "openshellsandboxes")).To(BeFalse(), "OLM granted the operator a namespace outside its OperatorGroup")
	}
	g.Expect(can(opNS, "deletecollection", "openshellsandboxes")).To(BeFalse())

	// One webhook configuration per webhook definition (the validating ones
	// and the finalizer's mutating one), served by OLM's Service with OLM's CA.
	vwcs := &admissionregistrationv1.ValidatingWebhookConfigurationList{}
	g.Expect(c.List(ctx, vwcs, client.MatchingLabels{"olm.owner": csv.Name, "olm.owner.namespace": opNS})).To(Succeed())
	mwcs := &admissionregistrationv1.MutatingWebhookConfigurationList{}
	g.Expect(c.List(ctx, mwcs, client.MatchingLabels{"olm.owner": csv.Name, "olm.owner.namespace": opNS})).To(Succeed())
	g.Expect(len(vwcs.Items) + len(mwcs.Items)).To(Equal(len(csv.Spec.WebhookDefinitions)))
	g.Expect(mwcs.Items).To(HaveLen(1), "the finalizer webhook")
	var configs []admissionregistrationv1.WebhookClientConfig
	for _, vwc := range vwcs.Items {
		for _, w := range vwc.Webhooks {
			configs = append(configs, w.ClientConfig)
		}
	}
	for _, w := range mwcs.Items[0].Webhooks {
		g.Expect(w.Rules).To(HaveLen(1))
		g.Expect(w.Rules[0].Operations).To(Equal([]admissionregistrationv1.OperationType{admissionregistrationv1.Create}))
		configs = append(configs, w.ClientConfig)
	}
	for _, cc := range configs {
		g.Expect(cc.CABundle).NotTo(BeEmpty(), "a webhook has no CA bundle")
		g.Expect(cc.Service).NotTo(BeNil())
		g.Expect(cc.Service.Name).To(Equal(deploymentName + "-service"))
	}
}

// expectNetworkPolicy: OLM created the bundle's NetworkPolicy of a
// Deployment (the operator's, the relay's), named as it is. It selects the
// Deployment's pods and admits each of their ports and nothing else; a
// metrics port only from the monitoring stack. A port added to the
// Deployment and forgotten in the policy fails this test.
func expectNetworkPolicy(ctx context.Context, g Gomega, dep *appsv1.Deployment) {
	np := &networkingv1.NetworkPolicy{}
	g.Expect(cluster.Client.Get(ctx, client.ObjectKey{Namespace: dep.Namespace, Name: dep.Name}, np)).To(Succeed(),
		"OLM did not create the NetworkPolicy of %s", dep.Name)
	sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(sel.Matches(labels.Set(dep.Spec.Template.Labels))).To(BeTrue(), "the NetworkPolicy does not select the pods of %s", dep.Name)
	g.Expect(np.Spec.PolicyTypes).To(ConsistOf(networkingv1.PolicyTypeIngress))
	admitted := map[int32][]networkingv1.NetworkPolicyPeer{}
	for _, rule := range np.Spec.Ingress {
		for _, p := range rule.Ports {
			g.Expect(p.Port).NotTo(BeNil())
			admitted[p.Port.IntVal] = rule.From
		}
	}
	var ports []int32
	for _, p := range dep.Spec.Template.Spec.Containers[0].Ports {
		ports = append(ports, p.ContainerPort)
		g.Expect(admitted).To(HaveKey(p.ContainerPort), "container port %s (%d) is not admitted", p.Name, p.ContainerPort)
		if p.Name == "metrics" {
			g.Expect(admitted[p.ContainerPort]).NotTo(BeEmpty(), "the metrics port is open to every peer")
		}
		// The kube-apiserver's ports: from the host network only.
		if p.ContainerPort == 9443 || (p.ContainerPort == 8443 && p.Name == "https") {
			g.Expect(admitted[p.ContainerPort]).To(ConsistOf(HaveField("NamespaceSelector.MatchLabels",
				HaveKeyWithValue("policy-group.network.openshift.io/host-network", ""))), "port %s (%d) is open beyond the host network", p.Name, p.ContainerPort)
		}
	}
	g.Expect(admitted).To(HaveLen(len(ports)), "the NetworkPolicy admits a port the operator does not serve")
}

// expectAPIServerIngress: this cluster's network cannot select host traffic
// (it is not OVN-Kubernetes), so the policies admitting the kube-apiserver
// to the webhook port and the relay's port from every peer, which the
// bundle ships, stay: the running operator, with the CSV's RBAC in this
// install mode, applies them as its own (its applied-hash annotation), and
// they admit no other port.
func expectAPIServerIngress(ctx context.Context, g Gomega, opNS string) {
	c := cluster.Client
	deps := map[string]*appsv1.Deployment{deploymentName: {}, relayDeployment: {}}
	for name, d := range deps {
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: opNS, Name: name}, d)).To(Succeed())
	}
	for _, want := range platform.APIServerIngress(opNS, platform.NamePrefix) {
		selected := 0
		for _, d := range deps {
			if labels.SelectorFromSet(want.Spec.PodSelector.MatchLabels).Matches(labels.Set(d.Spec.Template.Labels)) {
				selected++
			}
		}
		g.Expect(selected).To(Equal(1), "%s selects the pods of %d Deployments", want.Name, selected)
		g.Eventually(func(g Gomega) {
			np := &networkingv1.NetworkPolicy{}
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(want), np)).To(Succeed(), "nothing admits the kube-apiserver")
			g.Expect(np.Annotations).To(HaveKey(apply.AnnotationAppliedHash), "the operator did not apply %s", np.Name)
			g.Expect(np.Spec.PodSelector).To(Equal(want.Spec.PodSelector))
			g.Expect(np.Spec.Ingress).To(HaveLen(1))
			g.Expect(np.Spec.Ingress[0].From).To(BeEmpty())
			g.Expect(np.Spec.Ingress[0].Ports).To(ConsistOf(HaveField("Port.IntVal", BeElementOf(int32(9443), int32(8443)))))
		}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
	}
}
