package imagepolicy

import (
	"strings"
	"testing"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
)

// FuzzParseReference: no panics; a parsed reference re-parses to itself.
func FuzzParseReference(f *testing.F) {
	for _, s := range []string{"ubuntu", "docker.io/library/ubuntu:22.04", "mirror.corp:5000/a/b@sha256:" + d64,
		"[::1]:5000/x", "UPPER/case", "a@sha512:" + d128, "", "x:" + strings.Repeat("t", 200)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseReference(s)
		if err != nil {
			return
		}
		if r.Host == "" || r.Path == "" || r.Host != strings.ToLower(r.Host) {
			t.Fatalf("ParseReference(%q) = %+v: empty or non-normalised parts", s, r)
		}
		again, err := ParseReference(r.Normalized)
		if err != nil || again != r {
			t.Fatalf("normalised %q does not re-parse to itself: %+v, %v", r.Normalized, again, err)
		}
	})
}

// FuzzEvaluate: arbitrary allowlists and images never panic, every decision
// has a reason and a message, and an allowed image really lies inside an
// entry of the allowing policy.
func FuzzEvaluate(f *testing.F) {
	f.Add("mirror.corp/openshell", "ghcr.io/nvidia", "mirror.corp/ghcr", "mirror.corp/openshell/x@sha256:"+d64, true)
	f.Add("mirror.corp/openshell", "docker.io/library", "mirror.corp/hub", "ubuntu:latest", false)
	f.Add("*.corp.example", "*.quay.io", "m.corp/q", "a.quay.io/b/c@sha256:"+d64, true)
	f.Add("localhost:5000", "", "", "localhost:5000/x", false)
	f.Fuzz(func(t *testing.T, allowed, source, mirror, image string, requireDigest bool) {
		spec := openshellv1alpha1.OpenShellImagePolicySpec{
			AllowedMirrors: strings.Split(allowed, ","),
			Mirrors:        []openshellv1alpha1.ImageMirror{{Source: source, Mirrors: strings.Split(mirror, ",")}},
			RequireDigest:  &requireDigest,
		}
		p := Compile("fuzz", spec)
		d := Evaluate(image, []*Policy{p}, Options{Namespace: "ns", WhenNoPolicy: openshellv1alpha1.NoPolicyDeny})
		if d.Reason == "" || d.Message == "" {
			t.Fatalf("decision without reason or message: %+v", d)
		}
		if !d.Allowed || d.Reason != ReasonAllowed {
			return
		}
		ref, err := ParseReference(image)
		if err != nil {
			t.Fatalf("allowed an unparsable image %q", image)
		}
		if requireDigest && ref.Digest == "" {
			t.Fatalf("allowed tag-only %q although digests are required", image)
		}
		inside := false
		for _, e := range p.entries {
			inside = inside || e.Scope.Contains(ref)
		}
		if !inside {
			t.Fatalf("allowed %q outside every entry of %+v", image, spec)
		}
	})
}
