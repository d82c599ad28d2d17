package api

import (
	"context"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openshell/openshell-operator/test/framework"
)

// notAPIObjects are YAML documents in the docs that are files for tools,
// not Kubernetes objects; they are parsed but not applied.
var notAPIObjects = map[string]string{
	"mirror.openshift.io/v2alpha1/ImageSetConfiguration": "oc-mirror's input file",
}

// TestDocsYAMLIsAccepted applies every YAML document of the README and
// docs/ to a real API server with the CRDs the docs name (ours, OLM's,
// OpenShift's), as `oc apply` would: what the docs tell an admin to apply
// must be accepted as written. A block that is not a whole object fails:
// docs show objects, not fragments. test/quickstart TestQuickstart goes
// further with the quickstart: it runs the whole page, commands included.
func TestDocsYAMLIsAccepted(t *testing.T) {
	ctx := context.Background()
	files, err := filepath.Glob(filepath.Join(framework.RepoRoot(), "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, filepath.Join(framework.RepoRoot(), "README.md"))
	applied := 0
	for _, f := range files {
		docs, err := framework.DocYAML(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range docs {
			u := d.Object
			if u.GetAPIVersion() == "" || u.GetKind() == "" {
				t.Errorf("%s: a YAML block without apiVersion and kind (show whole objects)", d.Where)
				continue
			}
			if _, ok := notAPIObjects[u.GetAPIVersion()+"/"+u.GetKind()]; ok {
				continue
			}
			if ns := u.GetNamespace(); ns != "" {
				if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
					t.Fatalf("%s: namespace %s: %v", d.Where, ns, err)
				}
			}
			if err := env.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner("docs"), client.ForceOwnership); err != nil {
				t.Errorf("%s: %s %s rejected: %v", d.Where, u.GetKind(), u.GetName(), err)
				continue
			}
			applied++
		}
	}
	if applied < 12 {
		t.Fatalf("only %d objects applied from the docs: is the Markdown parsing broken?", applied)
	}
	t.Logf("%d objects from the docs applied", applied)
}
