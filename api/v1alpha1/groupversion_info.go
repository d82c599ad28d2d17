// Package v1alpha1 contains the openshell.ai/v1alpha1 API: the resources a
// Platform Admin (OpenShellGateway), a Tenant Admin (OpenShellPolicy,
// OpenShellProvider, OpenShellImagePolicy) and a Sandbox Consumer
// (OpenShellSandbox) use to run OpenShell agent sandboxes declaratively.
//
// +kubebuilder:object:generate=true
// +groupName=openshell.ai
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version used to register these objects.
	GroupVersion = schema.GroupVersion{Group: "openshell.ai", Version: "v1alpha1"}

	// SchemeBuilder adds the types of this group-version to a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the types in this group-version to the given scheme.
	AddToScheme = SchemeBuilder.AddToScheme

	// objectTypes is filled by each kind's file.
	objectTypes []runtime.Object
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, objectTypes...)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
