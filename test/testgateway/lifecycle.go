package testgateway

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/openshellv1"
	"github.com/openshell/openshell-operator/internal/gatewayline"
)

// stopWait bounds StopSandbox's wait for the driver, as the gateway's
// terminationGracePeriodSeconds (30 s) + 30 s.
const stopWait = 60 * time.Second

// begin starts a stop or a start (contract 2.5): it answers at once when
// the sandbox is already in the end state done, refuses a phase other than
// allowed or the retry of the transition to, and otherwise marks the row
// as moving to done through to. Without compute the end state is reached
// at once. g.mu must not be held.
func (g *Gateway) begin(ws, name string, allowed, to, done openshellv1.SandboxPhase, refusal string) (*sandboxRow, *openshellv1.SandboxResponse, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	r, err := g.lookup(ws, name)
	if err != nil {
		return nil, nil, err
	}
	switch phase := r.sb.Status.GetPhase(); phase {
	case done:
		return nil, &openshellv1.SandboxResponse{Sandbox: proto.Clone(r.sb).(*openshellv1.Sandbox)}, nil
	case allowed, to:
	default:
		return nil, nil, status.Errorf(codes.FailedPrecondition, "%s (current phase: %s)", refusal, phase)
	}
	if g.driver == nil {
		g.setPhase(r, done)
		return nil, &openshellv1.SandboxResponse{Sandbox: proto.Clone(r.sb).(*openshellv1.Sandbox)}, nil
	}
	r.transition = to
	g.setPhase(r, to)
	return r, nil, nil
}

// StopSandbox follows the documented contract (2.5): from READY (or
// STOPPING, a retry) it writes STOPPING, suspends the CR (v1beta1
// spec.operatingMode: Suspended; v1alpha1 spec.replicas: 0) and blocks
// until the driver reports it stopped, then returns it STOPPED; already
// STOPPED returns it as is; any other phase is FAILED_PRECONDITION.
func (g *Gateway) StopSandbox(ctx context.Context, req *openshellv1.StopSandboxRequest) (*openshellv1.SandboxResponse, error) {
	r, resp, err := g.begin(req.Workspace, req.Name, openshellv1.SandboxPhase_SANDBOX_PHASE_READY,
		openshellv1.SandboxPhase_SANDBOX_PHASE_STOPPING, openshellv1.SandboxPhase_SANDBOX_PHASE_STOPPED, "sandbox must be Ready to stop")
	if r == nil {
		return resp, err
	}
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
	r, resp, err := g.begin(req.Workspace, req.Name, openshellv1.SandboxPhase_SANDBOX_PHASE_STOPPED,
		openshellv1.SandboxPhase_SANDBOX_PHASE_STARTING, openshellv1.SandboxPhase_SANDBOX_PHASE_READY, "sandbox must be Stopped to start")
	if r == nil {
		return resp, err
	}
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
	d.g.mu.Lock()
	two := row.runtime != nil
	d.g.mu.Unlock()
	if two {
		return d.setRunning01(ctx, row, running)
	}
	cr := &unstructured.Unstructured{}
	cr.SetGroupVersionKind(d.gvk)
	cr.SetNamespace(row.ns)
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

// completed is 0.1's SANDBOX_PHASE_COMPLETED, which the 0.0.x enum the
// gateway stores its rows in does not name (proto3 enums are open; the 0.1
// face reads it by number).
const completed openshellv1.SandboxPhase = 9

// Exit plays the sandbox's agent exiting with code: a 0.1 gateway reports
// COMPLETED for 0, and ERROR with the exit code otherwise (0.0.x: ERROR
// with the exit code either way). The phase then stays until deletion.
func (g *Gateway) Exit(workspace, name string, code int32) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	r, ok := g.sandboxes[wsName{workspace, name}]
	if !ok {
		return fmt.Errorf("no sandbox %s in workspace %s", name, workspace)
	}
	r.sb.Status.ExitCode = &code
	phase := openshellv1.SandboxPhase_SANDBOX_PHASE_ERROR
	if code == 0 && g.lineLocked() == gatewayline.V01 {
		phase = completed
	}
	g.setPhase(r, phase)
	return nil
}
