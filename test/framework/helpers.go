package framework

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// CreateNamespace creates a namespace named after prefix and the test, with
// a random suffix, and deletes it when the test ends. Names from the test
// keep parallel tests apart and make leftovers easy to trace.
func CreateNamespace(ctx context.Context, t testing.TB, c client.Client, prefix string) string {
	t.Helper()
	base := strings.ToLower(prefix + "-" + t.Name())
	base = strings.Map(func(r rune) rune {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') || r == '-' {
			return r
		}
		return '-'
	}, base)
	if len(base) > 50 {
		base = base[:50]
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: strings.TrimRight(base, "-") + "-"}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	t.Cleanup(func() {
		_ = c.Delete(context.Background(), ns)
	})
	return ns.Name
}
