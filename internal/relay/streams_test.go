package relay_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/proxy"
	"k8s.io/client-go/rest"
	utilexec "k8s.io/client-go/util/exec"

	accessv1alpha1 "github.com/openshell/openshell-operator/api/access/v1alpha1"
	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/gatewayapi"
	openshellv1 "github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/openshellv1"
	"github.com/openshell/openshell-operator/internal/relay"
	"github.com/openshell/openshell-operator/internal/sandboxspec"
)

// endless is stdin that never ends and never waits: a client still typing
// (or pinging) when the command ends.
type endless struct{}

func (endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'y'
	}
	return len(p), nil
}

// behindAggregator is cfg for the relay behind the kube-apiserver's own
// proxy for upgraded connections (apimachinery's UpgradeAwareHandler, as
// the aggregator runs it): when either direction of the proxied
// connection ends, it closes both.
func (e *benchEnv) behindAggregator(t testing.TB) *rest.Config {
	backend, err := url.Parse(e.cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	h := proxy.NewUpgradeAwareHandler(backend, &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, false, false, errorResponder{t})
	h.UseRequestLocation = true
	front := httptest.NewServer(h)
	t.Cleanup(front.Close)
	return &rest.Config{Host: front.URL}
}

type errorResponder struct{ t testing.TB }

func (r errorResponder) Error(w http.ResponseWriter, _ *http.Request, err error) {
	r.t.Logf("proxy: %v", err)
	http.Error(w, err.Error(), http.StatusBadGateway)
}

// TestExitCodeSurvivesTheAggregator: a command's exit reaches a client
// that is still sending when the relay ends the session. The relay writes
// the exit status and closes; if it closed at once, the aggregator's
// client-to-relay copy could fail first and the aggregator would close the
// client's connection before the status got there: client-go reads an
// empty status as success.
func TestExitCodeSurvivesTheAggregator(t *testing.T) {
	e := startBench(t)
	e.cfg = e.behindAggregator(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for i := range 40 {
		_, err := e.execRelay(ctx, endless{}, "exit", "7")
		var exit utilexec.ExitError
		if !errors.As(err, &exit) || exit.ExitStatus() != 7 {
			t.Fatalf("exec %d ended with %v, want exit code 7", i, err)
		}
	}
}

// TestNothingReachesAnotherOwnersSandbox: the gateway's sandbox of the
// derived name was replaced by one the object does not own (whoever holds
// a token for the workspace can do that). An exec, a log read and a
// forwarded connection are refused with the reason, and no command runs.
// The check runs while the client sets its streams up; each use waits
// for it.
func TestNothingReachesAnotherOwnersSandbox(t *testing.T) {
	e := startBench(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	other := &openshellv1alpha1.OpenShellSandbox{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "other", UID: "other-uid"},
		Status: openshellv1alpha1.OpenShellSandboxStatus{Phase: openshellv1alpha1.SandboxPhaseReady, Gateway: "platform/gw", GatewaySandboxName: "y"}}
	if err := e.env.Client.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	if err := e.env.Client.Status().Update(ctx, other); err != nil {
		t.Fatal(err)
	}
	e.env.Gateway.SeedSandbox(e.ws, sandboxspec.SandboxName("team-a", "other"), map[string]string{sandboxspec.LabelOwnerUID: "someone-else"})
	const refusal = "is not this object's (owner"

	_, err := e.execRelayTo(ctx, "other", nil, "echo", "hi")
	if err == nil || !strings.Contains(err.Error(), refusal) {
		t.Fatalf("exec: %v, want the refusal %q", err, refusal)
	}
	logs, err := e.logsRelay(ctx, "other")
	if err == nil || !strings.Contains(err.Error(), refusal) {
		t.Fatalf("logs: %q, %v, want the refusal %q", logs, err, refusal)
	}
	conn, err := net.Dial("tcp", e.forwardPortTo(t, e.cfg, "other"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, _ = conn.Write([]byte("hello"))
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	if n, err := conn.Read(make([]byte, 5)); err == nil {
		t.Fatalf("a forwarded connection reached the other owner's sandbox (%d bytes back)", n)
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("the forwarded connection was neither refused nor closed")
	}
	resp, err := e.direct.GetSandboxLogs(ctx, &openshellv1.GetSandboxLogsRequest{Sandbox: sandboxspec.SandboxName("team-a", "other"),
		WorkspaceScope: gatewayapi.Workspace(e.ws), Lines: 100})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range resp.GetLogs() {
		if strings.Contains(l.GetMessage(), "exec") {
			t.Fatalf("a command ran in the other owner's sandbox: %s", l.GetMessage())
		}
	}
}

// logsRelay reads a sandbox's logs through the relay; a refusal is an
// error carrying the status's body.
func (e *benchEnv) logsRelay(ctx context.Context, sandbox string) (string, error) {
	resp, err := e.openLog(ctx, sandbox, "")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s", resp.Status, body)
	}
	return string(body), err
}

// openLog starts a log read of a sandbox through the relay, with query
// ("follow=true") when set.
func (e *benchEnv) openLog(ctx context.Context, sandbox, query string) (*http.Response, error) {
	u := e.cfg.Host + accessv1alpha1.Path("team-a", sandbox, accessv1alpha1.SubresourceLog)
	if query != "" {
		u += "?" + query
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	return c.Do(req)
}

// TestSessionsAreCounted: an open exec is on the sessions gauge while it
// runs and off it after; the bytes it moved are counted once it ends.
func TestSessionsAreCounted(t *testing.T) {
	e := startBench(t)
	reg := prometheus.NewRegistry()
	m, err := relay.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	e.srv.Metrics = m
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stdin, feed := io.Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := e.execRelay(ctx, stdin, "cat")
		done <- err
	}()
	waitGatewayExecs(t, e, 1)
	if got := gauge(t, reg, relay.MetricSessions, "exec"); got != 1 {
		t.Fatalf("%s{subresource=exec} = %v with one exec open, want 1", relay.MetricSessions, got)
	}
	if _, err := feed.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	_ = feed.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// The client has its exit status before the relay's handler returns.
	for deadline := time.Now().Add(10 * time.Second); gauge(t, reg, relay.MetricSessions, "exec") != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s{subresource=exec} stayed at %v after the exec ended, want 0", relay.MetricSessions, gauge(t, reg, relay.MetricSessions, "exec"))
		}
	}
	if got := gauge(t, reg, relay.MetricSessionBytes, "in"); got != 5 {
		t.Fatalf("%s{direction=in} = %v, want the 5 bytes sent", relay.MetricSessionBytes, got)
	}
}

// gauge is the value of metric name with the one label value given.
func gauge(t *testing.T, reg *prometheus.Registry, name, label string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if m.GetLabel()[0].GetValue() == label {
				if f.GetType() == dto.MetricType_GAUGE {
					return m.GetGauge().GetValue()
				}
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no %s{%s}", name, label)
	return 0
}

// TestAForwardedConnectionChecksTheOwnerAgain: a port-forward session's
// connections each check that the gateway's sandbox is still the
// object's. One replaced at the gateway while the session is open (a
// workspace user of the namespace can) is not reached by the next
// connection (fourth read, R9).
func TestAForwardedConnectionChecksTheOwnerAgain(t *testing.T) {
	e := startBench(t)
	local := e.forwardPortTo(t, e.cfg, "agent")
	echo := func() error {
		conn, err := net.Dial("tcp", local)
		if err != nil {
			return err
		}
		defer conn.Close()
		if _, err := conn.Write([]byte("hello")); err != nil {
			return err
		}
		_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		got := make([]byte, 5)
		if _, err := io.ReadFull(conn, got); err != nil {
			return err
		}
		if string(got) != "hello" {
			return fmt.Errorf("echoed %q", got)
		}
		return nil
	}
	if err := echo(); err != nil {
		t.Fatalf("the object's own sandbox: %v", err)
	}
	e.env.Gateway.SeedSandbox(e.ws, e.name, map[string]string{sandboxspec.LabelOwnerUID: "someone-else"})
	if err := echo(); err == nil {
		t.Fatal("a connection of the open session reached the sandbox that replaced the object's")
	}
}
