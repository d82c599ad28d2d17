// Command bundle generates (`bundle generate`) and validates (`bundle
// validate`) the OLM bundle, renders and validates the catalog, pins the
// operand images by digest (`bundle pin`) and builds the images; the make
// targets bundle, bundle-validate, catalog, catalog-validate, pin-images and
// images run it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/openshell/openshell-operator/hack/release/bundle"
	"github.com/openshell/openshell-operator/hack/release/catalog"
	"github.com/openshell/openshell-operator/hack/release/images"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: bundle generate|validate [flags]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	dir := fs.String("dir", "bundle", "bundle folder")
	manifests := fs.String("manifests", "config/manifests", "kustomization with the CSV base")
	imagesFile := fs.String("images", "config/manifests/images.yaml", "digest-pinned images")
	version := fs.String("version", "0.1.0", "bundle version (semver)")
	channels := fs.String("channels", "candidate-v0", "channels, comma separated")
	defaultChannel := fs.String("default-channel", "candidate-v0", "default channel")
	skipRange := fs.String("skip-range", "", "olm.skipRange")
	k8s := fs.String("k8s-version", "1.34", "Kubernetes version for the deprecated-API check")
	catalogDir := fs.String("catalog", "catalog/configs", "File-Based Catalog folder")
	bundleRepo := fs.String("bundle-repo", "quay.io/openshell/openshell-operator-bundle", "bundle image repository")
	operatorBin := fs.String("operator-binary", "bin/manager-linux-{arch}", "static operator binaries for the operator image, {arch} for each platform")
	opmBin := fs.String("opm-binary", "bin/opm", "static opm binary for the catalog image")
	probeBin := fs.String("probe-binary", "bin/grpc_health_probe", "static grpc_health_probe binary for the catalog image")
	imagesOut := fs.String("out", "bin/images", "folder for the OCI image layouts")
	_ = fs.Parse(os.Args[2:])

	switch os.Args[1] {
	case "generate":
		var imgs bundle.Images
		raw, err := os.ReadFile(*imagesFile)
		if err == nil {
			err = yaml.UnmarshalStrict(raw, &imgs)
		}
		if err != nil {
			fail(fmt.Errorf("read images: %w", err))
		}
		if err := bundle.Generate(bundle.Options{ManifestsDir: *manifests, OutputDir: *dir, Dockerfile: "bundle.Dockerfile",
			Package: "openshell-operator", Version: *version, Channels: strings.Split(*channels, ","), DefaultChannel: *defaultChannel,
			SkipRange: *skipRange, Images: imgs, OpenShiftVersions: bundle.DefaultOpenShiftVersions}); err != nil {
			fail(err)
		}
	case "validate":
		r, err := bundle.Validate(*dir, *k8s)
		if err != nil {
			fail(err)
		}
		for _, e := range r.Errors {
			fmt.Println("ERROR  ", e)
		}
		for _, w := range r.Warnings {
			fmt.Println("WARNING", w)
		}
		fmt.Printf("%d errors, %d warnings\n", len(r.Errors), len(r.Warnings))
		if !r.OK() {
			os.Exit(1)
		}
	case "catalog":
		digest, err := bundleDigest(*dir)
		if err != nil {
			fail(err)
		}
		prev, err := catalog.Load(context.Background(), *catalogDir)
		if err != nil {
			fail(err)
		}
		cfg, err := catalog.Render(catalog.Options{BundleDir: *dir, BundleImage: *bundleRepo + "@" + digest,
			Channels: strings.Split(*channels, ","), DefaultChannel: *defaultChannel, Previous: prev})
		if err != nil {
			fail(err)
		}
		if err := os.RemoveAll(*catalogDir); err != nil {
			fail(err)
		}
		if err := catalog.Write(cfg, *catalogDir); err != nil {
			fail(err)
		}
	case "catalog-validate":
		if err := catalog.Validate(context.Background(), *catalogDir); err != nil {
			fail(err)
		}
		fmt.Println("catalog valid")
	case "pin":
		pinned, err := images.PinFile(*imagesFile)
		if err != nil {
			fail(err)
		}
		for _, p := range pinned {
			fmt.Printf("%s\n  -> %s\n", p.From, p.To)
		}
		fmt.Printf("%d images pinned in %s\n", len(pinned), *imagesFile)
	case "images":
		if err := buildImages(*dir, *catalogDir, *operatorBin, *opmBin, *probeBin, *imagesOut, *imagesFile, *version); err != nil {
			fail(err)
		}
	default:
		fail(fmt.Errorf("unknown command %q", os.Args[1]))
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bundle:", err)
	os.Exit(1)
}
