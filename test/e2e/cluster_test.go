package e2e

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openshell/openshell-operator/test/framework"
)

var sandboxGVK = schema.GroupVersionKind{Group: "agents.x-k8s.io", Version: "v1beta1", Kind: "Sandbox"}

// TestClusterRunsAgentSandbox proves the harness: a raw agents.x-k8s.io
// Sandbox becomes Ready with a Running pod on a kwok node, through the real
// Agent Sandbox controller, scheduler and controller manager.
func TestClusterRunsAgentSandbox(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := cluster.Client
	ns := framework.CreateNamespace(ctx, t, c, "harness")

	sb := &unstructured.Unstructured{}
	sb.SetGroupVersionKind(sandboxGVK)
	sb.SetNamespace(ns)
	sb.SetName("probe")
	g.Expect(unstructured.SetNestedField(sb.Object, true, "spec", "service")).To(Succeed())
	g.Expect(unstructured.SetNestedField(sb.Object, map[string]any{
		"metadata": map[string]any{"labels": map[string]any{"app": "probe"}},
		"spec": map[string]any{
			"containers": []any{map[string]any{"name": "agent", "image": "registry.example/agent@sha256:" + sha("a")}},
		},
	}, "spec", "podTemplate")).To(Succeed())
	g.Expect(c.Create(ctx, sb)).To(Succeed())

	g.Eventually(func(g Gomega) {
		cur := &unstructured.Unstructured{}
		cur.SetGroupVersionKind(sandboxGVK)
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(sb), cur)).To(Succeed())
		conds, _, _ := unstructured.NestedSlice(cur.Object, "status", "conditions")
		g.Expect(conds).To(ContainElement(And(
			HaveKeyWithValue("type", "Ready"), HaveKeyWithValue("status", "True"))))
	}).WithContext(ctx).WithTimeout(90*time.Second).WithPolling(250*time.Millisecond).Should(Succeed(), func() string {
		return cluster.CheckProcessesMessage()
	})

	pod := &corev1.Pod{}
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "probe"}, pod)).To(Succeed())
	g.Expect(pod.Status.Phase).To(Equal(corev1.PodRunning))
	g.Expect(pod.Spec.NodeName).To(HavePrefix("kwok-node-"))
	g.Expect(metav1.GetControllerOf(pod)).NotTo(BeNil())
	g.Expect(metav1.GetControllerOf(pod).Kind).To(Equal("Sandbox"))

	// Deleting the Sandbox garbage-collects its pod (kube-controller-manager).
	g.Expect(c.Delete(ctx, sb)).To(Succeed())
	g.Eventually(func() error {
		return c.Get(ctx, client.ObjectKeyFromObject(pod), &corev1.Pod{})
	}).WithContext(ctx).WithTimeout(60 * time.Second).Should(Satisfy(apierrors.IsNotFound))
}

func sha(c string) string {
	b := make([]byte, 64)
	for i := range b {
		b[i] = c[0]
	}
	return string(b)
}
