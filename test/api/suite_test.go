package api

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// suite is one testdata file: create and update cases for one kind.
type suite struct {
	OnCreate []testCase `json:"onCreate"`
	OnUpdate []testCase `json:"onUpdate"`
}

type testCase struct {
	Name string `json:"name"`
	// Initial is the object created first.
	Initial string `json:"initial"`
	// Updated, for update cases, replaces Initial's spec.
	Updated string `json:"updated"`
	// Expected, when set, must equal the stored spec (after defaulting).
	Expected string `json:"expected"`
	// ExpectedError, when set, must be a substring of the API error.
	ExpectedError string `json:"expectedError"`
}

func loadSuites(t *testing.T) map[string]suite {
	t.Helper()
	files, err := filepath.Glob("testdata/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no testdata: %v", err)
	}
	out := map[string]suite{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var s suite
		if err := yaml.UnmarshalStrict(b, &s); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out[strings.TrimSuffix(filepath.Base(f), ".yaml")] = s
	}
	return out
}

func decode(t *testing.T, doc string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
		t.Fatalf("decode test object: %v\n%s", err, doc)
	}
	return u
}

func TestAPIValidation(t *testing.T) {
	runSuites(t, env.Client)
}

// runSuites runs every testdata case against the API server behind c.
func runSuites(t *testing.T, c client.Client) {
	ctx := context.Background()
	for file, s := range loadSuites(t) {
		t.Run(file, func(t *testing.T) {
			ns := createNamespaceWith(ctx, t, c, file)
			for i, tc := range s.OnCreate {
				t.Run("create/"+tc.Name, func(t *testing.T) {
					obj := decode(t, tc.Initial)
					obj.SetNamespace(ns)
					if obj.GetName() == "" { // a case about names names its object
						obj.SetName(fmt.Sprintf("c%d", i))
					}
					err := c.Create(ctx, obj)
					check(ctx, t, c, obj, tc, err)
				})
			}
			for i, tc := range s.OnUpdate {
				t.Run("update/"+tc.Name, func(t *testing.T) {
					obj := decode(t, tc.Initial)
					obj.SetNamespace(ns)
					obj.SetName(fmt.Sprintf("u%d", i))
					if err := c.Create(ctx, obj); err != nil {
						t.Fatalf("create initial object: %v", err)
					}
					upd := decode(t, tc.Updated)
					obj.Object["spec"] = upd.Object["spec"]
					err := c.Update(ctx, obj)
					check(ctx, t, c, obj, tc, err)
				})
			}
		})
	}
}

func check(ctx context.Context, t *testing.T, c client.Client, obj *unstructured.Unstructured, tc testCase, err error) {
	t.Helper()
	if tc.ExpectedError != "" {
		if err == nil {
			t.Fatalf("expected an error containing %q, got none", tc.ExpectedError)
		}
		if !strings.Contains(err.Error(), tc.ExpectedError) {
			t.Fatalf("error %q does not contain %q", err.Error(), tc.ExpectedError)
		}
		return
	}
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	if tc.Expected == "" {
		return
	}
	got := &unstructured.Unstructured{}
	got.SetGroupVersionKind(obj.GroupVersionKind())
	if err := c.Get(ctx, client.ObjectKeyFromObject(obj), got); err != nil {
		t.Fatal(err)
	}
	want := decode(t, tc.Expected)
	if !reflect.DeepEqual(normalize(t, got.Object["spec"]), normalize(t, want.Object["spec"])) {
		gy, _ := yaml.Marshal(got.Object["spec"])
		wy, _ := yaml.Marshal(want.Object["spec"])
		t.Fatalf("stored spec differs\n--- got\n%s--- want\n%s", gy, wy)
	}
}

// normalize round-trips through JSON so that numbers compare alike whether
// they came from the API (int64) or from YAML (float64).
func normalize(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func createNamespace(ctx context.Context, t *testing.T, name string) string {
	t.Helper()
	return createNamespaceWith(ctx, t, env.Client, name)
}

func createNamespaceWith(ctx context.Context, t *testing.T, c client.Client, name string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "api-" + name + "-"}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), ns) })
	return ns.Name
}

// TestEveryCELRuleHasARejectingCase walks the installed CRDs' schemas and
// fails for any x-kubernetes-validations message that no test case expects,
// so a new rule cannot land untested.
func TestEveryCELRuleHasARejectingCase(t *testing.T) {
	ctx := context.Background()
	var expected []string
	for _, s := range loadSuites(t) {
		for _, tc := range append(s.OnCreate, s.OnUpdate...) {
			if tc.ExpectedError != "" {
				expected = append(expected, tc.ExpectedError)
			}
		}
	}
	crds := &apiextensionsv1.CustomResourceDefinitionList{}
	if err := env.Client.List(ctx, crds); err != nil {
		t.Fatal(err)
	}
	var missing []string
	found := 0
	for _, crd := range crds.Items {
		if crd.Spec.Group != "openshell.ai" {
			continue
		}
		for _, v := range crd.Spec.Versions {
			walkRules(v.Schema.OpenAPIV3Schema, func(msg string) {
				found++
				for _, e := range expected {
					if strings.Contains(msg, e) || strings.Contains(e, msg) {
						return
					}
				}
				missing = append(missing, crd.Spec.Names.Kind+": "+msg)
			})
		}
	}
	if found < 20 {
		t.Fatalf("found only %d CEL rules: is the schema walk broken?", found)
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Fatalf("CEL rules without a rejecting test case:\n  %s", strings.Join(missing, "\n  "))
	}
}

func walkRules(s *apiextensionsv1.JSONSchemaProps, f func(string)) {
	if s == nil {
		return
	}
	for _, r := range s.XValidations {
		f(r.Message)
	}
	for _, p := range s.Properties {
		walkRules(&p, f)
	}
	if s.Items != nil {
		walkRules(s.Items.Schema, f)
	}
	if s.AdditionalProperties != nil {
		walkRules(s.AdditionalProperties.Schema, f)
	}
}

// TestPrinterColumnsAndNames checks what `oc get` and the console show.
func TestPrinterColumnsAndNames(t *testing.T) {
	ctx := context.Background()
	want := map[string]struct {
		short   string
		columns []string
	}{
		"openshellgateways.openshell.ai":         {"osgw", []string{"Mode", "Phase", "Endpoint", "Version", "Age"}},
		"openshellsandboxes.openshell.ai":        {"ossb", []string{"Gateway", "Image", "Phase", "Sandbox ID", "Reason", "Age"}},
		"openshellpolicies.openshell.ai":         {"ospol", []string{"Sandboxes", "Ready", "Age"}},
		"openshellproviders.openshell.ai":        {"osprov", []string{"Type", "Secret", "Ready", "Age"}},
		"openshellproviderprofiles.openshell.ai": {"osprof", []string{"Category", "Ready", "Reason", "Age"}},
		"openshellimagepolicies.openshell.ai":    {"osimgpol", []string{"Require Digest", "Ready", "Age"}},
	}
	for name, w := range want {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: name}, crd); err != nil {
			t.Fatalf("get CRD %s: %v", name, err)
		}
		if crd.Spec.Scope != apiextensionsv1.NamespaceScoped {
			t.Errorf("%s scope = %s, want Namespaced", name, crd.Spec.Scope)
		}
		if !reflect.DeepEqual(crd.Spec.Names.ShortNames, []string{w.short}) {
			t.Errorf("%s short names = %v, want [%s]", name, crd.Spec.Names.ShortNames, w.short)
		}
		if !reflect.DeepEqual(crd.Spec.Names.Categories, []string{"openshell"}) {
			t.Errorf("%s categories = %v, want [openshell]", name, crd.Spec.Names.Categories)
		}
		var cols []string
		for _, c := range crd.Spec.Versions[0].AdditionalPrinterColumns {
			cols = append(cols, c.Name)
		}
		if !reflect.DeepEqual(cols, w.columns) {
			t.Errorf("%s printer columns = %v, want %v", name, cols, w.columns)
		}
		if crd.Spec.Versions[0].Subresources == nil || crd.Spec.Versions[0].Subresources.Status == nil {
			t.Errorf("%s has no status subresource", name)
		}
		if d := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Description; d == "" && name != "openshellgateways.openshell.ai" {
			t.Errorf("%s spec has no description (it becomes console help)", name)
		}
	}
}

// TestEveryFieldDocumented fails for any schema property without a
// description: descriptions become `oc explain` and console help.
func TestEveryFieldDocumented(t *testing.T) {
	ctx := context.Background()
	crds := &apiextensionsv1.CustomResourceDefinitionList{}
	if err := env.Client.List(ctx, crds); err != nil {
		t.Fatal(err)
	}
	var undocumented []string
	var walk func(path string, s *apiextensionsv1.JSONSchemaProps)
	walk = func(path string, s *apiextensionsv1.JSONSchemaProps) {
		for name, p := range s.Properties {
			if !strings.Contains(path, ".") && (name == "apiVersion" || name == "kind" || name == "metadata") {
				continue
			}
			if p.Description == "" {
				undocumented = append(undocumented, path+"."+name)
			}
			walk(path+"."+name, &p)
		}
		if s.Items != nil && s.Items.Schema != nil {
			walk(path+"[]", s.Items.Schema)
		}
	}
	for _, crd := range crds.Items {
		if crd.Spec.Group == "openshell.ai" {
			walk(crd.Spec.Names.Kind, crd.Spec.Versions[0].Schema.OpenAPIV3Schema)
		}
	}
	sort.Strings(undocumented)
	if len(undocumented) > 0 {
		t.Fatalf("fields without a description:\n  %s", strings.Join(undocumented, "\n  "))
	}
}
