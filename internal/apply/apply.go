// Package apply writes rendered objects with server-side apply under the
// operator's field manager. Renderers build typed objects (easy to test and
// to compare with golden files); Apply sends only what they set.
package apply

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
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
// are dropped so that the operator does not claim them, with the
// generation and UID an earlier Apply of obj recorded.
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
	unstructured.RemoveNestedField(u.Object, "metadata", "generation")
	unstructured.RemoveNestedField(u.Object, "metadata", "uid")
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

// AnnotationAppliedHash holds a digest of what the operator last applied
// to an object: with it, a steady state sends no request at all (an apply
// that changes nothing is still an API write request), and a change of
// what the operator renders (a field it stops setting, say) is applied
// even when every field it still sets is in place.
const AnnotationAppliedHash = "openshell.ai/applied-hash"

// Apply server-side applies obj, taking ownership of the fields it sets
// from any other manager (drift is corrected), unless live (nil: always
// apply) already holds it: the last apply was of the same content and every
// field obj sets still has its value. A failed read applies.
//
// When it applies, obj's generation and UID become those the API server
// gave the object: a cache read right after may still hold the previous
// generation (or a deleted object of the same name), and a caller asking
// whether its change was rolled out compares with these.
func Apply(ctx context.Context, c client.Client, live client.Reader, obj client.Object) error {
	u, err := ToUnstructured(c.Scheme(), obj)
	if err != nil {
		return err
	}
	digest, err := hash(u)
	if err != nil {
		return err
	}
	ann := u.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	ann[AnnotationAppliedHash] = digest
	u.SetAnnotations(ann)
	if live != nil && applied(ctx, live, obj, u) {
		return nil
	}
	if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		return fmt.Errorf("apply %s %s: %w", u.GetKind(), client.ObjectKeyFromObject(obj), err)
	}
	// The apply decoded the API server's answer into u.
	obj.SetGeneration(u.GetGeneration())
	obj.SetUID(u.GetUID())
	return nil
}

// applied reads the live object into a new object of obj's type and
// reports whether it holds want.
func applied(ctx context.Context, live client.Reader, obj client.Object, want *unstructured.Unstructured) bool {
	cur, ok := obj.DeepCopyObject().(client.Object)
	if !ok {
		return false
	}
	if err := live.Get(ctx, client.ObjectKeyFromObject(obj), cur); err != nil {
		return false
	}
	b, err := json.Marshal(cur)
	if err != nil {
		return false
	}
	var have map[string]any
	if err := json.Unmarshal(b, &have); err != nil {
		return false
	}
	// A typed object read back carries no kind.
	have["apiVersion"], have["kind"] = want.GetAPIVersion(), want.GetKind()
	return Contains(have, want.Object)
}

// Contains says whether have holds every field of want with its value:
// maps by key (have may hold more: defaults, other managers' fields),
// lists element by element, and an empty or null value in want matches a
// missing one (the API server drops them). Both come from JSON, so numbers
// compare as float64.
func Contains(have, want any) bool {
	switch w := want.(type) {
	case map[string]any:
		h, ok := have.(map[string]any)
		if !ok {
			return len(w) == 0 && have == nil
		}
		for k, wv := range w {
			hv, present := h[k]
			if !present {
				if empty(wv) {
					continue
				}
				return false
			}
			if !Contains(hv, wv) {
				return false
			}
		}
		return true
	case []any:
		h, ok := have.([]any)
		if !ok {
			return len(w) == 0 && have == nil
		}
		if len(h) != len(w) {
			return false
		}
		for i := range w {
			if !Contains(h[i], w[i]) {
				return false
			}
		}
		return true
	case nil:
		return empty(have)
	default:
		return have == want
	}
}

func empty(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case map[string]any:
		return len(x) == 0
	case []any:
		return len(x) == 0
	case string:
		return x == ""
	}
	return false
}

// hash is the digest of the apply request body (encoding/json sorts map
// keys, so the same content always gives the same digest).
func hash(u *unstructured.Unstructured) (string, error) {
	b, err := json.Marshal(u.Object)
	if err != nil {
		return "", fmt.Errorf("encode %s: %w", u.GetKind(), err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16]), nil
}
