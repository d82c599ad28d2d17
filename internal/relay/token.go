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

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/gatewayapi"
	openshellv1 "github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/openshellv1"
	"github.com/openshell/openshell-operator/internal/gwconn"
	"github.com/openshell/openshell-operator/internal/oidc"
	"github.com/openshell/openshell-operator/internal/sandboxspec"
)

// SubjectPrefix marks the gateway subjects of Kubernetes identities, so
// that a cluster user can never be taken for a subject of the gateway's
// own identity provider of the same name.
const SubjectPrefix = "kube:"

// SandboxToken is what openshellsandboxes/token answers: a short-lived
// gateway token for the caller as a workspace user of the sandbox's
// namespace, and where to use it.
type SandboxToken struct {
	metav1.TypeMeta `json:",inline"`
	// Token is the bearer token (never logged or recorded).
	Token string `json:"token"`
	// ExpiresAt is when the gateway stops accepting it.
	ExpiresAt metav1.Time `json:"expiresAt"`
	// Subject is the identity the gateway sees (SubjectPrefix + user).
	Subject string `json:"subject"`
	// Endpoint is the gateway's address (its status.endpoint).
	Endpoint string `json:"endpoint,omitempty"`
	// Workspace and Sandbox are the sandbox's names at the gateway.
	Workspace string `json:"workspace"`
	Sandbox   string `json:"sandbox"`
}

// Tokens exchanges a Kubernetes identity the kube-apiserver authenticated
// (TokenReview for a ServiceAccount or user token) and the relay
// authorized for a gateway token, and keeps the gateway's workspace
// membership following RBAC: a member whose RBAC no longer allows the
// exchange is removed at the next check.
type Tokens struct {
	Reader   client.Reader
	Resolver *gwconn.Resolver
	Issuer   *oidc.Issuer
	Authz    Authorizer
	// Recheck is how often each granted membership is authorized again
	// (default 2 s).
	Recheck time.Duration

	mu      sync.Mutex
	members map[membership]user.Info
}

// membership is one subject's membership of one workspace at one gateway.
type membership struct{ gateway, namespace, workspace, subject string }

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
	conn, err := t.Resolver.Connect(ctx, gw)
	if err != nil {
		return nil, err
	}
	ns := sb.Namespace
	uid, err := namespaceUID(ctx, t.Reader, ns)
	if err != nil {
		return nil, err
	}
	m := membership{gateway: sb.Status.Gateway, namespace: ns, workspace: sandboxspec.WorkspaceName(ns, uid), subject: SubjectPrefix + u.GetName()}
	if _, err := conn.AddWorkspaceMember(ctx, &openshellv1.AddWorkspaceMemberRequest{WorkspaceScope: gatewayapi.Workspace(m.workspace),
		PrincipalSubject: m.subject, Role: openshellv1.WorkspaceRole_WORKSPACE_ROLE_USER}); err != nil && grpcstatus.Code(err) != codes.AlreadyExists {
		return nil, fmt.Errorf("add %s to workspace %s: %w", m.subject, m.workspace, err)
	}
	t.mu.Lock()
	if t.members == nil {
		t.members = map[membership]user.Info{}
	}
	t.members[m] = u
	t.mu.Unlock()
	tok, exp, err := t.Issuer.UserToken(oidc.Audience(gw.Namespace, gw.Name), m.subject)
	if err != nil {
		return nil, err
	}
	return &SandboxToken{Token: tok, ExpiresAt: metav1.NewTime(exp), Subject: m.subject, Endpoint: gw.Status.Endpoint,
		Workspace: m.workspace, Sandbox: sandboxspec.SandboxName(ns, sb.Name)}, nil
}

// Start authorizes every granted membership again each Recheck and
// removes, at the gateway, those RBAC no longer allows: revoking a
// RoleBinding revokes at the gateway within seconds, whatever tokens the
// user still holds. The memberships granted before this process started
// are read back from the gateways first, so that a restart forgets none.
// A manager Runnable.
func (t *Tokens) Start(ctx context.Context) error {
	every := t.Recheck
	if every <= 0 {
		every = 2 * time.Second
	}
	for ctx.Err() == nil {
		err := t.adopt(ctx)
		if err == nil {
			break
		}
		ctrl.LoggerFrom(ctx).Info("reading back the workspace memberships granted earlier failed; retrying", "error", err.Error())
		select {
		case <-ctx.Done():
		case <-time.After(every):
		}
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

func (t *Tokens) recheck(ctx context.Context) {
	t.mu.Lock()
	granted := make(map[membership]user.Info, len(t.members))
	for m, u := range t.members {
		granted[m] = u
	}
	t.mu.Unlock()
	log := ctrl.LoggerFrom(ctx)
	for m, u := range granted {
		allowed, _, err := t.Authz.Allowed(ctx, u, "create", m.namespace, "", SubresourceToken)
		if err != nil || allowed {
			continue // asked again at the next check
		}
		if err := t.revoke(ctx, m); err != nil {
			log.Info("revoking a workspace membership failed; retried at the next check", "subject", m.subject, "workspace", m.workspace, "error", err.Error())
			continue
		}
		t.mu.Lock()
		delete(t.members, m)
		t.mu.Unlock()
		log.Info("workspace membership revoked: RBAC no longer allows it", "subject", m.subject, "workspace", m.workspace, "gateway", m.gateway)
	}
}

func (t *Tokens) revoke(ctx context.Context, m membership) error {
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

// adopt reads back, from the gateways of every sandbox that uses the
// operator's issuer, the members of each namespace's workspace that this
// exchange made (SubjectPrefix), so that they are checked like the ones
// granted since. Their groups are not known any more: a member whose
// access came through a group is removed at the first check and gets it
// back with the next exchange (fail closed).
func (t *Tokens) adopt(ctx context.Context) error {
	list := &openshellv1alpha1.OpenShellSandboxList{}
	if err := t.Reader.List(ctx, list); err != nil {
		return fmt.Errorf("list sandboxes: %w", err)
	}
	seen := map[[2]string]bool{}
	for i := range list.Items {
		sb := &list.Items[i]
		key := [2]string{sb.Status.Gateway, sb.Namespace}
		if sb.Status.Gateway == "" || seen[key] {
			continue
		}
		seen[key] = true
		if err := t.adoptWorkspace(ctx, sb.Status.Gateway, sb.Namespace); err != nil {
			return err
		}
	}
	return nil
}

func (t *Tokens) adoptWorkspace(ctx context.Context, gatewayKey, namespace string) error {
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
			t.members = map[membership]user.Info{}
		}
		for _, m := range resp.GetMembers() {
			if name, ok := strings.CutPrefix(m.GetPrincipalSubject(), SubjectPrefix); ok {
				t.members[membership{gateway: gatewayKey, namespace: namespace, workspace: ws, subject: m.GetPrincipalSubject()}] = &user.DefaultInfo{Name: name}
			}
		}
		t.mu.Unlock()
		if resp.GetNextPageToken() == "" {
			return nil
		}
		req.PageToken = resp.GetNextPageToken()
	}
}
