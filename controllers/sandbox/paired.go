package sandbox

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/gwconn"
	"github.com/openshell/openshell-operator/internal/index"
	render "github.com/openshell/openshell-operator/internal/render/gateway"
)

// pairedPoll is how soon a sandbox waiting for its paired namespace is
// looked at again: the namespace is created, and the allowlist written, by
// other reconcilers within moments.
const pairedPoll = 2 * time.Second

// conflictPoll is how often a sandbox whose paired name is taken looks
// again.
const conflictPoll = time.Minute

// observePaired says why the tenant namespace's paired namespace cannot
// take sandboxes on gw yet (nil: it can): it does not exist yet, it is not
// the operator's (never adopted), or the gateway's allowlist, as the
// operator wrote it, does not name it yet. Both reads come from the cache.
func (r *Reconciler) observePaired(ctx context.Context, gw *openshellv1alpha1.OpenShellGateway, tenant string, uid types.UID) (*refusal, error) {
	name := render.PairedNamespace(tenant, uid)
	if len(r.WatchedNamespaces) > 0 {
		return &refusal{phase: openshellv1alpha1.SandboxPhaseRejected, reason: openshellv1alpha1.SandboxReasonWorkspaceModeUnsupported,
			message: fmt.Sprintf("gateway %s runs sandboxes in workspace mode Operator, in namespaces the operator creates at run time, but this operator "+
				"is installed for namespaces %s only: the platform admin must install it for all namespaces (OLM install mode AllNamespaces) "+
				"or use workspace mode Shared", gwconn.Key(gw), strings.Join(r.WatchedNamespaces, ", "))}, nil
	}
	pending := func(format string, args ...any) *refusal {
		return &refusal{phase: openshellv1alpha1.SandboxPhasePending, reason: openshellv1alpha1.SandboxReasonWorkspaceNamespacePending,
			message: fmt.Sprintf(format, args...)}
	}
	ns, err := index.GetNamespace(ctx, r.Client, name)
	switch {
	case apierrors.IsNotFound(err):
		return pending("the operator is creating namespace %s, where this namespace's sandboxes run on gateway %s (workspace mode Operator)", name, gwconn.Key(gw)), nil
	case err != nil:
		return nil, err
	}
	if t, u, ok := render.PairedTenant(gw, ns); !ok || t != tenant || u != uid {
		return &refusal{phase: openshellv1alpha1.SandboxPhasePending, reason: openshellv1alpha1.SandboxReasonWorkspaceNamespaceConflict,
			message: fmt.Sprintf("namespace %s, where gateway %s would run this namespace's sandboxes, exists but the operator did not create it for namespace %s "+
				"and this gateway: it is never adopted. A cluster admin must delete it; or this namespace's sandboxes already use another gateway in workspace mode "+
				"Operator (a namespace's sandboxes use at most one)", name, gwconn.Key(gw), tenant)}, nil
	}
	if !ns.DeletionTimestamp.IsZero() || render.Draining(ns) {
		return pending("namespace %s is being deleted (its last sandbox went); it is created again once it is gone", name), nil
	}
	cm := &corev1.ConfigMap{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: gw.Namespace, Name: render.NamesFor(gw).Workspaces}, cm); err != nil {
		if apierrors.IsNotFound(err) {
			return pending("waiting for gateway %s's namespace allowlist", gwconn.Key(gw)), nil
		}
		return nil, err
	}
	if names, err := render.WorkspacesIn(cm); err != nil || !slices.Contains(names, name) {
		return pending("waiting for gateway %s's namespace allowlist to name %s", gwconn.Key(gw), name), nil
	}
	return nil, nil
}
