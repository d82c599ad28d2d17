package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/types/known/timestamppb"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	openshellv1 "github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/openshellv1"
	"github.com/openshell/openshell-operator/internal/oidc"
	"github.com/openshell/openshell-operator/internal/relayload"
	"github.com/openshell/openshell-operator/internal/scheme"
)

// headerAuthn believes X-Test-User when X-Test-Proxy is set (the stand-in
// for a verified front-proxy certificate).
type headerAuthn struct{}

func (headerAuthn) AuthenticateRequest(r *http.Request) (*authenticator.Response, bool, error) {
	if r.Header.Get("X-Test-Proxy") == "" {
		return nil, false, nil
	}
	return &authenticator.Response{User: &user.DefaultInfo{Name: r.Header.Get("X-Test-User")}}, true, nil
}

// allowList allows "user verb ns/name/sub" entries.
type allowList map[string]bool

func (a allowList) Allowed(_ context.Context, u user.Info, verb, ns, name, sub string) (bool, string, error) {
	return a[u.GetName()+" "+verb+" "+ns+"/"+name+"/"+sub], "no RBAC rule", nil
}

type noGateways struct{}

func (noGateways) Open(context.Context, *openshellv1alpha1.OpenShellSandbox, Place, user.Info, string, string) (*Target, error) {
	return nil, errors.New("no gateway in this test")
}

// TestServeRefusals: every request is authenticated, authorized and
// checked against the sandbox's state before any gateway is opened, each
// refusal with the status a kubectl user recognises.
func TestServeRefusals(t *testing.T) {
	now := metav1.NewTime(time.Now())
	sandboxes := []*openshellv1alpha1.OpenShellSandbox{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "ready"}, Status: openshellv1alpha1.OpenShellSandboxStatus{
			Phase: openshellv1alpha1.SandboxPhaseReady, Gateway: "p/gw", GatewaySandboxName: "x"}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "pending"}, Status: openshellv1alpha1.OpenShellSandboxStatus{
			Phase: openshellv1alpha1.SandboxPhasePending}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "going", DeletionTimestamp: &now, Finalizers: []string{"x"}},
			Status: openshellv1alpha1.OpenShellSandboxStatus{Phase: openshellv1alpha1.SandboxPhaseReady, Gateway: "p/gw", GatewaySandboxName: "y"}},
	}
	b := fake.NewClientBuilder().WithScheme(scheme.New())
	for _, sb := range sandboxes {
		b = b.WithObjects(sb)
	}
	s := &Server{Authn: headerAuthn{}, Reader: b.Build(), Gateways: noGateways{}, Audit: Auditor{Log: logr.Discard()},
		Authz: allowList{
			"dave create team-a/ready/exec": true, "dave get team-a/ready/log": true, "dave create team-a/pending/exec": true,
			"dave create team-a/going/exec": true, "dave create team-a/gone/exec": true,
		}}
	base := "/apis/" + Group + "/" + Version + "/namespaces/"
	for _, tc := range []struct {
		name, method, path, user string
		proxy                    bool
		want                     int
		text                     string
	}{
		{"not through the front proxy", http.MethodGet, "/apis", "dave", false, http.StatusUnauthorized, "front-proxy"},
		{"discovery", http.MethodGet, "/apis/" + Group + "/" + Version, "dave", true, http.StatusOK, "openshellsandboxes/exec"},
		{"no RBAC", http.MethodPost, base + "team-a/openshellsandboxes/ready/exec?command=echo", "mallory", true, http.StatusForbidden, `cannot create openshellsandboxes/exec in namespace`},
		{"RBAC in another sandbox only", http.MethodGet, base + "team-a/openshellsandboxes/pending/log", "dave", true, http.StatusForbidden, "cannot get"},
		{"a method the subresource has not", http.MethodDelete, base + "team-a/openshellsandboxes/ready/exec", "dave", true, http.StatusMethodNotAllowed, ""},
		{"an unknown subresource", http.MethodGet, base + "team-a/openshellsandboxes/ready/attach", "dave", true, http.StatusNotFound, "not found"},
		{"a bad namespace", http.MethodPost, base + "Team_A/openshellsandboxes/ready/exec", "dave", true, http.StatusBadRequest, "invalid namespace"},
		{"no such sandbox", http.MethodPost, base + "team-a/openshellsandboxes/gone/exec?command=echo", "dave", true, http.StatusNotFound, "not found"},
		{"not Ready", http.MethodPost, base + "team-a/openshellsandboxes/pending/exec?command=echo", "dave", true, http.StatusConflict, "not Ready"},
		{"being deleted", http.MethodPost, base + "team-a/openshellsandboxes/going/exec?command=echo", "dave", true, http.StatusConflict, "being deleted"},
		{"no command", http.MethodPost, base + "team-a/openshellsandboxes/ready/exec?stdout=true", "dave", true, http.StatusBadRequest, "no command"},
		{"gateway down", http.MethodPost, base + "team-a/openshellsandboxes/ready/exec?command=echo&stdout=true", "dave", true, http.StatusServiceUnavailable, "cannot be reached"},
		{"bad tailLines", http.MethodGet, base + "team-a/openshellsandboxes/ready/log?tailLines=-1", "dave", true, http.StatusBadRequest, "tailLines"},
		{"a command line too long", http.MethodPost, base + "team-a/openshellsandboxes/ready/exec?stdout=true&command=" + strings.Repeat("x", maxCommandBytes), "dave", true, http.StatusBadRequest, "pass data on stdin"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest(tc.method, tc.path, nil)
			req.Header.Set("X-Test-User", tc.user)
			if tc.proxy {
				req.Header.Set("X-Test-Proxy", "1")
			}
			w := httptest.NewRecorder()
			s.Handler().ServeHTTP(w, req)
			if w.Code != tc.want {
				t.Fatalf("status %d, want %d: %s", w.Code, tc.want, w.Body.String())
			}
			if !strings.Contains(w.Body.String(), tc.text) {
				t.Fatalf("body %s does not say %q", w.Body.String(), tc.text)
			}
			if tc.want != http.StatusOK {
				var st metav1.Status
				if err := json.Unmarshal(w.Body.Bytes(), &st); err != nil || st.Kind != "Status" {
					t.Fatalf("a refusal is a metav1.Status (kubectl prints its message): %v %s", err, w.Body.String())
				}
			}
		})
	}
}

// TestExecNeedsCreate: exec over WebSocket is a GET, but a role that may
// only get must not run commands.
func TestExecNeedsCreate(t *testing.T) {
	for _, method := range []string{http.MethodGet, http.MethodPost} {
		for _, sub := range []string{SubresourceExec, SubresourcePortForward} {
			if v, err := verbOf(method, sub); err != nil || v != "create" {
				t.Errorf("%s %s: verb %q, %v; want create", method, sub, v, err)
			}
		}
	}
	if v, _ := verbOf(http.MethodGet, SubresourceLog); v != "get" {
		t.Errorf("log: verb %q, want get", v)
	}
	if _, err := verbOf(http.MethodGet, SubresourceToken); err == nil {
		t.Error("a token is created (POST), never read")
	}
}

// TestStillAllowed: an open session ends when its user loses the verb, or
// its sandbox is deleted, replaced or no longer Ready.
func TestStillAllowed(t *testing.T) {
	now := metav1.Now()
	ready := &openshellv1alpha1.OpenShellSandbox{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "sb", UID: "u1"},
		Status: openshellv1alpha1.OpenShellSandboxStatus{Phase: openshellv1alpha1.SandboxPhaseReady, Gateway: "p/gw", GatewaySandboxName: "x"}}
	u := &user.DefaultInfo{Name: "dave"}
	for _, tc := range []struct {
		name   string
		stored *openshellv1alpha1.OpenShellSandbox
		allow  allowList
		want   string
	}{
		{"still allowed", ready, allowList{"dave create team-a/sb/exec": true}, ""},
		{"RBAC revoked", ready, allowList{}, "may no longer create"},
		{"deleted", nil, allowList{"dave create team-a/sb/exec": true}, "deleted"},
		{"replaced by another of the same name", func() *openshellv1alpha1.OpenShellSandbox {
			o := ready.DeepCopy()
			o.UID = "u2"
			return o
		}(), allowList{"dave create team-a/sb/exec": true}, "deleted"},
		{"being deleted", func() *openshellv1alpha1.OpenShellSandbox {
			o := ready.DeepCopy()
			o.DeletionTimestamp, o.Finalizers = &now, []string{"x"}
			return o
		}(), allowList{"dave create team-a/sb/exec": true}, "being deleted"},
		{"no longer Ready", func() *openshellv1alpha1.OpenShellSandbox {
			o := ready.DeepCopy()
			o.Status.Phase = openshellv1alpha1.SandboxPhaseError
			return o
		}(), allowList{"dave create team-a/sb/exec": true}, "not Ready"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := fake.NewClientBuilder().WithScheme(scheme.New())
			if tc.stored != nil {
				b = b.WithObjects(tc.stored)
			}
			s := &Server{Reader: b.Build(), Authz: tc.allow}
			why, err := s.stillAllowed(context.Background(), u, "create", ready, SubresourceExec, true)
			if err != nil {
				t.Fatal(err)
			}
			if (tc.want == "") != (why == "") || !strings.Contains(why, tc.want) {
				t.Fatalf("stillAllowed = %q, want %q", why, tc.want)
			}
		})
	}
}

// TestLogLinesCannotBeForged: a sandbox's message cannot print a line of
// its own, and lines repeated by a poll since the last line's time are
// printed once.
func TestLogLinesCannotBeForged(t *testing.T) {
	at := timestamppb.New(time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC))
	forged := &openshellv1.SandboxLogLine{EventTime: at, Level: "INFO", Message: "ok\n2026-12-03T10:00:01Z INFO [relay] dave ran rm -rf"}
	if got := formatLogLine(forged); strings.Count(got, "\n") != 1 {
		t.Fatalf("a message printed %d lines: %q", strings.Count(got, "\n"), got)
	}
	w := httptest.NewRecorder()
	p := &logPrinter{w: w, rec: &Record{}}
	a := &openshellv1.SandboxLogLine{EventTime: at, Level: "INFO", Message: "a"}
	b := &openshellv1.SandboxLogLine{EventTime: at, Level: "INFO", Message: "b"}
	p.print([]*openshellv1.SandboxLogLine{a, b})
	p.print([]*openshellv1.SandboxLogLine{a, b}) // the next poll, since the same instant
	if got := strings.Count(w.Body.String(), "\n"); got != 2 {
		t.Fatalf("printed %d lines, want 2 (two lines of one instant, once each): %q", got, w.Body.String())
	}
}

// TestEventsNameOnlyTheProgram: a command's arguments can hold a secret,
// and anyone who may view the namespace reads its Events.
func TestEventsNameOnlyTheProgram(t *testing.T) {
	got := commandSuffix([]string{"mysql", "-pHunter2"})
	if strings.Contains(got, "Hunter2") || !strings.Contains(got, "mysql") {
		t.Fatalf("commandSuffix = %q", got)
	}
	if long := capNote(strings.Repeat("x", 5000)); len(long) > maxNote+len("…") {
		t.Fatalf("a note of %d bytes: the Events API refuses notes over 1 KiB", len(long))
	}
}

// TestMembersPerNamespaceAreBounded: each lease costs a recheck; a namespace
// cannot hold more than maxMembersPerNamespace. Renewing a held one is
// not a new one.
func TestMembersPerNamespaceAreBounded(t *testing.T) {
	ctx := context.Background()
	tk := leaseTokens(t)
	exp := tk.now().Add(time.Minute)
	for i := range maxMembersPerNamespace {
		if err := tk.record(ctx, member("team-a", fmt.Sprint(i)), lease{user: &user.DefaultInfo{Name: fmt.Sprint(i)}, expires: exp, grant: exchanged}); err != nil {
			t.Fatal(err)
		}
	}
	err := tk.record(ctx, member("team-a", "one-more"), lease{user: &user.DefaultInfo{Name: "x"}, expires: exp, grant: exchanged})
	if !apierrors.IsTooManyRequests(err) {
		t.Fatalf("record = %v, want TooManyRequests", err)
	}
	if err := tk.record(ctx, member("team-a", "0"), lease{user: &user.DefaultInfo{Name: "0"}, expires: exp.Add(time.Minute), grant: exchanged}); err != nil {
		t.Fatalf("renewing a held lease: %v", err)
	}
	if err := tk.record(ctx, member("team-b", "x"), lease{user: &user.DefaultInfo{Name: "x"}, expires: exp, grant: exchanged}); err != nil {
		t.Fatalf("another namespace: %v", err)
	}
}

func member(ns, subject string) membership {
	return membership{gateway: "platform/gw", namespace: ns, workspace: "ws-" + ns, subject: SubjectPrefix + subject}
}

func leaseTokens(t testing.TB) *Tokens {
	t.Helper()
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	c := fake.NewClientBuilder().WithScheme(scheme.New()).Build()
	issuer := &oidc.Issuer{URL: "https://issuer.example", Client: c, SecretNamespace: "operator", SecretName: "keys"}
	if err := issuer.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	return &Tokens{Leases: c, LeaseNamespace: "operator", Issuer: issuer, Now: func() time.Time { return now }}
}

// TestForgedLeasesAreIgnored: whoever else may write Leases in the relay's
// namespace cannot make a recheck keep a membership (groups of their
// choosing) or fill a namespace's bound: a Lease without the relay's
// signature, or with a field changed after it signed, is not believed.
func TestForgedLeasesAreIgnored(t *testing.T) {
	ctx := context.Background()
	tk := leaseTokens(t)
	m := member("team-a", "dave")
	if err := tk.record(ctx, m, lease{user: &user.DefaultInfo{Name: "dave"}, expires: tk.now().Add(time.Minute), grant: exchanged}); err != nil {
		t.Fatal(err)
	}
	o := &coordinationv1.Lease{}
	if err := tk.Leases.Get(ctx, client.ObjectKey{Namespace: "operator", Name: leaseName(m)}, o); err != nil {
		t.Fatal(err)
	}
	if _, _, err := tk.verifiedLease(o); err != nil {
		t.Fatalf("the relay's own lease: %v", err)
	}
	escalated := o.DeepCopy()
	escalated.Annotations[annotationUser] = `{"name":"dave","groups":["system:masters"]}`
	if _, _, err := tk.verifiedLease(escalated); err == nil {
		t.Fatal("a lease whose groups were changed was believed")
	}
	longer := o.DeepCopy()
	longer.Spec.LeaseDurationSeconds = ptr.To[int32](86400)
	if _, _, err := tk.verifiedLease(longer); err == nil {
		t.Fatal("a lease whose term was changed was believed")
	}
	// Unsigned Leases labelled with team-b do not count against team-b.
	for i := range maxMembersPerNamespace {
		forged := member("team-b", fmt.Sprint("ghost-", i))
		f, err := renderLease("operator", forged, lease{user: &user.DefaultInfo{Name: "ghost"}, expires: tk.now().Add(time.Hour), grant: exchanged}, tk.now())
		if err != nil {
			t.Fatal(err)
		}
		if err := tk.Leases.Create(ctx, f); err != nil {
			t.Fatal(err)
		}
	}
	if err := tk.record(ctx, member("team-b", "bob"), lease{user: &user.DefaultInfo{Name: "bob"}, expires: tk.now().Add(time.Minute), grant: exchanged}); err != nil {
		t.Fatalf("a namespace filled with forged leases refused a real one: %v", err)
	}
}

// TestGrantedCountsOnlySignedLeases: what the sweep compares a
// workspace's members with is the relay's signed Leases, per gateway and
// workspace; a Lease anyone else wrote in the namespace grants no one.
func TestGrantedCountsOnlySignedLeases(t *testing.T) {
	ctx := context.Background()
	tk := leaseTokens(t)
	for _, m := range []membership{member("team-a", "tina"), member("team-a", "gus"), member("team-b", "bob")} {
		if err := tk.record(ctx, m, lease{user: &user.DefaultInfo{Name: "x"}, expires: tk.now().Add(time.Minute), grant: exchanged}); err != nil {
			t.Fatal(err)
		}
	}
	forged, err := renderLease("operator", member("team-a", "mallory"), lease{user: &user.DefaultInfo{Name: "mallory"}, expires: tk.now().Add(time.Hour),
		grant: exchanged}, tk.now())
	if err != nil {
		t.Fatal(err)
	}
	if err := tk.Leases.Create(ctx, forged); err != nil {
		t.Fatal(err)
	}
	got, err := Granted(ctx, tk.Leases, "operator", tk.Issuer)
	if err != nil {
		t.Fatal(err)
	}
	want := map[WorkspaceKey]map[string]bool{
		{Gateway: "platform/gw", Workspace: "ws-team-a"}: {SubjectPrefix + "tina": true, SubjectPrefix + "gus": true},
		{Gateway: "platform/gw", Workspace: "ws-team-b"}: {SubjectPrefix + "bob": true},
	}
	if len(got) != len(want) {
		t.Fatalf("granted %v, want %v", got, want)
	}
	for k, subs := range want {
		if !maps.Equal(got[k], subs) {
			t.Errorf("%v: granted %v, want %v", k, got[k], subs)
		}
	}
}

// TestLeasesMerge: every replica reads and writes the same Lease of a
// membership. An exchange's (namespace-wide) check replaces a session's,
// a session never narrows an exchange's, a lease never ends sooner than
// the stored one, the user's groups survive (a replica that did not see
// the exchange checks the same RBAC), and even a covered renewal writes.
func TestLeasesMerge(t *testing.T) {
	ctx := context.Background()
	tk := leaseTokens(t)
	m := member("team-a", "dave")
	dave := &user.DefaultInfo{Name: "dave", Groups: []string{"team-a-admins", "system:authenticated"}}
	session := grant{verb: "create", name: "agent", sub: SubresourceExec}
	read := func() (lease, string) {
		t.Helper()
		o := &coordinationv1.Lease{}
		if err := tk.Leases.Get(ctx, client.ObjectKey{Namespace: "operator", Name: leaseName(m)}, o); err != nil {
			t.Fatal(err)
		}
		got, l, err := tk.verifiedLease(o)
		if err != nil || got != m {
			t.Fatalf("parse: %v, %+v", err, got)
		}
		return l, o.ResourceVersion
	}
	t0 := tk.now()
	if err := tk.record(ctx, m, lease{user: dave, expires: t0.Add(10 * time.Minute), grant: session}); err != nil {
		t.Fatal(err)
	}
	if l, _ := read(); l.grant != session || !l.expires.Equal(t0.Add(10*time.Minute)) {
		t.Fatalf("first lease: %+v", l)
	}
	if err := tk.record(ctx, m, lease{user: dave, expires: t0.Add(5 * time.Minute), grant: exchanged}); err != nil {
		t.Fatal(err)
	}
	l, rv := read()
	if l.grant != exchanged || !l.expires.Equal(t0.Add(10*time.Minute)) {
		t.Fatalf("after an exchange: %+v, want the exchange's check until the later end", l)
	}
	if got := l.user.GetGroups(); len(got) != 2 || got[0] != "team-a-admins" {
		t.Fatalf("groups: %v", got)
	}
	if err := tk.record(ctx, m, lease{user: dave, expires: t0.Add(8 * time.Minute), grant: session}); err != nil {
		t.Fatal(err)
	}
	// Written all the same: a concurrent revocation's delete must conflict.
	if l, rv2 := read(); l.grant != exchanged || !l.expires.Equal(t0.Add(10*time.Minute)) || rv2 == rv {
		t.Fatalf("a covered session renewal: %+v (resourceVersion %s, was %s), want the same lease written again", l, rv2, rv)
	}
	if err := tk.record(ctx, m, lease{user: dave, expires: t0.Add(20 * time.Minute), grant: session}); err != nil {
		t.Fatal(err)
	}
	if l, _ := read(); l.grant != exchanged || !l.expires.Equal(t0.Add(20*time.Minute)) {
		t.Fatalf("a longer session: %+v, want the exchange's check until the session's end", l)
	}
}

// TestNamedProxiesOnly: with no allowed front-proxy names, Kubernetes would
// let any certificate of the CA assert any user: the relay refuses all.
func TestNamedProxiesOnly(t *testing.T) {
	n := namedProxiesOnly{authn: headerAuthn{}, names: func() []string { return nil }}
	req := httptest.NewRequest(http.MethodGet, "/apis", nil)
	req.Header.Set("X-Test-Proxy", "1")
	if _, ok, err := n.AuthenticateRequest(req); ok || err == nil {
		t.Fatalf("authenticated with no allowed names: ok=%v err=%v", ok, err)
	}
	n.names = func() []string { return []string{"front-proxy-client"} }
	if _, ok, _ := n.AuthenticateRequest(req); !ok {
		t.Fatal("a named proxy was refused")
	}
}

// TestSessionLimits: one user, or one namespace, holds a bounded number of
// sessions; a released slot can be taken again.
func TestSessionLimits(t *testing.T) {
	var s sessions
	var releases []func()
	for i := range maxSessionsPerUser {
		rel, refused := s.acquire(holder{user: "dave", namespace: "team-a"})
		if refused != nil {
			t.Fatalf("session %d refused: %v", i, refused)
		}
		releases = append(releases, rel)
	}
	if _, refused := s.acquire(holder{user: "dave", namespace: "team-a"}); refused == nil || !apierrors.IsTooManyRequests(refused) {
		t.Fatalf("session %d of one user: %v, want TooManyRequests", maxSessionsPerUser+1, refused)
	}
	releases[0]()
	releases[0]() // releasing twice gives back one slot
	if _, refused := s.acquire(holder{user: "dave", namespace: "team-a"}); refused != nil {
		t.Fatalf("after a release: %v", refused)
	}
	if _, refused := s.acquire(holder{user: "dave", namespace: "team-a"}); refused == nil {
		t.Fatal("a double release gave back two slots")
	}
	for i := range maxSessionsPerNamespace - maxSessionsPerUser {
		if _, refused := s.acquire(holder{user: fmt.Sprint("user-", i), namespace: "team-a"}); refused != nil {
			t.Fatalf("namespace session %d: %v", i, refused)
		}
	}
	if _, refused := s.acquire(holder{user: "erin", namespace: "team-a"}); refused == nil || !strings.Contains(refused.Error(), "namespace team-a") {
		t.Fatalf("past the namespace's limit: %v", refused)
	}
	if _, refused := s.acquire(holder{user: "erin", namespace: "team-b"}); refused != nil {
		t.Fatalf("another namespace: %v", refused)
	}
}

// TestRequesterLimit (fourth read, R4): the projects one person requested
// hold a bounded number of sessions together, however many projects and
// ServiceAccounts they make; sessions with no requester bound (a gateway
// that admits chosen namespaces only) are not counted against it.
func TestRequesterLimit(t *testing.T) {
	s := sessions{perRequester: 6}
	for i := range 6 {
		// A new project, a new ServiceAccount, each time.
		if _, refused := s.acquire(holder{user: fmt.Sprint("system:serviceaccount:p-", i, ":sa"), namespace: fmt.Sprint("p-", i), requester: "mallory"}); refused != nil {
			t.Fatalf("session %d refused: %v", i, refused)
		}
	}
	_, refused := s.acquire(holder{user: "system:serviceaccount:p-7:sa", namespace: "p-7", requester: "mallory"})
	if refused == nil || !apierrors.IsTooManyRequests(refused) || !strings.Contains(refused.Error(), "the projects mallory requested have 6 open sessions") {
		t.Fatalf("past the requester's limit: %v, want 429 naming the requester", refused)
	}
	if _, refused := s.acquire(holder{user: "dave", namespace: "team-a", requester: "alice"}); refused != nil {
		t.Fatalf("another requester's project: %v", refused)
	}
	if _, refused := s.acquire(holder{user: "system:serviceaccount:p-8:sa", namespace: "p-8"}); refused != nil {
		t.Fatalf("no requester bound: %v", refused)
	}
}

// TestReplicaLimit: a replica holds at most max sessions whoever opens
// them; a refusal is 503 with a retry, which may reach another replica.
// Each refusal is counted by reason.
func TestReplicaLimit(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	s := sessions{max: 3, metrics: m}
	var releases []func()
	for i := range 3 {
		rel, refused := s.acquire(holder{user: fmt.Sprint("user-", i), namespace: fmt.Sprint("ns-", i)})
		if refused != nil {
			t.Fatalf("session %d refused: %v", i, refused)
		}
		releases = append(releases, rel)
	}
	_, refused := s.acquire(holder{user: "erin", namespace: "team-b"})
	if refused == nil || !apierrors.IsServiceUnavailable(refused) || !strings.Contains(refused.Error(), "another replica") {
		t.Fatalf("past the replica's limit: %v, want 503 naming another replica", refused)
	}
	if secs, ok := apierrors.SuggestsClientDelay(refused); !ok || secs != 1 {
		t.Fatalf("the refusal suggests no retry (%d, %v)", secs, ok)
	}
	releases[0]()
	if _, refused := s.acquire(holder{user: "erin", namespace: "team-b"}); refused != nil {
		t.Fatalf("after a release: %v", refused)
	}
	if got := testutil.ToFloat64(m.refusals.WithLabelValues(RefusedReplicaLimit)); got != 1 {
		t.Fatalf("%s{reason=%q} = %v, want 1", MetricSessionRefusals, RefusedReplicaLimit, got)
	}
}

// TestLimitsHoldAcrossReplicas: a user's and a namespace's limits count
// the sessions other replicas publish, so that a second replica does not
// double them; another replica's own Lease is counted, this replica's
// own is not counted twice, and a forged or deleted one counts for nothing.
func TestLimitsHoldAcrossReplicas(t *testing.T) {
	keys := leaseTokens(t).Issuer
	share := &LoadShare{Replica: relayload.Replica{Pod: "relay-a", UID: "uid-a"}, Keys: keys}
	var a sessions
	a.perUser, a.perNS, a.others = 3, 5, share.othersFor
	publish := func(pod string, l relayload.Load) *coordinationv1.Lease {
		o, err := relayload.Render("operator", relayload.Replica{Pod: pod, UID: types.UID("uid-" + pod)}, l, keys)
		if err != nil {
			t.Fatal(err)
		}
		share.observe(o)
		return o
	}
	// Replica b holds two of dave's sessions and four of team-a's.
	b := publish("relay-b", relayload.Load{Sessions: 4, Users: map[string]int{"dave": 2, "erin": 2}, Namespaces: map[string]int{"team-a": 4}})
	// This replica's own Lease, as the informer also delivers it.
	publish("relay-a", relayload.Load{Sessions: 1, Users: map[string]int{"dave": 1}, Namespaces: map[string]int{"team-a": 1}})
	if _, refused := a.acquire(holder{user: "dave", namespace: "team-a"}); refused != nil {
		t.Fatalf("dave's third session: %v", refused)
	}
	if _, refused := a.acquire(holder{user: "dave", namespace: "team-b"}); refused == nil || !strings.Contains(refused.Error(), "dave has 3 open sessions") {
		t.Fatalf("dave's fourth session, two of them on another replica: %v", refused)
	}
	if _, refused := a.acquire(holder{user: "frank", namespace: "team-a"}); refused == nil || !strings.Contains(refused.Error(), "namespace team-a has 5 open sessions") {
		t.Fatalf("team-a's sixth session: %v", refused)
	}
	forged := b.DeepCopy()
	forged.Name, forged.OwnerReferences[0].Name = relayload.Name("relay-c"), "relay-c"
	share.observe(forged)
	if c := share.othersFor(holder{user: "dave", namespace: "team-a"}); c.User != 2 || c.Namespace != 4 {
		t.Fatalf("a forged Lease was counted: dave %d, team-a %d", c.User, c.Namespace)
	}
	share.forget(b)
	if _, refused := a.acquire(holder{user: "dave", namespace: "team-b"}); refused != nil {
		t.Fatalf("after replica b's Lease is gone: %v", refused)
	}
}

// TestLoadIsPublished: a replica's Lease follows its sessions, counts a
// burst in one write, and goes when the replica stops.
func TestLoadIsPublished(t *testing.T) {
	g := NewWithT(t)
	tk := leaseTokens(t)
	var writes atomic.Int32
	c := interceptor.NewClient(tk.Leases.(client.WithWatch), interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.CreateOption) error {
			writes.Add(1)
			return c.Create(ctx, o, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.UpdateOption) error {
			writes.Add(1)
			return c.Update(ctx, o, opts...)
		},
	})
	// The interval is long enough that five acquisitions in a row fall in
	// one even on a loaded machine; the waits below are bounded by the
	// test's timeout, not by the interval.
	g.SetDefaultEventuallyTimeout(30 * time.Second)
	share := &LoadShare{Client: c, Namespace: "operator", Replica: relayload.Replica{Pod: "relay-a", UID: "uid-a"}, Keys: tk.Issuer,
		MinInterval: 250 * time.Millisecond}
	s := &Server{Share: share}
	open := s.sessions()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); share.publish(ctx, open) }()
	published := func() relayload.Load {
		o := &coordinationv1.Lease{}
		if err := tk.Leases.Get(ctx, client.ObjectKey{Namespace: "operator", Name: relayload.Name("relay-a")}, o); err != nil {
			return relayload.Load{Sessions: -1}
		}
		l, err := relayload.Read(o, tk.Issuer)
		g.Expect(err).NotTo(HaveOccurred())
		return l
	}
	g.Eventually(published).Should(Equal(relayload.Load{}), "an idle replica says so once")
	idle := &coordinationv1.Lease{}
	g.Expect(tk.Leases.Get(ctx, client.ObjectKey{Namespace: "operator", Name: relayload.Name("relay-a")}, idle)).To(Succeed())
	var releases []func()
	for range 5 {
		rel, refused := open.acquire(holder{user: "dave", namespace: "team-a"})
		g.Expect(refused).To(BeNil())
		releases = append(releases, rel)
	}
	g.Eventually(published).Should(Equal(relayload.Load{Sessions: 5, Users: map[string]int{"dave": 5}, Namespaces: map[string]int{"team-a": 5}}))
	g.Expect(writes.Load()).To(BeNumerically("<=", 3), "a burst of five sessions is not five writes")
	// Someone who may write Leases here replays the idle version (signed
	// by the relay): the replica sees it (its informer) and writes its own
	// again; and again after someone deletes it.
	replay := func() *coordinationv1.Lease {
		cur := &coordinationv1.Lease{}
		g.Expect(tk.Leases.Get(ctx, client.ObjectKeyFromObject(idle), cur)).To(Succeed())
		old := idle.DeepCopy()
		old.ResourceVersion = cur.ResourceVersion
		g.Expect(tk.Leases.Update(ctx, old)).To(Succeed())
		return old
	}
	share.observe(replay())
	g.Eventually(published).Should(HaveField("Sessions", 5), "a replayed Lease is written over")
	g.Expect(tk.Leases.Delete(ctx, idle)).To(Succeed())
	share.forget(idle)
	g.Eventually(published).Should(HaveField("Sessions", 5), "a deleted Lease is written again")
	for _, rel := range releases {
		rel()
	}
	g.Eventually(published).Should(Equal(relayload.Load{}))
	cancel()
	<-done
	g.Expect(published().Sessions).To(Equal(-1), "a stopped replica's Lease is deleted")
}

// TestHolderNamesTheRequesterOnlyOnOpenGateways: a session's requester is
// its namespace's openshift.io/requester when the sandbox's gateway admits
// every namespace, and no one otherwise (no bound there); a gateway that
// cannot be read ends the session before any slot is taken.
func TestHolderNamesTheRequesterOnlyOnOpenGateways(t *testing.T) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "p-1", Annotations: map[string]string{RequesterAnnotation: "mallory"}}}
	open := &openshellv1alpha1.OpenShellGateway{ObjectMeta: metav1.ObjectMeta{Name: "open", Namespace: "platform"},
		Spec: openshellv1alpha1.OpenShellGatewaySpec{Tenancy: openshellv1alpha1.GatewayTenancy{
			AllowedNamespaces: openshellv1alpha1.AllowedNamespaces{From: openshellv1alpha1.NamespacesFromAll}}}}
	chosen := &openshellv1alpha1.OpenShellGateway{ObjectMeta: metav1.ObjectMeta{Name: "chosen", Namespace: "platform"}}
	reader := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(ns, open, chosen).Build()
	dave := &user.DefaultInfo{Name: "dave"}
	sandboxOn := func(gw string) *openshellv1alpha1.OpenShellSandbox {
		return &openshellv1alpha1.OpenShellSandbox{ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: "p-1"},
			Status: openshellv1alpha1.OpenShellSandboxStatus{Gateway: gw}}
	}
	for gw, want := range map[string]string{"platform/open": "mallory", "platform/chosen": ""} {
		sb := sandboxOn(gw)
		p, err := readPlace(context.Background(), reader, sb)
		if err != nil {
			t.Fatalf("gateway %s: %v", gw, err)
		}
		if got := holderOf(sb, p, dave); got != (holder{user: "dave", namespace: "p-1", requester: want}) {
			t.Errorf("gateway %s: %+v, want requester %q", gw, got, want)
		}
	}
	if _, err := readPlace(context.Background(), reader, sandboxOn("platform/missing")); err == nil || !strings.Contains(err.Error(), "platform/missing") {
		t.Errorf("a missing gateway: %v, want an error naming it", err)
	}
}
