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
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
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
//
// Others may be able to write Leases there (the operator for its leader
// election; in an AllNamespaces install, any operator whose CSV may write
// Leases, since OLM makes such rules cluster-wide), so a Lease is believed
// only with the relay's signature (annotationSignature, the operator's
// issuer key over every field a recheck acts on): a forged one is neither
// acted on nor counted. And no Lease ever grants: members are added only by
// an exchange or a session the relay authorized itself.
const (
	labelMembership      = "openshell.ai/workspace-membership"
	labelTenantNamespace = "openshell.ai/tenant-namespace"
	annotationGateway    = "openshell.ai/gateway"
	annotationWorkspace  = "openshell.ai/workspace"
	annotationSubject    = "openshell.ai/subject"
	annotationUser       = "openshell.ai/user"
	annotationGrant      = "openshell.ai/grant"
	annotationSignature  = "openshell.ai/signature"
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
	// Whole seconds, rounded up (never ending before the token it covers),
	// at most a day (a merged far-future end must not overflow).
	secs := int32(min(24*time.Hour, max(time.Second, (l.expires.Sub(now)+time.Second-1)/time.Second*time.Second)) / time.Second)
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: leaseName(m), Namespace: ns,
			Labels: map[string]string{labelMembership: "true", labelTenantNamespace: m.namespace},
			Annotations: map[string]string{annotationGateway: m.gateway, annotationWorkspace: m.workspace, annotationSubject: m.subject,
				annotationUser: string(ub), annotationGrant: string(gb)}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(m.subject), RenewTime: &metav1.MicroTime{Time: now},
			LeaseDurationSeconds: ptr.To(secs)},
	}, nil
}

// signedFields is what a Lease's signature covers: every field a recheck
// or a revocation acts on, and the Lease's own identity.
func signedFields(o *coordinationv1.Lease) ([]byte, error) {
	renew, secs := "", ""
	if o.Spec.RenewTime != nil {
		renew = o.Spec.RenewTime.UTC().Format("2006-01-02T15:04:05.000000Z07:00")
	}
	if o.Spec.LeaseDurationSeconds != nil {
		secs = fmt.Sprint(*o.Spec.LeaseDurationSeconds)
	}
	a := o.Annotations
	return json.Marshal([]string{o.Namespace, o.Name, o.Labels[labelTenantNamespace], a[annotationGateway], a[annotationWorkspace],
		a[annotationSubject], a[annotationUser], a[annotationGrant], renew, secs})
}

// sign adds the relay's signature to a rendered Lease.
func (t *Tokens) sign(o *coordinationv1.Lease) error {
	b, err := signedFields(o)
	if err != nil {
		return err
	}
	sig, err := t.Issuer.SignRecord(b)
	if err != nil {
		return err
	}
	o.Annotations[annotationSignature] = sig
	return nil
}

// verifiedLease reads a membership Lease back, if the relay wrote it (its
// signature checks out).
func (t *Tokens) verifiedLease(o *coordinationv1.Lease) (membership, lease, error) {
	b, err := signedFields(o)
	if err != nil {
		return membership{}, lease{}, err
	}
	if err := t.Issuer.VerifyRecord(b, o.Annotations[annotationSignature]); err != nil {
		return membership{}, lease{}, fmt.Errorf("lease %s is not the relay's: %w", o.Name, err)
	}
	return leaseFields(o)
}

// leaseFields reads a membership Lease's fields, trusting them: only
// Tokens.verifiedLease, which checks who wrote them, may call it.
func leaseFields(o *coordinationv1.Lease) (membership, lease, error) {
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
// and a lease never ends sooner than the one stored. It always writes,
// even when the stored lease covers it: the write is what makes a
// concurrent revocation's delete conflict (revoke), so that a member added
// after it always has its Lease.
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
	// The API keeps a Lease's renewTime to the microsecond: sign what it
	// will give back.
	now := t.now().Truncate(time.Microsecond)
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
		if err := t.sign(o); err != nil {
			return err
		}
		return t.Leases.Create(ctx, o)
	case err != nil:
		return err
	}
	// A Lease the relay did not sign is replaced, not merged.
	if _, held, err := t.verifiedLease(cur); err == nil {
		if held.grant == exchanged && l.grant != exchanged {
			l.user, l.grant = held.user, held.grant
		}
		if held.expires.After(l.expires) {
			l.expires = held.expires
		}
	}
	o, err := renderLease(t.LeaseNamespace, m, l, now)
	if err != nil {
		return err
	}
	if err := t.sign(o); err != nil {
		return err
	}
	o.ResourceVersion = cur.ResourceVersion
	return t.Leases.Update(ctx, o)
}

// reserve refuses a new lease in a namespace that holds
// maxMembersPerNamespace already.
func (t *Tokens) reserve(ctx context.Context, m membership) error {
	list := &coordinationv1.LeaseList{}
	if err := t.Leases.List(ctx, list, client.InNamespace(t.LeaseNamespace),
		client.MatchingLabels{labelMembership: "true", labelTenantNamespace: m.namespace}); err != nil {
		return err
	}
	n := 0
	for i := range list.Items {
		if _, _, err := t.verifiedLease(&list.Items[i]); err == nil {
			n++ // forged Leases take no one's place
		}
	}
	if n >= maxMembersPerNamespace {
		return apierrors.NewTooManyRequests(fmt.Sprintf("namespace %s has %d identities with live gateway tokens, the most it may: "+
			"retry once some have expired (tokens live %s)", m.namespace, n, oidc.TokenTTL), int(oidc.TokenTTL.Seconds()))
	}
	return nil
}

// leases lists every membership Lease: from LeaseCache, else (not
// started, or not synced within checkTimeout: a cache that cannot sync
// blocks its reads) from the API server, so that a look never waits on a
// cache for good and revocations go on.
func (t *Tokens) leases(ctx context.Context) ([]coordinationv1.Lease, error) {
	opts := []client.ListOption{client.InNamespace(t.LeaseNamespace), client.MatchingLabels{labelMembership: "true"}}
	list := &coordinationv1.LeaseList{}
	if t.LeaseCache != nil {
		cctx, cancel := context.WithTimeout(ctx, checkTimeout)
		err := t.LeaseCache.List(cctx, list, opts...)
		cancel()
		if err == nil {
			return list.Items, nil
		}
		ctrl.LoggerFrom(ctx).V(1).Info("the membership cache cannot be read; listing the Leases from the API server", "error", err.Error())
	}
	if err := t.Leases.List(ctx, list, opts...); err != nil {
		return nil, err
	}
	return list.Items, nil
}

// MembershipLeaseCache is an informer cache of the membership Leases in
// namespace (selected by their label), for Tokens.LeaseCache; the caller
// starts it.
func MembershipLeaseCache(cfg *rest.Config, scheme *runtime.Scheme, namespace string) (cache.Cache, error) {
	return cache.New(cfg, cache.Options{Scheme: scheme, DefaultNamespaces: map[string]cache.Config{namespace: {}},
		DefaultTransform: cache.TransformStripManagedFields(), // not signed, not read
		ByObject:         map[client.Object]cache.ByObject{&coordinationv1.Lease{}: {Label: labels.SelectorFromSet(labels.Set{labelMembership: "true"})}}})
}

// WorkspaceKey names one workspace at one gateway (the gateway's
// namespace/name).
type WorkspaceKey struct{ Gateway, Workspace string }

// Granted reads, from r, the membership Leases in namespace and returns
// the subjects the relay made members of each workspace. Only the Leases
// the relay signed count: one anyone else wrote grants nothing. An
// expired Lease still counts (the relay's recheck removes its member),
// and the relay writes a Lease before it adds its member, so a reader
// that lists a workspace's members first and Granted (from the API
// server) second sees a Lease for every member the relay added.
func Granted(ctx context.Context, r client.Reader, namespace string, issuer *oidc.Issuer) (map[WorkspaceKey]map[string]bool, error) {
	list := &coordinationv1.LeaseList{}
	if err := r.List(ctx, list, client.InNamespace(namespace), client.MatchingLabels{labelMembership: "true"}); err != nil {
		return nil, fmt.Errorf("list the membership Leases: %w", err)
	}
	t := &Tokens{Issuer: issuer}
	out := map[WorkspaceKey]map[string]bool{}
	for i := range list.Items {
		m, _, err := t.verifiedLease(&list.Items[i])
		if err != nil {
			continue
		}
		k := WorkspaceKey{Gateway: m.gateway, Workspace: m.workspace}
		if out[k] == nil {
			out[k] = map[string]bool{}
		}
		out[k][m.subject] = true
	}
	return out, nil
}
