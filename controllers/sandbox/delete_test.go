package sandbox

import (
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/gatewayapi"
	"github.com/openshell/openshell-operator/internal/gwconn"
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
