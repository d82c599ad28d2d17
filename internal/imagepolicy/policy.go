package imagepolicy

import (
	"fmt"
	"sort"
	"strings"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
)

// Reasons of an OpenShellSandbox's ImageAllowed (the image-policy
// decision). They also prefix admission messages; they never change meaning.
const (
	// ReasonAllowed: an OpenShellImagePolicy allows the image.
	ReasonAllowed = "Allowed"
	// ReasonNoPolicy: the namespace has no policy and the gateway allows that.
	ReasonNoPolicy = "NoPolicy"
	// ReasonDefaultImage: the sandbox uses the gateway's default image, which
	// the operator's relatedImages (and so oc-mirror) cover.
	ReasonDefaultImage = "DefaultImage"
	// ReasonPolicyDisabled: the gateway disables image checks.
	ReasonPolicyDisabled = "PolicyDisabled"

	// ReasonImageReferenceInvalid: the image is not a valid reference.
	ReasonImageReferenceInvalid = "ImageReferenceInvalid"
	// ReasonImageNotDigestPinned: the location is allowed but the policy
	// requires a digest and the image has only a tag.
	ReasonImageNotDigestPinned = "ImageNotDigestPinned"
	// ReasonImageNotMirrored: no policy covers the image's registry, so a
	// disconnected cluster cannot pull it.
	ReasonImageNotMirrored = "ImageNotMirrored"
	// ReasonImageNotAllowed: the registry is a known mirror but the
	// repository is outside every allowed path, or the namespace has no
	// policy and the gateway denies that.
	ReasonImageNotAllowed = "ImageNotAllowed"
	// ReasonImageNotAllowedByPlatform: the namespace allows the image but it
	// is outside the gateway's spec.imagePolicy.platformAllowlist.
	ReasonImageNotAllowedByPlatform = "ImageNotAllowedByPlatform"
)

// Entry is one compiled allowlist location.
type Entry struct {
	Scope Scope
	// Mirrors are set when the entry is a source→mirrors mapping.
	Mirrors []string
}

// InvalidEntry is an allowlist entry that could not be parsed; it is
// skipped and reported in the policy's status.
type InvalidEntry struct {
	Field   string
	Value   string
	Message string
}

// Policy is a compiled OpenShellImagePolicy: entries indexed by registry
// host, then path prefix, so that a decision costs a few map lookups
// whatever the size of the allowlist.
type Policy struct {
	Name          string
	RequireDigest bool
	// Invalid entries, in spec order.
	Invalid []InvalidEntry

	exact    map[string]map[string]*Entry // host → path prefix → entry
	wildcard map[string]map[string]*Entry // ".domain" → path prefix → entry
	entries  []*Entry
	// mirrorHosts are hosts that serve mirrors; images there that no entry
	// allows are ImageNotAllowed rather than ImageNotMirrored.
	mirrorHosts map[string]bool
}

// Compile builds a Policy from a spec. Invalid entries are collected, not fatal.
func Compile(name string, spec openshellv1alpha1.OpenShellImagePolicySpec) *Policy {
	p := &Policy{
		Name:          name,
		RequireDigest: spec.RequireDigest == nil || *spec.RequireDigest,
		exact:         map[string]map[string]*Entry{},
		wildcard:      map[string]map[string]*Entry{},
		mirrorHosts:   map[string]bool{},
	}
	for i, loc := range spec.AllowedMirrors {
		s, err := ParseScope(loc)
		if err != nil {
			p.Invalid = append(p.Invalid, InvalidEntry{fmt.Sprintf("spec.allowedMirrors[%d]", i), loc, err.Error()})
			continue
		}
		p.add(&Entry{Scope: s})
		if !s.Wildcard() {
			p.mirrorHosts[s.Host] = true
		}
	}
	for i, m := range spec.Mirrors {
		s, err := ParseScope(m.Source)
		if err != nil {
			p.Invalid = append(p.Invalid, InvalidEntry{fmt.Sprintf("spec.mirrors[%d].source", i), m.Source, err.Error()})
			continue
		}
		var mirrors []string
		for j, mirror := range m.Mirrors {
			ms, err := ParseScope(mirror)
			if err != nil || ms.Wildcard() {
				msg := "a mirror cannot be a wildcard"
				if err != nil {
					msg = err.Error()
				}
				p.Invalid = append(p.Invalid, InvalidEntry{fmt.Sprintf("spec.mirrors[%d].mirrors[%d]", i, j), mirror, msg})
				continue
			}
			mirrors = append(mirrors, ms.String())
			p.mirrorHosts[ms.Host] = true
		}
		if len(mirrors) == 0 {
			continue // no usable mirror: the source is not covered
		}
		p.add(&Entry{Scope: s, Mirrors: mirrors})
	}
	return p
}

func (p *Policy) add(e *Entry) {
	idx, host := p.exact, e.Scope.Host
	if e.Scope.Wildcard() {
		idx, host = p.wildcard, e.Scope.Host[1:]
	}
	paths := idx[host]
	if paths == nil {
		paths = map[string]*Entry{}
		idx[host] = paths
	}
	if prev, ok := paths[e.Scope.Path]; ok {
		// The same location listed twice: a direct allowance wins over a
		// mapping (it needs no redirect), otherwise keep the first.
		if prev.Mirrors != nil && e.Mirrors == nil {
			*prev = *e
		}
		return
	}
	paths[e.Scope.Path] = e
	p.entries = append(p.entries, e)
}

// Len is the number of usable entries.
func (p *Policy) Len() int { return len(p.entries) }

// match finds the entry covering r: the longest path prefix on the exact
// host, then on wildcard domains from the most specific.
func (p *Policy) match(r Reference) *Entry {
	if e := longestPrefix(p.exact[r.Host], r.Path); e != nil {
		return e
	}
	if len(p.wildcard) == 0 || strings.Contains(r.Host, ":") {
		return nil
	}
	for i := strings.IndexByte(r.Host, '.'); i >= 0; {
		if e := longestPrefix(p.wildcard[r.Host[i:]], r.Path); e != nil {
			return e
		}
		next := strings.IndexByte(r.Host[i+1:], '.')
		if next < 0 {
			break
		}
		i += next + 1
	}
	return nil
}

// longestPrefix looks up path and each of its ancestors at '/' boundaries.
func longestPrefix(paths map[string]*Entry, path string) *Entry {
	if paths == nil {
		return nil
	}
	for p := path; ; {
		if e, ok := paths[p]; ok {
			return e
		}
		i := strings.LastIndexByte(p, '/')
		if i < 0 {
			break
		}
		p = p[:i]
	}
	return paths[""]
}

// Options are the gateway's enforcement settings and the context for messages.
type Options struct {
	Namespace    string
	WhenNoPolicy openshellv1alpha1.NoPolicyAction
}

// Decision is the outcome for one image.
type Decision struct {
	Allowed bool
	Reason  string
	Message string
	// Reference is the normalised image, when it parsed.
	Reference string
}

// Evaluate decides an image against the namespace's policies, which combine
// as a union: the image is allowed when any policy allows it.
func Evaluate(image string, policies []*Policy, opts Options) Decision {
	if image == "" {
		return Decision{Allowed: true, Reason: ReasonDefaultImage,
			Message: "no image set: the gateway's default sandbox image is used (digest-pinned in the operator's relatedImages)"}
	}
	ref, err := ParseReference(image)
	if err != nil {
		return Decision{Reason: ReasonImageReferenceInvalid,
			Message: err.Error() + `; use a reference such as registry.example.com/team/agent@sha256:<64 hex digits>`}
	}
	return EvaluateReference(ref, policies, opts)
}

// EvaluateReference decides an already parsed reference.
func EvaluateReference(ref Reference, policies []*Policy, opts Options) Decision {
	d := Decision{Reference: ref.Normalized}
	if len(policies) == 0 {
		if opts.WhenNoPolicy == openshellv1alpha1.NoPolicyDeny {
			d.Reason = ReasonImageNotAllowed
			d.Message = fmt.Sprintf("image %s is not allowed: namespace %s has no OpenShellImagePolicy and the gateway denies images in namespaces without one; ask your tenant admin to create an OpenShellImagePolicy listing the mirror this image is in",
				ref.Normalized, opts.Namespace)
			return d
		}
		d.Allowed, d.Reason = true, ReasonNoPolicy
		d.Message = fmt.Sprintf("namespace %s has no OpenShellImagePolicy and the gateway allows any image there", opts.Namespace)
		return d
	}

	var needDigest []string
	onMirrorHost := false
	for _, p := range policies {
		e := p.match(ref)
		if e == nil {
			onMirrorHost = onMirrorHost || p.mirrorHosts[ref.Host]
			continue
		}
		if p.RequireDigest && ref.Digest == "" {
			needDigest = append(needDigest, p.Name)
			continue
		}
		d.Allowed, d.Reason = true, ReasonAllowed
		if e.Mirrors != nil {
			d.Message = fmt.Sprintf("image %s is allowed by OpenShellImagePolicy %s: %s is mirrored to %s",
				ref.Normalized, p.Name, e.Scope, strings.Join(e.Mirrors, ", "))
		} else {
			d.Message = fmt.Sprintf("image %s is allowed by OpenShellImagePolicy %s (mirror location %s)", ref.Normalized, p.Name, e.Scope)
		}
		return d
	}

	names := policyNames(policies)
	switch {
	case len(needDigest) > 0:
		d.Reason = ReasonImageNotDigestPinned
		d.Message = fmt.Sprintf("image %s has no digest and OpenShellImagePolicy %s requires one: mirror sets redirect only pulls by digest; pin it as %s@sha256:<digest>",
			ref.Normalized, strings.Join(needDigest, ", "), ref.Location())
	case onMirrorHost:
		d.Reason = ReasonImageNotAllowed
		d.Message = fmt.Sprintf("image %s is on mirror registry %s but outside every allowed repository of OpenShellImagePolicy %s; %s",
			ref.Normalized, ref.Host, names, closestHint(ref, policies))
	default:
		d.Reason = ReasonImageNotMirrored
		d.Message = fmt.Sprintf("image %s is not mirrored: no OpenShellImagePolicy in namespace %s (%s) allows registry location %s; %s",
			ref.Normalized, opts.Namespace, names, ref.Location(), closestHint(ref, policies))
	}
	return d
}

func policyNames(ps []*Policy) string {
	names := make([]string, 0, len(ps))
	for _, p := range ps {
		names = append(names, p.Name)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// maxListed bounds how many allowed locations a message lists.
const maxListed = 3

// closestHint names the allowed locations nearest to the image (most shared
// host labels, then path segments), so that the user sees what would work.
// It scans every entry once without allocating and formats only the few it
// lists: denials stay cheap even with 10,000 entries.
func closestHint(ref Reference, policies []*Policy) string {
	var best [maxListed]*Entry
	var scores [maxListed]int
	total := 0
	for _, p := range policies {
		for _, e := range p.entries {
			total++
			sc := similarity(ref, e.Scope)
			for i := range best {
				if best[i] == nil || sc > scores[i] || (sc == scores[i] && e.Scope.less(best[i].Scope)) {
					copy(best[i+1:], best[i:maxListed-1])
					copy(scores[i+1:], scores[i:maxListed-1])
					best[i], scores[i] = e, sc
					break
				}
			}
		}
	}
	if total == 0 {
		return "the policies list no usable location: check their status for invalid entries"
	}
	var out []string
	for _, e := range best {
		if e == nil {
			break
		}
		loc := e.Scope.String()
		if e.Mirrors != nil {
			loc += " (mirrored to " + strings.Join(e.Mirrors, ", ") + ")"
		}
		out = append(out, loc)
	}
	more := ""
	if total > len(out) {
		more = fmt.Sprintf(" (and %d more)", total-len(out))
	}
	return "closest allowed: " + strings.Join(out, "; ") + more
}

// less orders scopes for stable messages.
func (s Scope) less(o Scope) bool {
	if s.Host != o.Host {
		return s.Host < o.Host
	}
	return s.Path < o.Path
}

// similarity scores how much of a scope's location an image shares: each
// matching host label counted from the right, then (on the same host) each
// leading path segment.
func similarity(ref Reference, s Scope) int {
	score := 0
	rh, sh := ref.Host, strings.TrimPrefix(s.Host, "*.")
	for {
		ri, si := strings.LastIndexByte(rh, '.'), strings.LastIndexByte(sh, '.')
		if rh[ri+1:] != sh[si+1:] {
			break
		}
		score += 10
		if ri < 0 || si < 0 {
			break
		}
		rh, sh = rh[:ri], sh[:si]
	}
	if ref.Host != s.Host {
		return score
	}
	score += 100
	rp, sp := ref.Path, s.Path
	for sp != "" {
		rs, rrest, _ := strings.Cut(rp, "/")
		ss, srest, _ := strings.Cut(sp, "/")
		if rs != ss {
			break
		}
		score++
		rp, sp = rrest, srest
	}
	return score
}
