// Package index holds the field indexes over openshell.ai objects, the
// "who uses X" queries built on them, and the predicates several
// controllers share. The composition root registers the indexes once
// (Register) before any controller or webhook starts, so that every user —
// the reconcilers and the admission webhooks alike — depends down on this
// package instead of on the controller that used to register an index.
package index

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
)

// Field indexes.
const (
	// SandboxGateway indexes sandboxes by "namespace/name" of their gateway.
	SandboxGateway = "spec.gatewayRef"
	// SandboxPolicy indexes sandboxes by the name of their OpenShellPolicy.
	SandboxPolicy = "spec.policyRef"
	// SandboxProviders indexes sandboxes by the names of their providers.
	SandboxProviders = "spec.providers"
	// SandboxTemplate indexes sandboxes by the name of their
	// OpenShellSandboxTemplate.
	SandboxTemplate = "spec.templateRef"
	// SandboxID indexes sandboxes by the gateway sandbox ID status records
	// (the label the gateway's driver puts on its agents.x-k8s.io Sandbox).
	SandboxID = "status.sandboxID"
	// SandboxWaitsForBudget indexes, by "true", the sandboxes refused for
	// their namespace's budget: those to look at again when a peer's
	// charge may have dropped.
	SandboxWaitsForBudget = "status.waitsForBudget"
	// SandboxEnvSecrets indexes sandboxes by the Secrets their env reads.
	SandboxEnvSecrets = "spec.env.valueFrom.secretKeyRef.name"
	// ProviderSecret indexes providers by their credentials and refresh
	// material Secrets.
	ProviderSecret = "spec.credentialsSecretRef.name"
	// ProviderType indexes providers by their type (the profile id).
	ProviderType = "spec.type"
)

// Register adds every index to the manager's field indexer.
func Register(ctx context.Context, idx client.FieldIndexer) error {
	for _, ix := range []struct {
		obj  client.Object
		name string
		fn   client.IndexerFunc
	}{
		{&openshellv1alpha1.OpenShellSandbox{}, SandboxGateway, func(o client.Object) []string {
			return []string{o.(*openshellv1alpha1.OpenShellSandbox).GatewayKey().String()}
		}},
		{&openshellv1alpha1.OpenShellSandbox{}, SandboxPolicy, func(o client.Object) []string {
			if ref := o.(*openshellv1alpha1.OpenShellSandbox).Spec.PolicyRef; ref != nil {
				return []string{ref.Name}
			}
			return nil
		}},
		{&openshellv1alpha1.OpenShellSandbox{}, SandboxTemplate, func(o client.Object) []string {
			if ref := o.(*openshellv1alpha1.OpenShellSandbox).Spec.TemplateRef; ref != nil {
				return []string{ref.Name}
			}
			return nil
		}},
		{&openshellv1alpha1.OpenShellSandbox{}, SandboxID, func(o client.Object) []string {
			if id := o.(*openshellv1alpha1.OpenShellSandbox).Status.SandboxID; id != "" {
				return []string{id}
			}
			return nil
		}},
		{&openshellv1alpha1.OpenShellSandbox{}, SandboxWaitsForBudget, func(o client.Object) []string {
			c := meta.FindStatusCondition(o.(*openshellv1alpha1.OpenShellSandbox).Status.Conditions, openshellv1alpha1.ConditionAccepted)
			if c != nil && c.Status == metav1.ConditionFalse && c.Reason == openshellv1alpha1.SandboxReasonNamespaceBudgetExceeded {
				return []string{"true"}
			}
			return nil
		}},
		{&openshellv1alpha1.OpenShellSandbox{}, SandboxProviders, func(o client.Object) []string {
			return o.(*openshellv1alpha1.OpenShellSandbox).Spec.Providers
		}},
		{&openshellv1alpha1.OpenShellSandbox{}, SandboxEnvSecrets, func(o client.Object) []string {
			var names []string
			for _, e := range o.(*openshellv1alpha1.OpenShellSandbox).Spec.Env {
				if e.ValueFrom != nil && !slices.Contains(names, e.ValueFrom.SecretKeyRef.Name) {
					names = append(names, e.ValueFrom.SecretKeyRef.Name)
				}
			}
			return names
		}},
		{&openshellv1alpha1.OpenShellProvider{}, ProviderType, func(o client.Object) []string {
			return []string{o.(*openshellv1alpha1.OpenShellProvider).Spec.Type}
		}},
		{&openshellv1alpha1.OpenShellProvider{}, ProviderSecret, func(o client.Object) []string {
			return o.(*openshellv1alpha1.OpenShellProvider).SecretNames()
		}},
	} {
		if err := idx.IndexField(ctx, ix.obj, ix.name, ix.fn); err != nil {
			return fmt.Errorf("index %T by %s: %w", ix.obj, ix.name, err)
		}
	}
	return nil
}

// PolicyUsers lists, sorted, the sandboxes in the policy's namespace that
// reference it and are not being deleted.
func PolicyUsers(ctx context.Context, c client.Reader, p *openshellv1alpha1.OpenShellPolicy) ([]string, error) {
	list := &openshellv1alpha1.OpenShellSandboxList{}
	if err := c.List(ctx, list, client.InNamespace(p.Namespace), client.MatchingFields{SandboxPolicy: p.Name}); err != nil {
		return nil, fmt.Errorf("list sandboxes using policy %s: %w", p.Name, err)
	}
	names := make([]string, 0, len(list.Items))
	for _, s := range list.Items {
		if s.DeletionTimestamp.IsZero() {
			names = append(names, s.Name)
		}
	}
	sort.Strings(names)
	return names, nil
}

// TemplateUsers lists, by name, the sandboxes that name template t,
// those being deleted too (they run until the gateway confirms).
func TemplateUsers(ctx context.Context, c client.Reader, t *openshellv1alpha1.OpenShellSandboxTemplate) ([]openshellv1alpha1.OpenShellSandbox, error) {
	list := &openshellv1alpha1.OpenShellSandboxList{}
	if err := c.List(ctx, list, client.InNamespace(t.Namespace), client.MatchingFields{SandboxTemplate: t.Name}); err != nil {
		return nil, fmt.Errorf("list sandboxes using template %s: %w", t.Name, err)
	}
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].Name < list.Items[j].Name })
	return list.Items, nil
}

// GetNamespace reads a namespace's metadata (labels decide gateway access,
// the UID names its workspace) from the manager's metadata cache.
func GetNamespace(ctx context.Context, c client.Reader, name string) (*metav1.PartialObjectMetadata, error) {
	ns := NamespaceMetadata()
	if err := c.Get(ctx, client.ObjectKey{Name: name}, ns); err != nil {
		return nil, fmt.Errorf("get namespace %s: %w", name, err)
	}
	return ns, nil
}

// NamespaceMetadata is an empty Namespace metadata object (for Get and watches).
func NamespaceMetadata() *metav1.PartialObjectMetadata { return coreMetadata("Namespace") }

// SecretMetadata is an empty Secret metadata object, for the metadata-only
// Secret cache: rotations are seen without holding any value.
func SecretMetadata() *metav1.PartialObjectMetadata { return coreMetadata("Secret") }

func coreMetadata(kind string) *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind(kind))
	return m
}

// SpecOrDeletionChanged passes updates that change the spec (generation),
// start deletion, or change labels and annotations: status and finalizer
// writes do not pass.
var SpecOrDeletionChanged = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	o, n := e.ObjectOld, e.ObjectNew
	return o.GetGeneration() != n.GetGeneration() || !o.GetDeletionTimestamp().Equal(n.GetDeletionTimestamp()) ||
		!maps.Equal(o.GetLabels(), n.GetLabels()) || !maps.Equal(o.GetAnnotations(), n.GetAnnotations())
}}

// DeletionStarted passes an update that set (or cleared) a deletion
// timestamp.
var DeletionStarted = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	return e.ObjectOld.GetDeletionTimestamp().IsZero() != e.ObjectNew.GetDeletionTimestamp().IsZero()
}}

// PullSecrets are the pull Secrets a namespace's image policies name, each
// once, sorted.
func PullSecrets(ctx context.Context, c client.Reader, ns string) ([]string, error) {
	policies := &openshellv1alpha1.OpenShellImagePolicyList{}
	if err := c.List(ctx, policies, client.InNamespace(ns)); err != nil {
		return nil, fmt.Errorf("list the image policies of %s: %w", ns, err)
	}
	var names []string
	for _, p := range policies.Items {
		for _, ref := range p.Spec.PullSecrets {
			names = append(names, ref.Name)
		}
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}
