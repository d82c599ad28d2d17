package sandbox

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/sandboxspec"
	"github.com/openshell/openshell-operator/internal/scheme"
)

// TestResolveEnvIsBounded (N9): one sandbox's env reads at most
// MaxEnvSecrets Secrets and at most the gateway's 256 KiB of values; past
// either it is refused with a reason, not read.
func TestResolveEnvIsBounded(t *testing.T) {
	var objs []client.Object
	for i := range sandboxspec.MaxEnvSecrets + 1 {
		objs = append(objs, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: fmt.Sprintf("s%d", i)},
			Data: map[string][]byte{"k": []byte("v"), "big": []byte(strings.Repeat("x", 200<<10))}})
	}
	r := &Reconciler{APIReader: fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(objs...).Build()}
	ref := func(i int, key string) openshellv1alpha1.SandboxEnvVar {
		return openshellv1alpha1.SandboxEnvVar{Name: fmt.Sprintf("E%d_%s", i, key), ValueFrom: &openshellv1alpha1.SandboxEnvVarSource{
			SecretKeyRef: openshellv1alpha1.SecretKeyReference{Name: fmt.Sprintf("s%d", i), Key: key}}}
	}
	sb := sandboxWith(nil)
	for i := range sandboxspec.MaxEnvSecrets {
		sb.Spec.Env = append(sb.Spec.Env, ref(i, "k"))
	}
	if env, _, ref := r.resolveEnv(context.Background(), sb); ref != nil || len(env) != sandboxspec.MaxEnvSecrets {
		t.Fatalf("within the bounds: %d values, %+v", len(env), ref)
	}
	refused := func(what, reason, msg string) {
		t.Helper()
		_, _, ref := r.resolveEnv(context.Background(), sb)
		if ref == nil || ref.reason != reason || !strings.Contains(ref.message, msg) {
			t.Fatalf("%s: %+v, want %s %q", what, ref, reason, msg)
		}
	}
	sb.Spec.Env = append(sb.Spec.Env, ref(sandboxspec.MaxEnvSecrets, "k"))
	refused("one Secret too many", openshellv1alpha1.SandboxReasonEnvTooLarge, "more than the 16 one sandbox may")
	sb.Spec.Env = []openshellv1alpha1.SandboxEnvVar{ref(0, "big"), ref(1, "big")}
	refused("values over the gateway's limit", openshellv1alpha1.SandboxReasonEnvTooLarge, "more than the gateway's 256 KiB (reached with Secret s1)")
	sb.Spec.Env = []openshellv1alpha1.SandboxEnvVar{ref(0, "missing")}
	refused("a key the Secret lacks", openshellv1alpha1.SandboxReasonSecretNotFound, `Secret s0 has no key "missing"`)
}
