// Package apply writes rendered objects with server-side apply under the
// operator's field manager. Renderers build typed objects (easy to test and
// to compare with golden files); Apply sends only what they set.
package apply

import (
	"context"
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// FieldOwner is the operator's server-side apply field manager.
const FieldOwner = "openshell-operator"

// ToUnstructured converts a typed object to the apply request body: the
// kind is filled from the scheme, and the fields a typed struct always
// serialises but a renderer never sets (creationTimestamp, empty status)
// are dropped so that the operator does not claim them.
func ToUnstructured(s *runtime.Scheme, obj client.Object) (*unstructured.Unstructured, error) {
	gvk, err := apiutil.GVKForObject(obj, s)
	if err != nil {
		return nil, fmt.Errorf("kind of %T: %w", obj, err)
	}
	b, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", gvk.Kind, err)
	}
	u := &unstructured.Unstructured{}
	if err := json.Unmarshal(b, &u.Object); err != nil {
		return nil, fmt.Errorf("decode %s: %w", gvk.Kind, err)
	}
	u.SetGroupVersionKind(gvk)
	unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
	unstructured.RemoveNestedField(u.Object, "status")
	// Templates carry their own metadata.creationTimestamp.
	unstructured.RemoveNestedField(u.Object, "spec", "template", "metadata", "creationTimestamp")
	if vcts, ok, _ := unstructured.NestedSlice(u.Object, "spec", "volumeClaimTemplates"); ok {
		for _, v := range vcts {
			if m, ok := v.(map[string]any); ok {
				unstructured.RemoveNestedField(m, "metadata", "creationTimestamp")
				unstructured.RemoveNestedField(m, "status")
			}
		}
		_ = unstructured.SetNestedSlice(u.Object, vcts, "spec", "volumeClaimTemplates")
	}
	return u, nil
}

// Apply server-side applies obj, taking ownership of the fields it sets
// from any other manager (drift is corrected). A request that changes
// nothing does not write to etcd.
func Apply(ctx context.Context, c client.Client, obj client.Object) error {
	u, err := ToUnstructured(c.Scheme(), obj)
	if err != nil {
		return err
	}
	if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		return fmt.Errorf("apply %s %s: %w", u.GetKind(), client.ObjectKeyFromObject(obj), err)
	}
	return nil
}
