package images

import (
	"bytes"
	"fmt"
	"os"
	"regexp"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// relatedLine matches an image entry of config/manifests/images.yaml:
// "  RELATED_IMAGE_X: <reference>".
var relatedLine = regexp.MustCompile(`(?m)^(\s+RELATED_IMAGE_[A-Z0-9_]+:\s*)(\S+)\s*$`)

// Pinned tells whether an image reference names its content by digest, as
// the bundle, the catalog and an ImageDigestMirrorSet need.
func Pinned(ref string) bool { return strings.Contains(ref, "@sha256:") }

// Resolved is one reference PinFile pinned.
type Resolved struct {
	From, To string
}

// PinFile resolves every RELATED_IMAGE_* reference in the images file that
// names a tag to the digest its registry serves for that tag now, and
// rewrites the file with repository@digest references. References already
// pinned are left alone, so running it twice changes nothing. The digest is
// the one the registry answers for the tag (a manifest list for multi-arch
// images), which is what OLM and oc-mirror copy. Nothing is written unless
// every tag resolved: a half-pinned file would hide the failure.
func PinFile(path string, opts ...remote.Option) ([]Resolved, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var pinned []Resolved
	var errs []string
	out := relatedLine.ReplaceAllFunc(raw, func(line []byte) []byte {
		m := relatedLine.FindSubmatch(line)
		ref := string(m[2])
		if Pinned(ref) {
			return line
		}
		to, err := resolve(ref, opts...)
		if err != nil {
			errs = append(errs, err.Error())
			return line
		}
		pinned = append(pinned, Resolved{From: ref, To: to})
		return append(append([]byte{}, m[1]...), to...)
	})
	if len(errs) > 0 {
		return nil, fmt.Errorf("pin %s: %s", path, strings.Join(errs, "; "))
	}
	if !bytes.Equal(out, raw) {
		if err := os.WriteFile(path, out, 0o644); err != nil {
			return nil, err
		}
	}
	return pinned, nil
}

func resolve(ref string, opts ...remote.Option) (string, error) {
	tag, err := name.NewTag(ref)
	if err != nil {
		return "", fmt.Errorf("%s: not an image tag: %w", ref, err)
	}
	desc, err := remote.Head(tag, opts...)
	if err != nil {
		return "", fmt.Errorf("resolve %s: %w", ref, err)
	}
	return tag.Context().Name() + "@" + desc.Digest.String(), nil
}
