package sandboxspec

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"k8s.io/apimachinery/pkg/types"
)

// MaxNameLen is the gateway's limit for sandbox and workspace names.
const MaxNameLen = 19

// WorkspaceName maps one incarnation of a Kubernetes namespace (its name
// and UID) to its gateway workspace: "ws-" and 64 bits of
// sha256(namespace/uid), the whole 19-character budget of the gateway's
// names spent on the hash. No readable prefix: it would only shorten the
// hash, and a tenant who can create namespaces could then search for a
// colliding name offline. The UID makes a re-created namespace of the same
// name a new workspace, so it never inherits the old one's providers.
// Workspaces are also labelled with their owner and verified on use (see
// WorkspaceLabels): a collision is refused, never adopted.
func WorkspaceName(namespace string, uid types.UID) string {
	sum := sha256.Sum256([]byte("ws:" + namespace + "/" + string(uid)))
	return "ws-" + hex.EncodeToString(sum[:8])
}

// Labels that record which namespace incarnation owns a gateway workspace
// or provider the operator created.
const (
	LabelNamespace    = "openshell.ai/k8s-namespace"
	LabelNamespaceUID = "openshell.ai/k8s-namespace-uid"
)

// WorkspaceLabels are the owner labels of the namespace's workspace.
func WorkspaceLabels(namespace string, uid types.UID) map[string]string {
	return map[string]string{LabelNamespace: namespace, LabelNamespaceUID: string(uid)}
}

// OwnedBy reports whether labels (of a workspace or provider found at the
// gateway) carry exactly the owner labels want.
func OwnedBy(labels, want map[string]string) bool {
	for k, v := range want {
		if labels[k] != v {
			return false
		}
	}
	return true
}

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
