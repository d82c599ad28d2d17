package sandbox

import (
	"context"
	"fmt"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/index"
)

// budgetLedger remembers the sandboxes this reconciler accepted under a
// namespace budget whose acceptance the cache does not show yet: a create
// in flight at the gateway, or one whose status write waits to settle
// (settleWindow). Without it a sandbox created in the same second as an
// accepted one, with a name that sorts first, saw neither an earlier peer
// nor a running one and was accepted too — both ran, over the budget.
//
// Its lock spans listing the namespace's sandboxes (from the cache),
// choosing the charged ones, evaluating and recording the decision, so two
// concurrent reconciles in one namespace charge each other. An entry stays
// until the sandbox is refused or released, or the cache shows it running
// (a create's status write can wait for the sandbox to settle, holding the
// ID in memory only). Only the leader reconciles, so one process's ledger
// is enough; after a restart the cache's Accepted conditions carry the
// same facts. The sandbox reconciler is its only user.
type budgetLedger struct {
	mu       sync.Mutex
	accepted map[client.ObjectKey]types.UID
}

// lock holds the ledger until the returned func is called.
func (l *budgetLedger) lock() func() {
	l.mu.Lock()
	return l.mu.Unlock
}

// record notes sb as accepted (or not) under its namespace's budget. Call
// with the lock held. sb's own status may show it running before the cache
// does (a held status write), so that does not drop the entry: charged
// does, once the cache shows it.
func (l *budgetLedger) record(sb *openshellv1alpha1.OpenShellSandbox, accepted bool) {
	key := client.ObjectKeyFromObject(sb)
	if !accepted {
		delete(l.accepted, key)
		return
	}
	if l.accepted == nil {
		l.accepted = map[client.ObjectKey]types.UID{}
	}
	l.accepted[key] = sb.UID
}

// forget drops a released sandbox's entry.
func (l *budgetLedger) forget(key client.ObjectKey) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.accepted, key)
}

// charged picks, from the namespace's sandboxes on sb's gateway (read from
// the cache under the lock), those charged before sb (CheckBudget then
// skips the rejected and deleted), and drops the entries the cache now
// makes needless: another incarnation's, or one the cache shows running.
// Call with the lock held.
func (l *budgetLedger) charged(sb *openshellv1alpha1.OpenShellSandbox, peers []openshellv1alpha1.OpenShellSandbox) []openshellv1alpha1.OpenShellSandbox {
	acceptedHere := func(o *openshellv1alpha1.OpenShellSandbox) bool {
		key := client.ObjectKeyFromObject(o)
		uid, ok := l.accepted[key]
		if ok && (uid != o.UID || o.Status.SandboxID != "") && o != sb {
			delete(l.accepted, key)
		}
		return ok && uid == o.UID
	}
	self := accepted(sb, acceptedHere(sb))
	var out []openshellv1alpha1.OpenShellSandbox
	for i := range peers {
		p := &peers[i]
		if p.UID == sb.UID {
			continue
		}
		if chargedBefore(sb, p, self, accepted(p, acceptedHere(p))) {
			out = append(out, *p)
		}
	}
	return out
}

// accepted says whether a sandbox runs or was accepted: by its status, or by
// this reconciler a moment ago (here).
func accepted(sb *openshellv1alpha1.OpenShellSandbox, here bool) bool {
	return here || sb.Status.SandboxID != "" || meta.IsStatusConditionTrue(sb.Status.Conditions, openshellv1alpha1.ConditionAccepted)
}

// chargedBefore decides whether peer is charged before sb: whatever its age
// once it runs; before sb when it was accepted and sb was not; and
// otherwise the earlier first — by creation time, then by name, so that
// sandboxes in the same state resolve the same way whichever is reconciled
// first (two accepted ones that a cut budget no longer fits both do not
// both lose their place). Pure.
func chargedBefore(sb, peer *openshellv1alpha1.OpenShellSandbox, sbAccepted, peerAccepted bool) bool {
	if peer.Status.SandboxID != "" {
		return true
	}
	if peerAccepted != sbAccepted {
		return peerAccepted
	}
	return peer.CreationTimestamp.Before(&sb.CreationTimestamp) ||
		(peer.CreationTimestamp.Equal(&sb.CreationTimestamp) && peer.Name < sb.Name)
}

// evaluateCharged is evaluate with the namespace budget (if the gateway
// has one) charged under the ledger's lock: the namespace's sandboxes are
// listed, those charged before sb chosen, the gates run and the acceptance
// recorded as one step.
func (r *Reconciler) evaluateCharged(ctx context.Context, sb *openshellv1alpha1.OpenShellSandbox, obs observed) (bool, error) {
	if obs.gateway == nil || obs.gateway.Spec.SandboxControls.NamespaceBudget == nil {
		return evaluate(sb, obs), nil
	}
	defer r.budget.lock()()
	peers := &openshellv1alpha1.OpenShellSandboxList{}
	if err := r.Client.List(ctx, peers, client.InNamespace(sb.Namespace),
		client.MatchingFields{index.SandboxGateway: sb.GatewayKey().String()}); err != nil {
		return false, fmt.Errorf("list the namespace's sandboxes on gateway %s: %w", sb.GatewayKey(), err)
	}
	obs.budgetPeers = r.budget.charged(sb, peers.Items)
	ok := evaluate(sb, obs)
	r.budget.record(sb, meta.IsStatusConditionTrue(sb.Status.Conditions, openshellv1alpha1.ConditionAccepted))
	return ok, nil
}
