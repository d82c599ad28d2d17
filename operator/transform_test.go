package operator_test

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/openshell/openshell-operator/operator"
)

// TestSecretMetadataTransform: a kubectl-applied Secret carries its data in
// an annotation; the metadata cache keeps neither that nor managedFields,
// nor labels a tenant could fill to inflate it.
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
	if m.Annotations != nil || m.ManagedFields != nil || m.Labels != nil {
		t.Fatalf("kept annotations %v, managed fields %v, labels %v", m.Annotations, m.ManagedFields, m.Labels)
	}
	if m.Name != "creds" || m.Namespace != "team-a" || m.ResourceVersion != "7" {
		t.Fatalf("lost what the operator needs: %+v", m.ObjectMeta)
	}
}
