package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openshell/openshell-operator/internal/tenancy"
	"github.com/openshell/openshell-operator/test/framework"
)

// TestSandboxPodsPolicy applies config/scc/optional's admission policy (with
// this cluster's Agent Sandbox controller identity) and checks that a
// namespace admin of a platform namespace cannot create a pod running as a
// sandbox ServiceAccount (which would borrow its SCC), while the
// controller's identity can, and other pods are untouched.
func TestSandboxPodsPolicy(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := cluster.Client

	// Who the Agent Sandbox controller is here: it runs with the admin kubeconfig.
	review := &authenticationv1.SelfSubjectReview{}
	g.Expect(c.Create(ctx, review)).To(Succeed())
	controller := review.Status.UserInfo.Username
	raw, err := os.ReadFile(filepath.Join(framework.RepoRoot(), "config", "scc", "optional", "sandbox_pods_policy.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	raw = []byte(strings.ReplaceAll(string(raw), "system:serviceaccount:agent-sandbox-system:agent-sandbox-controller", controller))
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(string(raw)), 4096)
	policy, binding := &admissionregistrationv1.ValidatingAdmissionPolicy{}, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
	g.Expect(dec.Decode(policy)).To(Succeed())
	g.Expect(dec.Decode(binding)).To(Succeed())
	for _, o := range []client.Object{policy, binding} {
		g.Expect(c.Create(ctx, o)).To(Succeed())
		defer func() { _ = c.Delete(context.Background(), o) }()
	}

	ns := framework.CreateNamespace(ctx, t, c, "vap-sandboxes")
	setLabels(ctx, g, ns, map[string]string{corev1.LabelMetadataName: ns, tenancy.LabelServeGateways: "true"})
	g.Expect(c.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "alice-admin", Namespace: ns},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "alice"}},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "admin"}})).To(Succeed())
	alice := as(t, "alice")
	pod := func(sa string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "probe-", Namespace: ns},
			Spec: corev1.PodSpec{ServiceAccountName: sa, Containers: []corev1.Container{{Name: "c", Image: "registry.example/app@sha256:" + sha("v")}}}}
	}
	dryRun := client.DryRunAll
	g.Eventually(func(g Gomega) {
		err := alice.Create(ctx, pod("openshell-sandbox"), dryRun)
		g.Expect(apierrors.IsForbidden(err) || apierrors.IsInvalid(err)).To(BeTrue(), "want refused, got %v", err)
		g.Expect(err.Error()).To(ContainSubstring("only the Agent Sandbox controller creates pods that run as an OpenShell sandbox ServiceAccount"))
	}).WithContext(ctx).WithTimeout(60*time.Second).Should(Succeed(), "the policy never took effect")
	g.Expect(c.Create(ctx, pod("openshell-sandbox"), dryRun)).To(Succeed(), "the controller's identity is admitted")
	g.Expect(alice.Create(ctx, pod("default"), dryRun)).To(Succeed(), "pods with other ServiceAccounts are untouched")
}
