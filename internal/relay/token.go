package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
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
	"github.com/openshell/openshell-operator/internal/gwconn"
	"github.com/openshell/openshell-operator/internal/oidc"
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
	// Recheck is how often each granted membership is authorized again
	// (default 2 s).
	Recheck time.Duration
	// Now is the clock (tests); nil: time.Now.
	Now func() time.Time

	mu      sync.Mutex
	members map[membership]*lease
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
	failed  int
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

// reserve refuses a new lease in a namespace that holds
// maxMembersPerNamespace already.
func (t *Tokens) reserve(m membership) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.members == nil {
		t.members = map[membership]*lease{}
	}
	if _, ok := t.members[m]; ok {
		return nil
	}
	n := 0
	for k := range t.members {
		if k.namespace == m.namespace {
			n++
		}
	}
	if n >= maxMembersPerNamespace {
		return apierrors.NewTooManyRequests(fmt.Sprintf("namespace %s has %d identities with live gateway tokens, the most it may: "+
			"retry once some have expired (tokens live %s)", m.namespace, n, oidc.TokenTTL), int(oidc.TokenTTL.Seconds()))
	}
	return nil
}

// Start rechecks the leases every Recheck until ctx ends, and meanwhile
// reads back the memberships granted before this process started, so that
// a restart forgets none. A manager Runnable.
func (t *Tokens) Start(ctx context.Context) error {
	every := t.Recheck
	if every <= 0 {
		every = 2 * time.Second
	}
	go t.adoptAll(ctx, every)
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

// recheck ends the leases that RBAC no longer allows, that failed too
// many checks in a row, or that outlived their tokens.
func (t *Tokens) recheck(ctx context.Context) {
	t.mu.Lock()
	leases := make(map[membership]lease, len(t.members))
	for m, l := range t.members {
		leases[m] = *l
	}
	t.mu.Unlock()
	log := ctrl.LoggerFrom(ctx)
	for m, l := range leases {
		why := ""
		if t.now().After(l.expires) {
			why = "every token of the subject has expired"
		} else {
			cctx, cancel := context.WithTimeout(ctx, checkTimeout)
			allowed, _, err := t.Authz.Allowed(cctx, l.user, l.grant.verb, m.namespace, l.grant.name, l.grant.sub)
			cancel()
			switch {
			case err != nil && l.failed+1 < maxFailedChecks:
				t.update(m, func(cur *lease) { cur.failed++ })
				continue
			case err != nil:
				why = fmt.Sprintf("%d checks failed in a row (%v)", maxFailedChecks, err)
			case !allowed:
				why = "RBAC no longer allows it"
			default:
				t.update(m, func(cur *lease) { cur.failed = 0 })
				continue
			}
		}
		if err := t.revoke(ctx, m); err != nil {
			log.Info("revoking a workspace membership failed; retried at the next check", "subject", m.subject, "workspace", m.workspace, "error", err.Error())
			continue
		}
		t.mu.Lock()
		if cur, ok := t.members[m]; ok && cur.expires.Equal(l.expires) {
			delete(t.members, m) // unless an exchange renewed it meanwhile
		}
		t.mu.Unlock()
		log.Info("workspace membership revoked", "subject", m.subject, "workspace", m.workspace, "gateway", m.gateway, "why", why)
	}
}

// update changes a lease that is still held.
func (t *Tokens) update(m membership, fn func(*lease)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if cur, ok := t.members[m]; ok {
		fn(cur)
	}
}

func (t *Tokens) revoke(ctx context.Context, m membership) error {
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	gw, err := lookupGateway(ctx, t.Reader, m.gateway)
	if apierrors.IsNotFound(err) {
		return nil // the gateway and its memberships are gone
	}
	if err != nil {
		return err
	}
	conn, err := t.Resolver.Connect(ctx, gw)
	if err != nil {
		return err
	}
	_, err = conn.RemoveWorkspaceMember(ctx, &openshellv1.RemoveWorkspaceMemberRequest{WorkspaceScope: gatewayapi.Workspace(m.workspace),
		PrincipalSubject: m.subject, AllowMissing: true})
	return err
}

// adoptAll reads back, from the gateways of every sandbox that uses the
// operator's issuer, the members of each namespace's workspace that this
// exchange made (SubjectPrefix), until every one was read. Their groups
// are not known any more: a member whose access came through a group is
// removed at the first check and gets it back with the next exchange
// (fail closed); each gets a lease of one token lifetime (the tokens
// minted before the restart live no longer).
func (t *Tokens) adoptAll(ctx context.Context, every time.Duration) {
	done := map[[2]string]bool{}
	for ctx.Err() == nil {
		list := &openshellv1alpha1.OpenShellSandboxList{}
		left := 0
		if err := t.Reader.List(ctx, list); err == nil {
			for i := range list.Items {
				sb := &list.Items[i]
				key := [2]string{sb.Status.Gateway, sb.Namespace}
				if sb.Status.Gateway == "" || done[key] {
					continue
				}
				if err := t.adoptWorkspace(ctx, sb.Status.Gateway, sb.Namespace); err != nil {
					left++
					ctrl.LoggerFrom(ctx).Info("reading back workspace members failed; retried", "gateway", sb.Status.Gateway, "namespace", sb.Namespace, "error", err.Error())
					continue
				}
				done[key] = true
			}
			if left == 0 {
				return
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(every):
		}
	}
}

func (t *Tokens) adoptWorkspace(ctx context.Context, gatewayKey, namespace string) error {
	ctx, cancel := context.WithTimeout(ctx, 4*checkTimeout)
	defer cancel()
	gw, err := lookupGateway(ctx, t.Reader, gatewayKey)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if !gwconn.UsesIssuer(gw) {
		return nil
	}
	conn, err := t.Resolver.Connect(ctx, gw)
	if err != nil {
		return err
	}
	uid, err := namespaceUID(ctx, t.Reader, namespace)
	if err != nil {
		return err
	}
	ws := sandboxspec.WorkspaceName(namespace, uid)
	req := &openshellv1.ListWorkspaceMembersRequest{WorkspaceScope: gatewayapi.Workspace(ws), PageSize: 500}
	for {
		resp, err := conn.ListWorkspaceMembers(ctx, req)
		switch grpcstatus.Code(err) {
		case codes.OK:
		case codes.NotFound, codes.Unimplemented:
			return nil // no workspace yet, or a 0.0.x gateway: no members
		default:
			return fmt.Errorf("list the members of workspace %s at gateway %s: %w", ws, gatewayKey, err)
		}
		t.mu.Lock()
		if t.members == nil {
			t.members = map[membership]*lease{}
		}
		for _, mem := range resp.GetMembers() {
			name, ok := strings.CutPrefix(mem.GetPrincipalSubject(), SubjectPrefix)
			m := membership{gateway: gatewayKey, namespace: namespace, workspace: ws, subject: mem.GetPrincipalSubject()}
			if _, held := t.members[m]; ok && !held {
				// Never over a lease an exchange made since the start.
				t.members[m] = &lease{user: &user.DefaultInfo{Name: name}, expires: t.now().Add(oidc.TokenTTL), grant: exchanged}
			}
		}
		t.mu.Unlock()
		if resp.GetNextPageToken() == "" {
			return nil
		}
		req.PageToken = resp.GetNextPageToken()
	}
}

// actAs makes the user a member of the workspace for as long as grant
// allows and mints a token the relay uses for the user's calls (never
// handed out).
func (t *Tokens) actAs(ctx context.Context, conn *gatewayapi.Client, gw *openshellv1alpha1.OpenShellGateway, m membership,
	u user.Info, g grant) (string, error) {
	tok, _, err := t.grantLease(ctx, conn, gw, m, u, g)
	return tok, err
}

// grantLease makes m's subject a workspace user at the gateway, mints its
// token and records the lease, for an exchange (g == exchanged) or a
// session of the relay's own. The exchange's lease is namespace-wide and
// broader: an exchange replaces any lease, a session's never replaces an
// exchange's.
func (t *Tokens) grantLease(ctx context.Context, conn *gatewayapi.Client, gw *openshellv1alpha1.OpenShellGateway, m membership,
	u user.Info, g grant) (string, time.Time, error) {
	if err := t.reserve(m); err != nil {
		return "", time.Time{}, err
	}
	_, err := conn.AddWorkspaceMember(ctx, &openshellv1.AddWorkspaceMemberRequest{WorkspaceScope: gatewayapi.Workspace(m.workspace),
		PrincipalSubject: m.subject, Role: openshellv1.WorkspaceRole_WORKSPACE_ROLE_USER})
	if err != nil && grpcstatus.Code(err) != codes.AlreadyExists {
		// AlreadyExists: granted earlier (by this process, or before a
		// restart that adoption has not read back yet); the lease below
		// covers it from now on.
		return "", time.Time{}, fmt.Errorf("add %s to workspace %s: %w", m.subject, m.workspace, err)
	}
	tok, exp, err := t.Issuer.UserToken(oidc.Audience(gw.Namespace, gw.Name), m.subject)
	if err != nil {
		return "", time.Time{}, err
	}
	t.mu.Lock()
	if cur, ok := t.members[m]; g == exchanged || !ok || cur.grant != exchanged {
		t.members[m] = &lease{user: u, expires: exp, grant: g}
	}
	t.mu.Unlock()
	return tok, exp, nil
}
