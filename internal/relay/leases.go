package relay

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openshell/openshell-operator/internal/oidc"
)

// Membership leases are coordination.k8s.io Leases in the relay's
// namespace, one per granted workspace membership, so that every replica
// of the relay (and a restarted one) sees the same leases: a replica that
// kept its own could end a membership another replica's exchange had just
// renewed, or miss one it never saw. The Lease holds what a recheck needs:
// the user as the front proxy named them (groups included), the RBAC the
// membership depends on and when it runs out.
const (
	labelMembership      = "openshell.ai/workspace-membership"
	labelTenantNamespace = "openshell.ai/tenant-namespace"
	annotationGateway    = "openshell.ai/gateway"
	annotationWorkspace  = "openshell.ai/workspace"
	annotationSubject    = "openshell.ai/subject"
	annotationUser       = "openshell.ai/user"
	annotationGrant      = "openshell.ai/grant"
)

// storedUser is user.Info as a Lease keeps it.
type storedUser struct {
	Name   string              `json:"name"`
	UID    string              `json:"uid,omitempty"`
	Groups []string            `json:"groups,omitempty"`
	Extra  map[string][]string `json:"extra,omitempty"`
}

// storedGrant is a grant as a Lease keeps it.
type storedGrant struct {
	Verb string `json:"verb"`
	Name string `json:"name,omitempty"`
	Sub  string `json:"sub"`
}

// leaseName is the Lease of one membership: a digest, since subjects and
// workspaces need not be valid object names.
func leaseName(m membership) string {
	sum := sha256.Sum256([]byte(m.gateway + "\x00" + m.namespace + "\x00" + m.workspace + "\x00" + m.subject))
	return "openshell-member-" + hex.EncodeToString(sum[:20])
}

// renderLease is the Lease recording l for m.
func renderLease(ns string, m membership, l lease, now time.Time) (*coordinationv1.Lease, error) {
	u := storedUser{Name: l.user.GetName(), UID: l.user.GetUID(), Groups: l.user.GetGroups(), Extra: l.user.GetExtra()}
	ub, err := json.Marshal(u)
	if err != nil {
		return nil, err
	}
	gb, err := json.Marshal(storedGrant{Verb: l.grant.verb, Name: l.grant.name, Sub: l.grant.sub})
	if err != nil {
		return nil, err
	}
	secs := int32(max(1, l.expires.Sub(now).Round(time.Second)/time.Second))
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: leaseName(m), Namespace: ns,
			Labels: map[string]string{labelMembership: "true", labelTenantNamespace: m.namespace},
			Annotations: map[string]string{annotationGateway: m.gateway, annotationWorkspace: m.workspace, annotationSubject: m.subject,
				annotationUser: string(ub), annotationGrant: string(gb)}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(m.subject), RenewTime: &metav1.MicroTime{Time: now},
			LeaseDurationSeconds: ptr.To(secs)},
	}, nil
}

// parseLease reads a membership Lease back.
func parseLease(o *coordinationv1.Lease) (membership, lease, error) {
	a := o.Annotations
	m := membership{gateway: a[annotationGateway], namespace: o.Labels[labelTenantNamespace], workspace: a[annotationWorkspace], subject: a[annotationSubject]}
	if m.gateway == "" || m.namespace == "" || m.workspace == "" || m.subject == "" || leaseName(m) != o.Name {
		return m, lease{}, fmt.Errorf("lease %s does not describe a membership", o.Name)
	}
	var u storedUser
	if err := json.Unmarshal([]byte(a[annotationUser]), &u); err != nil || u.Name == "" {
		return m, lease{}, fmt.Errorf("lease %s names no user", o.Name)
	}
	var g storedGrant
	if err := json.Unmarshal([]byte(a[annotationGrant]), &g); err != nil || g.Verb == "" {
		return m, lease{}, fmt.Errorf("lease %s names no grant", o.Name)
	}
	if o.Spec.RenewTime == nil || o.Spec.LeaseDurationSeconds == nil {
		return m, lease{}, fmt.Errorf("lease %s has no term", o.Name)
	}
	expires := o.Spec.RenewTime.Add(time.Duration(*o.Spec.LeaseDurationSeconds) * time.Second)
	return m, lease{user: &user.DefaultInfo{Name: u.Name, UID: u.UID, Groups: u.Groups, Extra: u.Extra}, expires: expires,
		grant: grant{verb: g.Verb, name: g.Name, sub: g.Sub}}, nil
}

// record writes the lease of m, merged with the one stored: an exchange's
// lease replaces a session's, a session's never replaces an exchange's,
// and a lease never ends sooner than the one stored. Nothing is written
// when the stored lease already covers it.
func (t *Tokens) record(ctx context.Context, m membership, l lease) error {
	for attempt := 0; ; attempt++ {
		err := t.recordOnce(ctx, m, l)
		if (apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err)) && attempt < 3 {
			continue // another replica wrote it meanwhile: merge again
		}
		return err
	}
}

func (t *Tokens) recordOnce(ctx context.Context, m membership, l lease) error {
	now := t.now()
	cur := &coordinationv1.Lease{}
	err := t.Leases.Get(ctx, client.ObjectKey{Namespace: t.LeaseNamespace, Name: leaseName(m)}, cur)
	switch {
	case apierrors.IsNotFound(err):
		if err := t.reserve(ctx, m); err != nil {
			return err
		}
		o, err := renderLease(t.LeaseNamespace, m, l, now)
		if err != nil {
			return err
		}
		return t.Leases.Create(ctx, o)
	case err != nil:
		return err
	}
	if _, held, err := parseLease(cur); err == nil {
		if held.grant == exchanged && l.grant != exchanged {
			l.user, l.grant = held.user, held.grant
		}
		if held.expires.After(l.expires) {
			l.expires = held.expires
		}
		// Covered: the same check, for at least as long (within a
		// second, the Lease's resolution).
		if held.grant == l.grant && !l.expires.After(held.expires.Add(time.Second)) && sameUser(held.user, l.user) {
			return nil
		}
	}
	o, err := renderLease(t.LeaseNamespace, m, l, now)
	if err != nil {
		return err
	}
	o.ResourceVersion = cur.ResourceVersion
	return t.Leases.Update(ctx, o)
}

func sameUser(a, b user.Info) bool {
	ab, _ := json.Marshal(storedUser{Name: a.GetName(), UID: a.GetUID(), Groups: a.GetGroups(), Extra: a.GetExtra()})
	bb, _ := json.Marshal(storedUser{Name: b.GetName(), UID: b.GetUID(), Groups: b.GetGroups(), Extra: b.GetExtra()})
	return string(ab) == string(bb)
}

// reserve refuses a new lease in a namespace that holds
// maxMembersPerNamespace already.
func (t *Tokens) reserve(ctx context.Context, m membership) error {
	list := &coordinationv1.LeaseList{}
	if err := t.Leases.List(ctx, list, client.InNamespace(t.LeaseNamespace),
		client.MatchingLabels{labelMembership: "true", labelTenantNamespace: m.namespace}); err != nil {
		return err
	}
	if n := len(list.Items); n >= maxMembersPerNamespace {
		return apierrors.NewTooManyRequests(fmt.Sprintf("namespace %s has %d identities with live gateway tokens, the most it may: "+
			"retry once some have expired (tokens live %s)", m.namespace, n, oidc.TokenTTL), int(oidc.TokenTTL.Seconds()))
	}
	return nil
}

// leases lists every membership Lease.
func (t *Tokens) leases(ctx context.Context) ([]coordinationv1.Lease, error) {
	list := &coordinationv1.LeaseList{}
	if err := t.Leases.List(ctx, list, client.InNamespace(t.LeaseNamespace), client.MatchingLabels{labelMembership: "true"}); err != nil {
		return nil, err
	}
	return list.Items, nil
}
