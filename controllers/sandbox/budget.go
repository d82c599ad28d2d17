package sandbox

import (
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
)

// budgetLedger remembers the sandboxes this reconciler accepted under a
// namespace budget whose acceptance the cache does not show yet: a create
// in flight at the gateway, or one whose status write waits to settle
// (settleWindow). Without it a sandbox created in the same second as an
// accepted one, with a name that sorts first, saw neither an earlier peer
// nor a running one and was accepted too — both ran, over the budget.
//
// Its lock spans choosing the charged peers, evaluating and recording the
// decision, so two concurrent reconciles in one namespace charge each
// other. Only the leader reconciles, so one process's ledger is enough;
// after a restart the cache's Accepted conditions carry the same facts.
// The sandbox reconciler is its only user.
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
// with the lock held. A sandbox whose status shows it running needs no
// entry: the cache charges it.
func (l *budgetLedger) record(sb *openshellv1alpha1.OpenShellSandbox, accepted bool) {
	key := client.ObjectKeyFromObject(sb)
	if !accepted || sb.Status.SandboxID != "" {
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

// charged picks, from the namespace's sandboxes on sb's gateway, those
// charged before sb (CheckBudget then skips the rejected and deleted).
// Call with the lock held.
func (l *budgetLedger) charged(sb *openshellv1alpha1.OpenShellSandbox, peers []openshellv1alpha1.OpenShellSandbox) []openshellv1alpha1.OpenShellSandbox {
	var out []openshellv1alpha1.OpenShellSandbox
	for _, p := range peers {
		if p.UID == sb.UID {
			continue
		}
		uid, ok := l.accepted[client.ObjectKeyFromObject(&p)]
		if chargedBefore(sb, &p, ok && uid == p.UID) {
			out = append(out, p)
		}
	}
	return out
}

// chargedBefore decides whether peer is charged before sb: whatever its age
// once it runs, was accepted (by status, or by this reconciler a moment
// ago), and otherwise the earlier first — by creation time, then by name,
// so that sandboxes neither of which is accepted yet resolve the same way
// whichever is reconciled first. Pure.
func chargedBefore(sb, peer *openshellv1alpha1.OpenShellSandbox, acceptedHere bool) bool {
	if peer.Status.SandboxID != "" || acceptedHere || meta.IsStatusConditionTrue(peer.Status.Conditions, openshellv1alpha1.ConditionAccepted) {
		return true
	}
	return peer.CreationTimestamp.Before(&sb.CreationTimestamp) ||
		(peer.CreationTimestamp.Equal(&sb.CreationTimestamp) && peer.Name < sb.Name)
}

// evaluateCharged is evaluate with the namespace budget (if the gateway
// has one) charged under the ledger's lock: the peers charged before sb
// are chosen, the gates run and the acceptance is recorded as one step.
func (r *Reconciler) evaluateCharged(sb *openshellv1alpha1.OpenShellSandbox, obs observed) bool {
	if obs.gateway == nil || obs.gateway.Spec.SandboxControls.NamespaceBudget == nil {
		return evaluate(sb, obs)
	}
	defer r.budget.lock()()
	obs.budgetPeers = r.budget.charged(sb, obs.budgetPeers)
	ok := evaluate(sb, obs)
	r.budget.record(sb, meta.IsStatusConditionTrue(sb.Status.Conditions, openshellv1alpha1.ConditionAccepted))
	return ok
}
