package relay

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/gatewayline"
	"github.com/openshell/openshell-operator/internal/gwconn"
	"github.com/openshell/openshell-operator/internal/sandboxspec"
)

// ResolverGateways opens a sandbox's gateway with the operator's own
// connections. The sandbox's names at the gateway are derived from its
// namespace and name, as the operator derives them, never taken from
// anything a tenant writes.
type ResolverGateways struct {
	Reader   client.Reader
	Resolver *gwconn.Resolver
}

// Open implements Gateways.
func (g ResolverGateways) Open(ctx context.Context, sb *openshellv1alpha1.OpenShellSandbox, _ string) (*Target, error) {
	gwNS, gwName, ok := strings.Cut(sb.Status.Gateway, "/")
	if !ok {
		return nil, fmt.Errorf("the sandbox records no gateway")
	}
	gw := &openshellv1alpha1.OpenShellGateway{}
	if err := g.Reader.Get(ctx, client.ObjectKey{Namespace: gwNS, Name: gwName}, gw); err != nil {
		return nil, fmt.Errorf("read gateway %s: %w", sb.Status.Gateway, err)
	}
	conn, err := g.Resolver.Connect(ctx, gw)
	if err != nil {
		return nil, err
	}
	if conn.Line == gatewayline.Legacy {
		return nil, fmt.Errorf("gateway %s runs OpenShell 0.0.x, which has no exec or log API for the relay: upgrade it to 0.1", sb.Status.Gateway)
	}
	ns := &corev1.Namespace{}
	if err := g.Reader.Get(ctx, client.ObjectKey{Name: sb.Namespace}, ns); err != nil {
		return nil, fmt.Errorf("read namespace %s: %w", sb.Namespace, err)
	}
	return &Target{Client: conn, Workspace: sandboxspec.WorkspaceName(sb.Namespace, ns.UID),
		Sandbox: sandboxspec.SandboxName(sb.Namespace, sb.Name)}, nil
}
