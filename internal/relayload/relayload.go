// Package relayload is how relay replicas tell each other, and the
// operator, how many sessions they hold: each replica keeps one
// coordination.k8s.io Lease in the relay's namespace with its open
// sessions in total, per user and per namespace. The replicas add the
// others' counts to their own when they enforce the per-user and
// per-namespace limits, and the operator scales the relay Deployment on
// the total (controllers/relayscale).
//
// A Lease lives as long as its replica's pod: it names the pod as its
// owner, so the garbage collector deletes it with the pod (a replica whose
// pod is gone stops counting without anyone renewing anything, and a
// replica whose load does not change writes nothing; a restarted container
// replaces its pod's Lease with its own counts as it starts). Others may be able
// to write Leases in that namespace (every operator of an AllNamespaces
// install may), so a Lease counts only with the relay's signature (the
// operator's issuer key, as for the membership Leases) over every field a
// reader acts on, the owner pod's UID included: a copy of an old Lease
// re-created after its pod is gone names an owner that no longer exists,
// and the garbage collector deletes it again.
package relayload

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// Label marks a replica's load Lease (value "true"): the relay's and the
// operator's caches select on it.
const Label = "openshell.ai/relay-load"

const (
	annotationLoad      = "openshell.ai/load"
	annotationSignature = "openshell.ai/signature"
	namePrefix          = "openshell-relay-load-"
)

// Load is what one replica holds now.
type Load struct {
	// Sessions open on the replica (exec, port-forward, log reads).
	Sessions int `json:"sessions"`
	// Users and Namespaces count them per user and per namespace (only
	// those with open sessions).
	Users      map[string]int `json:"users,omitempty"`
	Namespaces map[string]int `json:"namespaces,omitempty"`
	// Requesters counts them per project requester, for the sessions where
	// that bound applies (a gateway admitting every namespace).
	Requesters map[string]int `json:"requesters,omitempty"`
}

// Counts are the open sessions of one holder: its user, its namespace and
// its namespace's requester.
type Counts struct{ User, Namespace, Requester int }

// Signer signs a record and Verifier checks one (oidc.Issuer does both).
type Signer interface {
	SignRecord(payload []byte) (string, error)
}

// Verifier checks a record's signature.
type Verifier interface {
	VerifyRecord(payload []byte, signature string) error
}

// Replica names the pod a relay replica runs in.
type Replica struct {
	Pod string
	UID types.UID
}

// Name is the Lease of the replica in pod.
func Name(pod string) string { return namePrefix + pod }

// Render is the signed Lease that publishes l for r in namespace.
func Render(namespace string, r Replica, l Load, s Signer) (*coordinationv1.Lease, error) {
	if r.Pod == "" || r.UID == "" {
		return nil, errors.New("a replica's load needs its pod's name and UID (POD_NAME, POD_UID)")
	}
	b, err := json.Marshal(l)
	if err != nil {
		return nil, err
	}
	o := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: Name(r.Pod), Namespace: namespace,
			Labels:      map[string]string{Label: "true"},
			Annotations: map[string]string{annotationLoad: string(b)},
			// Not blocking the pod's deletion: that would need the right to
			// update pods' finalizers, and nothing is lost when the Lease
			// goes a moment after its pod.
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: r.Pod, UID: r.UID}}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(r.Pod)},
	}
	sig, err := s.SignRecord(signed(o))
	if err != nil {
		return nil, fmt.Errorf("sign the relay's load: %w", err)
	}
	o.Annotations[annotationSignature] = sig
	return o, nil
}

// Read returns the load a Lease publishes, if the relay signed
// it and it still names the owner it was signed for. A Lease being
// deleted, or one that could outlive its pod (a finalizer, another owner),
// counts for nothing: the relay writes neither.
func Read(o *coordinationv1.Lease, v Verifier) (Load, error) {
	if o.DeletionTimestamp != nil || len(o.Finalizers) > 0 || len(o.OwnerReferences) != 1 {
		return Load{}, fmt.Errorf("lease %s is not as the relay writes it (being deleted, finalizers, or other owners)", o.Name)
	}
	if err := v.VerifyRecord(signed(o), o.Annotations[annotationSignature]); err != nil {
		return Load{}, fmt.Errorf("lease %s is not a relay's: %w", o.Name, err)
	}
	r := owner(o)
	if r.UID == "" || Name(r.Pod) != o.Name {
		return Load{}, fmt.Errorf("lease %s names no relay pod", o.Name)
	}
	var l Load
	if err := json.Unmarshal([]byte(o.Annotations[annotationLoad]), &l); err != nil || l.Sessions < 0 {
		return Load{}, fmt.Errorf("lease %s holds no load", o.Name)
	}
	return l, nil
}

// owner is the Lease's pod owner.
func owner(o *coordinationv1.Lease) Replica {
	for _, ref := range o.OwnerReferences {
		if ref.APIVersion == "v1" && ref.Kind == "Pod" {
			return Replica{Pod: ref.Name, UID: ref.UID}
		}
	}
	return Replica{}
}

// recordKind tags what the signature covers, so that no other signed
// record (a membership Lease) can pass for a load.
const recordKind = "openshell.ai/relay-load/v1"

// signed is what the signature covers: the record's kind, the Lease's
// identity, its owner and its load.
func signed(o *coordinationv1.Lease) []byte {
	r := owner(o)
	// Marshalling a slice of strings cannot fail.
	b, _ := json.Marshal([]string{recordKind, o.Namespace, o.Name, r.Pod, string(r.UID), o.Annotations[annotationLoad]})
	return b
}

// The environment a relay's pod sets from the downward API
// (config/relay/deployment.yaml) so that the replica can name its pod as
// its Lease's owner.
const (
	EnvPodName = "POD_NAME"
	EnvPodUID  = "POD_UID"
)

// Scaling is how the operator scales the relay Deployment on its
// replicas' sessions. A platform admin sets it through the operator's
// environment (OLM: the Subscription's spec.config.env), since OLM puts
// the bundle's Deployment back as the CSV has it on an upgrade.
type Scaling struct {
	// Min and Max bound the replicas; Max 0 turns scaling off (the
	// replicas are then the admin's, or another autoscaler's).
	Min, Max int32
	// SessionsPerReplica is the load one replica is given: below the 400
	// sessions a replica holds at most (--max-sessions), so that the
	// sessions of a replica that stops find room on the others.
	SessionsPerReplica int
	// ScaleDownDelay is how long the sessions must have needed fewer
	// replicas before the relay is scaled down (each removed replica ends
	// its sessions with a notice); scaling up is at once.
	ScaleDownDelay time.Duration
}

// The operator's environment that sets Scaling.
const (
	EnvMinReplicas        = "RELAY_MIN_REPLICAS"
	EnvMaxReplicas        = "RELAY_MAX_REPLICAS"
	EnvSessionsPerReplica = "RELAY_SESSIONS_PER_REPLICA"
)

// DefaultScaling keeps the bundle's two replicas (one may stop while the
// other serves) and adds one per 300 sessions, up to 10.
var DefaultScaling = Scaling{Min: 2, Max: 10, SessionsPerReplica: 300, ScaleDownDelay: 5 * time.Minute}

// ScalingFromEnv is DefaultScaling with what the environment sets.
func ScalingFromEnv(getenv func(string) string) (Scaling, error) {
	s := DefaultScaling
	for _, v := range []struct {
		env string
		set func(int)
	}{
		{EnvMinReplicas, func(n int) { s.Min = int32(n) }},
		{EnvMaxReplicas, func(n int) { s.Max = int32(n) }},
		{EnvSessionsPerReplica, func(n int) { s.SessionsPerReplica = n }},
	} {
		raw := getenv(v.env)
		if raw == "" {
			continue
		}
		n, err := strconv.Atoi(raw)
		if err != nil || n < 0 || n > 10000 {
			return s, fmt.Errorf("%s=%q: want a whole number from 0 to 10000", v.env, raw)
		}
		v.set(n)
	}
	return s, s.Validate()
}

// Validate says what is wrong with s, for the admin who set it.
func (s Scaling) Validate() error {
	switch {
	case s.Max == 0:
		return nil // off
	case s.Min < 2:
		// One serves while the other restarts; and from one replica OLM
		// would fail the CSV while a second one starts (maxUnavailable rounds
		// down to none of two).
		return fmt.Errorf("%s=%d: the relay keeps at least 2 replicas, so that one serves while another restarts", EnvMinReplicas, s.Min)
	case s.Max < s.Min:
		return fmt.Errorf("%s=%d is below %s=%d", EnvMaxReplicas, s.Max, EnvMinReplicas, s.Min)
	case s.SessionsPerReplica < 1:
		return fmt.Errorf("%s=%d: give each replica at least one session", EnvSessionsPerReplica, s.SessionsPerReplica)
	}
	return nil
}

// Enabled reports whether the operator scales the relay.
func (s Scaling) Enabled() bool { return s.Max > 0 }

// Recommend is the replicas sessions need, within Min and Max.
func (s Scaling) Recommend(sessions int) int32 {
	per := max(s.SessionsPerReplica, 1) // Validate refuses less; never divide by zero
	n := (max(sessions, 0) + per - 1) / per
	return int32(min(max(n, int(s.Min)), int(s.Max)))
}
