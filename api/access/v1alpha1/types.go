// Package v1alpha1 is the consumer-access API (access.openshell.ai), which
// the relay serves as an aggregated API: subresources of OpenShellSandbox
// that run commands in a sandbox, read its logs, forward ports into it,
// send HTTP requests to a port it serves and exchange the caller's identity for a gateway token. Clients (the kubectl plugin, SDK users)
// need only this package.
package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// The API's coordinates.
const (
	// Group is the API group (a group of its own: subresources cannot be
	// added to a CRD's group).
	Group = "access.openshell.ai"
	// Version is its only version.
	Version = "v1alpha1"
	// Resource is the resource whose subresources are served.
	Resource = "openshellsandboxes"
	// SubresourceExec runs a command in the sandbox (create: SPDY's POST;
	// get: WebSocket's GET, as pods/exec), with kubectl exec's parameters.
	SubresourceExec = "exec"
	// SubresourceLog reads the sandbox's logs (get), with tailLines and
	// follow.
	SubresourceLog = "log"
	// SubresourceToken exchanges the caller's identity for a gateway token
	// as a workspace user of the sandbox's namespace (create).
	SubresourceToken = "token"
	// SubresourcePortForward forwards connections to ports inside the
	// sandbox (create; kubectl port-forward's protocol).
	SubresourcePortForward = "portforward"
	// SubresourceProxy sends an HTTP request to a port inside the sandbox:
	// .../openshellsandboxes/NAME/proxy/PORT/PATH. The kube-apiserver
	// checks the request's own verb (get, create, update, patch, delete);
	// the relay then checks create whatever the method, as any request
	// reaching the agent's service may make it act.
	SubresourceProxy = "proxy"
)

// SubjectPrefix marks the gateway subjects of Kubernetes identities, so
// that a cluster user can never be taken for a subject of the gateway's
// own identity provider of the same name.
const SubjectPrefix = "kube:"

// SessionSubjectPrefix marks the subject the relay acts as for a user's
// exec, log and port-forward sessions. A session needs only that
// sandbox's subresource, yet gateway membership is workspace-wide: were
// its subject the exchange's (SubjectPrefix), a token exchanged in a
// namespace where the user is a Tenant Admin would become a full
// workspace user of every namespace where they merely read a log. No
// token of this subject leaves the relay, and no user name makes an
// exchange's subject start with it.
const SessionSubjectPrefix = "kube-session:"

// SandboxToken is what openshellsandboxes/token answers: a short-lived
// gateway token for the caller as a workspace user of the sandbox's
// namespace, and where to use it.
type SandboxToken struct {
	metav1.TypeMeta `json:",inline"`
	// Token is the bearer token (never logged or recorded).
	Token string `json:"token"`
	// ExpiresAt is when the gateway stops accepting it.
	ExpiresAt metav1.Time `json:"expiresAt"`
	// Subject is the identity the gateway sees (SubjectPrefix + user).
	Subject string `json:"subject"`
	// Endpoint is the gateway's address (its status.endpoint).
	Endpoint string `json:"endpoint,omitempty"`
	// Workspace and Sandbox are the sandbox's names at the gateway.
	Workspace string `json:"workspace"`
	Sandbox   string `json:"sandbox"`
}

// Path is the API path of a subresource of a sandbox.
func Path(namespace, name, subresource string) string {
	return "/apis/" + Group + "/" + Version + "/namespaces/" + namespace + "/" + Resource + "/" + name + "/" + subresource
}
