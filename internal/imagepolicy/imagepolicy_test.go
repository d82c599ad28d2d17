package imagepolicy

import (
	"strings"
	"testing"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
)

var (
	d64  = strings.Repeat("a", 64)
	d128 = strings.Repeat("b", 128)
	sha  = "@sha256:" + d64
)

func TestParseReference(t *testing.T) {
	for _, tt := range []struct {
		in, normalized, host, path, tag, digest string
		wantErr                                 string
	}{
		{in: "ubuntu", normalized: "docker.io/library/ubuntu", host: "docker.io", path: "library/ubuntu"},
		{in: "ubuntu:22.04", normalized: "docker.io/library/ubuntu:22.04", host: "docker.io", path: "library/ubuntu", tag: "22.04"},
		{in: "library/ubuntu", normalized: "docker.io/library/ubuntu", host: "docker.io", path: "library/ubuntu"},
		{in: "docker.io/ubuntu", normalized: "docker.io/library/ubuntu", host: "docker.io", path: "library/ubuntu"},
		{in: "index.docker.io/library/ubuntu", normalized: "docker.io/library/ubuntu", host: "docker.io", path: "library/ubuntu"},
		{in: "user/app", normalized: "docker.io/user/app", host: "docker.io", path: "user/app"},
		{in: "quay.io/org/app" + sha, normalized: "quay.io/org/app" + sha, host: "quay.io", path: "org/app", digest: "sha256:" + d64},
		{in: "quay.io/org/app:v1" + sha, normalized: "quay.io/org/app:v1" + sha, host: "quay.io", path: "org/app", tag: "v1", digest: "sha256:" + d64},
		{in: "mirror.corp:5000/a/b/c", normalized: "mirror.corp:5000/a/b/c", host: "mirror.corp:5000", path: "a/b/c"},
		{in: "localhost:5000/x", normalized: "localhost:5000/x", host: "localhost:5000", path: "x"},
		{in: "localhost/x", normalized: "localhost/x", host: "localhost", path: "x"},
		{in: "127.0.0.1:5000/x:1", normalized: "127.0.0.1:5000/x:1", host: "127.0.0.1:5000", path: "x", tag: "1"},
		{in: "[::1]:5000/x", normalized: "[::1]:5000/x", host: "[::1]:5000", path: "x"},
		{in: "Mirror.Corp/app", normalized: "mirror.corp/app", host: "mirror.corp", path: "app"},
		{in: "quay.io/org/app@sha512:" + d128, normalized: "quay.io/org/app@sha512:" + d128, host: "quay.io", path: "org/app", digest: "sha512:" + d128},
		{in: "quay.io/a_b/c-d/e.f__g", normalized: "quay.io/a_b/c-d/e.f__g", host: "quay.io", path: "a_b/c-d/e.f__g"},
		// Invalid references.
		{in: "", wantErr: "empty"},
		{in: " ubuntu", wantErr: "white space"},
		{in: "ubuntu ", wantErr: "white space"},
		{in: "quay.io/Org/App", wantErr: "must be lowercase"},
		{in: "UBUNTU", wantErr: "must be lowercase"},
		{in: "UPPER/case", wantErr: "read as a registry host only because of its upper-case letters"},
		{in: "doCker.io/ubuntu", wantErr: `write Docker Hub's host "doCker.io" in lower case`},
		{in: "INDEX.docker.io/library/ubuntu", wantErr: `write Docker Hub's host "INDEX.docker.io" in lower case`},
		{in: "Mirror.Corp/app", normalized: "mirror.corp/app", host: "mirror.corp", path: "app"},
		{in: "LOCALHOST/x", normalized: "localhost/x", host: "localhost", path: "x"},
		{in: "quay.io/org/app@sha256:" + d64[:63], wantErr: "not valid"},
		{in: "quay.io/org/app@sha256:" + d64 + "a", wantErr: "not valid"},
		{in: "quay.io/org/app@sha256:" + strings.Repeat("G", 64), wantErr: "not valid"},
		{in: "quay.io/org/app@md5:" + strings.Repeat("a", 32), wantErr: "not valid"},
		{in: "quay.io/org/app@sha512:" + d64, wantErr: "not valid"},
		{in: "quay.io/org/app:", wantErr: "not valid"},
		{in: "quay.io/org/app:tag with space", wantErr: "not valid"},
		{in: "quay.io/org/ápp", wantErr: "not valid"},
		{in: "quay.io/org/app\x00", wantErr: "not valid"},
		{in: "quay.io//app", wantErr: "not valid"},
		{in: "quay.io/app/", wantErr: "not valid"},
		{in: "https://quay.io/app", wantErr: "not valid"},
		{in: "quay.io/app:" + strings.Repeat("t", 129), wantErr: "not valid"},
		{in: "quay.io/" + strings.Repeat("a", 1100), wantErr: "limit is 1024"},
		{in: "-bad.io/app", wantErr: "not valid"},
	} {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseReference(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseReference(%q) = %+v, %v; want error containing %q", tt.in, got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseReference(%q): %v", tt.in, err)
			}
			want := Reference{Normalized: tt.normalized, Host: tt.host, Path: tt.path, Tag: tt.tag, Digest: tt.digest}
			if got != want {
				t.Fatalf("ParseReference(%q)\n got %+v\nwant %+v", tt.in, got, want)
			}
		})
	}
}

func TestParseScope(t *testing.T) {
	for _, tt := range []struct {
		in      string
		want    Scope
		wantErr string
	}{
		{in: "mirror.corp", want: Scope{Host: "mirror.corp"}},
		{in: "mirror.corp/openshell", want: Scope{Host: "mirror.corp", Path: "openshell"}},
		{in: "Mirror.Corp:5000/a/b", want: Scope{Host: "mirror.corp:5000", Path: "a/b"}},
		{in: "localhost:5000", want: Scope{Host: "localhost:5000"}},
		{in: "localhost", want: Scope{Host: "localhost"}},
		{in: "*.corp.example/agents", want: Scope{Host: "*.corp.example", Path: "agents"}},
		{in: "", wantErr: "empty"},
		{in: "library/ubuntu", wantErr: "must start with a registry host"},
		{in: "mirror.corp/", wantErr: "ends with '/'"},
		{in: "mirror.corp/Team", wantErr: "not a valid registry location"},
		{in: "mirror.corp/app:v1", wantErr: "not a valid registry location"},
		{in: "mirror.corp/app@sha256:" + d64, wantErr: "not a valid registry location"},
		{in: "*.corp:5000", wantErr: "cannot have a port"},
		{in: "*corp.example", wantErr: "not a valid registry location"},
		{in: "mirror..corp/x", wantErr: "not a valid registry location"},
	} {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseScope(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseScope(%q) = %+v, %v; want error containing %q", tt.in, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseScope(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
			}
		})
	}
}

func boolPtr(b bool) *bool { return &b }

func compile(name string, requireDigest bool, allowed []string, mirrors ...openshellv1alpha1.ImageMirror) *Policy {
	return Compile(name, openshellv1alpha1.OpenShellImagePolicySpec{
		AllowedMirrors: allowed, Mirrors: mirrors, RequireDigest: boolPtr(requireDigest),
	})
}

func TestEvaluate(t *testing.T) {
	corp := compile("corp", true, []string{"mirror.corp/openshell", "mirror.corp:5000/team-a", "*.registry.internal/agents"},
		openshellv1alpha1.ImageMirror{Source: "ghcr.io/nvidia/openshell-community", Mirrors: []string{"mirror.corp/community"}},
		openshellv1alpha1.ImageMirror{Source: "docker.io/library", Mirrors: []string{"mirror.corp/dockerhub"}},
		openshellv1alpha1.ImageMirror{Source: "*.quay.io", Mirrors: []string{"mirror.corp/quay"}},
	)
	tags := compile("tags-ok", false, []string{"tags.corp/dev"})
	whole := compile("whole-registry", true, []string{"registry.whole"})
	deny := Options{Namespace: "team-a", WhenNoPolicy: openshellv1alpha1.NoPolicyDeny}
	allow := Options{Namespace: "team-a", WhenNoPolicy: openshellv1alpha1.NoPolicyAllow}

	for _, tt := range []struct {
		name     string
		image    string
		policies []*Policy
		opts     Options
		reason   string
		msg      string
	}{
		// Direct mirror locations.
		{"mirror prefix itself", "mirror.corp/openshell" + sha, []*Policy{corp}, deny, ReasonAllowed, "allowed by OpenShellImagePolicy corp"},
		{"below mirror prefix", "mirror.corp/openshell/base" + sha, []*Policy{corp}, deny, ReasonAllowed, "mirror location mirror.corp/openshell"},
		{"deep below mirror prefix", "mirror.corp/openshell/a/b/c/d" + sha, []*Policy{corp}, deny, ReasonAllowed, ""},
		{"tag and digest", "mirror.corp/openshell/base:1.0" + sha, []*Policy{corp}, deny, ReasonAllowed, ""},
		{"boundary trick", "mirror.corp/openshell-evil/base" + sha, []*Policy{corp}, deny, ReasonImageNotAllowed, "outside every allowed repository"},
		{"boundary trick suffix", "mirror.corp/openshellx" + sha, []*Policy{corp}, deny, ReasonImageNotAllowed, "closest allowed: mirror.corp/openshell"},
		{"parent of prefix", "mirror.corp/other" + sha, []*Policy{corp}, deny, ReasonImageNotAllowed, "on mirror registry mirror.corp"},
		{"host case-insensitive", "MIRROR.corp/openshell/base" + sha, []*Policy{corp}, deny, ReasonAllowed, ""},
		{"port must match", "mirror.corp:5000/openshell/base" + sha, []*Policy{corp}, deny, ReasonImageNotAllowed, ""},
		{"port entry", "mirror.corp:5000/team-a/x" + sha, []*Policy{corp}, deny, ReasonAllowed, ""},
		{"port entry without port", "mirror.corp/team-a/x" + sha, []*Policy{corp}, deny, ReasonImageNotAllowed, ""},
		{"other port", "mirror.corp:5001/team-a/x" + sha, []*Policy{corp}, deny, ReasonImageNotMirrored, ""},
		{"suffix host trick", "evilmirror.corp/openshell" + sha, []*Policy{corp}, deny, ReasonImageNotMirrored, ""},
		{"subdomain of mirror", "a.mirror.corp/openshell" + sha, []*Policy{corp}, deny, ReasonImageNotMirrored, ""},
		{"whole registry", "registry.whole/any/path" + sha, []*Policy{whole}, deny, ReasonAllowed, ""},
		{"whole registry other host", "registry.wholesale/any" + sha, []*Policy{whole}, deny, ReasonImageNotMirrored, ""},
		// Wildcard hosts.
		{"wildcard host", "eu.registry.internal/agents/x" + sha, []*Policy{corp}, deny, ReasonAllowed, ""},
		{"wildcard deep host", "a.b.registry.internal/agents" + sha, []*Policy{corp}, deny, ReasonAllowed, ""},
		{"wildcard needs subdomain", "registry.internal/agents" + sha, []*Policy{corp}, deny, ReasonImageNotMirrored, ""},
		{"wildcard path boundary", "eu.registry.internal/agents2" + sha, []*Policy{corp}, deny, ReasonImageNotMirrored, ""},
		{"wildcard rejects port", "eu.registry.internal:443/agents" + sha, []*Policy{corp}, deny, ReasonImageNotMirrored, ""},
		// Source→mirror mappings (ImageDigestMirrorSet semantics).
		{"mapped source", "ghcr.io/nvidia/openshell-community/sandboxes/base" + sha, []*Policy{corp}, deny, ReasonAllowed, "mirrored to mirror.corp/community"},
		{"mapped source exact", "ghcr.io/nvidia/openshell-community" + sha, []*Policy{corp}, deny, ReasonAllowed, ""},
		{"mapped source boundary", "ghcr.io/nvidia/openshell-community-evil/x" + sha, []*Policy{corp}, deny, ReasonImageNotMirrored, ""},
		{"mapped sibling", "ghcr.io/nvidia/openshell/gateway" + sha, []*Policy{corp}, deny, ReasonImageNotMirrored, "closest allowed: ghcr.io/nvidia/openshell-community"},
		{"docker hub short name", "ubuntu" + sha, []*Policy{corp}, deny, ReasonAllowed, "docker.io/library is mirrored"},
		{"docker hub explicit", "docker.io/library/ubuntu" + sha, []*Policy{corp}, deny, ReasonAllowed, ""},
		{"docker hub user repo", "someone/tool" + sha, []*Policy{corp}, deny, ReasonImageNotMirrored, "docker.io/someone/tool"},
		{"index.docker.io is docker.io", "index.docker.io/library/ubuntu" + sha, []*Policy{corp}, deny, ReasonAllowed, ""},
		{"wildcard source", "us.quay.io/org/app" + sha, []*Policy{corp}, deny, ReasonAllowed, "mirrored to mirror.corp/quay"},
		{"wildcard source not apex", "quay.io/org/app" + sha, []*Policy{corp}, deny, ReasonImageNotMirrored, ""},
		{"image on mirror of mapping", "mirror.corp/community/x" + sha, []*Policy{corp}, deny, ReasonImageNotAllowed, ""},
		// Digests.
		{"tag only on mirror", "mirror.corp/openshell/base:latest", []*Policy{corp}, deny, ReasonImageNotDigestPinned, "pin it as mirror.corp/openshell/base@sha256:<digest>"},
		{"no tag no digest", "mirror.corp/openshell/base", []*Policy{corp}, deny, ReasonImageNotDigestPinned, ""},
		{"tag only mapped", "ubuntu:22.04", []*Policy{corp}, deny, ReasonImageNotDigestPinned, "OpenShellImagePolicy corp requires one"},
		{"tag only unmirrored", "nginx.org/nginx:1", []*Policy{corp}, deny, ReasonImageNotMirrored, ""},
		{"tags allowed by policy", "tags.corp/dev/app:latest", []*Policy{tags}, deny, ReasonAllowed, ""},
		{"sha512 digest", "mirror.corp/openshell/x@sha512:" + d128, []*Policy{corp}, deny, ReasonAllowed, ""},
		{"short digest", "mirror.corp/openshell/x@sha256:abc", []*Policy{corp}, deny, ReasonImageReferenceInvalid, "not valid"},
		{"unknown algorithm", "mirror.corp/openshell/x@sha1:" + strings.Repeat("a", 40), []*Policy{corp}, deny, ReasonImageReferenceInvalid, ""},
		// Union of policies.
		{"union: second policy allows", "tags.corp/dev/app:1", []*Policy{corp, tags}, deny, ReasonAllowed, "allowed by OpenShellImagePolicy tags-ok"},
		{"union: tag allowed by one, digest required by other", "tags.corp/dev/app:1", []*Policy{tags, corp}, deny, ReasonAllowed, ""},
		{"union: none allows", "evil.io/x" + sha, []*Policy{corp, tags}, deny, ReasonImageNotMirrored, "(corp, tags-ok)"},
		// No policy in the namespace.
		{"no policy, gateway allows", "evil.io/x:latest", nil, allow, ReasonNoPolicy, "namespace team-a has no OpenShellImagePolicy"},
		{"no policy, gateway denies", "mirror.corp/openshell" + sha, nil, deny, ReasonImageNotAllowed, "gateway denies images in namespaces without one"},
		// Default image and invalid input.
		{"empty image uses default", "", []*Policy{corp}, deny, ReasonDefaultImage, "relatedImages"},
		{"uppercase path", "mirror.corp/OpenShell/base" + sha, []*Policy{corp}, deny, ReasonImageReferenceInvalid, "must be lowercase"},
		{"unicode", "mirror.corp/openshell/bäse" + sha, []*Policy{corp}, deny, ReasonImageReferenceInvalid, ""},
		{"unicode homoglyph host", "mіrror.corp/openshell/base" + sha, []*Policy{corp}, deny, ReasonImageReferenceInvalid, ""},
		{"oversized", "mirror.corp/openshell/" + strings.Repeat("x", 2000), []*Policy{corp}, deny, ReasonImageReferenceInvalid, "limit is 1024"},
		{"url scheme", "https://mirror.corp/openshell/base", []*Policy{corp}, deny, ReasonImageReferenceInvalid, "use a reference such as"},
		{"path traversal", "mirror.corp/openshell/../evil" + sha, []*Policy{corp}, deny, ReasonImageReferenceInvalid, ""},
		{"whitespace", "mirror.corp/openshell/base\n", []*Policy{corp}, deny, ReasonImageReferenceInvalid, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := Evaluate(tt.image, tt.policies, tt.opts)
			if d.Reason != tt.reason {
				t.Fatalf("Evaluate(%q).Reason = %s (%s), want %s", tt.image, d.Reason, d.Message, tt.reason)
			}
			wantAllowed := tt.reason == ReasonAllowed || tt.reason == ReasonNoPolicy || tt.reason == ReasonDefaultImage
			if d.Allowed != wantAllowed {
				t.Fatalf("Evaluate(%q).Allowed = %v, want %v", tt.image, d.Allowed, wantAllowed)
			}
			if !strings.Contains(d.Message, tt.msg) {
				t.Fatalf("message %q does not contain %q", d.Message, tt.msg)
			}
			if d.Message == "" {
				t.Fatal("empty message")
			}
		})
	}
}

func TestCompileReportsInvalidEntries(t *testing.T) {
	p := compile("p", true, []string{"mirror.corp/ok", "library/ubuntu", "Mirror.Corp/Bad", "mirror.corp/ok"},
		openshellv1alpha1.ImageMirror{Source: "docker.io/library", Mirrors: []string{"*.wild", "mirror.corp/hub"}},
		openshellv1alpha1.ImageMirror{Source: "quay.io", Mirrors: []string{"bad mirror"}},
		openshellv1alpha1.ImageMirror{Source: "bad source", Mirrors: []string{"mirror.corp/x"}},
	)
	var fields []string
	for _, e := range p.Invalid {
		fields = append(fields, e.Field)
	}
	want := "spec.allowedMirrors[1] spec.allowedMirrors[2] spec.mirrors[0].mirrors[0] spec.mirrors[1].mirrors[0] spec.mirrors[2].source"
	if got := strings.Join(fields, " "); got != want {
		t.Fatalf("invalid fields = %s\nwant %s", got, want)
	}
	// Duplicates count once; the mapping with no usable mirror is dropped.
	if p.Len() != 2 {
		t.Fatalf("Len = %d, want 2 (mirror.corp/ok and docker.io/library)", p.Len())
	}
	if d := Evaluate("quay.io/x/y"+sha, []*Policy{p}, Options{}); d.Reason != ReasonImageNotMirrored {
		t.Fatalf("a source without usable mirrors must not allow images: %+v", d)
	}
}

func TestDirectAllowanceWinsOverMapping(t *testing.T) {
	p := compile("p", true, []string{"quay.io/org"},
		openshellv1alpha1.ImageMirror{Source: "quay.io/org", Mirrors: []string{"mirror.corp/org"}})
	d := Evaluate("quay.io/org/app"+sha, []*Policy{p}, Options{})
	if !d.Allowed || strings.Contains(d.Message, "mirrored to") {
		t.Fatalf("want a direct allowance, got %+v", d)
	}
}
