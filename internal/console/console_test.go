package console

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// TestSamplesTargetWhatTheyContain: each sample parses, and its embedded
// object is of the kind the console lists it under. test/api creates every
// embedded object on a real API server; controllers/platform labels them.
func TestSamplesTargetWhatTheyContain(t *testing.T) {
	samples, err := Samples()
	if err != nil {
		t.Fatal(err)
	}
	if len(samples) < 4 {
		t.Fatalf("want at least 4 samples, got %d", len(samples))
	}
	for _, s := range samples {
		u := &unstructured.Unstructured{}
		if err := yaml.UnmarshalStrict([]byte(s.Spec.YAML), &u.Object); err != nil {
			t.Errorf("%s: %v", s.Name, err)
			continue
		}
		if u.GetAPIVersion() != s.Spec.TargetResource.APIVersion || u.GetKind() != s.Spec.TargetResource.Kind {
			t.Errorf("%s: targets %s %s but holds %s %s", s.Name, s.Spec.TargetResource.APIVersion, s.Spec.TargetResource.Kind, u.GetAPIVersion(), u.GetKind())
		}
		if s.Spec.Title == "" || s.Spec.Description == "" {
			t.Errorf("%s: title and description are required", s.Name)
		}
	}
}
