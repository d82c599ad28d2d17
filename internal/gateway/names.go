package gateway

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// MaxNameLen is the gateway's limit for sandbox and workspace names.
const MaxNameLen = 19

// WorkspaceName maps a Kubernetes namespace to its gateway workspace: a
// readable prefix plus a hash of the namespace, so that long or similar
// namespaces never collide and the name obeys the gateway's limits
// (DNS-1123 label, at most 19 characters, no "--").
func WorkspaceName(namespace string) string { return shortName(namespace, "ws:"+namespace) }

// SandboxName maps namespace/name to a gateway sandbox name, unique across
// namespaces (the workspace already separates them; the hash keeps even a
// shared workspace collision-free).
func SandboxName(namespace, name string) string {
	return shortName(name, "sb:"+namespace+"/"+name)
}

// shortName is prefix (sanitised, at most 10 characters) + "-" + 8 hex
// characters of sha256(key): 19 characters at most.
func shortName(prefix, key string) string {
	var b strings.Builder
	lastDash := true
	for _, r := range strings.ToLower(prefix) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
			lastDash = false
		case !lastDash:
			b.WriteByte('-')
			lastDash = true
		}
		if b.Len() >= 10 {
			break
		}
	}
	p := strings.Trim(b.String(), "-")
	if len(p) > 10 {
		p = strings.TrimRight(p[:10], "-")
	}
	if p == "" {
		p = "x"
	}
	sum := sha256.Sum256([]byte(key))
	return p + "-" + hex.EncodeToString(sum[:])[:8]
}
