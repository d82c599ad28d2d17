package framework

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// LoadCRD reads one CRD manifest.
func LoadCRD(path string) (*apiextensionsv1.CustomResourceDefinition, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read CRD: %w", err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(b, crd); err != nil {
		return nil, fmt.Errorf("decode CRD %s: %w", path, err)
	}
	return crd, nil
}

// AgentSandboxCRD loads the sandboxes.agents.x-k8s.io CRD of a release.
func AgentSandboxCRD(version string) (*apiextensionsv1.CustomResourceDefinition, error) {
	return LoadCRD(filepath.Join(AgentSandboxCRDDir(version), "agents.x-k8s.io_sandboxes.yaml"))
}

// InstallCRD creates the CRD, or replaces the spec of an existing one the
// way an upgrade of its release manifest would. Versions that the new spec
// no longer lists are first dropped from status.storedVersions, as a
// storage version migration would have done.
func InstallCRD(ctx context.Context, c client.Client, crd *apiextensionsv1.CustomResourceDefinition) error {
	cur := &apiextensionsv1.CustomResourceDefinition{}
	err := c.Get(ctx, client.ObjectKeyFromObject(crd), cur)
	if apierrors.IsNotFound(err) {
		return c.Create(ctx, crd.DeepCopy())
	}
	if err != nil {
		return err
	}
	listed := map[string]bool{}
	for _, v := range crd.Spec.Versions {
		listed[v.Name] = true
	}
	var stored []string
	for _, v := range cur.Status.StoredVersions {
		if listed[v] {
			stored = append(stored, v)
		}
	}
	if len(stored) != len(cur.Status.StoredVersions) {
		if len(stored) == 0 {
			for _, v := range crd.Spec.Versions {
				if v.Storage {
					stored = append(stored, v.Name)
				}
			}
		}
		cur.Status.StoredVersions = stored
		if err := c.Status().Update(ctx, cur); err != nil {
			return fmt.Errorf("drop stored versions of %s: %w", crd.Name, err)
		}
	}
	cur.Spec = crd.Spec
	return c.Update(ctx, cur)
}

// WaitCRDReady waits until the API server lists the CRD's storage version
// from its watch cache (resourceVersion "0"). Deleting a CRD whose storage is
// still initializing can leave it stuck Terminating with
// InstanceDeletionFailed, so tests that remove CRDs wait for this first.
func WaitCRDReady(ctx context.Context, c client.Client, crd *apiextensionsv1.CustomResourceDefinition) error {
	var version string
	for _, v := range crd.Spec.Versions {
		if v.Storage {
			version = v.Name
		}
	}
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(schema.GroupVersionKind{Group: crd.Spec.Group, Version: version, Kind: crd.Spec.Names.ListKind})
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return WaitFor(wctx, 50*time.Millisecond, func(ctx context.Context) (bool, error) {
		err := c.List(ctx, list, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: "0"}})
		return err == nil, err
	})
}
