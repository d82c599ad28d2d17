package sandbox

import (
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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

func TestHeldForSlot(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	busy := fmt.Errorf("create sandbox: %w", &gatewayapi.BusyError{Gateway: "platform/gw", InFlight: 4})
	young := func(sb *openshellv1alpha1.OpenShellSandbox) {
		sb.CreationTimestamp = metav1.NewTime(now.Add(-2 * time.Second))
	}
	for _, tc := range []struct {
		name     string
		orig, sb func(*openshellv1alpha1.OpenShellSandbox)
		err      error
		wantHeld bool
	}{
		{name: "a new sandbox refused a slot waits silently", orig: young, err: busy, wantHeld: true},
		{name: "past busyHold it reports WaitingForGateway", err: busy,
			orig: func(sb *openshellv1alpha1.OpenShellSandbox) {
				sb.CreationTimestamp = metav1.NewTime(now.Add(-busyHold))
			}},
		{name: "something was reported before", err: busy, orig: func(sb *openshellv1alpha1.OpenShellSandbox) {
			young(sb)
			sb.Status.Phase = openshellv1alpha1.SandboxPhasePending
		}},
		{name: "this reconcile created it at the gateway", err: busy, orig: young,
			sb: func(sb *openshellv1alpha1.OpenShellSandbox) { sb.Status.SandboxID = "id-1" }},
		{name: "a failure is reported", orig: young, err: grpcstatus.Error(codes.Unavailable, "connection refused")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			orig := sandboxWith(tc.orig)
			sb := orig.DeepCopy()
			if tc.sb != nil {
				tc.sb(sb)
			}
			if got := heldForSlot(orig, sb, tc.err, now); got != tc.wantHeld {
				t.Errorf("heldForSlot = %v, want %v", got, tc.wantHeld)
			}
		})
	}
}
