package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/user"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	accessv1alpha1 "github.com/openshell/openshell-operator/api/access/v1alpha1"
	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/gatewayapi"
	openshellv1 "github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/openshellv1"
	"github.com/openshell/openshell-operator/internal/groupmember"
	"github.com/openshell/openshell-operator/internal/gwconn"
	"github.com/openshell/openshell-operator/internal/oidc"
	"github.com/openshell/openshell-operator/internal/rbacchange"
	"github.com/openshell/openshell-operator/internal/saexist"
	"github.com/openshell/openshell-operator/internal/sandboxspec"
)

// SubjectPrefix is accessv1alpha1.SubjectPrefix.
const SubjectPrefix = accessv1alpha1.SubjectPrefix

// SandboxToken is accessv1alpha1.SandboxToken.
type SandboxToken = accessv1alpha1.SandboxToken

// Tokens exchanges a Kubernetes identity the kube-apiserver authenticated
// (TokenReview for a ServiceAccount or user token) and the relay
// authorized for a gateway token, and keeps the gateway's workspace
// membership following RBAC.
//
// Each membership it grants is a lease: authorized again every Recheck,
// and removed at the gateway when RBAC no longer allows it, when checks
// fail maxFailedChecks times in a row (fail closed), or one token lifetime
// after the last exchange (no token of the subject is valid then, so the
// membership is of no use). At most maxMembersPerNamespace leases run per
// namespace.
type Tokens struct {
	Reader   client.Reader
	Resolver *gwconn.Resolver
	Issuer   *oidc.Issuer
	Authz    Authorizer
	// Leases stores each granted membership as a Lease in LeaseNamespace
	// (leases.go), shared by every replica.
	Leases         client.Client
	LeaseNamespace string
	// LeaseCache, if set, is what each look lists the membership Leases
	// from (an informer's cache; nil: Leases, a list from the API server
	// every Recheck on every replica, which at 1,000 memberships was the
	// rechecks' largest cost left once answers were reused). A stale cache
	// is safe: a revocation's delete carries the Lease's resourceVersion,
	// so it conflicts with a renewal the cache has not seen yet.
	LeaseCache client.Reader
	// Recheck is how often the memberships are looked at (default 2 s):
	// each is authorized again then unless its last answer is still fresh
	// (RBAC).
	Recheck time.Duration
	// RBAC says whether an answer still holds: no RBAC change that could
	// take it back since, and younger than its MaxAge (nil: none holds,
	// every membership is authorized again at every look).
	RBAC *rbacchange.Changes
	// Accounts revokes the memberships of a ServiceAccount that was
	// deleted (nil: they last while RBAC still names it).
	Accounts *saexist.Accounts
	// Groups revokes the memberships of a user who left an OpenShift Group
	// their identity named (nil: they last while RBAC allows the groups
	// the exchange named).
	Groups *groupmember.Groups
	// Metrics counts the rechecks' reviews (nil: not counted).
	Metrics *Metrics
	// Now is the clock (tests); nil: time.Now.
	Now func() time.Time

	// failed counts each lease's failed checks in a row, and authorized
	// is when each lease (at a resourceVersion) was last allowed; only the
	// recheck loop touches them.
	failed     map[string]int
	authorized map[string]answer
}

// answer is when a lease, as of its resourceVersion, was last allowed.
type answer struct {
	rv string
	at time.Time
}

// maxMembersPerNamespace bounds the leases (and the rechecks they cost) one
// namespace can hold.
const maxMembersPerNamespace = 256

// membership is one subject's membership of one workspace at one gateway.
type membership struct{ gateway, namespace, workspace, subject string }

// lease is what is known of a granted membership: whose, until when, and
// what the user must still be allowed for it to go on.
type lease struct {
	user    user.Info
	expires time.Time
	grant   grant
}

// grant is the RBAC a lease depends on.
type grant struct{ verb, name, sub string }

// exchanged is what a token exchange needs: namespace-wide.
var exchanged = grant{verb: "create", sub: SubresourceToken}

func (t *Tokens) now() time.Time {
	if t.Now != nil {
		return t.Now()
	}
	return time.Now()
}

// exchange serves openshellsandboxes/token.
func (s *Server) exchange(w http.ResponseWriter, r *http.Request, sb *openshellv1alpha1.OpenShellSandbox, u user.Info, session Session) {
	if s.Tokens == nil {
		writeStatus(w, apierrors.NewServiceUnavailable("token exchange is not configured on this relay"))
		return
	}
	// Membership is workspace-wide: the RBAC behind it must be too.
	allowed, reason, err := s.Authz.Allowed(r.Context(), u, "create", sb.Namespace, "", SubresourceToken)
	if err != nil {
		writeStatus(w, apierrors.NewInternalError(err))
		return
	}
	if !allowed {
		writeStatus(w, apierrors.NewForbidden(schema.GroupResource{Group: Group, Resource: Resource + "/" + SubresourceToken}, sb.Name,
			fmt.Errorf("a gateway token makes %q a member of the namespace's whole workspace, so it needs create on %s/%s for every sandbox of namespace %q, not one: %s",
				u.GetName(), Resource, SubresourceToken, sb.Namespace, reason)))
		return
	}
	tok, err := s.Tokens.Issue(r.Context(), sb, u)
	if err != nil {
		var st *apierrors.StatusError
		if errors.As(err, &st) {
			writeStatus(w, st)
			return
		}
		writeStatus(w, apierrors.NewServiceUnavailable(err.Error()))
		return
	}
	rec := s.Audit.Start(r.Context(), sb, session)
	rec.End(0, nil)
	tok.TypeMeta = metav1.TypeMeta{Kind: "SandboxToken", APIVersion: Group + "/" + Version}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(tok)
}

// Issue makes the user a workspace user of the sandbox's namespace at its
// gateway and mints their token.
func (t *Tokens) Issue(ctx context.Context, sb *openshellv1alpha1.OpenShellSandbox, u user.Info) (*SandboxToken, error) {
	gw, err := lookupGateway(ctx, t.Reader, sb.Status.Gateway)
	if err != nil {
		return nil, err
	}
	if !gwconn.UsesIssuer(gw) {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("gateway %s trusts its own identity provider, not the operator's issuer: "+
			"ask its admin for a token there", sb.Status.Gateway))
	}
	ns := sb.Namespace
	uid, err := namespaceUID(ctx, t.Reader, ns)
	if err != nil {
		return nil, err
	}
	m := membership{gateway: sb.Status.Gateway, namespace: ns, workspace: sandboxspec.WorkspaceName(ns, uid), subject: SubjectPrefix + u.GetName()}
	conn, err := t.Resolver.Connect(ctx, gw)
	if err != nil {
		return nil, err
	}
	tok, exp, err := t.grantLease(ctx, conn, gw, m, u, exchanged)
	if err != nil {
		return nil, err
	}
	return &SandboxToken{Token: tok, ExpiresAt: metav1.NewTime(exp), Subject: m.subject, Endpoint: gw.Status.Endpoint,
		Workspace: m.workspace, Sandbox: sandboxspec.SandboxName(ns, sb.Name)}, nil
}

// Start rechecks the leases every Recheck until ctx ends. Every replica
// does: the leases are shared, and revoke settles a race with a renewal.
// A manager Runnable.
func (t *Tokens) Start(ctx context.Context) error {
	every := t.Recheck
	if every <= 0 {
		every = 2 * time.Second
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			t.recheck(ctx)
		}
	}
}

// recheckInFlight bounds the SubjectAccessReviews one recheck has in
// flight: one after another, a pass over many memberships outlasts the
// recheck period, and a revocation waits for the whole pass
// (BenchmarkRecheck1000: 1,000 reviews of 3 ms, 3.6 s a pass one after
// another, 0.31 s with 16 in flight).
const recheckInFlight = 16

// verdict is one lease's recheck: why it ends ("" if it goes on), or the
// error that kept it from being checked; asked is when it was authorized
// again (zero if its last answer held).
type verdict struct {
	lease *coordinationv1.Lease
	m     membership
	l     lease
	why   string
	err   error
	asked time.Time
}

// recheck ends the leases that RBAC no longer allows, that failed too
// many checks in a row, or that outlived their tokens: read them, check
// them (in parallel), then act on each verdict.
func (t *Tokens) recheck(ctx context.Context) {
	log := ctrl.LoggerFrom(ctx)
	items, err := t.leases(ctx)
	if err != nil {
		log.Info("listing the membership leases failed; retried at the next check", "error", err.Error())
		return
	}
	t.settle(ctx, t.judge(ctx, items))
	seen := make(map[string]bool, len(items))
	for i := range items {
		seen[items[i].Name] = true
	}
	for name := range t.failed {
		if !seen[name] {
			delete(t.failed, name)
		}
	}
	for name := range t.authorized {
		if !seen[name] {
			delete(t.authorized, name)
		}
	}
}

// judge checks every lease the relay signed: expired, or authorized again
// (unless its last answer holds) with at most recheckInFlight
// SubjectAccessReviews at a time.
func (t *Tokens) judge(ctx context.Context, items []coordinationv1.Lease) []*verdict {
	var out []*verdict
	now := t.now()
	sem := make(chan struct{}, recheckInFlight)
	var wg sync.WaitGroup
	for i := range items {
		o := &items[i]
		m, l, err := t.verifiedLease(o)
		if err != nil {
			ctrl.LoggerFrom(ctx).Info("ignoring a lease the relay did not write", "lease", o.Name, "error", err.Error())
			continue
		}
		v := &verdict{lease: o, m: m, l: l}
		out = append(out, v)
		if now.After(l.expires) {
			v.why = "every token of the subject has expired"
			continue
		}
		if t.Accounts.Gone(ctx, l.user) {
			v.why = "its ServiceAccount was deleted"
			continue
		}
		if grp := t.Groups.Left(l.user); grp != "" {
			v.why = "the user left group " + grp
			continue
		}
		if last, ok := t.authorized[o.Name]; ok && last.rv == o.ResourceVersion && t.RBAC.Fresh(m.namespace, last.at, now) {
			continue
		}
		v.asked = now // before the review: a change seen during it makes this answer stale
		t.Metrics.reauthorized(CheckMembership)
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			cctx, cancel := context.WithTimeout(ctx, checkTimeout)
			defer cancel()
			allowed, _, err := t.Authz.Allowed(cctx, v.l.user, v.l.grant.verb, v.m.namespace, v.l.grant.name, v.l.grant.sub)
			switch {
			case err != nil:
				v.err = err
			case !allowed:
				v.why = "RBAC no longer allows it"
			}
		}()
	}
	wg.Wait()
	return out
}

// settle acts on the verdicts: a lease that failed its check fails closed
// after maxFailedChecks in a row; one that ends is revoked.
func (t *Tokens) settle(ctx context.Context, verdicts []*verdict) {
	log := ctrl.LoggerFrom(ctx)
	if t.failed == nil {
		t.failed = map[string]int{}
	}
	if t.authorized == nil {
		t.authorized = map[string]answer{}
	}
	for _, v := range verdicts {
		name := v.lease.Name
		switch {
		case v.err != nil && t.failed[name]+1 < maxFailedChecks:
			t.failed[name]++
			continue
		case v.err != nil:
			v.why = fmt.Sprintf("%d checks failed in a row (%v)", maxFailedChecks, v.err)
		case v.why == "":
			delete(t.failed, name)
			if !v.asked.IsZero() {
				t.authorized[name] = answer{rv: v.lease.ResourceVersion, at: v.asked}
			}
			continue
		}
		delete(t.authorized, name)
		if err := t.revoke(ctx, v.m, v.lease); err != nil {
			log.Info("revoking a workspace membership failed; retried at the next check", "subject", v.m.subject, "workspace", v.m.workspace, "error", err.Error())
			continue
		}
		delete(t.failed, name)
		log.Info("workspace membership revoked", "subject", v.m.subject, "workspace", v.m.workspace, "gateway", v.m.gateway, "why", v.why)
	}
}

// revoke removes m at its gateway, then its Lease as it was read. A
// renewal in between (an exchange or a session, here or on another
// replica, always writes the Lease before it adds the member) makes the
// delete conflict: the Lease stays, and the member may have been removed
// after the renewal added it, which fails closed (the next exchange or
// session adds it again). A member without a Lease cannot result, and a
// Lease never adds a member.
func (t *Tokens) revoke(ctx context.Context, m membership, o *coordinationv1.Lease) error {
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	gw, err := lookupGateway(ctx, t.Reader, m.gateway)
	switch {
	case apierrors.IsNotFound(err):
		// The gateway and its memberships are gone.
	case err != nil:
		return err
	default:
		conn, err := t.Resolver.Connect(ctx, gw)
		if err != nil {
			return err
		}
		if _, err := conn.RemoveWorkspaceMember(ctx, &openshellv1.RemoveWorkspaceMemberRequest{WorkspaceScope: gatewayapi.Workspace(m.workspace),
			PrincipalSubject: m.subject, AllowMissing: true}); err != nil {
			return err
		}
	}
	rv := o.ResourceVersion
	err = t.Leases.Delete(ctx, o, client.Preconditions{ResourceVersion: &rv})
	if err == nil || apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}

// addMember makes m's subject a workspace user at the gateway.
func addMember(ctx context.Context, conn *gatewayapi.Client, m membership) error {
	_, err := conn.AddWorkspaceMember(ctx, &openshellv1.AddWorkspaceMemberRequest{WorkspaceScope: gatewayapi.Workspace(m.workspace),
		PrincipalSubject: m.subject, Role: openshellv1.WorkspaceRole_WORKSPACE_ROLE_USER})
	if err != nil && grpcstatus.Code(err) != codes.AlreadyExists {
		return fmt.Errorf("add %s to workspace %s: %w", m.subject, m.workspace, err)
	}
	return nil
}

// actAs makes the user a member of the workspace for as long as grant
// allows and mints a token the relay uses for the user's calls (never
// handed out).
func (t *Tokens) actAs(ctx context.Context, conn *gatewayapi.Client, gw *openshellv1alpha1.OpenShellGateway, m membership,
	u user.Info, g grant) (string, error) {
	tok, _, err := t.grantLease(ctx, conn, gw, m, u, g)
	return tok, err
}

// grantLease mints m's subject a token, records the lease and then makes
// the subject a workspace user at the gateway (in that order: revoke
// relies on it), for an exchange (g == exchanged) or a session of the
// relay's own. The exchange's lease is namespace-wide and broader: an
// exchange replaces any lease, a session's never replaces an exchange's.
func (t *Tokens) grantLease(ctx context.Context, conn *gatewayapi.Client, gw *openshellv1alpha1.OpenShellGateway, m membership,
	u user.Info, g grant) (string, time.Time, error) {
	tok, exp, err := t.Issuer.UserToken(oidc.Audience(gw.Namespace, gw.Name), m.subject)
	if err != nil {
		return "", time.Time{}, err
	}
	if err := t.record(ctx, m, lease{user: u, expires: exp, grant: g}); err != nil {
		var st *apierrors.StatusError
		if errors.As(err, &st) && st.ErrStatus.Code == http.StatusTooManyRequests {
			return "", time.Time{}, err
		}
		return "", time.Time{}, fmt.Errorf("record the membership lease: %w", err)
	}
	// AlreadyExists: granted earlier; the lease covers it from now on.
	if err := addMember(ctx, conn, m); err != nil {
		return "", time.Time{}, err
	}
	return tok, exp, nil
}
