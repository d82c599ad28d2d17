package mustgather_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/mustgather"
	"github.com/openshell/openshell-operator/test/framework"
)

var env *framework.Env

func TestMain(m *testing.M) {
	os.Exit(framework.RunWithEnv(m, framework.EnvOptions{OpenShift: true, OLM: true, AgentSandbox: framework.AgentSandboxBetaOnly}, &env))
}

// TestGatherCollectsWithoutSecretValues fills a cluster with what support
// needs and a few secrets, gathers, and checks both: every object is there,
// and no Secret value (nor a last-applied copy of one) is in any file.
func TestGatherCollectsWithoutSecretValues(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	c := env.Client
	platform := framework.CreateNamespace(ctx, t, c, "mg-platform")
	tenant := framework.CreateNamespace(ctx, t, c, "mg-tenant")
	const secretValue, lastApplied = "sk-must-not-leave-the-cluster", "private-key-in-last-applied"

	pol := &openshellv1alpha1.OpenShellPolicy{ObjectMeta: metav1.ObjectMeta{Name: "restricted", Namespace: tenant}}
	g.Expect(c.Create(ctx, pol)).To(Succeed())
	sb := &openshellv1alpha1.OpenShellSandbox{ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: tenant},
		Spec: openshellv1alpha1.OpenShellSandboxSpec{GatewayRef: openshellv1alpha1.GatewayReference{Name: "openshell", Namespace: platform}}}
	g.Expect(c.Create(ctx, sb)).To(Succeed())
	agentSandbox := &unstructured.Unstructured{}
	agentSandbox.SetAPIVersion("agents.x-k8s.io/v1beta1")
	agentSandbox.SetKind("Sandbox")
	agentSandbox.SetNamespace(platform)
	agentSandbox.SetName("openshell-agent")
	g.Expect(unstructured.SetNestedField(agentSandbox.Object, map[string]any{"spec": map[string]any{
		"containers": []any{map[string]any{"name": "agent", "image": "example.com/agent:1"}}}}, "spec", "podTemplate")).To(Succeed())
	g.Expect(c.Create(ctx, agentSandbox)).To(Succeed())
	// The tenant's own credentials: not the operator's, never collected.
	g.Expect(c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "anthropic-credentials", Namespace: tenant},
		StringData: map[string]string{"ANTHROPIC_API_KEY": secretValue}})).To(Succeed())
	// A gateway key the operator made: collected, values redacted.
	managed := map[string]string{"app.kubernetes.io/managed-by": "openshell-operator"}
	g.Expect(c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "openshell-ca-tls", Namespace: platform, Labels: managed,
		Annotations: map[string]string{corev1.LastAppliedConfigAnnotation: `{"data":{"tls.key":"` + lastApplied + `"}}`}},
		StringData: map[string]string{"tls.key": secretValue, "tls.crt": "certificate"}})).To(Succeed())
	g.Expect(c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "openshell-config", Namespace: platform, Labels: managed},
		Data: map[string]string{"gateway.toml": "[openshell]"}})).To(Succeed())
	g.Expect(c.Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "openshell-tenant-admin-" + platform}})).To(Succeed())
	// A gateway pod on no node: its logs cannot be read, which is recorded.
	g.Expect(c.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "openshell-0", Namespace: platform,
		Labels: map[string]string{"app.kubernetes.io/name": "openshell-gateway"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "gateway", Image: "example.com/gateway:1"}}}})).To(Succeed())
	g.Expect(c.Create(ctx, &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "agent.1", Namespace: tenant},
		InvolvedObject: corev1.ObjectReference{Kind: "OpenShellSandbox", Namespace: tenant, Name: "agent"}, Reason: "Rejected", Message: "image not allowed"})).To(Succeed())

	dir := t.TempDir()
	gth, err := mustgather.New(env.Config, mustgather.Options{Dir: dir})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(gth.Run(ctx)).To(Succeed())

	for _, f := range []string{
		"namespaces/" + tenant + "/openshell.ai/openshellpolicies/restricted.yaml",
		"namespaces/" + tenant + "/openshell.ai/openshellsandboxes/agent.yaml",
		"namespaces/" + platform + "/agents.x-k8s.io/sandboxes/openshell-agent.yaml",
		"namespaces/" + platform + "/core/secrets/openshell-ca-tls.yaml",
		"namespaces/" + platform + "/core/configmaps/openshell-config.yaml",
		"namespaces/" + platform + "/core/pods/openshell-0.yaml",
		"namespaces/" + tenant + "/core/events.yaml",
		"cluster-scoped-resources/apiextensions.k8s.io/customresourcedefinitions/openshellsandboxes.openshell.ai.yaml",
		"cluster-scoped-resources/apiextensions.k8s.io/customresourcedefinitions/sandboxes.agents.x-k8s.io.yaml",
		"cluster-scoped-resources/rbac.authorization.k8s.io/clusterroles/openshell-tenant-admin-" + platform + ".yaml",
	} {
		g.Expect(filepath.Join(dir, f)).To(BeAnExistingFile())
	}
	g.Expect(filepath.Join(dir, "namespaces", tenant, "core", "secrets")).NotTo(BeAnExistingFile(), "a tenant's own Secret was collected")
	secret, err := os.ReadFile(filepath.Join(dir, "namespaces", platform, "core", "secrets", "openshell-ca-tls.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(secret)).To(ContainSubstring("tls.key: '<redacted: "))
	// The pod's log, or why it could not be read (no kubelet here).
	logPath := filepath.Join(dir, "namespaces", platform, "pods", "openshell-0", "gateway.log")
	if _, err := os.Stat(logPath); err != nil {
		problems, err := os.ReadFile(filepath.Join(dir, "errors.txt"))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(string(problems)).To(ContainSubstring("logs of " + platform + "/openshell-0 container gateway"))
	}

	// No file holds a secret value, in clear or in base64.
	g.Expect(filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, v := range []string{secretValue, lastApplied, "c2stbXVzdC1ub3QtbGVhdmUtdGhlLWNsdXN0ZXI="} {
			if strings.Contains(string(b), v) {
				t.Errorf("%s holds a secret value", p)
			}
		}
		return nil
	})).To(Succeed())
}

func TestRedact(t *testing.T) {
	g := NewWithT(t)
	u := &unstructured.Unstructured{Object: map[string]any{"kind": "Secret", "data": map[string]any{"k": "dmFsdWU="},
		"stringData": map[string]any{"s": "value"}}}
	u.SetAnnotations(map[string]string{corev1.LastAppliedConfigAnnotation: "{}", "keep": "me"})
	mustgather.Redact(u)
	g.Expect(u.Object["data"]).To(Equal(map[string]any{"k": "<redacted: 8 characters>"}))
	g.Expect(u.Object["stringData"]).To(Equal(map[string]any{"s": "<redacted: 5 characters>"}))
	g.Expect(u.GetAnnotations()).To(Equal(map[string]string{"keep": "me"}))
	cm := &unstructured.Unstructured{Object: map[string]any{"kind": "ConfigMap", "data": map[string]any{"k": "v"}}}
	mustgather.Redact(cm)
	g.Expect(cm.Object["data"]).To(Equal(map[string]any{"k": "v"}))
}
