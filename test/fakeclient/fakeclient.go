// Package fakeclient prepares controller-runtime fake clients the way the
// reconcilers' package tests need them: with the operator's own field
// indexes, and counting the writes made through them (steady state must
// make none).
package fakeclient

import (
	"context"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/openshell/openshell-operator/internal/index"
)

// Writes counts the writes a client made: All of them (create, update,
// patch, delete, status), and Status, those to the status subresource.
type Writes struct{ All, Status int }

// CountWrites makes b's client count its writes into the returned Writes.
func CountWrites(b *fake.ClientBuilder) *Writes {
	w := &Writes{}
	b.WithInterceptorFuncs(interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			w.All++
			return c.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			w.All++
			return c.Update(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
			w.All++
			return c.Patch(ctx, obj, p, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			w.All++
			return c.Delete(ctx, obj, opts...)
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			w.All++
			w.Status++
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
			w.All++
			w.Status++
			return c.SubResource(sub).Patch(ctx, obj, p, opts...)
		},
	})
	return w
}

// WithIndexes registers the operator's field indexes (index.Register) on b.
func WithIndexes(t testing.TB, b *fake.ClientBuilder) {
	t.Helper()
	if err := index.Register(context.Background(), builderIndexer{b}); err != nil {
		t.Fatal(err)
	}
}

type builderIndexer struct{ b *fake.ClientBuilder }

func (i builderIndexer) IndexField(_ context.Context, obj client.Object, field string, fn client.IndexerFunc) error {
	i.b.WithIndex(obj, field, fn)
	return nil
}
