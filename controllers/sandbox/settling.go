package sandbox

import (
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/gwconn"
)

// settleWindow is how long the status write of a sandbox just created at
// the gateway waits for it to become Ready. Most sandboxes get there well
// within it, so their whole way to Ready costs one status write instead of
// one at the create and one at Ready (custom-resource writes are the API
// server's most expensive requests); a slower one reports Provisioning
// when the window ends.
const settleWindow = time.Second

// settled is what a CreateSandbox answer told the operator: the status
// fields that say where the sandbox lives, for one incarnation of the
// object (its UID).
type settled struct {
	uid                          types.UID
	gateway, workspace, name, id string
	specHash, policyHash         string
	providers                    []string
	resources                    *openshellv1alpha1.AppliedResources
}

// settlingCreates holds, for each sandbox created at the gateway whose
// status write is waiting (settleWindow), what the create answered; the
// sandbox reconciler is its only user. Losing it (a restart) loses
// nothing: the next reconcile's CreateSandbox meets ALREADY_EXISTS and
// adopts the gateway sandbox by its owner UID, and a deletion asks the
// gateway by the names the operator derives.
type settlingCreates struct {
	mu sync.Mutex
	m  map[client.ObjectKey]settled
}

// hold remembers the gateway sandbox sb's status now names.
func (s *settlingCreates) hold(sb *openshellv1alpha1.OpenShellSandbox) {
	st := sb.Status
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[client.ObjectKey]settled{}
	}
	s.m[client.ObjectKeyFromObject(sb)] = settled{uid: sb.UID, gateway: st.Gateway, workspace: st.Workspace, name: st.GatewaySandboxName,
		id: st.SandboxID, specHash: st.AppliedSpecHash, policyHash: st.AppliedPolicyHash, providers: slices.Clone(st.AttachedProviders),
		resources: st.AppliedResources.DeepCopy()}
}

// restore puts what a held create answered into sb's status, unless status
// already records a gateway sandbox (then the entry is done with) or the
// entry is another incarnation's. It reports whether it restored.
func (s *settlingCreates) restore(sb *openshellv1alpha1.OpenShellSandbox) bool {
	key := client.ObjectKeyFromObject(sb)
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.m[key]
	if !ok {
		return false
	}
	if sb.Status.SandboxID != "" || c.uid != sb.UID {
		delete(s.m, key)
		return false
	}
	st := &sb.Status
	st.Gateway, st.Workspace, st.GatewaySandboxName, st.SandboxID = c.gateway, c.workspace, c.name, c.id
	st.AppliedSpecHash, st.AppliedPolicyHash, st.AttachedProviders = c.specHash, c.policyHash, slices.Clone(c.providers)
	st.AppliedResources = c.resources.DeepCopy()
	return true
}

// forget drops the entry of a released sandbox.
func (s *settlingCreates) forget(key client.ObjectKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, key)
}

// holdable says whether the status write of this reconcile may wait for the
// sandbox to settle: only a first report (nothing was ever written, so
// nothing shown goes stale) of a sandbox this reconcile created and that is
// still on its way to Ready.
func holdable(orig, sb *openshellv1alpha1.OpenShellSandbox, created bool) bool {
	return created && orig.Status.Phase == "" && orig.Status.SandboxID == "" && sb.Status.SandboxID != "" &&
		sb.Status.Phase == openshellv1alpha1.SandboxPhaseProvisioning
}

// busyHold is how long a sandbox nothing was reported for yet waits,
// silently, for a gateway slot (the bulkhead refusing: busy, retried in
// 1-2 s) before its status says it is waiting for the gateway.
const busyHold = 10 * time.Second

// heldForSlot says whether the status write of a reconcile the bulkhead
// refused may wait: nothing was ever reported (nothing shown goes stale),
// nothing was created at the gateway in this reconcile, and the sandbox is
// younger than busyHold. Under overload the write would otherwise be one
// more custom-resource write per sandbox (Pending) exactly when the API
// server can least afford it.
func heldForSlot(orig, sb *openshellv1alpha1.OpenShellSandbox, err error, now time.Time) bool {
	return gwconn.NotNow(err) && orig.Status.Phase == "" && sb.Status.SandboxID == "" &&
		now.Sub(orig.CreationTimestamp.Time) < busyHold
}
