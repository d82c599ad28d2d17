package e2e

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	configv1 "github.com/openshift/api/config/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/imagepolicy"
	"github.com/openshell/openshell-operator/test/framework"
	"github.com/openshell/openshell-operator/test/stack"
	"github.com/openshell/openshell-operator/test/testgateway"
)

// TestClusterMirrors: with spec.imagePolicy.honorClusterMirrors, the
// cluster's ImageDigestMirrorSets (what oc-mirror writes) allow their
// sources by digest in a namespace whose Tenant Admin listed nothing, on a
// gateway that denies namespaces without a policy.
func TestClusterMirrors(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := cluster.Client
	gwNS := framework.CreateNamespace(ctx, t, c, "mirrors-platform")
	sbNS := framework.CreateNamespace(ctx, t, c, "mirrors-sandboxes")
	tenant := framework.CreateNamespace(ctx, t, c, "mirrors-tenant")
	idms := &configv1.ImageDigestMirrorSet{ObjectMeta: metav1.ObjectMeta{Name: "e2e-oc-mirror"},
		Spec: configv1.ImageDigestMirrorSetSpec{ImageDigestMirrors: []configv1.ImageDigestMirrors{{
			Source: "quay.example.com/upstream", Mirrors: []configv1.ImageMirror{"mirror.example.com/upstream"}}}}}
	g.Expect(c.Create(ctx, idms)).To(Succeed())
	t.Cleanup(func() { _ = c.Delete(context.Background(), idms) })
	st, err := stack.Start(ctx, cluster.Config, c, stack.Options{GatewayNamespace: gwNS, SandboxNamespace: sbNS})
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { g.Expect(st.Stop()).To(Succeed()) }()
	_, gw, err := st.AddGatewayWith(ctx, c, "mirrored", sbNS, func(_ *testgateway.Options, gw *openshellv1alpha1.OpenShellGateway) {
		gw.Spec.ImagePolicy = openshellv1alpha1.ImagePolicyEnforcement{Mode: openshellv1alpha1.ImagePolicyEnforce,
			WhenNoPolicy: openshellv1alpha1.NoPolicyDeny, HonorClusterMirrors: true}
	})
	g.Expect(err).NotTo(HaveOccurred())

	const digest = "@sha256:1111111111111111111111111111111111111111111111111111111111111111"
	for name, tc := range map[string]struct{ image, reason string }{
		"mirrored":  {"quay.example.com/upstream/agent" + digest, imagepolicy.ReasonAllowed},
		"by-tag":    {"quay.example.com/upstream/agent:1.0", imagepolicy.ReasonImageNotDigestPinned},
		"elsewhere": {"docker.io/library/ubuntu" + digest, imagepolicy.ReasonImageNotMirrored},
	} {
		sb := sandboxOn(tenant, name, gw)
		sb.Spec.Image = tc.image
		g.Expect(c.Create(ctx, sb)).To(Succeed())
		g.Eventually(func(g Gomega) {
			cur := sandboxStatus(ctx, g, client.ObjectKeyFromObject(sb))
			ia := meta.FindStatusCondition(cur.Status.Conditions, openshellv1alpha1.ConditionImageAllowed)
			g.Expect(ia).NotTo(BeNil())
			g.Expect(ia.Reason).To(Equal(tc.reason), "%s: %s", name, ia.Message)
			if tc.reason == imagepolicy.ReasonAllowed {
				g.Expect(ia.Message).To(ContainSubstring(imagepolicy.ClusterMirrorsPolicy))
			}
		}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
	}
}
