package framework

import (
	"context"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/openshell/openshell-operator/internal/operatorenv"
	"github.com/openshell/openshell-operator/operator"
)

// TestImages are digest-pinned operand images for tests (nothing pulls them).
var TestImages = operatorenv.Releases{
	Default: operatorenv.RelatedImages{
		Gateway:        "registry.example/openshell/gateway@sha256:1111111111111111111111111111111111111111111111111111111111111111",
		Supervisor:     "registry.example/openshell/supervisor@sha256:2222222222222222222222222222222222222222222222222222222222222222",
		Sandbox:        "registry.example/openshell/sandbox@sha256:3333333333333333333333333333333333333333333333333333333333333333",
		SandboxRuntime: "registry.example/openshell/sandbox-runtime@sha256:4444444444444444444444444444444444444444444444444444444444444444",
	},
	Legacy: operatorenv.RelatedImages{
		Gateway:    "registry.example/openshell/gateway@sha256:5555555555555555555555555555555555555555555555555555555555555555",
		Supervisor: "registry.example/openshell/supervisor@sha256:6666666666666666666666666666666666666666666666666666666666666666",
		Sandbox:    "registry.example/openshell/sandbox@sha256:7777777777777777777777777777777777777777777777777777777777777777",
	},
}

// StartManager runs the operator's manager until the returned stop
// function is called (also at test cleanup). Metrics and probes are off
// unless opts set them; images default to TestImages.
func StartManager(t testing.TB, cfg *rest.Config, opts operator.Options) (stop func()) {
	t.Helper()
	if opts.MetricsAddr == "" {
		opts.MetricsAddr = "0"
	}
	if opts.ProbeAddr == "" {
		opts.ProbeAddr = "0"
	}
	if opts.Controllers.Images == (operatorenv.Releases{}) {
		opts.Controllers.Images = TestImages
	}
	if opts.Controllers.Platform.GatewayNamespaces == nil && len(opts.WatchNamespaces) == 1 {
		// The watched namespace is a platform namespace (listed; tests
		// label it with CreatePlatformNamespace). It is not the operator's
		// own: managed gateways may not place sandboxes there.
		opts.Controllers.Platform.GatewayNamespaces = opts.WatchNamespaces
	}
	opts.SkipControllerNameValidation = true
	mgr, err := operator.New(cfg, opts)
	if err != nil {
		t.Fatalf("create manager: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager exited with error: %v", err)
		}
	}
	t.Cleanup(stop)
	return stop
}
