package bundle

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// The console's x-descriptors (openshift/console, packages/operator-lifecycle-manager
// descriptors) that the checks below ask for.
const (
	xdPrefix        = "urn:alm:descriptor:"
	xdBooleanSwitch = xdPrefix + "com.tectonic.ui:booleanSwitch"
	xdSelect        = xdPrefix + "com.tectonic.ui:select:"
	xdSecret        = xdPrefix + "io.kubernetes:Secret"
	xdStorageClass  = xdPrefix + "io.kubernetes:StorageClass"
	xdNamespace     = xdPrefix + "io.kubernetes:Namespace"
	xdResources     = xdPrefix + "com.tectonic.ui:resourceRequirements"
	xdNodeSelector  = xdPrefix + "com.tectonic.ui:nodeSelector"
	xdTolerations   = xdPrefix + "io.kubernetes:Tolerations"
	xdLabelSelector = xdPrefix + "com.tectonic.ui:selector:"
	xdNumber        = xdPrefix + "com.tectonic.ui:number"
	xdPodCount      = xdPrefix + "com.tectonic.ui:podCount"
	xdConditions    = xdPrefix + "io.kubernetes.conditions"
	xdPhase         = xdPrefix + "io.kubernetes.phase"
)

// checkDescriptors holds the console form to the CRDs: every spec field a
// user sets has a specDescriptor (on itself, or on an ancestor whose widget
// edits the whole object: resource requirements, a label selector), every
// descriptor path exists, and each field gets the widget the console has for
// it — a switch for booleans, a select with exactly the enum's values,
// Secret/StorageClass/Namespace pickers, resource requirements, node
// selector, tolerations. Status conditions and phase are described too.
func checkDescriptors(csv *operatorsv1alpha1.ClusterServiceVersion, crds []*apiextensionsv1.CustomResourceDefinition) []string {
	byName := map[string]*apiextensionsv1.CustomResourceDefinition{}
	for _, c := range crds {
		byName[c.Name] = c
	}
	var errs []string
	for _, owned := range csv.Spec.CustomResourceDefinitions.Owned {
		crd := byName[owned.Name]
		if crd == nil {
			continue // reported by Validate
		}
		var root *apiextensionsv1.JSONSchemaProps
		for _, v := range crd.Spec.Versions {
			if v.Name == owned.Version && v.Schema != nil {
				root = v.Schema.OpenAPIV3Schema
			}
		}
		if root == nil {
			errs = append(errs, fmt.Sprintf("%s: version %s has no schema", owned.Name, owned.Version))
			continue
		}
		spec, status := root.Properties["spec"], root.Properties["status"]
		errs = append(errs, checkSpecDescriptors(owned.Kind, &spec, owned.SpecDescriptors)...)
		errs = append(errs, checkStatusDescriptors(owned.Kind, &status, owned.StatusDescriptors)...)
	}
	sort.Strings(errs)
	return errs
}

func checkSpecDescriptors(kind string, spec *apiextensionsv1.JSONSchemaProps, ds []operatorsv1alpha1.SpecDescriptor) []string {
	fields := map[string]*apiextensionsv1.JSONSchemaProps{}
	flatten(spec, "", fields)
	described := map[string][]string{}
	var errs []string
	for _, d := range ds {
		if _, ok := fields[d.Path]; !ok {
			errs = append(errs, fmt.Sprintf("%s: specDescriptor %q names no field of the schema", kind, d.Path))
		}
		described[d.Path] = d.XDescriptors
	}
	// Every top-level field has its own descriptor, as the scorecard's
	// olm-spec-descriptors test requires of the alm-examples.
	for name := range spec.Properties {
		if _, ok := described[name]; !ok {
			errs = append(errs, fmt.Sprintf("%s: top-level spec field %s has no specDescriptor", kind, name))
		}
	}
	for path, f := range fields {
		if want := objectWidget(f); want != "" && !slices.ContainsFunc(described[path], func(x string) bool { return strings.HasPrefix(x, want) }) {
			errs = append(errs, fmt.Sprintf("%s: spec field %s needs a specDescriptor with %s", kind, path, want))
			continue
		}
		if !leaf(f) || coveredByAncestor(path, described) {
			continue
		}
		xds, ok := described[path]
		if !ok {
			errs = append(errs, fmt.Sprintf("%s: spec field %s has no specDescriptor", kind, path))
			continue
		}
		if want := widget(path, f); len(want) > 0 && !slices.ContainsFunc(want, func(w string) bool {
			return slices.ContainsFunc(xds, func(x string) bool { return x == w || (strings.HasSuffix(w, ":") && strings.HasPrefix(x, w)) })
		}) {
			errs = append(errs, fmt.Sprintf("%s: spec field %s needs one of x-descriptors %v, has %v", kind, path, want, xds))
		}
		if len(f.Enum) > 0 {
			var got, values []string
			for _, x := range xds {
				if v, ok := strings.CutPrefix(x, xdSelect); ok {
					got = append(got, v)
				}
			}
			for _, e := range f.Enum {
				values = append(values, strings.Trim(string(e.Raw), `"`))
			}
			sort.Strings(got)
			sort.Strings(values)
			if !slices.Equal(got, values) {
				errs = append(errs, fmt.Sprintf("%s: spec field %s selects %v, the schema allows %v", kind, path, got, values))
			}
		}
	}
	return errs
}

func checkStatusDescriptors(kind string, status *apiextensionsv1.JSONSchemaProps, ds []operatorsv1alpha1.StatusDescriptor) []string {
	var errs []string
	want := map[string]string{"conditions": xdConditions, "phase": xdPhase}
	for field, xd := range want {
		if _, ok := status.Properties[field]; !ok {
			continue
		}
		if !slices.ContainsFunc(ds, func(d operatorsv1alpha1.StatusDescriptor) bool {
			return d.Path == field && slices.Contains(d.XDescriptors, xd)
		}) {
			errs = append(errs, fmt.Sprintf("%s: status.%s needs a statusDescriptor with %s", kind, field, xd))
		}
	}
	for _, d := range ds {
		if _, ok := status.Properties[strings.SplitN(d.Path, ".", 2)[0]]; !ok {
			errs = append(errs, fmt.Sprintf("%s: statusDescriptor %q names no field of the status", kind, d.Path))
		}
	}
	return errs
}

// flatten records every field under s by its descriptor path (a.b.c).
func flatten(s *apiextensionsv1.JSONSchemaProps, prefix string, out map[string]*apiextensionsv1.JSONSchemaProps) {
	for name, p := range s.Properties {
		path := name
		if prefix != "" {
			path = prefix + "." + name
		}
		out[path] = &p
		flatten(&p, path, out)
	}
}

// leaf is a field the form edits as one value: a scalar, a list or a map.
func leaf(f *apiextensionsv1.JSONSchemaProps) bool { return len(f.Properties) == 0 }

// coveredByAncestor: a resource-requirements or label-selector widget edits
// every field below it.
func coveredByAncestor(path string, described map[string][]string) bool {
	for i := strings.LastIndex(path, "."); i > 0; i = strings.LastIndex(path[:i], ".") {
		for _, x := range described[path[:i]] {
			if x == xdResources || strings.HasPrefix(x, xdLabelSelector) {
				return true
			}
		}
	}
	return false
}

// objectWidget is the widget that edits a whole object: Kubernetes resource
// requirements or a label selector.
func objectWidget(f *apiextensionsv1.JSONSchemaProps) string {
	has := func(names ...string) bool {
		for _, n := range names {
			if _, ok := f.Properties[n]; !ok {
				return false
			}
		}
		return true
	}
	switch {
	case has("limits", "requests"):
		return xdResources
	case has("matchLabels", "matchExpressions"):
		return xdLabelSelector
	}
	return ""
}

// widget is the x-descriptors one of which the console needs to render the
// field well; nil when text or the schema's own rendering serves.
func widget(path string, f *apiextensionsv1.JSONSchemaProps) []string {
	name := path[strings.LastIndex(path, ".")+1:]
	switch {
	case f.Type == "boolean":
		return []string{xdBooleanSwitch}
	case len(f.Enum) > 0:
		return []string{xdSelect}
	case strings.HasSuffix(strings.ToLower(path), "secretref.name"):
		return []string{xdSecret}
	case name == "storageClassName":
		return []string{xdStorageClass}
	case name == "namespace":
		return []string{xdNamespace}
	case name == "nodeSelector":
		return []string{xdNodeSelector}
	case name == "tolerations":
		return []string{xdTolerations}
	case f.Type == "integer":
		return []string{xdNumber, xdPodCount}
	}
	return nil
}
