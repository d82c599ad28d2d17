// Package bundle turns config/manifests (the CSV base, the operator as OLM
// installs it, the samples and the scorecard configuration) into an OLM
// registry+v1 bundle, as `operator-sdk generate bundle` would: the CSV with
// its install strategy, permissions, webhook definitions, alm-examples and
// digest-pinned related images, the CRDs and the other allowed objects,
// metadata/annotations.yaml, the scorecard configuration and
// bundle.Dockerfile. The operator-sdk CLI cannot be installed here; this
// builds on the same libraries (kustomize, operator-framework/api).
package bundle

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// Options describe the bundle to generate.
type Options struct {
	// ManifestsDir is the kustomization to build (config/manifests).
	ManifestsDir string
	// OutputDir receives manifests/, metadata/ and tests/ (bundle/).
	OutputDir string
	// Dockerfile is the bundle.Dockerfile path.
	Dockerfile string
	Package    string
	Version    string
	// Channels and DefaultChannel of the bundle.
	Channels       []string
	DefaultChannel string
	// SkipRange is the olm.skipRange annotation; Replaces the previous CSV.
	SkipRange string
	Replaces  string
	// Images pins the operator image and the RELATED_IMAGE_* values.
	Images Images
	// OpenShiftVersions is com.redhat.openshift.versions, e.g. v4.18-v4.21.
	OpenShiftVersions string
}

// Images are the digest-pinned images of the bundle.
type Images struct {
	// Operator is the operator image.
	Operator string `json:"operator"`
	// Related maps RELATED_IMAGE_* names to images.
	Related map[string]string `json:"related"`
}

// Annotation keys of metadata/annotations.yaml.
const (
	AnnotationMediaType      = "operators.operatorframework.io.bundle.mediatype.v1"
	AnnotationManifests      = "operators.operatorframework.io.bundle.manifests.v1"
	AnnotationMetadata       = "operators.operatorframework.io.bundle.metadata.v1"
	AnnotationPackage        = "operators.operatorframework.io.bundle.package.v1"
	AnnotationChannels       = "operators.operatorframework.io.bundle.channels.v1"
	AnnotationDefaultChannel = "operators.operatorframework.io.bundle.channel.default.v1"
	AnnotationTestMediaType  = "operators.operatorframework.io.test.mediatype.v1"
	AnnotationTestConfig     = "operators.operatorframework.io.test.config.v1"
	AnnotationOpenShift      = "com.redhat.openshift.versions"
	// AnnotationInitializationResource is the object the console offers to
	// create once the operator is installed.
	AnnotationInitializationResource = "operatorframework.io/initialization-resource"
	// AnnotationMustGatherImage is what `oc adm must-gather` runs for this
	// operator.
	AnnotationMustGatherImage = "operators.openshift.io/must-gather-image"
)

const relatedPrefix = "RELATED_IMAGE_"

// DefaultOpenShiftVersions are the OpenShift releases the bundle targets:
// from the first whose Kubernetes meets the CSV's minKubeVersion (4.18 ships
// 1.31, which the Policy CRD's isCIDR/isIP rules need) to the newest tested.
const DefaultOpenShiftVersions = "v4.18-v4.21"

// objects collected from the kustomize build.
type collected struct {
	csv          *operatorsv1alpha1.ClusterServiceVersion
	crds         []*apiextensionsv1.CustomResourceDefinition
	deployments  []*appsv1.Deployment
	roles        map[string]*rbacv1.Role
	clusterRoles map[string]*rbacv1.ClusterRole
	bindings     []*rbacv1.RoleBinding
	cbindings    []*rbacv1.ClusterRoleBinding
	webhooks     []*admissionregistrationv1.ValidatingWebhookConfiguration
	mutating     []*admissionregistrationv1.MutatingWebhookConfiguration
	samples      []map[string]any
	scorecard    *unstructured.Unstructured
	extra        []*unstructured.Unstructured
}

// Generate writes the bundle.
func Generate(o Options) error {
	docs, err := build(o.ManifestsDir)
	if err != nil {
		return err
	}
	col, err := collect(docs)
	if err != nil {
		return err
	}
	csv, err := assembleCSV(col, o)
	if err != nil {
		return err
	}
	if err := os.RemoveAll(filepath.Join(o.OutputDir, "manifests")); err != nil {
		return err
	}
	files := map[string]any{
		filepath.Join("manifests", o.Package+".clusterserviceversion.yaml"): csv,
	}
	for _, crd := range col.crds {
		files[filepath.Join("manifests", crd.Spec.Group+"_"+crd.Spec.Names.Plural+".yaml")] = crd
	}
	// Roles bound to the Deployments' ServiceAccounts become CSV
	// permissions; other bindings (Prometheus reading the metrics and
	// discovering its targets) ship as they are, with the Roles they name.
	accounts := map[string]bool{}
	for _, d := range csv.Spec.InstallStrategy.StrategySpec.DeploymentSpecs {
		accounts[d.Spec.Template.Spec.ServiceAccountName] = true
	}
	bound := map[string]bool{}
	for _, b := range col.cbindings {
		if _, ok := boundAccount(b.Subjects, accounts); ok {
			bound["ClusterRole/"+b.RoleRef.Name] = true
			continue
		}
		files[filepath.Join("manifests", b.Name+"_rbac.authorization.k8s.io_v1_clusterrolebinding.yaml")] = b
	}
	shipped := map[string]bool{}
	for _, b := range col.bindings {
		bound[b.RoleRef.Kind+"/"+b.RoleRef.Name] = true
		if _, ok := boundAccount(b.Subjects, accounts); ok {
			continue
		}
		if b.RoleRef.Kind != "Role" {
			return fmt.Errorf("RoleBinding %s binds ClusterRole %s to no Deployment's ServiceAccount: bind a Role of the bundle", b.Name, b.RoleRef.Name)
		}
		// OLM creates namespaced bundle objects in the operator's namespace.
		b.Namespace = ""
		files[filepath.Join("manifests", b.Name+"_rbac.authorization.k8s.io_v1_rolebinding.yaml")] = b
		shipped[b.RoleRef.Name] = true
	}
	for name := range shipped {
		r, ok := col.roles[name]
		if !ok {
			return fmt.Errorf("a RoleBinding refers to unknown Role %s", name)
		}
		r.Namespace = ""
		files[filepath.Join("manifests", name+"_rbac.authorization.k8s.io_v1_role.yaml")] = r
	}
	for name, r := range col.clusterRoles {
		if !bound["ClusterRole/"+name] {
			files[filepath.Join("manifests", name+"_rbac.authorization.k8s.io_v1_clusterrole.yaml")] = r
		}
	}
	for _, u := range col.extra {
		gvk := u.GroupVersionKind()
		group := gvk.Group
		if group != "" {
			group += "_"
		}
		files[filepath.Join("manifests", fmt.Sprintf("%s_%s%s_%s.yaml", u.GetName(), group, gvk.Version, strings.ToLower(gvk.Kind)))] = u.Object
	}
	if col.scorecard == nil {
		return fmt.Errorf("no scorecard Configuration in %s", o.ManifestsDir)
	}
	files[filepath.Join("tests", "scorecard", "config.yaml")] = col.scorecard.Object
	annotations := Annotations(o)
	files[filepath.Join("metadata", "annotations.yaml")] = map[string]any{"annotations": annotations}
	for rel, obj := range files {
		if err := writeYAML(filepath.Join(o.OutputDir, rel), obj); err != nil {
			return err
		}
	}
	return os.WriteFile(o.Dockerfile, []byte(Dockerfile(annotations, filepath.Base(o.OutputDir))), 0o644)
}

// Annotations are the bundle annotations (also Dockerfile labels).
func Annotations(o Options) map[string]string {
	a := map[string]string{
		AnnotationMediaType:      "registry+v1",
		AnnotationManifests:      "manifests/",
		AnnotationMetadata:       "metadata/",
		AnnotationPackage:        o.Package,
		AnnotationChannels:       strings.Join(o.Channels, ","),
		AnnotationDefaultChannel: o.DefaultChannel,
		AnnotationTestMediaType:  "scorecard+v1",
		AnnotationTestConfig:     "tests/scorecard/",
	}
	if o.OpenShiftVersions != "" {
		a[AnnotationOpenShift] = o.OpenShiftVersions
	}
	return a
}

// Dockerfile is bundle.Dockerfile: FROM scratch, a LABEL per annotation,
// and the three folders.
func Dockerfile(annotations map[string]string, dir string) string {
	keys := make([]string, 0, len(annotations))
	for k := range annotations {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString("# Generated by `make bundle`. Do not edit.\nFROM scratch\n\n")
	for _, k := range keys {
		fmt.Fprintf(&b, "LABEL %s=%s\n", k, annotations[k])
	}
	fmt.Fprintf(&b, "\nCOPY %s/manifests /manifests/\nCOPY %s/metadata /metadata/\nCOPY %s/tests/scorecard /tests/scorecard/\n", dir, dir, dir)
	return b.String()
}

func build(dir string) ([]*unstructured.Unstructured, error) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	rm, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	var out []*unstructured.Unstructured
	for _, r := range rm.Resources() {
		m, err := r.Map()
		if err != nil {
			return nil, err
		}
		out = append(out, &unstructured.Unstructured{Object: m})
	}
	return out, nil
}

func convert(u *unstructured.Unstructured, into any) error {
	return runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, into)
}

func collect(docs []*unstructured.Unstructured) (*collected, error) {
	c := &collected{roles: map[string]*rbacv1.Role{}, clusterRoles: map[string]*rbacv1.ClusterRole{}}
	for _, u := range docs {
		gvk := u.GroupVersionKind()
		var err error
		switch {
		case gvk.Kind == "ClusterServiceVersion":
			c.csv = &operatorsv1alpha1.ClusterServiceVersion{}
			err = convert(u, c.csv)
		case gvk.Kind == "CustomResourceDefinition":
			crd := &apiextensionsv1.CustomResourceDefinition{}
			err = convert(u, crd)
			c.crds = append(c.crds, crd)
		case gvk.Kind == "Deployment":
			d := &appsv1.Deployment{}
			err = convert(u, d)
			c.deployments = append(c.deployments, d)
		case gvk.Kind == "Role":
			r := &rbacv1.Role{}
			err = convert(u, r)
			c.roles[r.Name] = r
		case gvk.Kind == "ClusterRole":
			r := &rbacv1.ClusterRole{}
			err = convert(u, r)
			c.clusterRoles[r.Name] = r
		case gvk.Kind == "RoleBinding":
			b := &rbacv1.RoleBinding{}
			err = convert(u, b)
			c.bindings = append(c.bindings, b)
		case gvk.Kind == "ClusterRoleBinding":
			b := &rbacv1.ClusterRoleBinding{}
			err = convert(u, b)
			c.cbindings = append(c.cbindings, b)
		case gvk.Kind == "ValidatingWebhookConfiguration":
			w := &admissionregistrationv1.ValidatingWebhookConfiguration{}
			err = convert(u, w)
			c.webhooks = append(c.webhooks, w)
		case gvk.Kind == "MutatingWebhookConfiguration":
			w := &admissionregistrationv1.MutatingWebhookConfiguration{}
			err = convert(u, w)
			c.mutating = append(c.mutating, w)
		case gvk.Group == "openshell.ai":
			c.samples = append(c.samples, u.Object)
		case gvk.Group == "scorecard.operatorframework.io":
			c.scorecard = u
		case gvk.Kind == "Namespace", gvk.Kind == "ServiceAccount":
			// OLM creates the namespace and the deployment's ServiceAccounts.
		case allowedExtra[gvk.Kind]:
			u.SetNamespace("")
			c.extra = append(c.extra, u)
		default:
			return nil, fmt.Errorf("%s %s cannot be shipped in a bundle", gvk.Kind, u.GetName())
		}
		if err != nil {
			return nil, fmt.Errorf("decode %s %s: %w", gvk.Kind, u.GetName(), err)
		}
	}
	if c.csv == nil {
		return nil, fmt.Errorf("no ClusterServiceVersion base")
	}
	if len(c.deployments) == 0 {
		return nil, fmt.Errorf("no operator Deployment")
	}
	return c, nil
}

// allowedExtra are the other kinds a registry+v1 bundle may carry.
var allowedExtra = map[string]bool{
	"Service": true, "ConfigMap": true, "Secret": true, "PodDisruptionBudget": true, "PriorityClass": true,
	"PrometheusRule": true, "ServiceMonitor": true, "VerticalPodAutoscaler": true, "NetworkPolicy": true,
	"ConsoleYAMLSample": true, "ConsoleQuickStart": true, "ConsoleCLIDownload": true, "ConsoleLink": true, "ConsolePlugin": true,
}

func writeYAML(path string, obj any) error {
	b, err := yaml.Marshal(obj)
	if err != nil {
		return fmt.Errorf("encode %s: %w", path, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// almExamples renders the samples as the alm-examples JSON, sorted by kind.
func almExamples(samples []map[string]any) (string, error) {
	sort.Slice(samples, func(i, j int) bool {
		return fmt.Sprint(samples[i]["kind"]) < fmt.Sprint(samples[j]["kind"])
	})
	b, err := json.MarshalIndent(samples, "", "  ")
	return string(b), err
}
