package bundle

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/blang/semver/v4"
	"github.com/operator-framework/api/pkg/manifests"
	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	"github.com/operator-framework/api/pkg/validation"
	"sigs.k8s.io/yaml"

	"github.com/openshell/openshell-operator/hack/release/images"
)

// Report is the result of validating a bundle.
type Report struct {
	Errors, Warnings []string
}

// accepted is the one warning the bundle keeps on purpose: OperatorHub asks
// for an alm-example of every provided API, the relay's APIService
// included, but its kind (SandboxToken, what a token exchange returns) is
// no object anyone creates, and scorecard's olm-*-descriptors tests fail on
// an example that is not a custom resource of an owned CRD.
func accepted(warning string) bool {
	return strings.Contains(warning, "Kind=SandboxToken: provided API should have an example annotation")
}

// OK reports whether there are neither errors nor warnings.
func (r Report) OK() bool { return len(r.Errors) == 0 && len(r.Warnings) == 0 }

// Validate runs the operator-framework validators (default bundle
// validators, OperatorHub v2, capabilities, categories, good practices,
// deprecated APIs for k8sVersion) and our own checks: every image pinned by
// digest, RELATED_IMAGE_* equal to relatedImages, every owned CRD shipped,
// alm-examples only of owned kinds, only kinds OLM accepts.
func Validate(dir, k8sVersion string) (Report, error) {
	b, err := manifests.GetBundleFromDir(dir)
	if err != nil {
		return Report{}, fmt.Errorf("load bundle %s: %w", dir, err)
	}
	objs := b.ObjectsToValidate()
	objs = append(objs, map[string]string{"k8s-version": k8sVersion})
	results := validation.DefaultBundleValidators.WithValidators(
		validation.OperatorHubV2Validator, validation.StandardCapabilitiesValidator, validation.StandardCategoriesValidator,
		validation.GoodPracticesValidator, validation.AlphaDeprecatedAPIsValidator,
	).Validate(objs...)
	var r Report
	for _, res := range results {
		for _, e := range res.Errors {
			r.Errors = append(r.Errors, fmt.Sprintf("%s: %s", res.Name, e.Error()))
		}
		for _, w := range res.Warnings {
			if accepted(w.Error()) {
				continue
			}
			r.Warnings = append(r.Warnings, fmt.Sprintf("%s: %s", res.Name, w.Error()))
		}
	}
	csv := b.CSV
	if csv == nil {
		r.Errors = append(r.Errors, "bundle has no ClusterServiceVersion")
		return r, nil
	}
	pinned := func(where, img string) {
		if !images.Pinned(img) {
			r.Errors = append(r.Errors, fmt.Sprintf("%s: image %s is not pinned by digest", where, img))
		}
	}
	related := map[string]bool{}
	for _, ri := range csv.Spec.RelatedImages {
		pinned("spec.relatedImages["+ri.Name+"]", ri.Image)
		related[ri.Image] = true
	}
	pinned("metadata.annotations.containerImage", csv.Annotations["containerImage"])
	if mg := csv.Annotations[AnnotationMustGatherImage]; mg != csv.Annotations["containerImage"] {
		r.Errors = append(r.Errors, fmt.Sprintf("%s is %q, not the operator image %q (its /usr/bin/gather)", AnnotationMustGatherImage, mg, csv.Annotations["containerImage"]))
	}
	envImages := map[string]bool{}
	for _, d := range csv.Spec.InstallStrategy.StrategySpec.DeploymentSpecs {
		for _, c := range append(d.Spec.Template.Spec.InitContainers, d.Spec.Template.Spec.Containers...) {
			pinned("deployment "+d.Name+" container "+c.Name, c.Image)
			if !related[c.Image] {
				r.Errors = append(r.Errors, fmt.Sprintf("deployment %s container %s image %s is missing from spec.relatedImages", d.Name, c.Name, c.Image))
			}
			for _, e := range c.Env {
				if strings.HasPrefix(e.Name, relatedPrefix) {
					pinned("env "+e.Name, e.Value)
					envImages[e.Value] = true
				}
			}
		}
	}
	for img := range related {
		if !envImages[img] && img != csv.Annotations["containerImage"] {
			r.Errors = append(r.Errors, fmt.Sprintf("relatedImages entry %s has no RELATED_IMAGE_* env var", img))
		}
	}
	for img := range envImages {
		if !related[img] {
			r.Errors = append(r.Errors, fmt.Sprintf("RELATED_IMAGE_* value %s is missing from spec.relatedImages", img))
		}
	}
	shipped := map[string]bool{}
	for _, crd := range b.V1CRDs {
		shipped[crd.Name] = true
	}
	owned := map[string]bool{}
	for _, d := range csv.Spec.CustomResourceDefinitions.Owned {
		owned[d.Kind] = true
		if !shipped[d.Name] {
			r.Errors = append(r.Errors, fmt.Sprintf("owned CRD %s is not in the bundle", d.Name))
		}
	}
	for _, d := range csv.Spec.APIServiceDefinitions.Owned {
		owned[d.Kind] = true
		if !deployed(csv, d.DeploymentName) {
			r.Errors = append(r.Errors, fmt.Sprintf("owned APIService %s.%s names Deployment %s, which the install strategy does not have", d.Version, d.Group, d.DeploymentName))
		}
	}
	var examples []map[string]any
	if err := json.Unmarshal([]byte(csv.Annotations["alm-examples"]), &examples); err != nil {
		r.Errors = append(r.Errors, "alm-examples is not a JSON list: "+err.Error())
	}
	for _, ex := range examples {
		if k, _ := ex["kind"].(string); !owned[k] {
			r.Errors = append(r.Errors, fmt.Sprintf("alm-examples has kind %v, which the CSV does not own", ex["kind"]))
		}
	}
	r.Errors = append(r.Errors, checkDescriptors(csv, b.V1CRDs)...)
	if msg := checkOpenShiftVersions(dir, csv.Spec.MinKubeVersion); msg != "" {
		r.Errors = append(r.Errors, msg)
	}
	entries, _ := os.ReadDir(filepath.Join(dir, "manifests"))
	for _, e := range entries {
		raw, err := os.ReadFile(filepath.Join(dir, "manifests", e.Name()))
		if err != nil {
			return r, err
		}
		var meta struct {
			Kind string `json:"kind"`
		}
		if err := yaml.Unmarshal(raw, &meta); err != nil {
			r.Errors = append(r.Errors, fmt.Sprintf("%s: %v", e.Name(), err))
			continue
		}
		if meta.Kind != "ClusterServiceVersion" && meta.Kind != "CustomResourceDefinition" && !allowedExtra[meta.Kind] &&
			!slices.Contains([]string{"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ServiceAccount"}, meta.Kind) {
			r.Errors = append(r.Errors, fmt.Sprintf("%s: kind %s is not supported in a bundle", e.Name(), meta.Kind))
		}
	}
	sort.Strings(r.Errors)
	sort.Strings(r.Warnings)
	return r, nil
}

// checkOpenShiftVersions returns an error message when the oldest OpenShift
// release of com.redhat.openshift.versions runs a Kubernetes older than the
// CSV's minKubeVersion: OLM on that release would refuse the bundle that the
// catalog offers it.
func checkOpenShiftVersions(dir, minKube string) string {
	raw, err := os.ReadFile(filepath.Join(dir, "metadata", "annotations.yaml"))
	if err != nil {
		return "bundle metadata: " + err.Error()
	}
	var meta struct {
		Annotations map[string]string `json:"annotations"`
	}
	if err := yaml.Unmarshal(raw, &meta); err != nil {
		return "bundle metadata: " + err.Error()
	}
	ocp := meta.Annotations[AnnotationOpenShift]
	if ocp == "" {
		return ""
	}
	oldest := strings.TrimPrefix(strings.SplitN(ocp, "-", 2)[0], "=")
	kube, ok := OpenShiftKubernetes(oldest)
	if !ok {
		return fmt.Sprintf("%s %q: unknown OpenShift release %s", AnnotationOpenShift, ocp, oldest)
	}
	want, err := semver.ParseTolerant(minKube)
	if err != nil {
		return fmt.Sprintf("minKubeVersion %q: %v", minKube, err)
	}
	if kube.LT(want) {
		return fmt.Sprintf("%s starts at %s (Kubernetes %s), older than minKubeVersion %s: OLM there would refuse the bundle",
			AnnotationOpenShift, oldest, kube, minKube)
	}
	return ""
}

// OpenShiftKubernetes maps an OpenShift release ("v4.18") to the Kubernetes
// it ships (4.N ships 1.(N+13) since 4.11).
func OpenShiftKubernetes(release string) (semver.Version, bool) {
	var major, minor uint64
	if _, err := fmt.Sscanf(strings.TrimPrefix(release, "v"), "%d.%d", &major, &minor); err != nil || major != 4 || minor < 11 {
		return semver.Version{}, false
	}
	return semver.Version{Major: 1, Minor: minor + 13}, true
}

// deployed says whether the CSV's install strategy has the Deployment.
func deployed(csv *operatorsv1alpha1.ClusterServiceVersion, name string) bool {
	for _, d := range csv.Spec.InstallStrategy.StrategySpec.DeploymentSpecs {
		if d.Name == name {
			return true
		}
	}
	return false
}
