package sandbox

import (
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/gatewayapi"
)

func TestHoldable(t *testing.T) {
	withStatus := func(phase openshellv1alpha1.SandboxPhase, id string) *openshellv1alpha1.OpenShellSandbox {
		sb := sandboxWith(nil)
		sb.Status.Phase, sb.Status.SandboxID = phase, id
		return sb
	}
	provisioning := withStatus(openshellv1alpha1.SandboxPhaseProvisioning, "id-1")
	for _, tt := range []struct {
		name     string
		orig, sb *openshellv1alpha1.OpenShellSandbox
		created  bool
		want     bool
	}{
		{"first report of a create, still provisioning", withStatus("", ""), provisioning, true, true},
		{"already Ready: nothing to wait for", withStatus("", ""), withStatus(openshellv1alpha1.SandboxPhaseReady, "id-1"), true, false},
		{"not created by this reconcile", withStatus("", ""), provisioning, false, false},
		{"status shows something else: it would go stale", withStatus(openshellv1alpha1.SandboxPhasePending, ""), provisioning, true, false},
		{"refused by the gateway", withStatus("", ""), withStatus(openshellv1alpha1.SandboxPhaseError, ""), true, false},
	} {
		if got := holdable(tt.orig, tt.sb, tt.created); got != tt.want {
			t.Errorf("%s: holdable = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestABusyGatewayIsNotAFailure(t *testing.T) {
	sb := sandboxWith(nil)
	err := fmt.Errorf("create sandbox: %w", &gatewayapi.BusyError{Gateway: "platform/gw", InFlight: 4})
	if grpcstatus.Code(err) != codes.ResourceExhausted {
		t.Fatalf("code %s: a bulkhead refusal is RESOURCE_EXHAUSTED to gRPC callers", grpcstatus.Code(err))
	}
	res, rerr := gatewayError(sb, err)
	if rerr != nil || res.RequeueAfter < busyRetry || res.RequeueAfter >= 2*busyRetry {
		t.Errorf("result %+v, err %v: want a retry within %s..%s and no error (no backoff, no error count)", res, rerr, busyRetry, 2*busyRetry)
	}
	if len(sb.Status.Conditions) != 0 {
		t.Errorf("conditions %+v: a busy gateway is not reported as unreachable", sb.Status.Conditions)
	}
	// The gateway's own RESOURCE_EXHAUSTED is a failure to report.
	if _, rerr := gatewayError(sb, grpcstatus.Error(codes.ResourceExhausted, "overloaded")); rerr == nil {
		t.Error("the gateway's own RESOURCE_EXHAUSTED was swallowed")
	}
}
