package webhook_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openshell/openshell-operator/internal/sandboxspec"
	"github.com/openshell/openshell-operator/internal/webhook"
	"github.com/openshell/openshell-operator/test/framework"
)

// TestSandboxPodsCannotWearAnotherTenantsLabels: the API server sends pods
// wearing openshell.ai/tenant-namespace to the operator, which admits them
// only as a sandbox pod of that namespace's workspace. The pod a gateway
// token of team-a would have the Agent Sandbox controller create for a
// sandbox dressed as team-b's is refused with the reason; team-b's own is
// admitted, and cannot be relabelled as team-a's afterwards. (test/e2e
// TestForgedTenantLabelsAtTheGateway takes the whole path, token included.)
func TestSandboxPodsCannotWearAnotherTenantsLabels(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := env.Client
	sandboxes := framework.CreateNamespace(ctx, t, c, "sandboxes")
	teamA, teamB := framework.CreateNamespace(ctx, t, c, "team-a"), framework.CreateNamespace(ctx, t, c, "team-b")
	uid := func(ns string) types.UID {
		n := &corev1.Namespace{}
		g.Expect(c.Get(ctx, client.ObjectKey{Name: ns}, n)).To(Succeed())
		return n.UID
	}
	uidA, uidB := uid(teamA), uid(teamB)
	pod := func(name, tenant string, tenantUID types.UID, owner string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: sandboxes,
			Labels: map[string]string{sandboxspec.LabelTenantNamespace: tenant, sandboxspec.LabelTenantNamespaceUID: string(tenantUID)}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "registry.example/agent" + digest}}}}
		if owner != "" {
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "agents.x-k8s.io/v1beta1", Kind: "Sandbox", Name: owner,
				UID: types.UID("sandbox-" + name), Controller: func() *bool { b := true; return &b }()}}
		}
		return p
	}

	// team-b's own sandbox pod (its workspace's Sandbox): admitted, once
	// the operator's cache has the new namespaces.
	own := pod("own", teamB, uidB, sandboxspec.WorkspaceName(teamB, uidB)+"--"+sandboxspec.SandboxName(teamB, "agent"))
	g.Eventually(func() error { return c.Create(ctx, own.DeepCopy()) }).WithContext(ctx).WithTimeout(10 * time.Second).Should(Succeed())

	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want string
	}{
		{"a sandbox of team-a's workspace dressed as team-b's", pod("forged", teamB, uidB, sandboxspec.WorkspaceName(teamA, uidA)+"--forged"),
			"cannot dress a pod as another's"},
		{"team-b's name for a sandbox, made in team-a's workspace", pod("named", teamB, uidB, sandboxspec.WorkspaceName(teamA, uidA)+"--"+sandboxspec.SandboxName(teamB, "agent")),
			"was not created in namespace " + teamB + "'s workspace"},
		{"a pod no Sandbox owns", pod("ownerless", teamB, uidB, ""), "no agents.x-k8s.io Sandbox owns it"},
		{"another incarnation's UID", pod("stale", teamB, "0000", sandboxspec.WorkspaceName(teamB, uidB)+"--x"), "not namespace " + teamB + "'s UID"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			err := c.Create(ctx, tc.pod)
			g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%v", err)
			g.Expect(err.Error()).To(ContainSubstring(tc.want))
		})
	}

	t.Run("an admitted pod cannot be relabelled as another tenant's", func(t *testing.T) {
		g := NewWithT(t)
		cur := &corev1.Pod{}
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(own), cur)).To(Succeed())
		cur.Labels[sandboxspec.LabelTenantNamespace], cur.Labels[sandboxspec.LabelTenantNamespaceUID] = teamA, string(uidA)
		err := c.Update(ctx, cur)
		g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%v", err)
		// Other changes still go through.
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(own), cur)).To(Succeed())
		cur.Labels["note"] = "fine"
		g.Expect(c.Update(ctx, cur)).To(Succeed())
	})
}

// TestSandboxPodSelectorsSplitThePods: the two webhooks' object selectors
// together see every pod that wears either tenant label, each such pod
// exactly once (a pod wearing both, as every sandbox pod does, is not
// checked twice), and no other pod.
func TestSandboxPodSelectorsSplitThePods(t *testing.T) {
	var selectors []labels.Selector
	for _, ls := range []*metav1.LabelSelector{webhook.SandboxPodTenantObjectSelector(), webhook.SandboxPodTenantUIDObjectSelector()} {
		s, err := metav1.LabelSelectorAsSelector(ls)
		if err != nil {
			t.Fatal(err)
		}
		selectors = append(selectors, s)
	}
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   int
	}{
		{"both labels", map[string]string{sandboxspec.LabelTenantNamespace: "team-b", sandboxspec.LabelTenantNamespaceUID: "uid-b"}, 1},
		{"the namespace label alone", map[string]string{sandboxspec.LabelTenantNamespace: "team-b"}, 1},
		{"the UID label alone", map[string]string{sandboxspec.LabelTenantNamespaceUID: "uid-b"}, 1},
		{"empty values", map[string]string{sandboxspec.LabelTenantNamespace: "", sandboxspec.LabelTenantNamespaceUID: ""}, 1},
		{"neither", map[string]string{"app": "web"}, 0},
	} {
		n := 0
		for _, s := range selectors {
			if s.Matches(labels.Set(tc.labels)) {
				n++
			}
		}
		if n != tc.want {
			t.Errorf("%s: %d webhooks see the pod, want %d", tc.name, n, tc.want)
		}
	}
}
