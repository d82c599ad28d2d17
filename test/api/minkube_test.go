package api

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel/model"
	"k8s.io/apimachinery/pkg/util/version"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/cel/environment"
	"sigs.k8s.io/yaml"

	"github.com/openshell/openshell-operator/internal/preflight"
	"github.com/openshell/openshell-operator/test/framework"
)

// minKubeVersion is spec.minKubeVersion of the CSV base the bundle is
// generated from.
func minKubeVersion(t *testing.T) *version.Version {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(framework.RepoRoot(), "config", "manifests", "bases", "openshell-operator.clusterserviceversion.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var csv operatorsv1alpha1.ClusterServiceVersion
	if err := yaml.Unmarshal(b, &csv); err != nil {
		t.Fatal(err)
	}
	v, err := version.ParseSemantic(csv.Spec.MinKubeVersion)
	if err != nil {
		t.Fatalf("CSV minKubeVersion %q: %v", csv.Spec.MinKubeVersion, err)
	}
	// The operator's own preflight refuses older clusters with the same floor.
	if csv.Spec.MinKubeVersion != preflight.MinKubernetesVersion {
		t.Fatalf("CSV minKubeVersion %s differs from preflight.MinKubernetesVersion %s", csv.Spec.MinKubeVersion, preflight.MinKubernetesVersion)
	}
	return v
}

// TestMinKubeVersionIsWhatTheCRDsNeed compiles every CEL rule of our CRDs
// the way a kube-apiserver of a given minor compiles a new CRD: with the CEL
// libraries of its compatibility version, one minor below its own (libraries
// reach new expressions one release after they ship, for rollback safety).
// The rules must compile for minKubeVersion and must not for the minor
// before it, so the CSV claims neither too little nor too much.
func TestMinKubeVersionIsWhatTheCRDsNeed(t *testing.T) {
	minKube := minKubeVersion(t)
	if errs := compileCRDRules(t, minKube); len(errs) > 0 {
		t.Errorf("CEL rules do not compile on Kubernetes %d.%d (the CSV's minKubeVersion):\n%s",
			minKube.Major(), minKube.Minor(), strings.Join(errs, "\n"))
	}
	older := version.MajorMinor(minKube.Major(), minKube.Minor()-1)
	errs := compileCRDRules(t, older)
	if len(errs) == 0 {
		t.Errorf("every CEL rule compiles on Kubernetes %s too: lower minKubeVersion (and com.redhat.openshift.versions) to what the CRDs need", older)
	}
	t.Logf("on Kubernetes %s the CRDs fail with:\n%s", older, strings.Join(errs, "\n"))
}

// compileCRDRules returns one line per rule of config/crd/bases that a
// kube-apiserver of minor kube refuses.
func compileCRDRules(t *testing.T, kube *version.Version) []string {
	t.Helper()
	envSet := environment.MustBaseEnvSet(version.MajorMinor(kube.Major(), kube.Minor()-1))
	files, err := filepath.Glob(filepath.Join(framework.OwnCRDDir(), "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRDs: %v", err)
	}
	var errs []string
	for _, f := range files {
		crd, err := framework.LoadCRD(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range crd.Spec.Versions {
			internal := &apiextensions.JSONSchemaProps{}
			if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(v.Schema.OpenAPIV3Schema, internal, nil); err != nil {
				t.Fatal(err)
			}
			s, err := schema.NewStructural(internal)
			if err != nil {
				t.Fatalf("%s %s: not structural: %v", crd.Name, v.Name, err)
			}
			errs = append(errs, compileAt(s, true, fmt.Sprintf("%s/%s", crd.Name, v.Name), envSet)...)
		}
	}
	sort.Strings(errs)
	return errs
}

func compileAt(s *schema.Structural, root bool, path string, envSet *environment.EnvSet) []string {
	var errs []string
	if len(s.XValidations) > 0 {
		results, err := cel.Compile(s, model.SchemaDeclType(s, root), celconfig.PerCallLimit, envSet, cel.NewExpressionsEnvLoader())
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", path, err))
		}
		for _, r := range results {
			if r.Error != nil {
				errs = append(errs, fmt.Sprintf("%s: %v", path, r.Error))
			}
		}
	}
	for name, p := range s.Properties {
		errs = append(errs, compileAt(&p, false, path+"."+name, envSet)...)
	}
	if s.Items != nil {
		errs = append(errs, compileAt(s.Items, false, path+"[]", envSet)...)
	}
	if s.AdditionalProperties != nil && s.AdditionalProperties.Structural != nil {
		errs = append(errs, compileAt(s.AdditionalProperties.Structural, false, path+"{}", envSet)...)
	}
	return errs
}

// TestCRDsOnTheOldestClaimedKubernetes installs the CRDs on a kube-apiserver
// emulating minKubeVersion (KEP-4330 compatibility versions: the CEL
// environment, APIs and feature gates of that release; built from the same
// source as the other tests' — older k8s.io/kubernetes modules are not
// served here) and runs every CEL case of testdata against it.
func TestCRDsOnTheOldestClaimedKubernetes(t *testing.T) {
	minKube := minKubeVersion(t)
	old, err := framework.StartEnv(framework.EnvOptions{APIServerFlags: map[string]string{
		"emulated-version": fmt.Sprintf("kube=%d.%d", minKube.Major(), minKube.Minor()),
	}})
	if err != nil {
		t.Fatalf("CRDs on Kubernetes %d.%d: %v", minKube.Major(), minKube.Minor(), err)
	}
	t.Cleanup(func() { _ = old.Stop() })
	runSuites(t, old.Client)
}
