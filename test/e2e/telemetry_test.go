package e2e

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/sandboxspec"
	"github.com/openshell/openshell-operator/internal/tracing"
	"github.com/openshell/openshell-operator/test/framework"
)

// TestTelemetry (#47 item 5): with the standard OpenTelemetry environment
// naming a collector, the operator exports a span for each reconcile and
// the relay one for each consumer session, over OTLP/gRPC, to a real
// OpenTelemetry Collector (bin/otelcol, built from the collector's pinned
// modules) — the spans arrive there. Without that environment nothing is
// installed (the other tests run so).
func TestTelemetry(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := cluster.Client
	received := startCollector(ctx, t)

	g.Expect(tracing.Enabled()).To(BeFalse(), "an earlier test left tracing installed")
	stop, err := tracing.Start(ctx, "openshell-operator-e2e")
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = stop(context.Background()) }()
	g.Expect(tracing.Enabled()).To(BeTrue())

	// The stack's controllers are built now: their reconciles are traced.
	st, tenant, _ := startLineStack(ctx, t, g, "otel")
	upgradeInPlace(ctx, g, st.Gateway, st.GatewayObj, "0.1.5")
	sb := sandboxOn(tenant, "agent", st.GatewayObj)
	g.Expect(c.Create(ctx, sb)).To(Succeed())
	waitPhase(ctx, g, client.ObjectKeyFromObject(sb), openshellv1alpha1.SandboxPhaseReady)
	ws := sandboxWorkspace(ctx, g, tenant)
	g.Expect(st.Gateway.AppendLog(ws, sandboxspec.SandboxName(tenant, "agent"), "traced")).To(Succeed())

	// A consumer's session through the relay.
	installOLMAggregatedRoles(ctx, t)
	bind(ctx, t, tenant, "olga", "openshell-sandbox-user")
	r, err := st.StartRelay(ctx, cluster.Config, st.GatewayObj.Namespace, zap.New(zap.WriteTo(io.Discard)))
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { g.Expect(r.Stop(context.Background(), c)).To(Succeed()) })
	g.Eventually(func() (string, error) { return logsAs(ctx, "olga", tenant, "agent") }).WithContext(ctx).WithTimeout(30 * time.Second).
		Should(ContainSubstring("traced"))

	// Flushed at the stop (the batch processor holds spans a few seconds).
	g.Expect(stop(ctx)).To(Succeed())
	g.Expect(tracing.Enabled()).To(BeFalse())
	g.Eventually(received).WithContext(ctx).WithTimeout(30*time.Second).Should(And(
		ContainSubstring("Reconcile openshellsandbox"),
		ContainSubstring("Reconcile openshellgateway"),
		ContainSubstring("relay log"),
		ContainSubstring("openshell-operator-e2e"),
		ContainSubstring(tenant)), "the collector did not receive the operator's spans")
}

// startCollector runs bin/otelcol with an OTLP/gRPC receiver on a free
// loopback port and the debug exporter, points the standard OTLP
// environment at it for this test, and returns what the collector has
// printed so far (every span it received, with its attributes).
func startCollector(ctx context.Context, t *testing.T) func() string {
	t.Helper()
	port, err := framework.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "otelcol.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:%d
exporters:
  debug:
    verbosity: detailed
service:
  telemetry:
    metrics:
      level: none
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [debug]
`, port)), 0o600); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var out strings.Builder
	cmd := exec.CommandContext(ctx, filepath.Join(framework.BinDir(), "otelcol"), "--config", "file:"+cfg)
	w := writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return out.Write(p) })
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatalf("start bin/otelcol (make tools builds it): %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	printed := func() string { mu.Lock(); defer mu.Unlock(); return out.String() }
	NewWithT(t).Eventually(printed).WithContext(ctx).WithTimeout(30*time.Second).Should(ContainSubstring("Everything is ready"),
		"the collector did not start")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", fmt.Sprintf("http://127.0.0.1:%d", port))
	t.Setenv("OTEL_EXPORTER_OTLP_INSECURE", "true")
	return printed
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
