package e2e

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/sandboxspec"
	"github.com/openshell/openshell-operator/test/framework"
	"github.com/openshell/openshell-operator/test/stack"
)

// TestPolicyLoaded: Synced says the gateway accepted a policy; PolicyLoaded
// says the sandbox's supervisor enforces it, from the gateway's
// current_policy_version and revision status — so a GitOps tool knows when
// an edit is in force, and a version the supervisor rejects shows as such
// with its load error.
func TestPolicyLoaded(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := cluster.Client
	gwNS := framework.CreateNamespace(ctx, t, c, "policyload-platform")
	sbNS := framework.CreateNamespace(ctx, t, c, "policyload-sandboxes")
	tenant := framework.CreateNamespace(ctx, t, c, "policyload-tenant")
	st, err := stack.Start(ctx, cluster.Config, c, stack.Options{GatewayNamespace: gwNS, SandboxNamespace: sbNS})
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { g.Expect(st.Stop()).To(Succeed()) }()
	g.Expect(c.Create(ctx, &openshellv1alpha1.OpenShellPolicy{ObjectMeta: metav1.ObjectMeta{Name: "egress", Namespace: tenant}})).To(Succeed())
	sb := sandboxOn(tenant, "enforced", st.GatewayObj)
	sb.Spec.PolicyRef = &openshellv1alpha1.LocalObjectReference{Name: "egress"}
	g.Expect(c.Create(ctx, sb)).To(Succeed())
	key := client.ObjectKeyFromObject(sb)
	loaded := func(version string) {
		t.Helper()
		g.Eventually(func(g Gomega) {
			cur := sandboxStatus(ctx, g, key)
			g.Expect(cur.Status.Phase).To(Equal(openshellv1alpha1.SandboxPhaseReady))
			pl := meta.FindStatusCondition(cur.Status.Conditions, openshellv1alpha1.SandboxConditionPolicyLoaded)
			g.Expect(pl).NotTo(BeNil(), "%+v", cur.Status.Conditions)
			g.Expect(pl.Status).To(Equal(metav1.ConditionTrue), pl.Message)
			g.Expect(pl.Message).To(Equal("the supervisor enforces policy version " + version))
		}).WithContext(ctx).WithTimeout(90*time.Second).WithPolling(500*time.Millisecond).Should(Succeed(), cluster.CheckProcessesMessage)
	}
	loaded("1")
	addNetworkRule(ctx, g, tenant, "egress", "github", "api.github.com")
	loaded("2")

	// The supervisor rejects the next version: Synced (the gateway took it)
	// but not loaded, with the load error.
	ns := sandboxWorkspace(ctx, g, tenant)
	st.Gateway.FailPolicyLoad(ns, sandboxspec.SandboxName(tenant, sb.Name), "rule github-write: unsupported L7 protocol")
	addNetworkRule(ctx, g, tenant, "egress", "pypi", "pypi.org")
	g.Eventually(func(g Gomega) {
		cur := sandboxStatus(ctx, g, key)
		g.Expect(meta.IsStatusConditionTrue(cur.Status.Conditions, openshellv1alpha1.ConditionSynced)).To(BeTrue())
		g.Expect(cur.Status.PolicyVersion).To(Equal(int64(3)))
		pl := meta.FindStatusCondition(cur.Status.Conditions, openshellv1alpha1.SandboxConditionPolicyLoaded)
		g.Expect(pl.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(pl.Reason).To(Equal(openshellv1alpha1.SandboxReasonPolicyLoadFailed))
		g.Expect(pl.Message).To(ContainSubstring("the supervisor rejected policy version 3: rule github-write: unsupported L7 protocol"))
	}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
	// Fixing the policy (a new version) loads again.
	addNetworkRule(ctx, g, tenant, "egress", "npm", "registry.npmjs.org")
	loaded("4")
}
