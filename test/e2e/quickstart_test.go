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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/operatorenv"
	"github.com/openshell/openshell-operator/internal/tenancy"
	"github.com/openshell/openshell-operator/operator"
	"github.com/openshell/openshell-operator/test/framework"
)

// TestQuickstart follows docs/quickstart.md on the real control plane: it
// applies every YAML block in order (OLM's CRDs stand in for OLM, whose own
// run is test/olm; the cluster already has the SCC and the Agent Sandbox
// controller, steps 1 and 2), creates the Secret as the `oc create secret`
// line does, and runs the operator as the quickstart's Subscription
// configures it (AllNamespaces, its OPENSHELL_GATEWAY_NAMESPACES). The
// newcomer's objects must fit together: the gateway is installed (not
// refused), the sandbox's image and policy resolve, and its providers exist
// with their Secrets, held only by the gateway. The gateway process itself
// cannot run here (it is Rust), so providers are not pushed and the sandbox
// is not expected to reach Ready.
func TestQuickstart(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := cluster.Client
	olmCRDs, err := filepath.Glob(filepath.Join(framework.UpstreamDir("crds", framework.CRDsOLM), "*.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	for _, f := range olmCRDs {
		crd, err := framework.LoadCRD(f)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(framework.InstallCRD(ctx, c, crd)).To(Succeed())
		g.Expect(framework.WaitCRDReady(ctx, c, crd)).To(Succeed())
	}

	docs, err := framework.DocYAML(filepath.Join(framework.RepoRoot(), "docs", "quickstart.md"))
	g.Expect(err).NotTo(HaveOccurred())
	var gatewayNamespaces []string
	var gw, sb *unstructured.Unstructured
	namespaces := map[string]bool{}
	for _, d := range docs {
		u := d.Object
		switch u.GetKind() {
		case "Namespace":
			namespaces[u.GetName()] = true
		case "Subscription":
			env, _, _ := unstructured.NestedSlice(u.Object, "spec", "config", "env")
			for _, e := range env {
				if m := e.(map[string]any); m["name"] == "OPENSHELL_GATEWAY_NAMESPACES" {
					gatewayNamespaces = strings.Split(m["value"].(string), ",")
				}
			}
		case "OpenShellGateway":
			gw = u
		case "OpenShellSandbox":
			sb = u
		}
		if ns := u.GetNamespace(); ns != "" && !namespaces[ns] {
			// openshift-marketplace, for the CatalogSource: a cluster's own.
			if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatal(err)
			}
			namespaces[ns] = true
		}
		g.Expect(c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u.DeepCopy()), client.FieldOwner("quickstart"), client.ForceOwnership)).
			To(Succeed(), "%s: %s %s", d.Where, u.GetKind(), u.GetName())
		if u.GetKind() == "Namespace" && u.GetName() == "team-a" {
			// The `oc create secret generic anthropic-credentials` step.
			g.Expect(c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "anthropic-credentials", Namespace: "team-a"},
				StringData: map[string]string{"ANTHROPIC_API_KEY": "sk-quickstart-not-a-real-key"}})).To(Succeed())
		}
	}
	g.Expect(gw).NotTo(BeNil(), "the quickstart creates no gateway")
	g.Expect(sb).NotTo(BeNil(), "the quickstart creates no sandbox")
	g.Expect(gatewayNamespaces).NotTo(BeEmpty(), "the quickstart's Subscription sets no OPENSHELL_GATEWAY_NAMESPACES")

	// The environment OLM gives the operator: its namespace from the
	// downward API, the Subscription's env; read as cmd/ reads it.
	olmEnv := map[string]string{operatorenv.EnvOperatorNamespace: gw.GetNamespace(),
		operatorenv.EnvGatewayNamespaces: strings.Join(gatewayNamespaces, ",")}
	platform, err := tenancy.PlatformFromEnv(func(k string) string { return olmEnv[k] })
	g.Expect(err).NotTo(HaveOccurred())
	framework.StartManager(t, cluster.Config, operator.Options{Controllers: operator.ControllerOptions{Platform: platform}})
	// Registered after the manager, so it runs first: the documented
	// uninstall order, while the operator still runs.
	t.Cleanup(func() { uninstallQuickstart(t, gw, sb, namespaces) })

	g.Eventually(func(g Gomega) {
		cur := &openshellv1alpha1.OpenShellGateway{}
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(gw), cur)).To(Succeed())
		for _, cond := range cur.Status.Conditions {
			g.Expect(cond.Reason).NotTo(BeElementOf(openshellv1alpha1.GatewayReasonSandboxNamespaceNotServed, openshellv1alpha1.GatewayReasonNamespaceNotServed,
				openshellv1alpha1.GatewayReasonImageOverrideNotAllowed), "%s: %s", cond.Type, cond.Message)
		}
		g.Expect(meta.IsStatusConditionTrue(cur.Status.Conditions, openshellv1alpha1.ConditionAgentSandboxAvailable)).To(BeTrue(), "%+v", cur.Status.Conditions)
		g.Expect(meta.IsStatusConditionTrue(cur.Status.Conditions, openshellv1alpha1.GatewayConditionSCCReady)).To(BeTrue(), "%+v", cur.Status.Conditions)
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: gw.GetNamespace(), Name: gw.GetName()}, &appsv1.StatefulSet{})).To(Succeed())
	}).WithContext(ctx).WithTimeout(60 * time.Second).Should(Succeed())

	g.Eventually(func(g Gomega) {
		cur := &openshellv1alpha1.OpenShellSandbox{}
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(sb), cur)).To(Succeed())
		for _, typ := range []string{openshellv1alpha1.ConditionImageAllowed, openshellv1alpha1.SandboxConditionPolicyResolved} {
			g.Expect(meta.IsStatusConditionTrue(cur.Status.Conditions, typ)).To(BeTrue(), "%s: %+v", typ, cur.Status.Conditions)
		}
		// Its providers exist and their Secrets fit; pushing them waits for
		// the gateway process, which cannot run here.
		pr := meta.FindStatusCondition(cur.Status.Conditions, openshellv1alpha1.SandboxConditionProvidersResolved)
		g.Expect(pr).NotTo(BeNil())
		g.Expect(pr.Reason).To(Equal(openshellv1alpha1.SandboxReasonProviderSyncing), "%+v", pr)
		for _, name := range cur.Spec.Providers {
			p := &openshellv1alpha1.OpenShellProvider{}
			g.Expect(c.Get(ctx, client.ObjectKey{Namespace: cur.Namespace, Name: name}, p)).To(Succeed())
			ready := meta.FindStatusCondition(p.Status.Conditions, openshellv1alpha1.ConditionReady)
			g.Expect(ready).NotTo(BeNil())
			g.Expect(ready.Reason).To(Equal(openshellv1alpha1.ProviderReasonGatewayError), "only the gateway holds it: %+v", ready)
		}
	}).WithContext(ctx).WithTimeout(60 * time.Second).Should(Succeed())
}

// uninstallQuickstart deletes in the quickstart's order: the sandbox (its
// gateway cannot be reached here, so it is force-released as a platform
// admin would), then the gateway, then the namespaces.
func uninstallQuickstart(t *testing.T, gw, sb *unstructured.Unstructured, namespaces map[string]bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := cluster.Client
	g := NewWithT(t)
	cur := &openshellv1alpha1.OpenShellSandbox{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(sb), cur); err == nil {
		g.Expect(client.IgnoreNotFound(c.Delete(ctx, cur))).To(Succeed())
		patch := client.MergeFrom(cur.DeepCopy())
		metav1.SetMetaDataAnnotation(&cur.ObjectMeta, openshellv1alpha1.AnnotationForceRelease, "true")
		g.Expect(client.IgnoreNotFound(c.Patch(ctx, cur, patch))).To(Succeed())
	}
	g.Eventually(func() bool { return apierrors.IsNotFound(c.Get(ctx, client.ObjectKeyFromObject(sb), cur)) }).
		WithContext(ctx).WithTimeout(time.Minute).Should(BeTrue())
	g.Expect(client.IgnoreNotFound(c.Delete(ctx, &openshellv1alpha1.OpenShellGateway{ObjectMeta: metav1.ObjectMeta{Name: gw.GetName(), Namespace: gw.GetNamespace()}}))).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(c.Get(ctx, client.ObjectKeyFromObject(gw), &openshellv1alpha1.OpenShellGateway{}))
	}).WithContext(ctx).WithTimeout(time.Minute).Should(BeTrue())
	for ns := range namespaces {
		if ns != "openshift-marketplace" {
			g.Expect(client.IgnoreNotFound(c.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))).To(Succeed())
		}
	}
}
