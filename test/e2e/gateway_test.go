package e2e

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/operator"
	"github.com/openshell/openshell-operator/test/framework"
)

// TestManagedGatewayBecomesAvailable runs the operator against the local
// cluster: the gateway StatefulSet is scheduled onto the kwok node with its
// SQLite volume bound, becomes Ready, and the gateway reports Available.
// The NetworkPolicies select the gateway pod and the pods the Agent
// Sandbox controller creates.
func TestManagedGatewayBecomesAvailable(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := cluster.Client
	ns := framework.CreatePlatformNamespace(ctx, t, c, "gateway")
	createVolume(ctx, t, "pv-"+ns)
	framework.StartManager(t, cluster.Config, operator.Options{WatchNamespaces: []string{ns}})

	gw := &openshellv1alpha1.OpenShellGateway{ObjectMeta: metav1.ObjectMeta{Name: "openshell", Namespace: ns},
		Spec: openshellv1alpha1.OpenShellGatewaySpec{Managed: &openshellv1alpha1.ManagedGatewaySpec{}}}
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

// createVolume makes a PersistentVolume for the gateway's SQLite claim:
// kube-controller-manager binds it, as a storage provisioner would.
func createVolume(ctx context.Context, t *testing.T, name string) {
	t.Helper()
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/tmp/" + name}},
		},
	}
	if err := cluster.Client.Create(ctx, pv); err != nil {
		t.Fatalf("create volume: %v", err)
	}
	t.Cleanup(func() { _ = cluster.Client.Delete(context.Background(), pv) })
}
