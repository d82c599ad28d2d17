package operator_test

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/openshell/openshell-operator/operator"
)

// TestSecretMetadataTransform: a kubectl-applied Secret carries its data in
// an annotation; the metadata cache keeps neither that nor managedFields.
func TestSecretMetadataTransform(t *testing.T) {
	in := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "creds", Namespace: "team-a", ResourceVersion: "7",
		Labels:        map[string]string{"app": "x"},
		Annotations:   map[string]string{"kubectl.kubernetes.io/last-applied-configuration": `{"data":{"API_KEY":"c2stc2VjcmV0"}}`},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}}}
	out, err := operator.SecretMetadataTransform(in)
	if err != nil {
		t.Fatal(err)
	}
	m := out.(*metav1.PartialObjectMetadata)
	if m.Annotations != nil || m.ManagedFields != nil {
		t.Fatalf("kept annotations %v, managed fields %v", m.Annotations, m.ManagedFields)
	}
	if m.Name != "creds" || m.Namespace != "team-a" || m.ResourceVersion != "7" || m.Labels["app"] != "x" {
		t.Fatalf("lost what the operator needs: %+v", m.ObjectMeta)
	}
}
