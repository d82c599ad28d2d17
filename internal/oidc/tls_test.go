package oidc

import (
	"bytes"
	"context"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/openshell/openshell-operator/internal/scheme"
)

// TestServingCertRaceUsesTheWinner: two replicas start at once, both find
// no serving Secret, both create one; the loser must serve under the
// winner's CA (the one gateways are given), not fail or replace it.
func TestServingCertRaceUsesTheWinner(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientBuilder().WithScheme(scheme.New()).Build()
	now := time.Now()
	_, winnerCA, err := EnsureServingCert(ctx, c, "ops", "oidc-tls", []string{"issuer.ops.svc"}, now)
	if err != nil {
		t.Fatal(err)
	}
	stale := true // the loser's first read predates the winner's create
	loser := interceptor.NewClient(c, interceptor.Funcs{Get: func(ctx context.Context, cl client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
		if stale {
			stale = false
			return apierrors.NewNotFound(schema.GroupResource{Resource: "secrets"}, key.Name)
		}
		return cl.Get(ctx, key, obj, opts...)
	}})
	_, loserCA, err := EnsureServingCert(ctx, loser, "ops", "oidc-tls", []string{"issuer.ops.svc"}, now)
	if err != nil {
		t.Fatalf("the losing replica failed: %v", err)
	}
	if !bytes.Equal(loserCA, winnerCA) {
		t.Fatal("the losing replica serves under a CA of its own")
	}
}
