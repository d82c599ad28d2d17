package testgateway

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/openshellv1"
)

// stopWait bounds StopSandbox's wait for the driver, as the gateway's
// terminationGracePeriodSeconds (30 s) + 30 s.
const stopWait = 60 * time.Second

// StopSandbox follows the documented contract (2.5): from READY (or
// STOPPING, a retry) it writes STOPPING, suspends the CR (v1beta1
// spec.operatingMode: Suspended; v1alpha1 spec.replicas: 0) and blocks
// until the driver reports it stopped, then returns it STOPPED; already
// STOPPED returns it as is; any other phase is FAILED_PRECONDITION.
func (g *Gateway) StopSandbox(ctx context.Context, req *openshellv1.StopSandboxRequest) (*openshellv1.SandboxResponse, error) {
	g.mu.Lock()
	r, err := g.lookup(req.Workspace, req.Name)
	if err != nil {
		g.mu.Unlock()
		return nil, err
	}
	switch phase := r.sb.Status.GetPhase(); phase {
	case openshellv1.SandboxPhase_SANDBOX_PHASE_STOPPED:
		defer g.mu.Unlock()
		return &openshellv1.SandboxResponse{Sandbox: proto.Clone(r.sb).(*openshellv1.Sandbox)}, nil
	case openshellv1.SandboxPhase_SANDBOX_PHASE_READY, openshellv1.SandboxPhase_SANDBOX_PHASE_STOPPING:
	default:
		g.mu.Unlock()
		return nil, status.Errorf(codes.FailedPrecondition, "sandbox must be Ready to stop (current phase: %s)", phase)
	}
	if g.driver == nil { // no compute: stopped at once
		defer g.mu.Unlock()
		g.setPhase(r, openshellv1.SandboxPhase_SANDBOX_PHASE_STOPPED)
		return &openshellv1.SandboxResponse{Sandbox: proto.Clone(r.sb).(*openshellv1.Sandbox)}, nil
	}
	r.transition = openshellv1.SandboxPhase_SANDBOX_PHASE_STOPPING
	g.setPhase(r, openshellv1.SandboxPhase_SANDBOX_PHASE_STOPPING)
	g.mu.Unlock()
	if err := g.driver.setRunning(ctx, r, false); err != nil {
		return nil, status.Errorf(codes.Internal, "stop sandbox failed: %v", err)
	}
	deadline := time.After(stopWait)
	for {
		g.mu.Lock()
		if r.sb.Status.GetPhase() == openshellv1.SandboxPhase_SANDBOX_PHASE_STOPPED {
			defer g.mu.Unlock()
			return &openshellv1.SandboxResponse{Sandbox: proto.Clone(r.sb).(*openshellv1.Sandbox)}, nil
		}
		g.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		case <-deadline:
			return nil, status.Error(codes.DeadlineExceeded, "stop sandbox failed: the driver did not confirm the stop")
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// StartSandbox: from STOPPED (or STARTING, a retry) it writes STARTING,
// resumes the CR and returns at once, usually STARTING; READY follows when
// the pod (the supervisor) is back. Already READY returns it as is.
func (g *Gateway) StartSandbox(ctx context.Context, req *openshellv1.StartSandboxRequest) (*openshellv1.SandboxResponse, error) {
	g.mu.Lock()
	r, err := g.lookup(req.Workspace, req.Name)
	if err != nil {
		g.mu.Unlock()
		return nil, err
	}
	switch phase := r.sb.Status.GetPhase(); phase {
	case openshellv1.SandboxPhase_SANDBOX_PHASE_READY:
		defer g.mu.Unlock()
		return &openshellv1.SandboxResponse{Sandbox: proto.Clone(r.sb).(*openshellv1.Sandbox)}, nil
	case openshellv1.SandboxPhase_SANDBOX_PHASE_STOPPED, openshellv1.SandboxPhase_SANDBOX_PHASE_STARTING:
	default:
		g.mu.Unlock()
		return nil, status.Errorf(codes.FailedPrecondition, "sandbox must be Stopped to start (current phase: %s)", phase)
	}
	if g.driver == nil {
		defer g.mu.Unlock()
		g.setPhase(r, openshellv1.SandboxPhase_SANDBOX_PHASE_READY)
		return &openshellv1.SandboxResponse{Sandbox: proto.Clone(r.sb).(*openshellv1.Sandbox)}, nil
	}
	r.transition = openshellv1.SandboxPhase_SANDBOX_PHASE_STARTING
	g.setPhase(r, openshellv1.SandboxPhase_SANDBOX_PHASE_STARTING)
	g.mu.Unlock()
	if err := g.driver.setRunning(ctx, r, true); err != nil {
		return nil, status.Errorf(codes.Internal, "start sandbox failed: %v", err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return &openshellv1.SandboxResponse{Sandbox: proto.Clone(r.sb).(*openshellv1.Sandbox)}, nil
}

// setPhase records a phase the gateway writes itself; g.mu is held.
func (g *Gateway) setPhase(r *sandboxRow, phase openshellv1.SandboxPhase) {
	r.sb.Status.Phase = phase
	r.sb.Metadata.ResourceVersion++
	g.notify(r.sb.Metadata.Id)
}

// setRunning patches the CR as the Kubernetes driver does: v1beta1
// spec.operatingMode, v1alpha1 spec.replicas. The CR, and with it the
// workspace volume, stays.
func (d *driver) setRunning(ctx context.Context, row *sandboxRow, running bool) error {
	cr := &unstructured.Unstructured{}
	cr.SetGroupVersionKind(d.gvk)
	cr.SetNamespace(d.g.opts.Namespace)
	cr.SetName(row.crName)
	patch := `{"spec":{"operatingMode":"Suspended"}}`
	switch {
	case d.gvk.Version == "v1alpha1" && running:
		patch = `{"spec":{"replicas":1}}`
	case d.gvk.Version == "v1alpha1":
		patch = `{"spec":{"replicas":0}}`
	case running:
		patch = `{"spec":{"operatingMode":"Running"}}`
	}
	return d.g.opts.Kube.Patch(ctx, cr, client.RawPatch(types.MergePatchType, []byte(patch)))
}
