package sandbox

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/openshellv1"
)

// TestRecordExit: an agent that exited is reported with its code and the
// time it was first seen finished, once; a sandbox that runs again (or
// never exited) carries neither.
func TestRecordExit(t *testing.T) {
	then, now := metav1.NewTime(time.Unix(1_800_000_000, 0)), metav1.NewTime(time.Unix(1_800_000_100, 0))
	exited := func(code int32) *openshellv1.Sandbox {
		return &openshellv1.Sandbox{Status: &openshellv1.SandboxStatus{ExitCode: &code}}
	}
	for name, c := range map[string]struct {
		phase    openshellv1alpha1.SandboxPhase
		current  *openshellv1.Sandbox
		before   *metav1.Time
		wantCode *int32
		wantTime *metav1.Time
	}{
		"completed: first seen now":           {openshellv1alpha1.SandboxPhaseCompleted, exited(0), nil, ptr.To[int32](0), &now},
		"completed: the first time stays":     {openshellv1alpha1.SandboxPhaseCompleted, exited(0), &then, ptr.To[int32](0), &then},
		"an error with an exit code finished": {openshellv1alpha1.SandboxPhaseError, exited(3), nil, ptr.To[int32](3), &now},
		"an error without one did not finish": {openshellv1alpha1.SandboxPhaseError, &openshellv1.Sandbox{}, nil, nil, nil},
		"running again forgets the last exit": {openshellv1alpha1.SandboxPhaseReady, &openshellv1.Sandbox{}, &then, nil, nil},
		"a transient phase keeps the record":  {openshellv1alpha1.SandboxPhaseProvisioning, &openshellv1.Sandbox{}, &then, ptr.To[int32](0), &then},
	} {
		sb := &openshellv1alpha1.OpenShellSandbox{Status: openshellv1alpha1.OpenShellSandboxStatus{Phase: c.phase, CompletionTime: c.before}}
		if c.before != nil {
			sb.Status.ExitCode = ptr.To[int32](0)
		}
		recordExit(sb, c.current, now)
		if !ptr.Equal(sb.Status.ExitCode, c.wantCode) || !ptr.Equal(sb.Status.CompletionTime, c.wantTime) {
			t.Errorf("%s: exit code %v at %v, want %v at %v", name, ptr.Deref(sb.Status.ExitCode, -1), sb.Status.CompletionTime, ptr.Deref(c.wantCode, -1), c.wantTime)
		}
	}
}

// TestTTLLeft: only a finished sandbox with a TTL is due, counted from its
// completion time.
func TestTTLLeft(t *testing.T) {
	done := metav1.NewTime(time.Unix(1_800_000_000, 0))
	sb := &openshellv1alpha1.OpenShellSandbox{}
	if _, due := ttlLeft(sb, done.Time); due {
		t.Error("due without a TTL or a completion")
	}
	sb.Spec.TTLSecondsAfterFinished = ptr.To[int32](30)
	if _, due := ttlLeft(sb, done.Time); due {
		t.Error("due before the agent finished")
	}
	sb.Status.CompletionTime = &done
	if left, due := ttlLeft(sb, done.Add(10*time.Second)); !due || left != 20*time.Second {
		t.Errorf("10 s after: %s left, due %v; want 20s", left, due)
	}
	if left, due := ttlLeft(sb, done.Add(31*time.Second)); !due || left > 0 {
		t.Errorf("31 s after: %s left, due %v; want expired", left, due)
	}
}
