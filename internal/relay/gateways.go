package relay

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authentication/user"
	"sigs.k8s.io/controller-runtime/pkg/client"

	accessv1alpha1 "github.com/openshell/openshell-operator/api/access/v1alpha1"
	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/gatewayapi"
	openshellv1 "github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/openshellv1"
	"github.com/openshell/openshell-operator/internal/gatewayline"
	"github.com/openshell/openshell-operator/internal/gwconn"
	"github.com/openshell/openshell-operator/internal/sandboxspec"
)

// ResolverGateways opens a sandbox's gateway with the operator's own
// connections. The sandbox's names at the gateway are derived from its
// namespace and name, as the operator derives them, never taken from
// anything a tenant writes.
//
// With Tokens set, calls to a gateway that trusts the operator's issuer
// carry a token of the user's session subject (kube-session:<user>, a
// workspace member for as long as the user may use the subresource): the
// gateway then authorizes the user too, and its audit log names them. It
// is not the exchange's subject (accessv1alpha1.SessionSubjectPrefix).
type ResolverGateways struct {
	Reader   client.Reader
	Resolver *gwconn.Resolver
	Tokens   *Tokens
}

// Open implements Gateways.
func (g ResolverGateways) Open(ctx context.Context, sb *openshellv1alpha1.OpenShellSandbox, p Place, u user.Info, verb, sub string) (*Target, error) {
	gw := p.Gateway
	conn, err := g.Resolver.Connect(ctx, gw)
	if err != nil {
		return nil, err
	}
	if conn.Line == gatewayline.Legacy {
		return nil, fmt.Errorf("gateway %s runs OpenShell 0.0.x, which has no exec or log API for the relay: upgrade it to 0.1", sb.Status.Gateway)
	}
	uid := p.Namespace.UID
	t := &Target{Client: conn, Workspace: sandboxspec.WorkspaceName(sb.Namespace, uid), Sandbox: sandboxspec.SandboxName(sb.Namespace, sb.Name)}
	// The name is derived, but whoever holds a gateway token for the
	// workspace could replace the sandbox behind it: use it only while
	// it is still this object's. The check's round trip overlaps the
	// client's stream set-up; every use waits for it (Target.Verified).
	t.owner = checkOwner(ctx, conn, t, sb)
	if g.Tokens != nil && gwconn.UsesIssuer(gw) {
		grant := grant{verb: verb, name: sb.Name, sub: sub}
		if t.Token, err = g.Tokens.actAs(ctx, conn, gw, membership{gateway: sb.Status.Gateway, namespace: sb.Namespace,
			workspace: t.Workspace, subject: accessv1alpha1.SessionSubjectPrefix + u.GetName()}, u, grant); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// checkOwner starts reading the sandbox at the gateway and checking that
// it is sb's (its owner label names sb's UID), and keeps how to check it
// again (Target.CheckOwnerAgain).
func checkOwner(ctx context.Context, conn openshellv1.OpenShellClient, t *Target, sb *openshellv1alpha1.OpenShellSandbox) *ownerCheck {
	c := &ownerCheck{done: make(chan struct{})}
	c.again = func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, checkTimeout)
		defer cancel()
		got, err := conn.GetSandbox(ctx, &openshellv1.GetSandboxRequest{Name: t.Sandbox, WorkspaceScope: gatewayapi.Workspace(t.Workspace)})
		if err != nil {
			return fmt.Errorf("read sandbox %s at the gateway: %w", t.Sandbox, err)
		}
		if owner := got.GetSandbox().GetMetadata().GetLabels()[sandboxspec.LabelOwnerUID]; owner != string(sb.UID) {
			return fmt.Errorf("sandbox %s at gateway %s is not this object's (owner %q): refusing to use it", t.Sandbox, sb.Status.Gateway, owner)
		}
		return nil
	}
	go func() {
		defer close(c.done)
		c.err = c.again(context.WithoutCancel(ctx))
	}()
	return c
}

// ownerCheck is the outcome of checkOwner, once done is closed, and the
// check itself, to run again.
type ownerCheck struct {
	done  chan struct{}
	err   error
	again func(context.Context) error
}

// Place is what a session reads of the cluster before it opens the
// sandbox's gateway, once: the gateway its status names, and its namespace
// (whose UID names the workspace, and whose requester holds the session
// on a gateway that admits every namespace).
type Place struct {
	Gateway   *openshellv1alpha1.OpenShellGateway
	Namespace *corev1.Namespace
}

// readPlace reads sb's gateway and namespace, side by side.
func readPlace(ctx context.Context, r client.Reader, sb *openshellv1alpha1.OpenShellSandbox) (Place, error) {
	nsc := make(chan error, 1)
	ns := &corev1.Namespace{}
	go func() {
		if err := r.Get(ctx, client.ObjectKey{Name: sb.Namespace}, ns); err != nil {
			nsc <- fmt.Errorf("read namespace %s: %w", sb.Namespace, err)
			return
		}
		nsc <- nil
	}()
	gw, err := lookupGateway(ctx, r, sb.Status.Gateway)
	if nsErr := <-nsc; err == nil {
		err = nsErr
	}
	if err != nil {
		return Place{}, err
	}
	return Place{Gateway: gw, Namespace: ns}, nil
}

// lookupGateway reads the gateway a sandbox's status names
// ("namespace/name").
func lookupGateway(ctx context.Context, r client.Reader, key string) (*openshellv1alpha1.OpenShellGateway, error) {
	ns, name, ok := strings.Cut(key, "/")
	if !ok {
		return nil, fmt.Errorf("the sandbox records no gateway")
	}
	gw := &openshellv1alpha1.OpenShellGateway{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, gw); err != nil {
		return nil, fmt.Errorf("read gateway %s: %w", key, err)
	}
	return gw, nil
}

// namespaceUID is the UID of the namespace's current incarnation, which
// its workspace name is derived from.
func namespaceUID(ctx context.Context, r client.Reader, name string) (types.UID, error) {
	ns := &corev1.Namespace{}
	if err := r.Get(ctx, client.ObjectKey{Name: name}, ns); err != nil {
		return "", fmt.Errorf("read namespace %s: %w", name, err)
	}
	return ns.UID, nil
}
