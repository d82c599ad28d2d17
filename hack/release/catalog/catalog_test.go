package catalog

import (
	"testing"

	"github.com/operator-framework/operator-registry/alpha/declcfg"
	"github.com/operator-framework/operator-registry/alpha/property"
)

// TestRenderKeepsReleasedBundles re-renders the catalog with a release
// already in it: the old bundle stays, the new entry replaces the channel's
// head, and the result is a valid upgrade graph (one head per channel).
func TestRenderKeepsReleasedBundles(t *testing.T) {
	first, err := Render(Options{BundleDir: "../../../bundle", BundleImage: "quay.io/x/bundle@sha256:" + digest("a"),
		Channels: []string{"stable-v0"}, DefaultChannel: "stable-v0"})
	if err != nil {
		t.Fatal(err)
	}
	// Pretend the released bundle was an older version.
	old := first.Bundles[0]
	old.Name = "openshell-operator.v0.0.9"
	for i, p := range old.Properties {
		if p.Type == property.TypePackage {
			old.Properties[i] = property.MustBuildPackage(old.Package, "0.0.9")
		}
	}
	prev := &declcfg.DeclarativeConfig{Packages: first.Packages, Bundles: []declcfg.Bundle{old},
		Channels: []declcfg.Channel{{Schema: declcfg.SchemaChannel, Package: old.Package, Name: "stable-v0",
			Entries: []declcfg.ChannelEntry{{Name: old.Name}}}}}
	next, err := Render(Options{BundleDir: "../../../bundle", BundleImage: "quay.io/x/bundle@sha256:" + digest("b"),
		Channels: []string{"stable-v0"}, DefaultChannel: "stable-v0", Previous: prev})
	if err != nil {
		t.Fatal(err)
	}
	if len(next.Bundles) != 2 {
		t.Fatalf("bundles = %d, want the released one and the new one", len(next.Bundles))
	}
	entries := next.Channels[0].Entries
	if len(entries) != 2 || entries[1].Replaces != old.Name {
		t.Fatalf("channel entries = %+v, want the new one replacing %s", entries, old.Name)
	}
	m, err := declcfg.ConvertToModel(*next)
	if err != nil {
		t.Fatalf("not a valid catalog: %v", err)
	}
	h, err := m[old.Package].Channels["stable-v0"].Head()
	if err != nil || h.Name != first.Bundles[0].Name {
		t.Fatalf("head = %v (%v), want %s", h, err, first.Bundles[0].Name)
	}
	// Rendering the same release again changes nothing.
	again, err := Render(Options{BundleDir: "../../../bundle", BundleImage: "quay.io/x/bundle@sha256:" + digest("b"),
		Channels: []string{"stable-v0"}, DefaultChannel: "stable-v0", Previous: next})
	if err != nil {
		t.Fatal(err)
	}
	if len(again.Bundles) != 2 || len(again.Channels[0].Entries) != 2 {
		t.Fatalf("re-rendering duplicated entries: %d bundles, %d entries", len(again.Bundles), len(again.Channels[0].Entries))
	}
}

func digest(c string) string {
	out := ""
	for range 64 {
		out += c
	}
	return out
}
