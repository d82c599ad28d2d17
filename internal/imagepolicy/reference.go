// Package imagepolicy decides whether a sandbox image may be used in a
// namespace, given the namespace's OpenShellImagePolicy allowlists. It
// parses references strictly (distribution/reference, the parser the
// kubelet and the container runtimes share), matches locations at path
// boundaries with ImageDigestMirrorSet semantics, and explains every denial
// with a stable reason and a message a user can act on.
package imagepolicy

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/distribution/reference"
)

// Anchored forms of the reference grammar's own expressions.
var (
	anchoredDomain = regexp.MustCompile(`^(?:` + reference.DomainRegexp.String() + `)$`)
	anchoredName   = regexp.MustCompile(`^(?:` + reference.NameRegexp.String() + `)$`)
)

// MaxReferenceLength bounds what is parsed (the CRD allows 1024 bytes).
const MaxReferenceLength = 1024

// Reference is a parsed and normalised image reference: "ubuntu" becomes
// docker.io/library/ubuntu.
type Reference struct {
	// Normalized is the full reference, e.g. docker.io/library/ubuntu:22.04.
	Normalized string
	// Host is the registry host with its port, lower case (docker.io, mirror.corp:5000).
	Host string
	// Path is the repository path without the host (library/ubuntu).
	Path string
	// Tag is empty when the reference has none.
	Tag string
	// Digest is algorithm:hex, empty when the reference has none.
	Digest string
}

// Location is Host/Path.
func (r Reference) Location() string { return r.Host + "/" + r.Path }

// ParseReference parses and normalises an image reference. Digests are
// validated (registered algorithm, exact hex length); repository paths must
// be lower case; registry hosts are case-insensitive and lower-cased.
func ParseReference(image string) (Reference, error) {
	if image == "" {
		return Reference{}, errors.New("image reference is empty")
	}
	if len(image) > MaxReferenceLength {
		return Reference{}, fmt.Errorf("image reference is %d bytes long; the limit is %d", len(image), MaxReferenceLength)
	}
	if strings.TrimSpace(image) != image {
		return Reference{}, errors.New("image reference has leading or trailing white space")
	}
	named, err := reference.ParseNormalizedNamed(image)
	if err != nil {
		return Reference{}, fmt.Errorf("image reference %q is not valid: %w", image, err)
	}
	ref := Reference{
		Host: strings.ToLower(reference.Domain(named)),
		Path: reference.Path(named),
	}
	// "UPPER/app" names host UPPER only because upper case is not allowed in
	// paths; lower-cased it would mean docker.io/upper/app. Refuse the
	// ambiguity instead of guessing.
	if !strings.ContainsAny(ref.Host, ".:") && ref.Host != "localhost" {
		return Reference{}, fmt.Errorf("image reference %q: %q is read as a registry host only because of its upper-case letters; write the host in lower case with its domain or port, or the repository in lower case",
			image, reference.Domain(named))
	}
	// Docker Hub's names are normalised (library/ added, index.docker.io
	// folded into docker.io) only when the host is written in lower case:
	// "doCker.io/x" parses as docker.io/x, which read again is
	// docker.io/library/x, another repository. Refuse it rather than judge
	// one name and have the runtime pull another.
	if domain := reference.Domain(named); domain != ref.Host && (ref.Host == "docker.io" || ref.Host == "index.docker.io") {
		return Reference{}, fmt.Errorf("image reference %q: write Docker Hub's host %q in lower case", image, domain)
	}
	if t, ok := named.(reference.Tagged); ok {
		ref.Tag = t.Tag()
	}
	if d, ok := named.(reference.Digested); ok {
		dg := d.Digest()
		if err := dg.Validate(); err != nil {
			return Reference{}, fmt.Errorf("image reference %q has an invalid digest: %w", image, err)
		}
		ref.Digest = dg.String()
	}
	ref.Normalized = ref.Location()
	if ref.Tag != "" {
		ref.Normalized += ":" + ref.Tag
	}
	if ref.Digest != "" {
		ref.Normalized += "@" + ref.Digest
	}
	return ref, nil
}

// Scope is an allowlist location: a registry host (with optional port, or a
// "*." wildcard for subdomains as in ImageDigestMirrorSet sources) and an
// optional repository path prefix.
type Scope struct {
	// Host is lower case; "*.example.com" matches any subdomain of example.com.
	Host string
	// Path is a repository path prefix; empty matches the whole registry.
	Path string
}

// String renders the scope as written in a policy.
func (s Scope) String() string {
	if s.Path == "" {
		return s.Host
	}
	return s.Host + "/" + s.Path
}

// Wildcard reports whether the scope's host is a "*." pattern.
func (s Scope) Wildcard() bool { return strings.HasPrefix(s.Host, "*.") }

// ParseScope parses an allowlist entry or a mirror-mapping source:
// "host[:port][/path]" or "*.domain[/path]". It does not accept tags or
// digests: a scope names repositories, not images.
func ParseScope(s string) (Scope, error) {
	if s == "" {
		return Scope{}, errors.New("empty location")
	}
	if len(s) > MaxReferenceLength {
		return Scope{}, fmt.Errorf("location is %d bytes long; the limit is %d", len(s), MaxReferenceLength)
	}
	host, path, _ := strings.Cut(s, "/")
	host = strings.ToLower(host)
	if strings.HasSuffix(s, "/") {
		return Scope{}, fmt.Errorf("location %q ends with '/'", s)
	}
	probeHost := host
	wildcard := strings.HasPrefix(host, "*.")
	if wildcard {
		// A wildcard stands for at least one DNS label; validate the rest.
		probeHost = "wildcard" + host[1:]
		if strings.Contains(host, ":") {
			return Scope{}, fmt.Errorf("location %q: a wildcard host cannot have a port", s)
		}
	}
	// The host must look like a registry (contain a dot or a port, or be
	// localhost) so that "library/ubuntu" is not mistaken for a host named
	// "library"; host and path follow the reference grammar.
	if !strings.ContainsAny(probeHost, ".:") && probeHost != "localhost" {
		return Scope{}, fmt.Errorf("location %q must start with a registry host such as registry.example.com or registry:5000", s)
	}
	if !anchoredDomain.MatchString(probeHost) || (path != "" && !anchoredName.MatchString(probeHost+"/"+path)) {
		return Scope{}, fmt.Errorf("location %q is not a valid registry location: want host[:port][/lower-case/path] without tag or digest", s)
	}
	return Scope{Host: host, Path: path}, nil
}

// Contains reports whether a reference lies within the scope: same host
// (ports matter), and the path equals the prefix or continues it after a
// '/' (mirror.corp/openshell does not contain mirror.corp/openshell-evil).
func (s Scope) Contains(r Reference) bool {
	if s.Wildcard() {
		if strings.Contains(r.Host, ":") || !strings.HasSuffix(r.Host, s.Host[1:]) {
			return false
		}
	} else if s.Host != r.Host {
		return false
	}
	return s.Path == "" || r.Path == s.Path || strings.HasPrefix(r.Path, s.Path+"/")
}
