package bundle_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"github.com/openshell/openshell-operator/hack/release/bundle"
	"github.com/openshell/openshell-operator/test/framework"
)

func generate(t *testing.T, edit ...func(*bundle.Images)) string {
	t.Helper()
	root := framework.RepoRoot()
	raw, err := os.ReadFile(filepath.Join(root, "config", "manifests", "images.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var imgs bundle.Images
	if err := yaml.UnmarshalStrict(raw, &imgs); err != nil {
		t.Fatal(err)
	}
	for _, e := range edit {
		e(&imgs)
	}
	out := t.TempDir()
	if err := bundle.Generate(bundle.Options{ManifestsDir: filepath.Join(root, "config", "manifests"), OutputDir: filepath.Join(out, "bundle"),
		Dockerfile: filepath.Join(out, "bundle.Dockerfile"), Package: "openshell-operator", Version: "0.1.0",
		Channels: []string{"candidate-v0"}, DefaultChannel: "candidate-v0", SkipRange: ">=0.0.0 <0.1.0",
		Images: imgs, OpenShiftVersions: bundle.DefaultOpenShiftVersions}); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestCommittedBundleIsCurrent regenerates the bundle and compares it with
// the committed one (make verify does the same through git).
func TestCommittedBundleIsCurrent(t *testing.T) {
	out := generate(t)
	root := framework.RepoRoot()
	err := filepath.WalkDir(filepath.Join(out, "bundle"), func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(out, p)
		want, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Errorf("%s is generated but not committed: run make bundle", rel)
			return nil
		}
		got, _ := os.ReadFile(p)
		if string(got) != string(want) {
			t.Errorf("%s differs from the committed file: run make bundle", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestOperatorFrameworkValidators: the default bundle validators plus
// OperatorHub v2, capabilities, categories, good practices and deprecated
// APIs report nothing, and our own consistency checks pass. Digest pinning
// is left to make bundle-validate until the operand images are pinned
// (it needs registry access; see docs/releasing.md).
func TestOperatorFrameworkValidators(t *testing.T) {
	out := generate(t)
	r, err := bundle.Validate(filepath.Join(out, "bundle"), "1.34")
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range r.Warnings {
		t.Errorf("warning: %s", w)
	}
	for _, e := range r.Errors {
		if !strings.Contains(e, "is not pinned by digest") {
			t.Errorf("error: %s", e)
		}
	}
}

// TestOpenShiftVersionsMeetMinKubeVersion: a bundle whose oldest OpenShift
// release ships a Kubernetes below the CSV's minKubeVersion is an error (OLM
// there would refuse what the catalog offers).
func TestOpenShiftVersionsMeetMinKubeVersion(t *testing.T) {
	out := generate(t)
	meta := filepath.Join(out, "bundle", "metadata", "annotations.yaml")
	raw, err := os.ReadFile(meta)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), bundle.DefaultOpenShiftVersions) {
		t.Fatalf("annotations do not carry %s:\n%s", bundle.DefaultOpenShiftVersions, raw)
	}
	if err := os.WriteFile(meta, []byte(strings.ReplaceAll(string(raw), bundle.DefaultOpenShiftVersions, "v4.16-v4.21")), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := bundle.Validate(filepath.Join(out, "bundle"), "1.34")
	if err != nil {
		t.Fatal(err)
	}
	want := "starts at v4.16 (Kubernetes 1.29.0), older than minKubeVersion"
	for _, e := range r.Errors {
		if strings.Contains(e, want) {
			return
		}
	}
	t.Fatalf("no error containing %q in %v", want, r.Errors)
}

// TestPinnedBundle: once the operand images are pinned (make pin-images
// rewrites them to repository@digest), the same validators and our digest
// checks report nothing at all, and only then does the CSV claim the
// disconnected feature. The digests here are stand-ins in a temporary
// bundle; committed digests come from make pin-images and make images.
func TestPinnedBundle(t *testing.T) {
	csvOf := func(dir string) *operatorsv1alpha1.ClusterServiceVersion {
		t.Helper()
		raw, err := os.ReadFile(filepath.Join(dir, "bundle", "manifests", "openshell-operator.clusterserviceversion.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		csv := &operatorsv1alpha1.ClusterServiceVersion{}
		if err := yaml.Unmarshal(raw, csv); err != nil {
			t.Fatal(err)
		}
		return csv
	}

	committed := csvOf(generate(t))
	anyTag := false
	for _, ri := range committed.Spec.RelatedImages {
		anyTag = anyTag || !strings.Contains(ri.Image, "@sha256:")
	}
	if got := committed.Annotations[bundle.FeatureDisconnected]; got != map[bool]string{true: "false", false: "true"}[anyTag] {
		t.Errorf("committed images (some tags: %v): disconnected=%q", anyTag, got)
	}

	out := generate(t, func(imgs *bundle.Images) {
		for k, v := range imgs.Related {
			if !strings.Contains(v, "@sha256:") {
				repo := v[:strings.LastIndex(v, ":")]
				imgs.Related[k] = repo + "@sha256:" + strings.Repeat("0", 63) + string(rune('a'+len(k)%6))
			}
		}
	})
	r, err := bundle.Validate(filepath.Join(out, "bundle"), "1.34")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range append(r.Errors, r.Warnings...) {
		t.Errorf("pinned bundle: %s", e)
	}
	csv := csvOf(out)
	if got := csv.Annotations[bundle.FeatureDisconnected]; got != "true" {
		t.Errorf("pinned bundle: disconnected=%q, want true", got)
	}
	for _, ri := range csv.Spec.RelatedImages {
		if !strings.Contains(ri.Image, "@sha256:") {
			t.Errorf("pinned bundle: related image %s is not pinned", ri.Image)
		}
	}
}

// TestTrustedCABundle: on OpenShift the operator's outbound TLS trusts the
// cluster's CA bundle (proxy CA, additionalTrustBundle): the bundle ships a
// ConfigMap the Cluster Network Operator fills, and the Deployment mounts
// it where Go looks for system roots.
func TestTrustedCABundle(t *testing.T) {
	out := generate(t)
	dir := filepath.Join(out, "bundle", "manifests")
	raw, err := os.ReadFile(filepath.Join(dir, "openshell-operator-trusted-ca_v1_configmap.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{}
	if err := yaml.Unmarshal(raw, cm); err != nil {
		t.Fatal(err)
	}
	if cm.Labels["config.openshift.io/inject-trusted-cabundle"] != "true" {
		t.Fatalf("ConfigMap %s lacks the inject-trusted-cabundle label: %v", cm.Name, cm.Labels)
	}
	raw, err = os.ReadFile(filepath.Join(dir, "openshell-operator.clusterserviceversion.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	csv := &operatorsv1alpha1.ClusterServiceVersion{}
	if err := yaml.Unmarshal(raw, csv); err != nil {
		t.Fatal(err)
	}
	pod := csv.Spec.InstallStrategy.StrategySpec.DeploymentSpecs[0].Spec.Template.Spec
	var volume string
	for _, v := range pod.Volumes {
		if v.ConfigMap != nil && v.ConfigMap.Name == cm.Name {
			volume = v.Name
			if len(v.ConfigMap.Items) != 1 || v.ConfigMap.Items[0].Key != "ca-bundle.crt" || v.ConfigMap.Items[0].Path != "tls-ca-bundle.pem" {
				t.Fatalf("volume %s items %+v: want ca-bundle.crt as tls-ca-bundle.pem", v.Name, v.ConfigMap.Items)
			}
		}
	}
	for _, m := range pod.Containers[0].VolumeMounts {
		if m.Name == volume && volume != "" && m.MountPath == "/etc/pki/ca-trust/extracted/pem" {
			return
		}
	}
	t.Fatalf("the manager does not mount ConfigMap %s at /etc/pki/ca-trust/extracted/pem (a path Go reads system roots from)", cm.Name)
}

// TestPrometheusDiscoveryShipsAsItIs: the Role and RoleBinding that let
// OpenShift's platform Prometheus discover the operator's targets are
// bound to no Deployment's ServiceAccount, so they ship as bundle objects
// (OLM creates them in the operator's namespace: no namespace of their
// own), and the operator's own permissions do not gain their reads.
func TestPrometheusDiscoveryShipsAsItIs(t *testing.T) {
	dir := filepath.Join(generate(t), "bundle", "manifests")
	role := &rbacv1.Role{}
	binding := &rbacv1.RoleBinding{}
	for name, obj := range map[string]any{
		"openshell-operator-prometheus-k8s_rbac.authorization.k8s.io_v1_role.yaml":        role,
		"openshell-operator-prometheus-k8s_rbac.authorization.k8s.io_v1_rolebinding.yaml": binding,
	} {
		raw, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.UnmarshalStrict(raw, obj); err != nil {
			t.Fatal(err)
		}
	}
	if role.Namespace != "" || binding.Namespace != "" {
		t.Errorf("namespaces %q, %q: OLM places them", role.Namespace, binding.Namespace)
	}
	if binding.RoleRef.Kind != "Role" || binding.RoleRef.Name != role.Name {
		t.Errorf("the binding names %s %s, not the shipped Role %s", binding.RoleRef.Kind, binding.RoleRef.Name, role.Name)
	}
	if len(binding.Subjects) != 1 || binding.Subjects[0].Namespace != "openshift-monitoring" || binding.Subjects[0].Name != "prometheus-k8s" {
		t.Errorf("subjects %+v, want only openshift-monitoring/prometheus-k8s", binding.Subjects)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "openshell-operator.clusterserviceversion.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	csv := &operatorsv1alpha1.ClusterServiceVersion{}
	if err := yaml.Unmarshal(raw, csv); err != nil {
		t.Fatal(err)
	}
	for _, p := range csv.Spec.InstallStrategy.StrategySpec.Permissions {
		for _, r := range p.Rules {
			if slices.Contains(r.Resources, "endpoints") {
				t.Errorf("the operator's permissions gained the discovery rule %+v", r)
			}
		}
	}
}
