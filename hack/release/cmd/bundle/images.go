package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"sigs.k8s.io/yaml"

	"github.com/openshell/openshell-operator/hack/release/images"
)

// bundleDigest is the digest of the bundle image built from dir.
func bundleDigest(dir string) (string, error) {
	img, err := bundleImage(dir)
	if err != nil {
		return "", err
	}
	d, err := img.Digest()
	return d.String(), err
}

func bundleImage(dir string) (v1.Image, error) {
	raw, err := os.ReadFile(filepath.Join(dir, "metadata", "annotations.yaml"))
	if err != nil {
		return nil, err
	}
	var meta struct {
		Annotations map[string]string `json:"annotations"`
	}
	if err := yaml.Unmarshal(raw, &meta); err != nil {
		return nil, err
	}
	return images.Bundle(dir, meta.Annotations)
}

var operatorLine = regexp.MustCompile(`(?m)^operator: .*$`)

// buildImages writes the operator, bundle and catalog images as OCI
// layouts, prints their digests, and pins the operator digest in the
// images file.
func buildImages(bundleDir, catalogDir, operatorBins, opmBin, probeBin, out, imagesFile, version string) error {
	bins := map[string][]byte{}
	for _, arch := range images.Platforms {
		bin, err := os.ReadFile(strings.ReplaceAll(operatorBins, "{arch}", arch))
		if err != nil {
			return fmt.Errorf("read operator binary (make images builds it): %w", err)
		}
		bins[arch] = bin
	}
	files, err := images.RepoOperatorFiles(".")
	if err != nil {
		return err
	}
	op, err := images.OperatorIndex(bins, files, images.OperatorLabels(version))
	if err != nil {
		return err
	}
	bundle, err := bundleImage(bundleDir)
	if err != nil {
		return err
	}
	opm, err := os.ReadFile(opmBin)
	if err != nil {
		return fmt.Errorf("read opm binary: %w", err)
	}
	probe, err := os.ReadFile(probeBin)
	if err != nil {
		return fmt.Errorf("read grpc_health_probe binary: %w", err)
	}
	cat, err := images.Catalog(opm, probe, catalogDir)
	if err != nil {
		return err
	}
	for name, img := range map[string]interface {
		Digest() (v1.Hash, error)
	}{"openshell-operator": op, "openshell-operator-bundle": bundle, "openshell-operator-catalog": cat} {
		p, err := layout.Write(filepath.Join(out, name), empty.Index)
		if err != nil {
			return err
		}
		switch i := img.(type) {
		case v1.ImageIndex:
			err = p.AppendIndex(i)
		case v1.Image:
			err = p.AppendImage(i)
		}
		if err != nil {
			return err
		}
		d, _ := img.Digest()
		fmt.Printf("%-28s %s\n", name, d)
		if name == "openshell-operator" {
			raw, err := os.ReadFile(imagesFile)
			if err != nil {
				return err
			}
			raw = operatorLine.ReplaceAll(raw, []byte("operator: quay.io/openshell/openshell-operator@"+d.String()))
			if err := os.WriteFile(imagesFile, raw, 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}
