package framework

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openshell/openshell-operator/internal/tenancy"
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

// CreatePlatformNamespace creates a namespace as CreateNamespace does,
// labelled as a cluster admin labels the namespaces listed in
// OPENSHELL_GATEWAY_NAMESPACES (openshell.ai/serve-gateways=true), so that
// the gateways in it are served.
func CreatePlatformNamespace(ctx context.Context, t testing.TB, c client.Client, prefix string) string {
	t.Helper()
	name := CreateNamespace(ctx, t, c, prefix)
	ns := &corev1.Namespace{}
	if err := c.Get(ctx, client.ObjectKey{Name: name}, ns); err != nil {
		t.Fatal(err)
	}
	if ns.Labels == nil {
		ns.Labels = map[string]string{}
	}
	ns.Labels[tenancy.LabelServeGateways] = "true"
	if err := c.Update(ctx, ns); err != nil {
		t.Fatalf("label namespace %s: %v", name, err)
	}
	return name
}

// ApplyManifests server-side applies every object of a multi-document
// YAML file, as `kubectl apply --server-side` would.
func ApplyManifests(ctx context.Context, c client.Client, path string) error {
	return eachManifest(path, func(u *unstructured.Unstructured) error {
		if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner("cluster-admin"), client.ForceOwnership); err != nil {
			return fmt.Errorf("apply %s %s from %s: %w", u.GetKind(), u.GetName(), path, err)
		}
		return nil
	})
}

// DeleteManifests deletes every object of a multi-document YAML file, as
// `kubectl delete -f` would (those already gone are no error).
func DeleteManifests(ctx context.Context, c client.Client, path string) error {
	return eachManifest(path, func(u *unstructured.Unstructured) error {
		if err := c.Delete(ctx, u); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete %s %s from %s: %w", u.GetKind(), u.GetName(), path, err)
		}
		return nil
	})
}

func eachManifest(path string, fn func(*unstructured.Unstructured) error) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("%s: %w", path, err)
		}
		if len(u.Object) == 0 {
			continue
		}
		if err := fn(u); err != nil {
			return err
		}
	}
}
