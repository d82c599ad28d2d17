package bundle

import (
	"strings"
	"testing"

	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

const testCRD = `
metadata: {name: widgets.example.com}
spec:
  versions:
  - name: v1
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              enabled: {type: boolean}
              level: {type: string, enum: [low, high]}
              secretRef: {type: object, properties: {name: {type: string}}}
              resources: {type: object, properties: {limits: {type: object}, requests: {type: object}}}
              note: {type: string}
          status:
            type: object
            properties:
              conditions: {type: array}
`

func TestCheckDescriptors(t *testing.T) {
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.Unmarshal([]byte(testCRD), crd); err != nil {
		t.Fatal(err)
	}
	good := []operatorsv1alpha1.SpecDescriptor{
		{Path: "enabled", XDescriptors: []string{xdBooleanSwitch}},
		{Path: "level", XDescriptors: []string{xdSelect + "low", xdSelect + "high"}},
		{Path: "secretRef"},
		{Path: "secretRef.name", XDescriptors: []string{xdSecret}},
		{Path: "resources", XDescriptors: []string{xdResources}},
		{Path: "note"},
	}
	status := []operatorsv1alpha1.StatusDescriptor{{Path: "conditions", XDescriptors: []string{xdConditions}}}
	csv := func(spec []operatorsv1alpha1.SpecDescriptor, st []operatorsv1alpha1.StatusDescriptor) *operatorsv1alpha1.ClusterServiceVersion {
		c := &operatorsv1alpha1.ClusterServiceVersion{}
		c.Spec.CustomResourceDefinitions.Owned = []operatorsv1alpha1.CRDDescription{{Name: crd.Name, Version: "v1", Kind: "Widget",
			SpecDescriptors: spec, StatusDescriptors: st}}
		return c
	}
	if errs := checkDescriptors(csv(good, status), []*apiextensionsv1.CustomResourceDefinition{crd}); len(errs) > 0 {
		t.Fatalf("complete descriptors reported: %v", errs)
	}
	replace := func(i int, d operatorsv1alpha1.SpecDescriptor) []operatorsv1alpha1.SpecDescriptor {
		out := append([]operatorsv1alpha1.SpecDescriptor(nil), good...)
		out[i] = d
		return out
	}
	for name, tc := range map[string]struct {
		spec   []operatorsv1alpha1.SpecDescriptor
		status []operatorsv1alpha1.StatusDescriptor
		want   string
	}{
		"missing":        {good[1:], status, "spec field enabled has no specDescriptor"},
		"switch":         {replace(0, operatorsv1alpha1.SpecDescriptor{Path: "enabled", XDescriptors: []string{"urn:alm:descriptor:com.tectonic.ui:text"}}), status, "spec field enabled needs one of x-descriptors"},
		"enum values":    {replace(1, operatorsv1alpha1.SpecDescriptor{Path: "level", XDescriptors: []string{xdSelect + "low"}}), status, "selects [low], the schema allows [high low]"},
		"secret picker":  {replace(3, operatorsv1alpha1.SpecDescriptor{Path: "secretRef.name"}), status, "spec field secretRef.name needs one of"},
		"resources":      {replace(4, operatorsv1alpha1.SpecDescriptor{Path: "resources"}), status, "spec field resources needs a specDescriptor with " + xdResources},
		"top level":      {replace(2, operatorsv1alpha1.SpecDescriptor{Path: "secretRef.name", XDescriptors: []string{xdSecret}}), status, "top-level spec field secretRef has no specDescriptor"},
		"unknown path":   {append(good, operatorsv1alpha1.SpecDescriptor{Path: "nope"}), status, `specDescriptor "nope" names no field`},
		"conditions":     {good, nil, "status.conditions needs a statusDescriptor"},
		"unknown status": {good, append(status, operatorsv1alpha1.StatusDescriptor{Path: "gone"}), `statusDescriptor "gone" names no field`},
	} {
		errs := checkDescriptors(csv(tc.spec, tc.status), []*apiextensionsv1.CustomResourceDefinition{crd})
		if !strings.Contains(strings.Join(errs, "\n"), tc.want) {
			t.Errorf("%s: want an error containing %q, got %v", name, tc.want, errs)
		}
	}
}
