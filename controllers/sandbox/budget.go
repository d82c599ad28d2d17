package sandbox

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/index"
	"github.com/openshell/openshell-operator/internal/sandboxcontrols"
)

// budgetLedger remembers the sandboxes this reconciler accepted under a
// namespace budget whose acceptance the cache does not show yet: a create
// in flight at the gateway, or one whose status write has not landed.
// Without it a sandbox created in the same second as an accepted one, with
// a name that sorts first, saw neither an earlier peer nor a running one
// and was accepted too — both ran, over the budget.
//
// Each namespace has a lock of its own that spans listing the namespace's
// sandboxes (from the cache), choosing the charged ones, evaluating and
// recording the decision, so two concurrent reconciles in one namespace
// charge each other. An entry stays until the sandbox is released or
// another incarnation takes its name, is refused while it does not run, or
// the cache shows it running or accepted for its current generation. Only
// the leader reconciles, so one process's ledger is enough; after a
// restart the cache's status carries the same facts, because a first
// status write is never held where a namespace budget applies (sync). The
// sandbox reconciler is its only user.
type budgetLedger struct {
	mu     sync.Mutex
	shards map[string]*budgetShard
}

// budgetShard is one namespace's part of the ledger.
type budgetShard struct {
	mu       sync.Mutex
	accepted map[string]acceptance // by sandbox name
}

// acceptance is one accepted sandbox: its incarnation, and what it was
// charged with (its working copy: with what its template and the
// namespace defaults gave it, which the cache's spec leaves out until its
// status shows them).
type acceptance struct {
	uid       types.UID
	resources *corev1.ResourceRequirements
	gpu       *openshellv1alpha1.SandboxGPU
}

// lock holds namespace's shard until the returned func is called.
func (l *budgetLedger) lock(namespace string) (*budgetShard, func()) {
	l.mu.Lock()
	if l.shards == nil {
		l.shards = map[string]*budgetShard{}
	}
	s := l.shards[namespace]
	if s == nil {
		s = &budgetShard{accepted: map[string]acceptance{}}
		l.shards[namespace] = s
	}
	l.mu.Unlock()
	s.mu.Lock()
	return s, s.mu.Unlock
}

// forget drops a released sandbox's entry.
func (l *budgetLedger) forget(key client.ObjectKey) {
	s, unlock := l.lock(key.Namespace)
	defer unlock()
	delete(s.accepted, key.Name)
}

// record notes sb as accepted (or not) under its namespace's budget. Call
// with the lock held. A refused sandbox that runs keeps its entry (it still
// runs, and the cache may not show it yet); charged drops it once the cache
// does.
func (s *budgetShard) record(sb *openshellv1alpha1.OpenShellSandbox, accepted bool) {
	if !accepted && sb.Status.SandboxID == "" {
		delete(s.accepted, sb.Name)
		return
	}
	if accepted {
		s.accepted[sb.Name] = acceptance{uid: sb.UID, resources: sb.Spec.Resources.DeepCopy(), gpu: sb.Spec.GPU.DeepCopy()}
	}
}

// charged picks, from the namespace's sandboxes on sb's gateway (read from
// the cache under the lock), those charged before sb (CheckBudget then
// skips the rejected and deleted), and drops the entries the cache now
// makes needless. Call with the lock held.
func (s *budgetShard) charged(sb *openshellv1alpha1.OpenShellSandbox, peers []openshellv1alpha1.OpenShellSandbox) []openshellv1alpha1.OpenShellSandbox {
	here := func(o *openshellv1alpha1.OpenShellSandbox) bool {
		a, ok := s.accepted[o.Name]
		if ok && o != sb && (a.uid != o.UID || o.Status.SandboxID != "" || acceptedNow(o)) {
			delete(s.accepted, o.Name) // another incarnation's, or the cache shows it
		}
		return ok && a.uid == o.UID
	}
	self := accepted(sb, here(sb))
	var out []openshellv1alpha1.OpenShellSandbox
	for i := range peers {
		p := &peers[i]
		if p.UID == sb.UID {
			continue
		}
		inLedger := here(p)
		if !chargedBefore(sb, p, self, accepted(p, inLedger)) {
			continue
		}
		if a, ok := s.accepted[p.Name]; inLedger && ok {
			// Charged with what it was accepted with: what it inherits
			// is not in the cache's spec, nor yet in its status.
			c := p.DeepCopy()
			c.Spec.Resources, c.Spec.GPU = a.resources.DeepCopy(), a.gpu.DeepCopy()
			out = append(out, *c)
			continue
		}
		out = append(out, *sandboxcontrols.Effective(p))
	}
	return out
}

// acceptedNow says whether a sandbox's status accepts its current spec.
func acceptedNow(sb *openshellv1alpha1.OpenShellSandbox) bool {
	c := meta.FindStatusCondition(sb.Status.Conditions, openshellv1alpha1.ConditionAccepted)
	return c != nil && c.Status == "True" && c.ObservedGeneration == sb.Generation
}

// accepted says whether a sandbox runs or was accepted: for its current
// spec by its status (an acceptance of an earlier spec does not let an
// edit jump the queue), or by this reconciler a moment ago (here).
func accepted(sb *openshellv1alpha1.OpenShellSandbox, here bool) bool {
	return here || sb.Status.SandboxID != "" || acceptedNow(sb)
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
// has one) charged under the namespace's ledger lock: the namespace's
// sandboxes are listed, those charged before sb chosen, the gates run and
// the acceptance recorded as one step.
func (r *Reconciler) evaluateCharged(ctx context.Context, sb *openshellv1alpha1.OpenShellSandbox, obs observed) (bool, error) {
	if !budgeted(obs) {
		r.budget.forget(client.ObjectKeyFromObject(sb)) // a budget removed leaves no stale entry
		return evaluate(sb, obs), nil
	}
	shard, unlock := r.budget.lock(sb.Namespace)
	defer unlock()
	peers := &openshellv1alpha1.OpenShellSandboxList{}
	// Read only (charged copies what it keeps): no deep copy of every peer.
	if err := r.Client.List(ctx, peers, client.InNamespace(sb.Namespace), client.UnsafeDisableDeepCopy,
		client.MatchingFields{index.SandboxGateway: sb.GatewayKey().String()}); err != nil {
		return false, fmt.Errorf("list the namespace's sandboxes on gateway %s: %w", sb.GatewayKey(), err)
	}
	obs.budgetPeers = shard.charged(sb, peers.Items)
	ok := evaluate(sb, obs)
	shard.record(sb, meta.IsStatusConditionTrue(sb.Status.Conditions, openshellv1alpha1.ConditionAccepted))
	return ok, nil
}

// budgeted says whether the sandbox's gateway has a namespace budget.
func budgeted(obs observed) bool {
	return obs.gateway != nil && obs.gateway.Spec.SandboxControls.NamespaceBudget != nil
}
