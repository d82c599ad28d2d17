package sandboxspec

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"
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

// requestIDSpace is the UUID namespace of the operator's idempotency keys.
var requestIDSpace = uuid.MustParse("5b2f6a7e-2c1d-4f0b-9a51-0e6c7d3f8a14")

// RequestID is the request_id (a name-based UUID, version 5) of a
// mutation: derived from the request (request_id unset, encoded
// deterministically) and parts that tell its incarnations apart, so that
// a retry of the same request carries the same key and 0.1 gateways
// replay its result for 24 hours, while any other request gets its own.
func RequestID(req proto.Message, parts ...string) string {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(req)
	if err != nil {
		return uuid.NewString() // unencodable: no replay, as without a key
	}
	for _, p := range parts {
		b = append(append(b, 0), p...)
	}
	return uuid.NewSHA1(requestIDSpace, b).String()
}
