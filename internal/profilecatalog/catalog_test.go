package profilecatalog

import (
	"slices"
	"testing"
	"testing/fstest"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
)

// TestTheShippedCatalogLoads: every file is a profile named after it.
func TestTheShippedCatalogLoads(t *testing.T) {
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Profiles) == 0 || c.Version == "" {
		t.Fatalf("catalog = %+v", c)
	}
	if !slices.IsSorted(c.IDs()) {
		t.Errorf("ids not sorted: %v", c.IDs())
	}
	for _, p := range c.Profiles {
		if len(p.Spec.Endpoints) == 0 {
			t.Errorf("%s: a shipped profile names where its sandboxes may connect", p.Name)
		}
	}
}

func file(id, host string) *fstest.MapFile {
	return &fstest.MapFile{Data: []byte("apiVersion: openshell.ai/v1alpha1\nkind: OpenShellProviderProfile\nmetadata:\n  name: " + id +
		"\nspec:\n  endpoints:\n  - host: " + host + "\n    port: 443\n")}
}

// TestParse: a misnamed or misspelt file is refused; the version follows
// the content and nothing else.
func TestParse(t *testing.T) {
	a, err := Parse(fstest.MapFS{"profiles/a.yaml": file("a", "a.example.com")})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Parse(fstest.MapFS{"profiles/a.yaml": file("a", "b.example.com")})
	if err != nil {
		t.Fatal(err)
	}
	if a.Version == b.Version {
		t.Error("the version does not follow the content")
	}
	again, _ := Parse(fstest.MapFS{"profiles/a.yaml": file("a", "a.example.com")})
	if again.Version != a.Version {
		t.Error("the version is not stable")
	}
	for name, fsys := range map[string]fstest.MapFS{
		"misnamed":      {"profiles/b.yaml": file("a", "a.example.com")},
		"unknown field": {"profiles/a.yaml": &fstest.MapFile{Data: []byte("apiVersion: openshell.ai/v1alpha1\nkind: OpenShellProviderProfile\nmetadata:\n  name: a\nspec:\n  endpoint: []\n")}},
		"empty":         {},
	} {
		if _, err := Parse(fsys); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestWanted: the defaults per mode, None, exclusions, and the platform
// admin's own ids.
func TestWanted(t *testing.T) {
	c, err := Parse(fstest.MapFS{"profiles/a.yaml": file("a", "a.example.com"), "profiles/b.yaml": file("b", "b.example.com"), "profiles/c.yaml": file("c", "c.example.com")})
	if err != nil {
		t.Fatal(err)
	}
	all := &openshellv1alpha1.BuiltinProviderProfiles{Policy: openshellv1alpha1.BuiltinProfilesAll}
	for _, tc := range []struct {
		name     string
		mode     openshellv1alpha1.GatewayMode
		builtin  *openshellv1alpha1.BuiltinProviderProfiles
		platform []string
		want     []string
	}{
		{"Managed by default", openshellv1alpha1.GatewayModeManaged, nil, nil, []string{"a", "b", "c"}},
		{"External by default", openshellv1alpha1.GatewayModeExternal, nil, nil, nil},
		{"External asking", openshellv1alpha1.GatewayModeExternal, all, nil, []string{"a", "b", "c"}},
		{"None", openshellv1alpha1.GatewayModeManaged, &openshellv1alpha1.BuiltinProviderProfiles{Policy: openshellv1alpha1.BuiltinProfilesNone}, nil, nil},
		{"excluded", openshellv1alpha1.GatewayModeManaged, &openshellv1alpha1.BuiltinProviderProfiles{Policy: openshellv1alpha1.BuiltinProfilesAll, Exclude: []string{"b", "zz"}}, nil, []string{"a", "c"}},
		{"the platform admin's own", openshellv1alpha1.GatewayModeManaged, nil, []string{"c"}, []string{"a", "b"}},
	} {
		gw := &openshellv1alpha1.OpenShellGateway{Spec: openshellv1alpha1.OpenShellGatewaySpec{Mode: tc.mode, BuiltinProviderProfiles: tc.builtin, ProviderProfiles: tc.platform}}
		if got := c.Wanted(gw); !slices.Equal(got, tc.want) {
			t.Errorf("%s: wanted %v, want %v", tc.name, got, tc.want)
		}
	}
}
