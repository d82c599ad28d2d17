// Package profilecatalog is the set of provider profiles the operator
// ships. OpenShell 0.1 builds no profiles into its gateway, so a provider
// of any type fails until someone imports that type's profile; the
// operator imports these into the platform catalog of the gateways that
// want them (OpenShellGateway spec.builtinProviderProfiles;
// controllers/profilecatalog), so that the provider types upstream
// documents work out of the box.
//
// Each profile is a file under profiles/, written as an
// OpenShellProviderProfile manifest from the facts upstream publishes
// about its reference profile (the file's header comment names its
// source). Only profiles whose credentials, placements and endpoints are
// established upstream are shipped: a guessed endpoint would send a
// tenant's credential somewhere nobody chose.
package profilecatalog

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"sort"
	"strings"
	"sync"

	"sigs.k8s.io/yaml"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
)

//go:embed profiles/*.yaml
var files embed.FS

// Catalog is the parsed set of shipped profiles.
type Catalog struct {
	// Profiles by id, sorted.
	Profiles []*openshellv1alpha1.OpenShellProviderProfile
	// Version is a hash of every profile's content: it changes exactly
	// when what the operator would import changes.
	Version string
}

// IDs lists the shipped profile ids in order.
func (c *Catalog) IDs() []string {
	out := make([]string, 0, len(c.Profiles))
	for _, p := range c.Profiles {
		out = append(out, p.Name)
	}
	return out
}

// Get returns the shipped profile id, or nil.
func (c *Catalog) Get(id string) *openshellv1alpha1.OpenShellProviderProfile {
	i := slices.IndexFunc(c.Profiles, func(p *openshellv1alpha1.OpenShellProviderProfile) bool { return p.Name == id })
	if i < 0 {
		return nil
	}
	return c.Profiles[i]
}

// Load parses the shipped catalog (once; the files are part of the binary,
// so an error is a build defect that the package's tests catch).
var Load = sync.OnceValues(func() (*Catalog, error) { return Parse(files) })

// Parse reads a catalog from profiles/*.yaml in fsys (Load reads the
// shipped one; tests build their own).
func Parse(fsys fs.FS) (*Catalog, error) {
	names, err := fs.Glob(fsys, "profiles/*.yaml")
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	c := &Catalog{}
	sum := sha256.New()
	for _, name := range names {
		raw, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		p := &openshellv1alpha1.OpenShellProviderProfile{}
		if err := yaml.UnmarshalStrict(raw, p); err != nil {
			return nil, fmt.Errorf("shipped provider profile %s: %w", name, err)
		}
		id := strings.TrimSuffix(path.Base(name), ".yaml")
		if p.Kind != "OpenShellProviderProfile" || p.Name != id {
			return nil, fmt.Errorf("shipped provider profile %s: want kind OpenShellProviderProfile named %s, have %s %q", name, id, p.Kind, p.Name)
		}
		spec, err := yaml.Marshal(p.Spec)
		if err != nil {
			return nil, err
		}
		sum.Write([]byte(id))
		sum.Write([]byte{0})
		sum.Write(bytes.TrimSpace(spec))
		sum.Write([]byte{0})
		c.Profiles = append(c.Profiles, p)
	}
	if len(c.Profiles) == 0 {
		return nil, fmt.Errorf("no shipped provider profiles")
	}
	c.Version = hex.EncodeToString(sum.Sum(nil))[:16]
	return c, nil
}

// Wanted is the shipped profile ids gw imports: with no
// spec.builtinProviderProfiles, every one for a Managed gateway and none
// for an External one; with policy None, none; else all but the excluded.
// An id the gateway lists in spec.providerProfiles is its platform
// admin's own and never the shipped one.
func (c *Catalog) Wanted(gw *openshellv1alpha1.OpenShellGateway) []string {
	b := gw.Spec.BuiltinProviderProfiles
	switch {
	case b == nil && gw.Spec.Mode == openshellv1alpha1.GatewayModeExternal:
		return nil
	case b != nil && b.Policy == openshellv1alpha1.BuiltinProfilesNone:
		return nil
	}
	var out []string
	for _, id := range c.IDs() {
		if b != nil && slices.Contains(b.Exclude, id) {
			continue
		}
		if slices.Contains(gw.Spec.ProviderProfiles, id) {
			continue
		}
		out = append(out, id)
	}
	return out
}
