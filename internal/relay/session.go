package relay

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/authentication/user"
	"sigs.k8s.io/controller-runtime/pkg/client"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
)

// Session bounds. A session (an exec, a followed log) has its sandbox
// looked at every sessionRecheck, and is authorized again then unless its
// last answer still holds (Server.RBAC: no RBAC change since that could
// take it back, and younger than its MaxAge): revoking the user's RBAC,
// deleting their ServiceAccount, deleting the sandbox or its leaving Ready
// ends open sessions within that time, not only new ones. Failed checks
// end it after maxFailedChecks in a row (fail closed), and no session
// outlives maxSession.
const (
	sessionRecheck  = 5 * time.Second
	maxFailedChecks = 3
	maxSession      = 8 * time.Hour
	checkTimeout    = 5 * time.Second
)

// errClientGone ends a session whose client no longer reads or writes.
var errClientGone = errors.New("the client went away")

// session is the context of one session: cancelled, with the reason as its
// cause, when a check fails, the client goes or maxSession passes.
func (s *Server) session(r *http.Request, u user.Info, verb string, sb *openshellv1alpha1.OpenShellSandbox, sub string) (context.Context, context.CancelCauseFunc) {
	// The request's own context is not cancelled once the connection is
	// hijacked for streaming: the session has one of its own.
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(r.Context()))
	ctx, stopTimer := context.WithTimeoutCause(ctx, maxSession, fmt.Errorf("the session reached its limit of %s", maxSession))
	go func() {
		defer stopTimer()
		s.watch(ctx, cancel, u, verb, sb, sub)
	}()
	return ctx, cancel
}

// watch checks the session every sessionRecheck until it ends.
func (s *Server) watch(ctx context.Context, end context.CancelCauseFunc, u user.Info, verb string, sb *openshellv1alpha1.OpenShellSandbox, sub string) {
	tick := time.NewTicker(cmp.Or(s.sessionRecheck, sessionRecheck))
	defer tick.Stop()
	failed := 0
	var authorized time.Time // when it was last allowed here (the request's own review is not counted)
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		now := time.Now()
		ask := !s.RBAC.Fresh(sb.Namespace, authorized, now)
		why, err := s.stillAllowed(ctx, u, verb, sb, sub, ask)
		if ask && err == nil && why == "" {
			authorized = now
		}
		switch {
		case err != nil:
			if failed++; failed >= maxFailedChecks {
				end(fmt.Errorf("the session could not be authorized again %d times in a row: %w", failed, err))
				return
			}
		case why != "":
			end(errors.New(why))
			return
		default:
			failed = 0
		}
	}
}

// stillAllowed says why the session may not go on ("" when it may),
// asking RBAC again if ask.
func (s *Server) stillAllowed(ctx context.Context, u user.Info, verb string, sb *openshellv1alpha1.OpenShellSandbox, sub string, ask bool) (string, error) {
	if s.Accounts.Gone(ctx, u) {
		return fmt.Sprintf("the ServiceAccount %s was deleted", u.GetName()), nil
	}
	if grp := s.Groups.Left(u); grp != "" {
		return fmt.Sprintf("%s is no longer in group %s, which the session's identity named: start the session again", u.GetName(), grp), nil
	}
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	if ask {
		s.Metrics.reauthorized(CheckSession)
		allowed, _, err := s.Authz.Allowed(ctx, u, verb, sb.Namespace, sb.Name, sub)
		if err != nil {
			return "", err
		}
		if !allowed {
			return fmt.Sprintf("%s may no longer %s %s/%s in namespace %s", u.GetName(), verb, Resource, sub, sb.Namespace), nil
		}
	}
	cur := &openshellv1alpha1.OpenShellSandbox{}
	if err := s.Reader.Get(ctx, client.ObjectKeyFromObject(sb), cur); apierrors.IsNotFound(err) || (err == nil && cur.UID != sb.UID) {
		return "the sandbox was deleted", nil
	} else if err != nil {
		return "", err
	}
	if st := usable(cur); st != nil {
		return st.ErrStatus.Message, nil
	}
	return "", nil
}

// stream is an open streaming session (an exec, a port-forward, a log
// read): its gateway, its context (ended by watch), its audit record.
type stream struct {
	target  *Target
	ctx     context.Context
	end     context.CancelCauseFunc
	rec     *Record
	release func()
}

// startStream takes a session slot for the user, opens the sandbox's
// gateway as the user and starts the session's checks and its audit
// record. On a refusal it has written the status and returns nil; close
// ends the session.
func (s *Server) startStream(w http.ResponseWriter, r *http.Request, sb *openshellv1alpha1.OpenShellSandbox, u user.Info,
	verb, sub string, session Session) *stream {
	place, err := readPlace(r.Context(), s.Reader, sb)
	if err != nil {
		writeStatus(w, apierrors.NewServiceUnavailable(fmt.Sprintf("the sandbox's gateway cannot be reached: %v", err)))
		return nil
	}
	release, refused := s.sessions().acquire(holderOf(sb, place, u))
	if refused != nil {
		writeStatus(w, refused)
		return nil
	}
	target, err := s.Gateways.Open(r.Context(), sb, place, u, verb, sub)
	if err != nil {
		release()
		var st *apierrors.StatusError
		if errors.As(err, &st) {
			writeStatus(w, st) // a refusal of the relay's own (too many leases)
		} else {
			writeStatus(w, apierrors.NewServiceUnavailable(fmt.Sprintf("the sandbox's gateway cannot be reached: %v", err)))
		}
		return nil
	}
	ctx, end := s.session(r, u, verb, sb, sub)
	st := &stream{target: target, ctx: ctx, end: end, rec: s.Audit.Start(ctx, sb, session)}
	open := s.sessions()
	open.track(st)
	s.Metrics.opened(sub)
	st.release = func() {
		open.untrack(st)
		release()
		s.Metrics.closed(sub, st.rec.in.Load(), st.rec.out.Load())
	}
	return st
}

// RequesterAnnotation is the OpenShift project requester: the project
// request API sets it, and a project's own admins cannot change it.
const RequesterAnnotation = "openshift.io/requester"

// holderOf is whose a session on sb is. The requester bound applies only
// on a gateway that admits every namespace, the one where a
// self-provisioner's new projects each get sandboxes; a namespace made
// otherwise has no requester and no such bound. Pure.
func holderOf(sb *openshellv1alpha1.OpenShellSandbox, p Place, u user.Info) holder {
	h := holder{user: u.GetName(), namespace: sb.Namespace}
	if p.Gateway.Spec.Tenancy.AllowedNamespaces.From == openshellv1alpha1.NamespacesFromAll {
		h.requester = p.Namespace.Annotations[RequesterAnnotation]
	}
	return h
}

func (st *stream) close() {
	st.end(nil)
	st.release()
}
