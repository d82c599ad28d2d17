// Package gatewayline names the OpenShell gateway release lines the
// operator speaks and decides, in one place, which line a gateway version
// belongs to. The lines differ in their wire contract (0.1.0 broke it:
// workspace selectors, deletion outcomes, enums for policy fields), their
// gateway.toml schema (v1 and v2) and their sandbox pod model (the 0.0.x
// supervisor sidecar with capabilities; the 0.1 two-pod runtime without
// any), so each line has its own client, config renderer and pod model,
// chosen here and nowhere else.
package gatewayline

import (
	"fmt"
	"strconv"
	"strings"
)

// Line is one release line of the gateway.
type Line string

const (
	// Legacy is 0.0.x from 0.0.111: schema-v1 config, sidecar supervisor.
	Legacy Line = "0.0"
	// V01 is 0.1.x: schema-v2 config, the two-pod runtime.
	V01 Line = "0.1"
)

const (
	// LegacyMinimumPatch is the oldest 0.0.x the operator speaks.
	LegacyMinimumPatch = 111
	// V01WireRelease is the 0.1 release whose own descriptors (its PyPI
	// wheel; the Makefile's OPENSHELL_WHEEL_VERSION) the operator's 0.1
	// protos are checked against, field for field (test/wire).
	V01WireRelease = "0.1.5"
	// DefaultManaged is the version a Managed gateway runs unless its
	// spec names another: the newest release whose wire is verified. The
	// operator's RELATED_IMAGE_* images are this release's.
	DefaultManaged = V01WireRelease
	// LegacyManaged is the 0.0.x release the operator still ships images
	// for (RELATED_IMAGE_LEGACY_*), so that gateways pinned to it keep
	// running until their admin moves them.
	LegacyManaged = "0.0.111"
)

// Supported says, for messages, which versions the operator speaks.
const Supported = "0.0.111 and later 0.0.x, and 0.1.x"

// Of says which line a gateway version belongs to. Versions may carry a
// leading "v" and build or pre-release suffixes ("0.1.5-dev.3+g1a2b3c"),
// as gateways report them; anything else is refused with the supported
// versions named.
func Of(version string) (Line, error) {
	major, minor, patch, err := parse(version)
	if err != nil {
		return "", fmt.Errorf("gateway version %q: %w; the operator speaks %s", version, err, Supported)
	}
	switch {
	case major == 0 && minor == 0 && patch >= LegacyMinimumPatch:
		return Legacy, nil
	case major == 0 && minor == 1:
		return V01, nil
	}
	return "", fmt.Errorf("gateway version %s is not one the operator speaks (%s)", version, Supported)
}

// AtLeast says whether version is minimum or later (both major.minor.patch,
// with the suffixes Of accepts): what a feature that a release introduced
// within a line is decided by (0.1.5's pod label allowlist, 0.1.6's
// suspend and resume).
func AtLeast(version, minimum string) bool {
	a1, a2, a3, err := parse(version)
	b1, b2, b3, err2 := parse(minimum)
	if err != nil || err2 != nil {
		return false
	}
	return [3]int{a1, a2, a3} == [3]int{b1, b2, b3} || a1 > b1 || (a1 == b1 && (a2 > b2 || (a2 == b2 && a3 > b3)))
}

// PodLabelAllowlist is the first release that refuses SandboxTemplate
// labels and annotations its driver does not allowlist
// (allowed_pod_labels, allowed_pod_annotations).
const PodLabelAllowlist = "0.1.5"

// ImportsProfiles says whether a line's gateways take provider profiles by
// import (0.1: an empty catalog until profiles are imported) rather than
// building them in (0.0.x).
func ImportsProfiles(l Line) bool { return l == V01 }

// parse reads major.minor.patch, ignoring a "v" prefix and any "-" or "+"
// suffix.
func parse(v string) (major, minor, patch int, err error) {
	v = strings.TrimPrefix(strings.TrimSpace(v), "v")
	if i := strings.IndexAny(v, "-+"); i >= 0 {
		v = v[:i]
	}
	parts := strings.Split(v, ".")
	if len(parts) != 3 {
		return 0, 0, 0, fmt.Errorf("not a major.minor.patch version")
	}
	var n [3]int
	for i, p := range parts {
		if n[i], err = strconv.Atoi(p); err != nil || n[i] < 0 {
			return 0, 0, 0, fmt.Errorf("not a major.minor.patch version")
		}
	}
	return n[0], n[1], n[2], nil
}

// Spoken says whether this build of the operator speaks a line's wire to
// its gateways: it speaks the 0.1 messages and reaches 0.0.x gateways
// through their translation (internal/gatewayapi).
func Spoken(l Line) bool { return l == Legacy || l == V01 }

// Check says, for a version a gateway reported, why the operator will not
// talk to it ("" when it will, or when nothing was reported yet).
func Check(version string) string {
	if version == "" {
		return ""
	}
	l, err := Of(version)
	switch {
	case err != nil:
		return err.Error()
	case !Spoken(l):
		return fmt.Sprintf("gateway version %s is on the %s line, whose wire this operator build does not speak (it speaks %s)", version, l, Supported)
	}
	return ""
}
