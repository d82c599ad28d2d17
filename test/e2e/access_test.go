package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	accessv1alpha1 "github.com/openshell/openshell-operator/api/access/v1alpha1"
	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/gatewayapi"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/openshellv1"
	"github.com/openshell/openshell-operator/internal/pki"
	"github.com/openshell/openshell-operator/internal/sandboxspec"
	"github.com/openshell/openshell-operator/operator"
	"github.com/openshell/openshell-operator/test/framework"
	"github.com/openshell/openshell-operator/test/stack"
	"github.com/openshell/openshell-operator/test/testgateway"
)

// TestConsumerAccess: a Sandbox Consumer uses their sandbox with their own
// cluster identity, through the Kubernetes API (the relay's aggregated
// access.openshell.ai API behind the real kube-apiserver's front proxy),
// with nothing but the tenancy roles a tenant admin binds. Each attack is
// played by a user holding exactly that persona's RBAC.
func TestConsumerAccess(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := cluster.Client
	// A second tenant namespace on the same gateway, watched: its
	// sandboxes become Ready, so a session there reaches the gateway.
	// A short sweep period: the bound on how long a workspace member added
	// at the gateway directly lasts (10 minutes by default), and every
	// membership the relay grants must outlive many sweeps.
	st, tenants, _ := startLineStackWith(ctx, t, g, "access", 2, operator.ControllerOptions{SweepPeriod: 2 * time.Second})
	tenant, other := tenants[0], tenants[1]
	upgradeInPlace(ctx, g, st.Gateway, st.GatewayObj, "0.1.5")
	installOLMAggregatedRoles(ctx, t)
	bind(ctx, t, tenant, "dave", "openshell-sandbox-user")
	bind(ctx, t, tenant, "vic", "openshell-view")
	bind(ctx, t, other, "mallory", "openshell-sandbox-user")

	sb := sandboxOn(tenant, "agent", st.GatewayObj)
	g.Expect(c.Create(ctx, sb)).To(Succeed())
	waitPhase(ctx, g, client.ObjectKeyFromObject(sb), openshellv1alpha1.SandboxPhaseReady)
	ws := sandboxWorkspace(ctx, g, tenant)
	g.Expect(st.Gateway.AppendLog(ws, sandboxspec.SandboxName(tenant, "agent"), "the agent says hello")).To(Succeed())
	// A sandbox of the same name in another namespace, which mallory may use.
	g.Expect(c.Create(ctx, sandboxOn(other, "agent", st.GatewayObj))).To(Succeed())

	r, err := st.StartRelay(ctx, cluster.Config, st.GatewayObj.Namespace, zap.New(zap.WriteTo(io.Discard)))
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { g.Expect(r.Stop(context.Background(), c)).To(Succeed()) })

	t.Run("exec runs a command and returns its output and exit code", func(t *testing.T) {
		g := NewWithT(t)
		out, errOut, err := execAs(ctx, "dave", tenant, "agent", nil, nil, "echo", "hello", "world")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(out).To(Equal("hello world\n"))
		g.Expect(errOut).To(BeEmpty())
		_, errOut, err = execAs(ctx, "dave", tenant, "agent", nil, nil, "warn", "careful")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(errOut).To(Equal("careful\n"), "stderr is its own stream")
		_, _, err = execAs(ctx, "dave", tenant, "agent", nil, nil, "exit", "3")
		var exit utilexec.CodeExitError
		g.Expect(errors.As(err, &exit)).To(BeTrue(), "want the command's exit code, got %v", err)
		g.Expect(exit.Code).To(Equal(3))
		_, errOut, err = execAs(ctx, "dave", tenant, "agent", nil, nil, "no-such-command")
		g.Expect(errors.As(err, &exit) && exit.Code == 127).To(BeTrue(), "%v", err)
		g.Expect(errOut).To(ContainSubstring("command not found"))
	})
	t.Run("exec over WebSocket v5 through the kube-apiserver, as current kubectl speaks it", func(t *testing.T) {
		g := NewWithT(t)
		out, _, err := execWebSocketAs(ctx, "dave", tenant, "agent", strings.NewReader("over a websocket\n"), "cat")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(out).To(Equal("over a websocket\n"), "stdin ends with v5's close signal")
		_, _, err = execWebSocketAs(ctx, "dave", tenant, "agent", nil, "exit", "3")
		var exit utilexec.CodeExitError
		g.Expect(errors.As(err, &exit) && exit.Code == 3).To(BeTrue(), "want exit code 3, got %v", err)
		// A WebSocket exec is a GET: a viewer is still refused (the
		// kube-apiserver asks get on openshellsandboxes/exec, which
		// openshell-view does not grant, and the relay asks create).
		_, _, err = execWebSocketAs(ctx, "vic", tenant, "agent", nil, "echo", "hi")
		g.Expect(err).To(MatchError(ContainSubstring("forbidden")))
	})
	t.Run("an exec's round trip through the kube-apiserver", func(t *testing.T) {
		// A figure, not a bound: 40 `echo hi` as kubectl runs them (a new
		// connection each, through the aggregator and the relay, with the
		// relay's SubjectAccessReview and reads on a real API server).
		g := NewWithT(t)
		var took []time.Duration
		for range 40 {
			t0 := time.Now()
			out, _, err := execAs(ctx, "dave", tenant, "agent", nil, nil, "echo", "hi")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(out).To(Equal("hi\n"))
			took = append(took, time.Since(t0))
		}
		slices.Sort(took)
		t.Logf("figure: exec round trip through the kube-apiserver and the relay: p50 %s, p90 %s (40 execs)",
			took[len(took)/2].Round(10*time.Microsecond), took[len(took)*9/10].Round(10*time.Microsecond))
	})
	t.Run("every session is an event on the sandbox", func(t *testing.T) {
		g := NewWithT(t)
		g.Eventually(func(g Gomega) {
			list := &eventsv1.EventList{}
			g.Expect(c.List(ctx, list, client.InNamespace(tenant))).To(Succeed())
			var notes []string
			for _, e := range list.Items {
				if e.Regarding.Name == "agent" && e.Regarding.Kind == "OpenShellSandbox" {
					notes = append(notes, e.Reason+": "+e.Note)
				}
			}
			g.Expect(notes).To(ContainElement(HavePrefix(openshellv1alpha1.SandboxReasonSessionStarted + ": dave started exec of echo (session")))
			g.Expect(notes).To(ContainElement(And(HavePrefix(openshellv1alpha1.SandboxReasonSessionEnded+": dave ended exec of exit"),
				ContainSubstring("exit code 3"))))
			// Viewers read Events: a command's arguments (a password flag)
			// are not in them.
			for _, n := range notes {
				g.Expect(n).NotTo(ContainSubstring("hello world"))
			}
		}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
	})
	t.Run("stdin reaches the command until EOF", func(t *testing.T) {
		g := NewWithT(t)
		out, _, err := execAs(ctx, "dave", tenant, "agent", strings.NewReader("line one\nline two\n"), nil, "cat")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(out).To(Equal("line one\nline two\n"))
	})
	t.Run("a terminal's size and resizes reach the command", func(t *testing.T) {
		g := NewWithT(t)
		sizes := &sizeQueue{sizes: []remotecommand.TerminalSize{{Width: 120, Height: 40}}}
		// A terminal's input stays open (kubectl exec -it).
		stdin, typing := io.Pipe()
		defer typing.Close()
		out, _, err := execAs(ctx, "dave", tenant, "agent", stdin, sizes, "size", "wait")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(out).To(Equal("40 120\n"))
	})
	t.Run("logs read the gateway's log of the sandbox", func(t *testing.T) {
		g := NewWithT(t)
		for _, user := range []string{"dave", "vic"} {
			logs, err := logsAs(ctx, user, tenant, "agent")
			g.Expect(err).NotTo(HaveOccurred(), user)
			g.Expect(logs).To(ContainSubstring("the agent says hello"), user)
			g.Expect(logs).To(ContainSubstring(`exec "echo hello world" by `+accessv1alpha1.SessionSubjectPrefix+"dave"),
				"the gateway's record of the exec names the user, not the operator")
		}
	})
	t.Run("a viewer cannot exec", func(t *testing.T) {
		g := NewWithT(t)
		_, _, err := execAs(ctx, "vic", tenant, "agent", nil, nil, "echo", "hi")
		g.Expect(err).To(HaveOccurred())
		g.Expect(err.Error()).To(ContainSubstring("forbidden"))
	})
	t.Run("a consumer of another namespace cannot reach a sandbox of the same name", func(t *testing.T) {
		g := NewWithT(t)
		_, _, err := execAs(ctx, "mallory", tenant, "agent", nil, nil, "echo", "hi")
		g.Expect(err).To(HaveOccurred())
		g.Expect(err.Error()).To(ContainSubstring("forbidden"))
		_, err = logsAs(ctx, "mallory", tenant, "agent")
		g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%v", err)
	})
	t.Run("a sandbox that is not Ready refuses exec", func(t *testing.T) {
		g := NewWithT(t)
		pending := sandboxOn(tenant, "pending", st.GatewayObj)
		pending.Spec.PolicyRef = &openshellv1alpha1.LocalObjectReference{Name: "no-such-policy"}
		g.Expect(c.Create(ctx, pending)).To(Succeed())
		_, _, err := execAs(ctx, "dave", tenant, "pending", nil, nil, "echo", "hi")
		g.Expect(err).To(HaveOccurred())
		g.Expect(err.Error()).To(ContainSubstring("not Ready"))
	})
	t.Run("the relay trusts only the front proxy", func(t *testing.T) {
		g := NewWithT(t)
		path := "/apis/" + accessv1alpha1.Group + "/" + accessv1alpha1.Version + "/namespaces/" + tenant + "/openshellsandboxes/agent/log"
		// No client certificate, a forged user header.
		code, _ := direct(ctx, g, r, nil, path, "dave")
		g.Expect(code).To(Equal(http.StatusUnauthorized))
		// A certificate from another CA with the front proxy's name.
		forger, err := pki.NewCA("front-proxy-ca", time.Hour, time.Now())
		g.Expect(err).NotTo(HaveOccurred())
		fake, err := forger.Issue(pki.LeafRequest{CommonName: framework.FrontProxyClientName, Client: true, Validity: time.Hour}, time.Now())
		g.Expect(err).NotTo(HaveOccurred())
		code, _ = direct(ctx, g, r, fake, path, "dave")
		g.Expect(code).To(Equal(http.StatusUnauthorized))
		// The cluster's CA, but not a name allowed to assert users.
		other, err := cluster.FrontProxy.CA.Issue(pki.LeafRequest{CommonName: "not-the-proxy", Client: true, Validity: time.Hour}, time.Now())
		g.Expect(err).NotTo(HaveOccurred())
		code, _ = direct(ctx, g, r, other, path, "dave")
		g.Expect(code).To(Equal(http.StatusUnauthorized))
		// The real front-proxy certificate asserting a user is what the
		// API server sends: authorized as that user (mallory: refused).
		code, body := direct(ctx, g, r, cluster.FrontProxy.Client, path, "mallory")
		g.Expect(code).To(Equal(http.StatusForbidden), body)
		code, body = direct(ctx, g, r, cluster.FrontProxy.Client, path, "dave")
		g.Expect(code).To(Equal(http.StatusOK), body)
	})
	t.Run("a token exchange makes a workspace user, following RBAC", func(t *testing.T) {
		g := NewWithT(t)
		// A sandbox user may exec, but a gateway token is a full workspace
		// user at the gateway (it can create sandboxes there outside the
		// operator's admission): Tenant Admins only.
		_, err := exchangeAs(ctx, userConfig("dave"), tenant, "agent")
		g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%v", err)
		bind(ctx, t, tenant, "tina", "openshell-tenant-admin")
		tok, err := exchangeAs(ctx, userConfig("tina"), tenant, "agent")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(tok.Subject).To(Equal(accessv1alpha1.SubjectPrefix + "tina"))
		g.Expect(tok.Workspace).To(Equal(ws))
		g.Expect(st.Gateway.Members(ws)).To(HaveKeyWithValue(accessv1alpha1.SubjectPrefix+"tina", openshellv1.WorkspaceRole_WORKSPACE_ROLE_USER))
		// The real SDK with the exchanged token, as a workspace user.
		out := runPythonClient(ctx, t, st, tok.Token, ws, tok.Sandbox)
		g.Expect(string(out)).To(ContainSubstring(tok.Sandbox))
		// Exchanged in one namespace, refused in another's workspace.
		otherWS := sandboxWorkspace(ctx, g, other)
		g.Expect(listAtGateway(ctx, st, tok.Token, otherWS)).To(MatchError(ContainSubstring("not a member of workspace")))
		// Nor does a session there make it reach: tina, who may only read
		// logs in the other namespace, reads its sandbox's log (the relay
		// calls the gateway for her), and her token still reaches nothing
		// of that workspace. (A session's membership was the exchange's
		// subject's, and so a full workspace user's, until
		// SessionSubjectPrefix.)
		bind(ctx, t, other, "tina", "openshell-view")
		waitPhase(ctx, g, client.ObjectKey{Namespace: other, Name: "agent"}, openshellv1alpha1.SandboxPhaseReady)
		_, err = logsAs(ctx, "tina", other, "agent")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(st.Gateway.Members(otherWS)).NotTo(HaveKey(tok.Subject))
		g.Expect(listAtGateway(ctx, st, tok.Token, otherWS)).To(MatchError(ContainSubstring("not a member of workspace")))
		g.Expect(st.Gateway.Members(otherWS)).To(HaveKey(accessv1alpha1.SessionSubjectPrefix+"tina"), "the log read went through the gateway as tina")
		// A viewer gets no token.
		_, err = exchangeAs(ctx, userConfig("vic"), tenant, "agent")
		g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%v", err)
		// The relay restarts: what it granted is read back, not forgotten.
		g.Expect(r.Stop(ctx, c)).To(Succeed())
		r, err = st.StartRelay(ctx, cluster.Config, st.GatewayObj.Namespace, zap.New(zap.WriteTo(io.Discard)))
		g.Expect(err).NotTo(HaveOccurred())
		// Revoked in Kubernetes: revoked at the gateway, whatever token she holds.
		revoked := time.Now()
		g.Expect(c.Delete(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: "tina-openshell-tenant-admin"}})).To(Succeed())
		g.Eventually(func(g Gomega) {
			g.Expect(listAtGateway(ctx, st, tok.Token, ws)).To(MatchError(ContainSubstring("not a member of workspace")))
		}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
		t.Logf("figure: the gateway refused the exchanged token %s after the RoleBinding was deleted", time.Since(revoked).Round(10*time.Millisecond))
	})
	t.Run("replicas share the memberships, groups included", func(t *testing.T) {
		g := NewWithT(t)
		// Access through a group, as most tenants grant it.
		g.Expect(c.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: "leads-tenant-admin"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "team-leads"}},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "openshell-tenant-admin"}})).To(Succeed())
		cfg := rest.CopyConfig(cluster.Config)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: "gus", Groups: []string{"team-leads", "system:authenticated"}}
		var tok *accessv1alpha1.SandboxToken
		g.Eventually(func(g Gomega) {
			var err error
			tok, err = exchangeAs(ctx, cfg, tenant, "agent")
			g.Expect(err).NotTo(HaveOccurred())
		}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
		g.Expect(listAtGateway(ctx, st, tok.Token, ws)).To(Succeed())
		// A second replica starts after the exchange (a rolling update):
		// it checks the same RBAC, groups included, and keeps gus a member
		// through several of its rechecks (one a second).
		second, err := st.StartRelayReplica(cluster.Config, st.GatewayObj.Namespace, stack.RelayOptions{Log: zap.New(zap.WriteTo(io.Discard))})
		g.Expect(err).NotTo(HaveOccurred())
		defer func() { g.Expect(second.Drain()).To(Succeed()) }()
		g.Consistently(func(g Gomega) {
			g.Expect(listAtGateway(ctx, st, tok.Token, ws)).To(Succeed())
		}).WithContext(ctx).WithTimeout(4 * time.Second).WithPolling(500 * time.Millisecond).Should(Succeed())
		// The group loses the role: revoked by whichever replica looks first
		// (both follow RBAC: the deletion is what makes them ask again).
		revoked := time.Now()
		g.Expect(c.Delete(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: "leads-tenant-admin"}})).To(Succeed())
		g.Eventually(func(g Gomega) {
			g.Expect(listAtGateway(ctx, st, tok.Token, ws)).To(MatchError(ContainSubstring("not a member of workspace")))
		}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
		t.Logf("figure: a group's membership was revoked at the gateway %s after its RoleBinding was deleted, with two replicas following RBAC",
			time.Since(revoked).Round(10*time.Millisecond))
	})
	t.Run("a member added at the gateway directly is removed", func(t *testing.T) {
		g := NewWithT(t)
		// A gateway admin's CLI (or a token that could) makes someone a
		// workspace admin without Kubernetes RBAC.
		st.Gateway.Grant(ws, "mallory@example.com", openshellv1.WorkspaceRole_WORKSPACE_ROLE_ADMIN)
		g.Eventually(func(g Gomega) {
			g.Expect(st.Gateway.Members(ws)).NotTo(HaveKey("mallory@example.com"))
			evs := &eventsv1.EventList{}
			g.Expect(c.List(ctx, evs, client.InNamespace(st.GatewayObj.Namespace))).To(Succeed())
			g.Expect(evs.Items).To(ContainElement(SatisfyAll(
				HaveField("Reason", "DriftReverted"), HaveField("Note", ContainSubstring("mallory@example.com")))))
		}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
	})
	t.Run("a service exposed at the gateway with a tenant's token is deleted", func(t *testing.T) {
		// The gateway gives ExposeService to any workspace user; whether
		// it authenticates the service's callers is not established, so
		// the operator exposes none and deletes what a token exposed.
		g := NewWithT(t)
		bind(ctx, t, tenant, "tina", "openshell-tenant-admin")
		var tok *accessv1alpha1.SandboxToken
		g.Eventually(func(g Gomega) {
			var err error
			tok, err = exchangeAs(ctx, userConfig("tina"), tenant, "agent")
			g.Expect(err).NotTo(HaveOccurred())
		}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
		gw, gctx, done, err := gatewayAs(ctx, st, tok.Token)
		g.Expect(err).NotTo(HaveOccurred())
		defer done()
		name := sandboxspec.SandboxName(tenant, "agent")
		_, err = gw.ExposeService(gctx, &openshellv1.ExposeServiceRequest{WorkspaceScope: gatewayapi.Workspace(ws), Sandbox: name, Name: "web", TargetPort: 8000})
		g.Expect(err).NotTo(HaveOccurred(), "the gateway lets a workspace user expose a service")
		g.Expect(st.Gateway.Services(ws)).To(ContainElement(name + "/web"))
		g.Eventually(func(g Gomega) {
			g.Expect(st.Gateway.Services(ws)).To(BeEmpty())
			evs := &eventsv1.EventList{}
			g.Expect(c.List(ctx, evs, client.InNamespace(st.GatewayObj.Namespace))).To(Succeed())
			g.Expect(evs.Items).To(ContainElement(SatisfyAll(
				HaveField("Reason", "DriftReverted"), HaveField("Note", ContainSubstring(`service "web" (port 8000) of sandbox `+name)))))
		}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
	})
	t.Run("a ServiceAccount exchanges its token", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: "chatbot"}})).To(Succeed())
		g.Expect(c.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: "chatbot-tenant-admin"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: tenant, Name: "chatbot"}},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "openshell-tenant-admin"}})).To(Succeed())
		sa := "system:serviceaccount:" + tenant + ":chatbot"
		cfg := rest.CopyConfig(cluster.Config)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: sa, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + tenant, "system:authenticated"}}
		var tok *accessv1alpha1.SandboxToken
		g.Eventually(func(g Gomega) {
			var err error
			tok, err = exchangeAs(ctx, cfg, tenant, "agent")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(tok.Subject).To(Equal(accessv1alpha1.SubjectPrefix + sa))
			g.Expect(listAtGateway(ctx, st, tok.Token, ws)).To(Succeed())
		}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
		// The workload is compromised: its admin deletes the ServiceAccount.
		// Its RoleBinding stays, yet the gateway refuses the token it holds.
		deleted := time.Now()
		g.Expect(c.Delete(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: "chatbot"}})).To(Succeed())
		g.Eventually(func(g Gomega) {
			g.Expect(listAtGateway(ctx, st, tok.Token, ws)).To(MatchError(ContainSubstring("not a member of workspace")))
		}).WithContext(ctx).WithTimeout(30*time.Second).Should(Succeed(), "a deleted ServiceAccount kept its membership")
		t.Logf("figure: the gateway refused a deleted ServiceAccount's token %s after the deletion", time.Since(deleted).Round(10*time.Millisecond))
	})
	t.Run("the kubectl plugin, run by the real kubectl", func(t *testing.T) {
		g := NewWithT(t)
		kubectl := pluginPath(t)
		run := func(user string, stdin string, args ...string) (string, string, int) {
			return runPlugin(ctx, g, kubectl, user, tenant, stdin, args...)
		}
		out, errOut, code := run("dave", "", "exec", "agent", "--", "echo", "from", "kubectl")
		g.Expect(code).To(BeZero(), errOut)
		g.Expect(out).To(Equal("from kubectl\n"))
		_, _, code = run("dave", "", "exec", "agent", "--", "exit", "4")
		g.Expect(code).To(Equal(4), "the command's exit code is kubectl's")
		out, errOut, code = run("dave", "piped in\n", "exec", "-i", "agent", "--", "cat")
		g.Expect(code).To(BeZero(), errOut)
		g.Expect(out).To(Equal("piped in\n"))
		// Every exec above logged a line: the first line is further back.
		out, errOut, code = run("vic", "", "logs", "agent", "--tail=500")
		g.Expect(code).To(BeZero(), errOut)
		g.Expect(out).To(ContainSubstring("the agent says hello"))
		bind(ctx, t, tenant, "tess", "openshell-tenant-admin")
		out, errOut, code = run("tess", "", "token", "agent", "-o", "token")
		g.Expect(code).To(BeZero(), errOut)
		g.Expect(strings.Count(strings.TrimSpace(out), ".")).To(Equal(2), "a JWT")
		_, errOut, code = run("vic", "", "exec", "agent", "--", "echo", "hi")
		g.Expect(code).To(Equal(1))
		g.Expect(errOut).To(ContainSubstring("forbidden"))
		_, errOut, code = run("dave", "", "exec", "agent", "echo")
		g.Expect(code).To(Equal(1))
		g.Expect(errOut).To(ContainSubstring("then the command after --"))
	})
	t.Run("port-forward through the plugin reaches a port in the sandbox", func(t *testing.T) {
		g := NewWithT(t)
		kubectl := pluginPath(t)
		fctx, stop := context.WithCancel(ctx)
		defer stop()
		cmd := exec.CommandContext(fctx, kubectl.bin, "openshell", "port-forward", "--kubeconfig="+cluster.KubeconfigPath, "-n", tenant,
			"--as=dave", "--as-group=system:authenticated", "agent", fmt.Sprintf(":%d", testgateway.EchoPort))
		cmd.Env = append(os.Environ(), "PATH="+kubectl.dir+string(os.PathListSeparator)+os.Getenv("PATH"))
		out, err := cmd.StdoutPipe()
		g.Expect(err).NotTo(HaveOccurred())
		var errOut bytes.Buffer
		cmd.Stderr = &errOut
		g.Expect(cmd.Start()).To(Succeed())
		defer func() { stop(); _ = cmd.Wait() }()
		// kubectl's own line: "Forwarding from 127.0.0.1:PORT -> 7".
		local := ""
		sc := bufio.NewScanner(out)
		for local == "" && sc.Scan() {
			if f := strings.Fields(sc.Text()); len(f) >= 3 && f[0] == "Forwarding" && strings.HasPrefix(f[2], "127.0.0.1:") {
				local = f[2]
			}
		}
		g.Expect(local).NotTo(BeEmpty(), "no Forwarding line; stderr: %s", errOut.String())
		go func() { _, _ = io.Copy(io.Discard, out) }()
		for _, msg := range []string{"ping\n", strings.Repeat("x", 100<<10)} {
			conn, err := net.Dial("tcp", local)
			g.Expect(err).NotTo(HaveOccurred())
			_, err = conn.Write([]byte(msg))
			g.Expect(err).NotTo(HaveOccurred())
			got := make([]byte, len(msg))
			_, err = io.ReadFull(conn, got)
			g.Expect(err).NotTo(HaveOccurred(), "stderr: %s", errOut.String())
			g.Expect(string(got)).To(Equal(msg), "the echo inside the sandbox")
			g.Expect(conn.Close()).To(Succeed())
		}
		// A viewer may not forward.
		_, errV, code := runPlugin(ctx, g, kubectl, "vic", tenant, "", "port-forward", "agent", ":7")
		g.Expect(code).To(Equal(1))
		g.Expect(errV).To(ContainSubstring("forbidden"))
	})
	t.Run("proxy reaches a port the agent serves as RBAC allows, and no web page acts through it", func(t *testing.T) {
		g := NewWithT(t)
		code, h, body := proxyAs(ctx, g, "dave", tenant, http.MethodPost, "/api/run?x=1", "payload", map[string]string{"X-Agent": "kept"})
		g.Expect(code).To(Equal(http.StatusOK), body)
		var seen testgateway.SandboxRequest
		g.Expect(json.Unmarshal([]byte(body), &seen)).To(Succeed(), body)
		g.Expect(seen.Method).To(Equal(http.MethodPost))
		g.Expect(seen.URI).To(Equal("/api/run?x=1"))
		g.Expect(seen.Body).To(Equal("payload"))
		g.Expect(seen.Header).To(HaveKeyWithValue("X-Agent", []string{"kept"}))
		for name := range seen.Header {
			// The front proxy's identity headers (dave, his groups) and
			// the impersonation that made them never reach the agent.
			g.Expect(strings.HasPrefix(name, "X-Remote-") || strings.HasPrefix(name, "Impersonate-") || name == "Authorization").To(BeFalse(),
				"%s reached the agent's service", name)
		}
		// Through the kube-apiserver the path arrives decoded and the
		// query re-encoded, keys sorted (its aggregator forwards no other).
		code, _, body = proxyAs(ctx, g, "dave", tenant, http.MethodGet, "/files/a%2Fb?z=1&a=2", "", nil)
		g.Expect(code).To(Equal(http.StatusOK), body)
		g.Expect(json.Unmarshal([]byte(body), &seen)).To(Succeed(), body)
		g.Expect(seen.URI).To(Equal("/files/a/b?a=2&z=1"))
		g.Expect(h.Get("Content-Security-Policy")).To(Equal("sandbox allow-same-origin"))
		g.Expect(h.Get("Clear-Site-Data")).To(BeEmpty())
		g.Expect(h.Values("Set-Cookie")).To(BeEmpty())
		g.Expect(h.Get("Access-Control-Allow-Origin")).To(BeEmpty())

		// A viewer, and mallory, who uses sandboxes in another namespace only.
		for _, user := range []string{"vic", "mallory"} {
			code, _, body = proxyAs(ctx, g, user, tenant, http.MethodGet, "/", "", nil)
			g.Expect(code).To(Equal(http.StatusForbidden), "%s: %s", user, body)
		}
		// A reader of everything passes the kube-apiserver's check of a
		// GET (get) and is refused by the relay's (create).
		reader := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "e2e-reads-everything"}, Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{openshellv1alpha1.GroupVersion.Group, accessv1alpha1.Group}, Resources: []string{"*", "*/*"}, Verbs: []string{"get", "list", "watch"}}}}
		g.Expect(c.Create(ctx, reader)).To(Succeed())
		t.Cleanup(func() { _ = c.Delete(context.Background(), reader) })
		bind(ctx, t, tenant, "rita", reader.Name)
		code, _, body = proxyAs(ctx, g, "rita", tenant, http.MethodGet, "/", "", nil)
		g.Expect(code).To(Equal(http.StatusForbidden), body)
		g.Expect(body).To(ContainSubstring("cannot create openshellsandboxes/proxy"), "refused by the relay, not the kube-apiserver")
		// A page's request through the kube-apiserver (as a browser's
		// script sends it through kubectl proxy) is refused, naming why.
		code, _, body = proxyAs(ctx, g, "dave", tenant, http.MethodGet, "/", "", map[string]string{"Origin": "https://evil.example"})
		g.Expect(code).To(Equal(http.StatusForbidden), body)
		g.Expect(body).To(ContainSubstring("web page"))
		// An image tag on another site sends no Origin, but Fetch Metadata.
		code, _, body = proxyAs(ctx, g, "dave", tenant, http.MethodGet, "/act", "", map[string]string{"Sec-Fetch-Site": "cross-site"})
		g.Expect(code).To(Equal(http.StatusForbidden), body)
		g.Expect(body).To(ContainSubstring("cross-site"))
		// A port nothing listens on.
		code, _, body = proxyAtPort(ctx, g, "dave", tenant, 8001, http.MethodGet, "/", "", nil)
		g.Expect(code).To(Equal(http.StatusServiceUnavailable), body)
		g.Expect(body).To(ContainSubstring("connection refused"))
	})
	t.Run("external ports: a Route to the relay serves a port the template publishes, to a token RBAC allows", func(t *testing.T) {
		externalPorts(ctx, t, st, r, tenant)
	})
	t.Run("external ports: an HTTPRoute on an HTTPS Gateway listener, the relay verified by a BackendTLSPolicy", func(t *testing.T) {
		externalPortsHTTPRoute(ctx, t, st, r, tenant)
	})
	t.Run("revoking the role ends an open session", func(t *testing.T) {
		g := NewWithT(t)
		bind(ctx, t, tenant, "olga", "openshell-sandbox-user")
		done := make(chan error, 1)
		go func() {
			_, _, err := execAs(ctx, "olga", tenant, "agent", nil, nil, "sleep", "120")
			done <- err
		}()
		// The session is open once the gateway has recorded the exec.
		g.Eventually(func(g Gomega) {
			logs, err := logsAs(ctx, "dave", tenant, "agent")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(logs).To(ContainSubstring(`exec "sleep 120"`))
		}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
		revoked := time.Now()
		g.Expect(c.Delete(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: "olga-openshell-sandbox-user"}})).To(Succeed())
		var err error
		g.Eventually(done).WithContext(ctx).WithTimeout(30 * time.Second).Should(Receive(&err))
		g.Expect(err).To(MatchError(ContainSubstring("may no longer create")))
		t.Logf("figure: an open exec session ended %s after its user's RoleBinding was deleted", time.Since(revoked).Round(10*time.Millisecond))
	})
	t.Run("revoking the role ends access", func(t *testing.T) {
		g := NewWithT(t)
		bind(ctx, t, tenant, "erin", "openshell-sandbox-user")
		_, _, err := execAs(ctx, "erin", tenant, "agent", nil, nil, "echo", "hi")
		g.Expect(err).NotTo(HaveOccurred())
		revoked := time.Now()
		g.Expect(c.Delete(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: "erin-openshell-sandbox-user"}})).To(Succeed())
		g.Eventually(func(g Gomega) {
			_, _, err := execAs(ctx, "erin", tenant, "agent", nil, nil, "echo", "hi")
			g.Expect(err).To(HaveOccurred())
			g.Expect(err.Error()).To(ContainSubstring("forbidden"))
		}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
		t.Logf("figure: exec refused %s after the RoleBinding was deleted", time.Since(revoked).Round(10*time.Millisecond))
	})
}

// proxyAs sends one request through openshellsandboxes/proxy to the test
// sandbox's HTTP service, as user, and returns the status, headers and
// body.
func proxyAs(ctx context.Context, g Gomega, user, ns, method, path, body string, header map[string]string) (int, http.Header, string) {
	return proxyAtPort(ctx, g, user, ns, testgateway.HTTPPort, method, path, body, header)
}

func proxyAtPort(ctx context.Context, g Gomega, user, ns string, port int, method, path, body string, header map[string]string) (int, http.Header, string) {
	cfg := userConfig(user)
	hc, err := rest.HTTPClientFor(cfg)
	g.Expect(err).NotTo(HaveOccurred())
	defer hc.CloseIdleConnections()
	u := fmt.Sprintf("%s/apis/%s/%s/namespaces/%s/openshellsandboxes/agent/proxy/%d%s", strings.TrimSuffix(cfg.Host, "/"), accessv1alpha1.Group,
		accessv1alpha1.Version, ns, port, path)
	req, err := http.NewRequestWithContext(ctx, method, u, strings.NewReader(body))
	g.Expect(err).NotTo(HaveOccurred())
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := hc.Do(req)
	g.Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	g.Expect(err).NotTo(HaveOccurred())
	return resp.StatusCode, resp.Header, string(b)
}

// userConfig impersonates an authenticated user.
func userConfig(user string) *rest.Config {
	cfg := rest.CopyConfig(cluster.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:authenticated"}}
	return cfg
}

// execAs runs cmd in the sandbox as user, over SPDY as kubectl exec does;
// sizes, when set, makes it a terminal session.
func execAs(ctx context.Context, user, ns, name string, stdin io.Reader, sizes remotecommand.TerminalSizeQueue, cmd ...string) (string, string, error) {
	cfg := userConfig(user)
	u, err := framework.ExecURL(cfg, ns, name, stdin != nil, sizes != nil, cmd)
	if err != nil {
		return "", "", err
	}
	ex, err := remotecommand.NewSPDYExecutor(cfg, http.MethodPost, u)
	if err != nil {
		return "", "", err
	}
	var out, errOut bytes.Buffer
	opts := remotecommand.StreamOptions{Stdin: stdin, Stdout: &out, Tty: sizes != nil, TerminalSizeQueue: sizes}
	if sizes == nil {
		opts.Stderr = &errOut
	}
	err = ex.StreamWithContext(ctx, opts)
	return out.String(), errOut.String(), err
}

// execWebSocketAs is execAs with client-go's WebSocket executor, which
// offers only v5.channel.k8s.io (kubectl's first choice).
func execWebSocketAs(ctx context.Context, user, ns, name string, stdin io.Reader, cmd ...string) (string, string, error) {
	cfg := userConfig(user)
	u, err := framework.ExecURL(cfg, ns, name, stdin != nil, false, cmd)
	if err != nil {
		return "", "", err
	}
	ex, err := remotecommand.NewWebSocketExecutor(cfg, http.MethodGet, u.String())
	if err != nil {
		return "", "", err
	}
	var out, errOut bytes.Buffer
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: stdin, Stdout: &out, Stderr: &errOut})
	return out.String(), errOut.String(), err
}

// logsAs reads the sandbox's logs as user.
func logsAs(ctx context.Context, user, ns, name string) (string, error) {
	rc, err := framework.RelayClient(userConfig(user))
	if err != nil {
		return "", err
	}
	b, err := rc.Get().AbsPath("/apis", accessv1alpha1.Group, accessv1alpha1.Version, "namespaces", ns, "openshellsandboxes", name, "log").
		Param("tailLines", "100").DoRaw(ctx)
	return string(b), err
}

// direct sends a request to the relay's own listener, not through the API
// server, presenting cert (nil: none) and claiming user in the header.
func direct(ctx context.Context, g Gomega, r *stack.Relay, cert *pki.KeyPair, path, user string) (int, string) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp := openDirect(ctx, g, r, cert, path, user)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// openDirect is direct's request, its response left open (a stream).
func openDirect(ctx context.Context, g Gomega, r *stack.Relay, cert *pki.KeyPair, path, user string) *http.Response {
	tc := &tls.Config{RootCAs: r.RelayCA(), MinVersion: tls.VersionTLS12}
	if cert != nil {
		kp, err := tls.X509KeyPair(cert.CertPEM, cert.KeyPEM)
		g.Expect(err).NotTo(HaveOccurred())
		tc.Certificates = []tls.Certificate{kp}
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+r.Addr+path, nil)
	g.Expect(err).NotTo(HaveOccurred())
	req.Header.Set(framework.FrontProxyUserHeader, user)
	req.Header.Set("X-Remote-Group", "system:authenticated")
	resp, err := hc.Do(req)
	g.Expect(err).NotTo(HaveOccurred())
	return resp
}

// sizeQueue hands out the given terminal sizes, then ends.
type sizeQueue struct{ sizes []remotecommand.TerminalSize }

func (q *sizeQueue) Next() *remotecommand.TerminalSize {
	if len(q.sizes) == 0 {
		return nil
	}
	s := q.sizes[0]
	q.sizes = q.sizes[1:]
	return &s
}

// exchangeAs asks the relay for a gateway token as the config's user.
func exchangeAs(ctx context.Context, cfg *rest.Config, ns, name string) (*accessv1alpha1.SandboxToken, error) {
	rc, err := framework.RelayClient(cfg)
	if err != nil {
		return nil, err
	}
	b, err := rc.Post().AbsPath("/apis", accessv1alpha1.Group, accessv1alpha1.Version, "namespaces", ns, "openshellsandboxes", name, accessv1alpha1.SubresourceToken).DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	tok := &accessv1alpha1.SandboxToken{}
	return tok, json.Unmarshal(b, tok)
}

// listAtGateway lists a workspace's sandboxes at the stack's gateway with
// a bearer token, as any 0.1 client would.
func listAtGateway(ctx context.Context, st *stack.Stack, token, workspace string) error {
	gw, ctx, done, err := gatewayAs(ctx, st, token)
	if err != nil {
		return err
	}
	defer done()
	_, err = gw.ListSandboxes(ctx, &openshellv1.ListSandboxesRequest{WorkspaceScope: gatewayapi.Workspace(workspace)})
	return err
}

// gatewayAs is a 0.1 client of the stack's gateway that presents token,
// with the context its calls must use; done closes its connection.
func gatewayAs(ctx context.Context, st *stack.Stack, token string) (openshellv1.OpenShellClient, context.Context, func(), error) {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(st.CA.CertPEM)
	conn, err := grpc.NewClient(strings.TrimPrefix(st.Gateway.Endpoint(), "https://"),
		grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})))
	if err != nil {
		return nil, nil, nil, err
	}
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	return openshellv1.NewOpenShellClient(conn), ctx, func() { _ = conn.Close() }, nil
}

// plugin is kubectl from bin/ and a folder holding kubectl-openshell, built
// from this repo as a consumer installs it.
type plugin struct{ bin, dir string }

func pluginPath(t *testing.T) plugin {
	t.Helper()
	bin, err := framework.Binary("kubectl")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := framework.BuildKubectlPlugin(dir); err != nil {
		t.Fatal(err)
	}
	return plugin{bin: bin, dir: dir}
}

// runPlugin runs `kubectl openshell ARGS` as user in namespace ns and
// returns its stdout, stderr and exit code.
func runPlugin(ctx context.Context, g Gomega, kubectl plugin, user, ns, stdin string, args ...string) (string, string, int) {
	args = append([]string{"openshell"}, args...)
	args = append(args[:2], append([]string{"--kubeconfig=" + cluster.KubeconfigPath, "-n", ns, "--as=" + user,
		"--as-group=system:authenticated"}, args[2:]...)...)
	cmd := exec.CommandContext(ctx, kubectl.bin, args...)
	cmd.Env = append(os.Environ(), "PATH="+kubectl.dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	if exit := (*exec.ExitError)(nil); errors.As(err, &exit) {
		code = exit.ExitCode()
	} else {
		g.Expect(err).NotTo(HaveOccurred())
	}
	return out.String(), errOut.String(), code
}
