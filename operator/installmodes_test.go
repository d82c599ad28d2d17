package operator_test

import (
	"context"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/operatorenv"
	"github.com/openshell/openshell-operator/operator"
	"github.com/openshell/openshell-operator/test/framework"
)

// TestInstallModes runs the manager as OLM's four install modes configure
// it (WATCH_NAMESPACE from olm.targetNamespaces) and checks that it
// reconciles OpenShell objects only in the target namespaces, while its
// cluster-scoped work (the CRD watch behind the preflight conditions)
// keeps working under the namespace-restricted cache.
func TestInstallModes(t *testing.T) {
	ctx := context.Background()
	c := env.Client
	operatorNS := framework.CreateNamespace(ctx, t, c, "operator")
	a := framework.CreateNamespace(ctx, t, c, "target-a")
	b := framework.CreateNamespace(ctx, t, c, "target-b")
	outside := framework.CreateNamespace(ctx, t, c, "outside")

	for _, mode := range []struct {
		name            string
		targetNamespace string // olm.targetNamespaces as OLM writes it
		watched         []string
		ignored         []string
	}{
		{"OwnNamespace", operatorNS, []string{operatorNS}, []string{a, outside}},
		{"SingleNamespace", a, []string{a}, []string{operatorNS, outside}},
		{"MultiNamespace", a + "," + b, []string{a, b}, []string{outside}},
		{"AllNamespaces", "", []string{a, b, outside, operatorNS}, nil},
	} {
		t.Run(mode.name, func(t *testing.T) {
			g := NewWithT(t)
			ns, err := operatorenv.WatchNamespaces(mode.targetNamespace)
			g.Expect(err).NotTo(HaveOccurred())
			stop := framework.StartManager(t, env.Config, operator.Options{WatchNamespaces: ns})
			defer stop()
			name := "gw-" + strings.ToLower(mode.name)
			create := func(ns string) *openshellv1alpha1.OpenShellGateway {
				gw := &openshellv1alpha1.OpenShellGateway{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
					Spec: openshellv1alpha1.OpenShellGatewaySpec{Mode: openshellv1alpha1.GatewayModeExternal,
						External: &openshellv1alpha1.ExternalGatewaySpec{Endpoint: "https://gateway.invalid",
							CASecretRef: openshellv1alpha1.SecretKeyReference{Name: "ca", Key: "ca.crt"}}}}
				g.Expect(c.Create(ctx, gw)).To(Succeed())
				return gw
			}
			var seen, unseen []*openshellv1alpha1.OpenShellGateway
			for _, ns := range mode.watched {
				seen = append(seen, create(ns))
			}
			for _, ns := range mode.ignored {
				unseen = append(unseen, create(ns))
			}
			g.Eventually(func(g Gomega) {
				for _, gw := range seen {
					cur := &openshellv1alpha1.OpenShellGateway{}
					g.Expect(c.Get(ctx, client.ObjectKeyFromObject(gw), cur)).To(Succeed())
					// The preflight condition proves the cluster-scoped CRD watch works.
					g.Expect(meta.FindStatusCondition(cur.Status.Conditions, "AgentSandboxAvailable")).NotTo(BeNil(), gw.Namespace)
				}
			}).WithTimeout(20 * time.Second).Should(Succeed())
			g.Consistently(func(g Gomega) {
				for _, gw := range unseen {
					cur := &openshellv1alpha1.OpenShellGateway{}
					g.Expect(c.Get(ctx, client.ObjectKeyFromObject(gw), cur)).To(Succeed())
					g.Expect(cur.Status.Conditions).To(BeEmpty(), "%s is outside the target namespaces", gw.Namespace)
				}
			}).WithTimeout(2 * time.Second).Should(Succeed())
		})
	}
}
