// Package console holds the ConsoleYAMLSamples the operator offers in the
// OpenShift console's YAML editor, beyond the CSV's alm-examples (one per
// kind): the other common shapes — an External gateway, a disconnected
// mirror allowlist, a narrow network policy, a GPU sandbox. They are applied
// by the operator where the console API is served, not shipped in the
// bundle: OLM fails an install whose bundle carries a kind the cluster does
// not serve, and the bundle installs on vanilla Kubernetes too.
package console

import (
	"embed"
	"fmt"
	"io/fs"
	"sort"

	consolev1 "github.com/openshift/api/console/v1"
	"sigs.k8s.io/yaml"
)

//go:embed samples/*.yaml
var files embed.FS

// Samples returns the console YAML samples, sorted by name.
func Samples() ([]*consolev1.ConsoleYAMLSample, error) {
	names, err := fs.Glob(files, "samples/*.yaml")
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	out := make([]*consolev1.ConsoleYAMLSample, 0, len(names))
	for _, n := range names {
		b, err := files.ReadFile(n)
		if err != nil {
			return nil, err
		}
		s := &consolev1.ConsoleYAMLSample{}
		if err := yaml.UnmarshalStrict(b, s); err != nil {
			return nil, fmt.Errorf("parse console sample %s: %w", n, err)
		}
		out = append(out, s)
	}
	return out, nil
}
