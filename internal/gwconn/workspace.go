package gwconn

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"golang.org/x/sync/singleflight"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/types"

	"github.com/openshell/openshell-operator/internal/gatewayapi"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/openshellv1"
	"github.com/openshell/openshell-operator/internal/sandboxspec"
)

// ConflictError says that a workspace or provider of the name the operator
// derives exists at the gateway but was not created for this owner. It is
// never adopted: adopting would hand one tenant another's sandboxes or
// credentials.
type ConflictError struct {
	// Kind is "workspace", "provider" or "provider profile".
	Kind, Name, Workspace, Gateway string
}

func (e *ConflictError) Error() string {
	where := "at gateway " + e.Gateway
	if e.Kind != "workspace" {
		where = "in workspace " + e.Workspace + " " + where
	}
	return fmt.Sprintf("%s %s %s exists but was not created for this %s (its owner labels differ); "+
		"the operator never adopts it: a gateway admin must delete it", e.Kind, e.Name, where, owner(e.Kind))
}

func owner(kind string) string {
	switch kind {
	case "workspace":
		return "namespace"
	case "provider profile":
		return "OpenShellProviderProfile"
	}
	return "OpenShellProvider"
}

// workspaces remembers, per gateway, the workspaces verified to exist and
// belong to their namespace, so that a reconcile costs no workspace call.
// One instance, owned by the Resolver, serves the sandbox and provider
// controllers: both need the same workspace and must agree on its owner.
type workspaces struct {
	known   sync.Map // gateway key + "/" + workspace → struct{}
	lookups singleflight.Group
}

// EnsureWorkspace makes sure the workspace of one namespace incarnation
// exists at the gateway and carries that namespace's owner labels, and
// returns its name. A workspace of that name with other labels is a
// *ConflictError. It reads before it creates, and concurrent workers share
// one lookup: after an operator restart every sandbox of a namespace
// reconciles at once, and the gateway should see one read, not a burst of
// CreateWorkspace calls answered AlreadyExists.
func (r *Resolver) EnsureWorkspace(ctx context.Context, conn *gatewayapi.Client, gatewayKey, namespace string, uid types.UID) (string, error) {
	ws := sandboxspec.WorkspaceName(namespace, uid)
	key := gatewayKey + "/" + ws
	if _, ok := r.workspaces.known.Load(key); ok {
		return ws, nil
	}
	want := sandboxspec.WorkspaceLabels(namespace, uid)
	_, err, _ := r.workspaces.lookups.Do(key, func() (any, error) {
		if _, ok := r.workspaces.known.Load(key); ok {
			return nil, nil
		}
		got, err := conn.GetWorkspace(ctx, &openshellv1.GetWorkspaceRequest{Name: ws})
		if grpcstatus.Code(err) == codes.NotFound {
			_, err = conn.CreateWorkspace(ctx, &openshellv1.CreateWorkspaceRequest{Name: ws, Labels: want})
			if grpcstatus.Code(err) == codes.AlreadyExists {
				// Created between our read and our create: by whom decides.
				got, err = conn.GetWorkspace(ctx, &openshellv1.GetWorkspaceRequest{Name: ws})
			}
		}
		if err != nil {
			return nil, fmt.Errorf("ensure workspace %s: %w", ws, err)
		}
		if got != nil && !sandboxspec.OwnedBy(got.GetWorkspace().GetMetadata().GetLabels(), want) {
			return nil, &ConflictError{Kind: "workspace", Name: ws, Gateway: gatewayKey}
		}
		r.workspaces.known.Store(key, struct{}{})
		return nil, nil
	})
	return ws, err
}

// ForgetWorkspace drops a workspace the gateway no longer has (a new
// database), so that the next EnsureWorkspace creates it again.
func (r *Resolver) ForgetWorkspace(gatewayKey, ws string) {
	r.workspaces.known.Delete(gatewayKey + "/" + ws)
}

// KnownWorkspaces lists the workspaces this process has verified at the
// gateway (EnsureWorkspace): each belongs to a namespace of this cluster.
// The sweep audits them even once their sandboxes are gone. A deleted
// namespace's stays listed until the process restarts; the gateway then
// answers NotFound for it, at the cost of one call a sweep.
func (r *Resolver) KnownWorkspaces(gatewayKey string) []string {
	var out []string
	r.workspaces.known.Range(func(k, _ any) bool {
		// Keys are gateway key + "/" + workspace; neither a gateway's
		// namespace, its name nor a workspace holds a slash.
		if ws, ok := strings.CutPrefix(k.(string), gatewayKey+"/"); ok {
			out = append(out, ws)
		}
		return true
	})
	return out
}
