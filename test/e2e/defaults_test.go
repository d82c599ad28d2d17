package e2e

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/sandboxspec"
)

// TestNamespaceDefaults (#45 item 4): a Tenant Admin's defaults on the
// namespace's default policy fill what a sandbox leaves empty, are shown
// on it (status.defaults, with where they came from), and never widen the
// platform's ceilings: a default RuntimeClass the gateway does not allow
// refuses the sandbox as its own would. Removed, the sandbox runs; its
// defaulted TTL deletes it once its agent exits.
func TestNamespaceDefaults(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := cluster.Client
	st, tenant, _ := startLineStack(ctx, t, g, "defaults")
	policy := &openshellv1alpha1.OpenShellPolicy{ObjectMeta: metav1.ObjectMeta{Name: "team-defaults", Namespace: tenant},
		Spec: openshellv1alpha1.OpenShellPolicySpec{Default: true, SandboxDefaults: &openshellv1alpha1.SandboxDefaults{
			RuntimeClassName: "kata", TTLSecondsAfterFinished: ptr.To[int32](0)}}}
	g.Expect(c.Create(ctx, policy)).To(Succeed())
	sb := sandboxOn(tenant, "agent", st.GatewayObj)
	sb.Spec.Command = []string{"true"}
	g.Expect(c.Create(ctx, sb)).To(Succeed())
	key := client.ObjectKeyFromObject(sb)
	g.Eventually(func(g Gomega) {
		cur := sandboxStatus(ctx, g, key)
		g.Expect(cur.Status.Phase).To(Equal(openshellv1alpha1.SandboxPhaseRejected), "%+v", cur.Status.Conditions)
		g.Expect(meta.FindStatusCondition(cur.Status.Conditions, openshellv1alpha1.ConditionAccepted).Reason).To(Equal(openshellv1alpha1.SandboxReasonRuntimeClassNotAllowed))
		g.Expect(cur.Status.Defaults).NotTo(BeNil())
		g.Expect(cur.Status.Defaults.From).To(Equal(policy.Name))
		g.Expect(cur.Status.Defaults.RuntimeClassName).To(Equal("kata"))
		g.Expect(cur.Spec.RuntimeClassName).To(BeEmpty(), "the default was written into the user's spec")
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())

	g.Expect(c.Patch(ctx, policy, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"sandboxDefaults":{"runtimeClassName":null}}}`)))).To(Succeed())
	waitPhase(ctx, g, key, openshellv1alpha1.SandboxPhaseReady)
	cur := sandboxStatus(ctx, g, key)
	g.Expect(cur.Status.Defaults.RuntimeClassName).To(BeEmpty())
	g.Expect(cur.Status.Defaults.TTLSecondsAfterFinished).To(Equal(ptr.To[int32](0)))
	g.Expect(st.Gateway.Exit(sandboxWorkspace(ctx, g, tenant), sandboxspec.SandboxName(tenant, sb.Name), 0)).To(Succeed())
	g.Eventually(func() error { return c.Get(ctx, key, sb) }).WithContext(ctx).WithTimeout(time.Minute).
		Should(Satisfy(apierrors.IsNotFound), "the defaulted TTL did not delete the finished sandbox")
}
