package sandbox

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/gatewayapi"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/datamodelv1"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/openshellv1"
	"github.com/openshell/openshell-operator/internal/gwconn"
	"github.com/openshell/openshell-operator/internal/preflight"
)

// TestDecideDeletion: a sandbox is released only on the gateway's word, or
// by an authorised force-release once the gateway has been unreachable for
// the whole grace; whatever status recorded (nothing, Pending, Rejected),
// a failed or refused call never releases.
func TestDecideDeletion(t *testing.T) {
	now := time.Now()
	const grace = 5 * time.Minute
	unavailable := grpcstatus.Error(codes.Unavailable, "connection refused")
	busy := &gatewayapi.BusyError{Gateway: "p/gw", InFlight: 4}
	sandbox := func(phase openshellv1alpha1.SandboxPhase, force bool, unreachableSince time.Duration) *openshellv1alpha1.OpenShellSandbox {
		sb := &openshellv1alpha1.OpenShellSandbox{}
		sb.Status.Phase = phase
		if force {
			sb.Annotations = map[string]string{openshellv1alpha1.AnnotationForceRelease: "true"}
		}
		if unreachableSince > 0 {
			sb.Status.Conditions = []metav1.Condition{{Type: openshellv1alpha1.ConditionGatewayReachable, Status: metav1.ConditionFalse,
				Reason: openshellv1alpha1.SandboxReasonUnavailable, LastTransitionTime: metav1.NewTime(now.Add(-unreachableSince))}}
		}
		return sb
	}
	for _, tc := range []struct {
		name string
		sb   *openshellv1alpha1.OpenShellSandbox
		l    lookup
		want deletion
	}{
		{"gone at the gateway", sandbox("", false, 0), lookup{gone: true}, deletionFinish},
		{"still deleting at the gateway", sandbox(openshellv1alpha1.SandboxPhaseReady, false, 0), lookup{id: "x"}, deletionWait},
		// The orphan paths of the third review: nothing recorded, Pending
		// (a provider not yet pushed), Rejected (after an earlier accept).
		{"nothing recorded, gateway down", sandbox("", false, 0), lookup{err: unavailable}, deletionRetry},
		{"pending, gateway down", sandbox(openshellv1alpha1.SandboxPhasePending, false, 0), lookup{err: unavailable}, deletionRetry},
		{"rejected, gateway down", sandbox(openshellv1alpha1.SandboxPhaseRejected, false, 0), lookup{err: unavailable}, deletionRetry},
		{"busy never releases", sandbox("", true, time.Hour), lookup{err: busy}, deletionBusy},
		{"busy, wrapped", sandbox("", false, 0), lookup{err: errors.Join(errors.New("get sandbox"), busy)}, deletionBusy},
		{"the operator's issuer not signing yet never releases", sandbox("", true, time.Hour), lookup{err: gwconn.ErrIssuerNotReady}, deletionBusy},
		{"force before the grace", sandbox("", true, grace-time.Second), lookup{err: unavailable}, deletionRetry},
		{"force with the gateway reachable", sandbox("", true, 0), lookup{err: unavailable}, deletionRetry},
		{"force after the grace", sandbox("", true, grace), lookup{err: unavailable}, deletionForce},
		{"force after the grace, a call timed out", sandbox("", true, grace), lookup{err: grpcstatus.Error(codes.DeadlineExceeded, "slow")}, deletionForce},
		// Third read: only a call made now that finds the gateway
		// unreachable releases.
		{"force after the grace, breaker open (no call made)", sandbox("", true, time.Hour),
			lookup{err: &gatewayapi.OpenError{Gateway: "p/gw", Failures: 5, Wait: time.Minute}}, deletionRetry},
		{"force after the grace, breaker open, wrapped", sandbox("", true, time.Hour),
			lookup{err: fmt.Errorf("get sandbox: %w", &gatewayapi.OpenError{Gateway: "p/gw", Failures: 5})}, deletionRetry},
		{"force after the grace, the gateway refuses", sandbox("", true, time.Hour), lookup{err: grpcstatus.Error(codes.PermissionDenied, "no")}, deletionRetry},
		{"force after the grace, an API error", sandbox("", true, time.Hour), lookup{err: errors.New("etcdserver: request timed out")}, deletionRetry},
		{"force after the grace, the gateway rolls out", sandbox("", true, time.Hour), lookup{err: unavailable, rollingOut: true}, deletionBusy},
		{"force, but the gateway answered", sandbox("", true, time.Hour), lookup{gone: true}, deletionFinish},
		{"force other than true", func() *openshellv1alpha1.OpenShellSandbox {
			sb := sandbox("", true, time.Hour)
			sb.Annotations[openshellv1alpha1.AnnotationForceRelease] = "yes"
			return sb
		}(), lookup{err: unavailable}, deletionRetry},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := decideDeletion(tc.sb, tc.l, now, grace); got != tc.want {
				t.Fatalf("decideDeletion = %d, want %d", got, tc.want)
			}
		})
	}
}

// TestCreateInFlight: a young provisioning row whose agents.x-k8s.io
// Sandbox cannot be seen (the Agent Sandbox API not served, or the install
// mode forbids listing it) is waited for, not raced; an old one, or one
// past provisioning, is not.
func TestCreateInFlight(t *testing.T) {
	now := time.Now()
	row := func(phase openshellv1.SandboxPhase, age time.Duration) *openshellv1.Sandbox {
		return &openshellv1.Sandbox{Metadata: &datamodelv1.ObjectMeta{Id: "id-1", CreatedTime: timestamppb.New(now.Add(-age))},
			Status: &openshellv1.SandboxStatus{Phase: phase}}
	}
	forbidden := interceptor.Funcs{List: func(context.Context, client.WithWatch, client.ObjectList, ...client.ListOption) error {
		return apierrors.NewForbidden(schema.GroupResource{Group: "agents.x-k8s.io", Resource: "sandboxes"}, "", errors.New("not in this install mode"))
	}}
	for _, tc := range []struct {
		name      string
		available bool
		row       *openshellv1.Sandbox
		want      bool
	}{
		{"young, the API not served", false, row(openshellv1.SandboxPhase_SANDBOX_PHASE_PROVISIONING, time.Second), true},
		{"young, listing forbidden", true, row(openshellv1.SandboxPhase_SANDBOX_PHASE_PROVISIONING, time.Second), true},
		{"past the grace", true, row(openshellv1.SandboxPhase_SANDBOX_PHASE_PROVISIONING, createInFlightGrace+time.Second), false},
		{"ready", true, row(openshellv1.SandboxPhase_SANDBOX_PHASE_READY, time.Second), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := preflight.NewStore()
			store.Set(preflight.Result{AgentSandbox: preflight.AgentSandbox{Available: tc.available, Preferred: "v1beta1"}})
			c := fake.NewClientBuilder().WithInterceptorFuncs(forbidden).Build()
			r := &Reconciler{Client: c, APIReader: c, Preflight: store}
			got, err := r.createInFlight(context.Background(), &openshellv1alpha1.OpenShellGateway{}, &openshellv1alpha1.OpenShellSandbox{}, tc.row, now)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("createInFlight = %v, want %v", got, tc.want)
			}
		})
	}
}
