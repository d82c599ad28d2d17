// Package catalog renders and validates the File-Based Catalog with
// operator-registry's declcfg: the olm.package, its channels and the
// olm.bundle rendered from the bundle (by digest), with the related images
// oc-mirror copies.
package catalog

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/operator-framework/api/pkg/manifests"
	"github.com/operator-framework/operator-registry/alpha/declcfg"
	"github.com/operator-framework/operator-registry/alpha/property"

	"github.com/openshell/openshell-operator/hack/release/images"
)

// Options describe the catalog.
type Options struct {
	BundleDir string
	// BundleImage is the bundle image by digest.
	BundleImage    string
	Channels       []string
	DefaultChannel string
	// Previous is the catalog as released so far (nil for the first
	// release): its bundles and channel entries stay, so subscriptions at
	// an older version have a path, and the new entry replaces each
	// channel's head.
	Previous *declcfg.DeclarativeConfig
}

// Load reads a catalog folder; a missing folder is an empty catalog.
func Load(ctx context.Context, dir string) (*declcfg.DeclarativeConfig, error) {
	if _, err := os.Stat(dir); os.IsNotExist(err) {
		return &declcfg.DeclarativeConfig{}, nil
	}
	cfg, err := declcfg.LoadFS(ctx, os.DirFS(dir))
	if err != nil {
		return nil, fmt.Errorf("load catalog: %w", err)
	}
	return cfg, nil
}

// Render builds the declarative config of the package.
func Render(o Options) (*declcfg.DeclarativeConfig, error) {
	b, err := manifests.GetBundleFromDir(o.BundleDir)
	if err != nil {
		return nil, fmt.Errorf("load bundle: %w", err)
	}
	csv := b.CSV
	pkgName := b.Package
	cfg := &declcfg.DeclarativeConfig{}
	pkg := declcfg.Package{Schema: declcfg.SchemaPackage, Name: pkgName, DefaultChannel: o.DefaultChannel,
		Description: strings.SplitN(csv.Spec.Description, "\n\n", 2)[0]}
	if len(csv.Spec.Icon) > 0 {
		data, err := decodeIcon(csv.Spec.Icon[0].Data)
		if err != nil {
			return nil, err
		}
		pkg.Icon = &declcfg.Icon{Data: data, MediaType: csv.Spec.Icon[0].MediaType}
	}
	cfg.Packages = append(cfg.Packages, pkg)
	for _, ch := range o.Channels {
		entries := previousEntries(o.Previous, pkgName, ch, csv.Name)
		replaces := csv.Spec.Replaces
		if replaces == "" {
			replaces = head(entries)
		}
		entries = append(entries, declcfg.ChannelEntry{Name: csv.Name, Replaces: replaces, SkipRange: csv.Annotations["olm.skipRange"]})
		cfg.Channels = append(cfg.Channels, declcfg.Channel{Schema: declcfg.SchemaChannel, Package: pkgName, Name: ch, Entries: entries})
	}
	if o.Previous != nil {
		for _, b := range o.Previous.Bundles {
			if b.Package == pkgName && b.Name != csv.Name {
				cfg.Bundles = append(cfg.Bundles, b)
			}
		}
	}
	props := []property.Property{property.MustBuildPackage(pkgName, csv.Spec.Version.String())}
	for _, d := range csv.Spec.CustomResourceDefinitions.Owned {
		group := d.Name[strings.Index(d.Name, ".")+1:]
		props = append(props, property.MustBuildGVK(group, d.Version, d.Kind))
	}
	props = append(props, property.MustBuildCSVMetadata(*csv))
	related := map[string]string{o.BundleImage: ""}
	for _, ri := range csv.Spec.RelatedImages {
		related[ri.Image] = ri.Name
	}
	for _, d := range csv.Spec.InstallStrategy.StrategySpec.DeploymentSpecs {
		for _, c := range d.Spec.Template.Spec.Containers {
			if _, ok := related[c.Image]; !ok {
				related[c.Image] = ""
			}
		}
	}
	var imgs []declcfg.RelatedImage
	for img, name := range related {
		imgs = append(imgs, declcfg.RelatedImage{Name: name, Image: img})
	}
	sort.Slice(imgs, func(i, j int) bool { return imgs[i].Image < imgs[j].Image })
	cfg.Bundles = append(cfg.Bundles, declcfg.Bundle{Schema: declcfg.SchemaBundle, Name: csv.Name, Package: pkgName,
		Image: o.BundleImage, Properties: props, RelatedImages: imgs})
	return cfg, nil
}

// previousEntries are a channel's released entries, without name (which
// is being re-rendered).
func previousEntries(prev *declcfg.DeclarativeConfig, pkg, channel, name string) []declcfg.ChannelEntry {
	if prev == nil {
		return nil
	}
	var out []declcfg.ChannelEntry
	for _, ch := range prev.Channels {
		if ch.Package != pkg || ch.Name != channel {
			continue
		}
		for _, e := range ch.Entries {
			if e.Name != name {
				out = append(out, e)
			}
		}
	}
	return out
}

// head is the entry no other entry replaces or skips: the channel's
// newest release, which the next one replaces.
func head(entries []declcfg.ChannelEntry) string {
	replaced := map[string]bool{}
	for _, e := range entries {
		replaced[e.Replaces] = true
		for _, s := range e.Skips {
			replaced[s] = true
		}
	}
	for _, e := range entries {
		if !replaced[e.Name] {
			return e.Name
		}
	}
	return ""
}

// Write renders the catalog into dir/<package>/catalog.yaml.
func Write(cfg *declcfg.DeclarativeConfig, dir string) error {
	var buf bytes.Buffer
	if err := declcfg.WriteYAML(*cfg, &buf); err != nil {
		return err
	}
	p := filepath.Join(dir, cfg.Packages[0].Name, "catalog.yaml")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return os.WriteFile(p, buf.Bytes(), 0o644)
}

// ValidateModel does what `opm validate` does: load and convert to the
// model, which validates channels, heads and skip ranges.
func ValidateModel(ctx context.Context, dir string) error {
	_, err := loadModel(ctx, dir)
	return err
}

func loadModel(ctx context.Context, dir string) (*declcfg.DeclarativeConfig, error) {
	cfg, err := declcfg.LoadFS(ctx, os.DirFS(dir))
	if err != nil {
		return nil, fmt.Errorf("load catalog: %w", err)
	}
	if _, err := declcfg.ConvertToModel(*cfg); err != nil {
		return nil, fmt.Errorf("invalid catalog: %w", err)
	}
	return cfg, nil
}

// Validate is ValidateModel plus a check that every image is referenced by
// digest, which opm does not do.
func Validate(ctx context.Context, dir string) error {
	cfg, err := loadModel(ctx, dir)
	if err != nil {
		return err
	}
	var bad []string
	for _, b := range cfg.Bundles {
		if !images.Pinned(b.Image) {
			bad = append(bad, "bundle "+b.Name+" image "+b.Image)
		}
		for _, ri := range b.RelatedImages {
			if !images.Pinned(ri.Image) {
				bad = append(bad, "bundle "+b.Name+" related image "+ri.Image)
			}
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("not pinned by digest: %s", strings.Join(bad, "; "))
	}
	return nil
}

func decodeIcon(b64 string) ([]byte, error) {
	data, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil, fmt.Errorf("decode CSV icon: %w", err)
	}
	return data, nil
}
