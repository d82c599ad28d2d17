package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// The accessors below let shared status code (conditions, observed
// generation) work on every kind without reflection.

// GetConditions returns the status conditions.
func (o *OpenShellGateway) GetConditions() []metav1.Condition { return o.Status.Conditions }

// SetConditions replaces the status conditions.
func (o *OpenShellGateway) SetConditions(c []metav1.Condition) { o.Status.Conditions = c }

// GetObservedGeneration returns status.observedGeneration.
func (o *OpenShellGateway) GetObservedGeneration() int64 { return o.Status.ObservedGeneration }

// SetObservedGeneration sets status.observedGeneration.
func (o *OpenShellGateway) SetObservedGeneration(g int64) { o.Status.ObservedGeneration = g }

// GetConditions returns the status conditions.
func (o *OpenShellSandbox) GetConditions() []metav1.Condition { return o.Status.Conditions }

// SetConditions replaces the status conditions.
func (o *OpenShellSandbox) SetConditions(c []metav1.Condition) { o.Status.Conditions = c }

// GetObservedGeneration returns status.observedGeneration.
func (o *OpenShellSandbox) GetObservedGeneration() int64 { return o.Status.ObservedGeneration }

// SetObservedGeneration sets status.observedGeneration.
func (o *OpenShellSandbox) SetObservedGeneration(g int64) { o.Status.ObservedGeneration = g }

// GetConditions returns the status conditions.
func (o *OpenShellPolicy) GetConditions() []metav1.Condition { return o.Status.Conditions }

// SetConditions replaces the status conditions.
func (o *OpenShellPolicy) SetConditions(c []metav1.Condition) { o.Status.Conditions = c }

// GetObservedGeneration returns status.observedGeneration.
func (o *OpenShellPolicy) GetObservedGeneration() int64 { return o.Status.ObservedGeneration }

// SetObservedGeneration sets status.observedGeneration.
func (o *OpenShellPolicy) SetObservedGeneration(g int64) { o.Status.ObservedGeneration = g }

// GetConditions returns the status conditions.
func (o *OpenShellProvider) GetConditions() []metav1.Condition { return o.Status.Conditions }

// SetConditions replaces the status conditions.
func (o *OpenShellProvider) SetConditions(c []metav1.Condition) { o.Status.Conditions = c }

// GetObservedGeneration returns status.observedGeneration.
func (o *OpenShellProvider) GetObservedGeneration() int64 { return o.Status.ObservedGeneration }

// SetObservedGeneration sets status.observedGeneration.
func (o *OpenShellProvider) SetObservedGeneration(g int64) { o.Status.ObservedGeneration = g }

// GetConditions returns the status conditions.
func (o *OpenShellImagePolicy) GetConditions() []metav1.Condition { return o.Status.Conditions }

// SetConditions replaces the status conditions.
func (o *OpenShellImagePolicy) SetConditions(c []metav1.Condition) { o.Status.Conditions = c }

// GetObservedGeneration returns status.observedGeneration.
func (o *OpenShellImagePolicy) GetObservedGeneration() int64 { return o.Status.ObservedGeneration }

// SetObservedGeneration sets status.observedGeneration.
func (o *OpenShellImagePolicy) SetObservedGeneration(g int64) { o.Status.ObservedGeneration = g }

// StatusValue returns a copy of the status, for change detection.
func (o *OpenShellGateway) StatusValue() any { return *o.Status.DeepCopy() }

// StatusValue returns a copy of the status, for change detection.
func (o *OpenShellSandbox) StatusValue() any { return *o.Status.DeepCopy() }

// StatusValue returns a copy of the status, for change detection.
func (o *OpenShellPolicy) StatusValue() any { return *o.Status.DeepCopy() }

// StatusValue returns a copy of the status, for change detection.
func (o *OpenShellProvider) StatusValue() any { return *o.Status.DeepCopy() }

// StatusValue returns a copy of the status, for change detection.
func (o *OpenShellImagePolicy) StatusValue() any { return *o.Status.DeepCopy() }

// GetConditions returns the status conditions.
func (o *OpenShellProviderProfile) GetConditions() []metav1.Condition { return o.Status.Conditions }

// SetConditions replaces the status conditions.
func (o *OpenShellProviderProfile) SetConditions(c []metav1.Condition) { o.Status.Conditions = c }

// GetObservedGeneration returns status.observedGeneration.
func (o *OpenShellProviderProfile) GetObservedGeneration() int64 { return o.Status.ObservedGeneration }

// SetObservedGeneration sets status.observedGeneration.
func (o *OpenShellProviderProfile) SetObservedGeneration(g int64) { o.Status.ObservedGeneration = g }

// StatusValue returns a copy of the status, for change detection.
func (o *OpenShellProviderProfile) StatusValue() any { return *o.Status.DeepCopy() }

// GetConditions returns the status conditions.
func (o *OpenShellSandboxTemplate) GetConditions() []metav1.Condition { return o.Status.Conditions }

// SetConditions replaces the status conditions.
func (o *OpenShellSandboxTemplate) SetConditions(c []metav1.Condition) { o.Status.Conditions = c }

// GetObservedGeneration returns status.observedGeneration.
func (o *OpenShellSandboxTemplate) GetObservedGeneration() int64 { return o.Status.ObservedGeneration }

// SetObservedGeneration sets status.observedGeneration.
func (o *OpenShellSandboxTemplate) SetObservedGeneration(g int64) { o.Status.ObservedGeneration = g }

// StatusValue returns a copy of the status, for change detection.
func (o *OpenShellSandboxTemplate) StatusValue() any { return *o.Status.DeepCopy() }
