// Package testgateway is the stand-in for the OpenShell gateway, which
// cannot run here. It serves the subset of openshell.v1.OpenShell the
// operator uses over real gRPC and TLS, validates OIDC RS256 tokens against
// the operator's discovery and JWKS as the gateway does, enforces the
// documented names, limits and status codes, and acts as the Kubernetes
// compute driver: it creates agents.x-k8s.io Sandboxes with the sidecar pod
// shape and maps their Ready condition to the phase model. Faults
// (unavailable, slow, errors) can be injected.
package testgateway

import (
	"context"
	"crypto/tls"
	"fmt"
	"maps"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openshell/openshell-operator/internal/gatewayapi"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/datamodelv1"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/openshellv1"
	v01 "github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/openshellv1"
)

// Version is what Health reports.
const Version = "0.0.111-test"

// Options configure a test gateway.
type Options struct {
	// Listen is host:port; default 127.0.0.1:0.
	Listen string
	// Cert is the server certificate. No client certificate is asked
	// for: with OIDC the gateway requires none.
	Cert tls.Certificate
	OIDC OIDC
	// Kube creates and watches agents.x-k8s.io Sandboxes in Namespace.
	Kube      client.WithWatch
	Namespace string
	GatewayID string
	// DefaultImage (used when a sandbox names no image) and SupervisorImage,
	// as default_image and supervisor_image in gateway.toml.
	DefaultImage, SupervisorImage string
	ClientTLSSecret               string
	ServiceAccount                string
	// AllowedPodLabels and AllowedPodAnnotations are the driver's
	// allowed_pod_labels and allowed_pod_annotations: from 0.1.5 a template
	// label or annotation not listed is refused.
	AllowedPodLabels, AllowedPodAnnotations []string
	// Version is what Health reports from the start ("": Version); see
	// ReportVersion.
	Version string
	// WorkspaceMode is the driver's workspace_mode: "" or "shared" (every
	// sandbox in Namespace, its Sandbox named <workspace>--<name>), or
	// "operator" (in the namespace named after its workspace, which
	// Allowlist must name, its Sandbox named <name>; Namespace is then
	// only where the client certificate is read from).
	WorkspaceMode string
	// Allowlist reads the operator_namespace_file as the kubelet would
	// have mounted it (operator mode only).
	Allowlist func(context.Context) ([]string, error)
}

// WorkspaceModeOperator is the driver's workspace_mode operator.
const WorkspaceModeOperator = "operator"

// place is where a new sandbox's Sandbox goes. In operator mode a
// workspace whose namespace is not on the allowlist is refused as the
// 0.1 driver refuses it (FAILED_PRECONDITION), never placed elsewhere.
func (g *Gateway) place(ctx context.Context, ws, name string) (ns, crName string, err error) {
	if g.opts.WorkspaceMode != WorkspaceModeOperator {
		ns, crName = g.placeOf(ws, name)
		return ns, crName, nil
	}
	if g.opts.Allowlist == nil {
		return "", "", status.Error(codes.FailedPrecondition, "operator mode requires a namespace allowlist")
	}
	names, err := g.opts.Allowlist(ctx)
	if err != nil || !slices.Contains(names, ws) {
		return "", "", status.Errorf(codes.FailedPrecondition, "workspace '%s' is not in the operator namespace allowlist", ws)
	}
	ns, crName = g.placeOf(ws, name)
	return ns, crName, nil
}

// placeOf is where the driver puts a sandbox's Sandbox, in its mode.
func (g *Gateway) placeOf(ws, name string) (ns, crName string) {
	if g.opts.WorkspaceMode == WorkspaceModeOperator {
		return ws, name
	}
	return g.opts.Namespace, ws + "--" + name
}

// Gateway is a running test gateway.
type Gateway struct {
	openshellv1.UnimplementedOpenShellServer
	opts     Options
	verifier *verifier
	// version is what Health reports instead of Version (ReportVersion).
	version string
	srv     *grpc.Server
	lis     net.Listener
	driver  *driver
	cancel  context.CancelFunc

	// openExecs counts the ExecSandboxInteractive streams being served.
	openExecs atomic.Int64

	mu           sync.Mutex
	calls        map[string]int
	lineCalls    map[string]int // "0.1 CreateSandbox"
	authFailures int
	// created counts the sandboxes CreateSandbox made (not its refusals).
	created     int
	requestIDs  []string
	unavailable bool
	// chunkSeq numbers draft chunks, gateway-wide as the release's IDs are.
	chunkSeq int
	delay    time.Duration
	failNext map[string]codes.Code
	holdNext map[string]hold
	loseNext map[string]bool
	// replays are the 0.1 idempotency keys seen (request_id), with what
	// they answered; replayed counts the answers given again.
	replays  map[string]replay
	replayed int
	keys     []string
	trace    func(event, sandbox string)
	// unnoticed, while delaying, holds the rows whose runtime object was
	// deleted but whose removal the gateway has not noticed yet
	// (DelayRuntimeDeletionNotice).
	unnoticed []*sandboxRow
	delaying  bool

	workspaces map[string]*datamodelv1.Workspace
	sandboxes  map[wsName]*sandboxRow
	byID       map[string]*sandboxRow
	providers  map[wsName]*datamodelv1.Provider
	watchers   map[string][]chan struct{}
	// profiles is the 0.1 provider-profile catalog; profileRefs the
	// profile_workspace of each provider stored through the 0.1 wire (a
	// provider from 0.0.x has none: the platform catalog).
	profiles    map[catalogKey]*v01.ProviderProfile
	profileRefs map[wsName]string
	// members is each workspace's membership (0.1): subject → role.
	members map[string]map[string]v01.WorkspaceRole
	// templates are the workspace templates (0.1); fromTemplate, by
	// sandbox ID, the template each sandbox was created from.
	templates    map[wsName]*v01.SandboxWorkloadTemplate
	fromTemplate map[string]*v01.SandboxWorkloadTemplateProvenance
	// refreshes are the providers' credential refreshes (0.1); refreshFail
	// makes mints fail; minted counts mints (the minted values differ).
	refreshes   map[refreshKey]*refreshState
	refreshFail *refreshFailure
	minted      int
}

type wsName struct{ ws, name string }

type sandboxRow struct {
	sb *openshellv1.Sandbox
	// ns and crName place its agents.x-k8s.io Sandbox (place).
	ns, crName string
	policyV    uint32
	deleting   bool
	// transition is STOPPING or STARTING while a stop or start is under
	// way: the gateway holds that phase until the driver reports the end
	// state (STOPPED, READY).
	transition openshellv1.SandboxPhase
	// revisions are the sandbox's policy versions; failLoad, when set, is
	// the load error the supervisor reports for the next one.
	revisions []*openshellv1.SandboxPolicyRevision
	failLoad  string
	// logs is the sandbox's bounded log buffer (0.1 GetSandboxLogs).
	logs []*v01.SandboxLogLine
	// runtime is the 0.1 runtime of a sandbox created while the gateway
	// spoke 0.1 (nil: the 0.0.x sidecar pod).
	runtime *runtime01
	// drafts is its policy advisor's settings and chunks (nil: none yet).
	drafts *drafts
	// services are its exposed services (0.1 ExposeService), by name.
	services map[string]*v01.ServiceEndpoint
}

// Start serves until Stop.
func Start(ctx context.Context, opts Options) (*Gateway, error) {
	if opts.Listen == "" {
		opts.Listen = "127.0.0.1:0"
	}
	v, err := newVerifier(opts.OIDC)
	if err != nil {
		return nil, err
	}
	g := &Gateway{opts: opts, verifier: v, calls: map[string]int{}, lineCalls: map[string]int{}, failNext: map[string]codes.Code{}, holdNext: map[string]hold{}, loseNext: map[string]bool{}, replays: map[string]replay{},
		workspaces: map[string]*datamodelv1.Workspace{}, sandboxes: map[wsName]*sandboxRow{}, byID: map[string]*sandboxRow{},
		providers: map[wsName]*datamodelv1.Provider{}, watchers: map[string][]chan struct{}{}, version: opts.Version,
		profiles: map[catalogKey]*v01.ProviderProfile{}, profileRefs: map[wsName]string{}, members: map[string]map[string]v01.WorkspaceRole{},
		templates: map[wsName]*v01.SandboxWorkloadTemplate{}, fromTemplate: map[string]*v01.SandboxWorkloadTemplateProvenance{},
		refreshes: map[refreshKey]*refreshState{}}
	g.workspaces["default"] = newWorkspace("default")
	lis, err := net.Listen("tcp", opts.Listen)
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	g.lis = lis
	g.srv = grpc.NewServer(
		grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{opts.Cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2"}})),
		grpc.MaxRecvMsgSize(1<<20), // the gateway's 1 MiB request limit
		grpc.ChainUnaryInterceptor(g.unaryAuth),
		grpc.ChainStreamInterceptor(g.streamAuth),
	)
	g.srv.RegisterService(g.serviceDesc(), g)
	dctx, cancel := context.WithCancel(ctx)
	g.cancel = cancel
	if opts.Kube != nil {
		g.driver, err = newDriver(dctx, g)
		if err != nil {
			cancel()
			_ = lis.Close()
			return nil, err
		}
	}
	go func() { _ = g.srv.Serve(lis) }()
	return g, nil
}

// Endpoint is the https:// address clients dial.
func (g *Gateway) Endpoint() string { return "https://" + g.lis.Addr().String() }

// Stop stops serving and the driver.
func (g *Gateway) Stop() {
	g.cancel()
	g.srv.Stop()
}

// SetUnavailable makes every RPC fail with UNAVAILABLE.
func (g *Gateway) SetUnavailable(down bool) { g.mu.Lock(); g.unavailable = down; g.mu.Unlock() }

// SetDelay delays every RPC.
func (g *Gateway) SetDelay(d time.Duration) { g.mu.Lock(); g.delay = d; g.mu.Unlock() }

// FailNext fails the next call of method (e.g. "CreateSandbox") with code.
func (g *Gateway) FailNext(method string, code codes.Code) {
	g.mu.Lock()
	g.failNext["/openshell.v1.OpenShell/"+method] = code
	g.mu.Unlock()
}

// LoseNextResponse lets the next call of method do its work and then
// answers UNAVAILABLE: the outcome is uncertain to the caller, whose retry
// meets what the first call did.
func (g *Gateway) LoseNextResponse(method string) {
	g.mu.Lock()
	g.loseNext["/openshell.v1.OpenShell/"+method] = true
	g.mu.Unlock()
}

// hold is a response withheld until the test releases it.
type hold struct{ reached, release chan struct{} }

// HoldNext lets the next call of method (e.g. "CreateSandbox") do its work
// and then withholds the response: reached closes when the work is done,
// and release lets the response go. A test uses it to act while a call is
// in flight (delete the object whose sandbox is being created, say).
func (g *Gateway) HoldNext(method string) (reached <-chan struct{}, release func()) {
	h := hold{reached: make(chan struct{}), release: make(chan struct{})}
	g.mu.Lock()
	g.holdNext["/openshell.v1.OpenShell/"+method] = h
	g.mu.Unlock()
	var once sync.Once
	return h.reached, func() { once.Do(func() { close(h.release) }) }
}

// DelayRuntimeDeletionNotice makes the gateway slow to notice that a
// sandbox's runtime object is gone, as 0.0.111 is (its sweep drops the row
// only after a grace): until notice is called the row stays, reporting the
// phase it had. notice then drops every row whose object went meanwhile
// and ends the delay.
func (g *Gateway) DelayRuntimeDeletionNotice() (notice func()) {
	g.mu.Lock()
	g.delaying = true
	g.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			g.mu.Lock()
			rows := g.unnoticed
			g.unnoticed, g.delaying = nil, false
			g.mu.Unlock()
			for _, r := range rows {
				g.remove(r)
			}
		})
	}
}

// Trace makes the gateway call fn at points of a sandbox's way to Ready
// (TraceCreateReceived, TraceReadySent, TraceReadyAnswered) with the
// gateway sandbox's name, before the answer leaves: the benchmark splits
// the operator path's latency with it, and a fault test acts at the
// moment the operator learns that a sandbox is Ready.
func (g *Gateway) Trace(fn func(event, sandbox string)) {
	g.mu.Lock()
	g.trace = fn
	g.mu.Unlock()
}

// Trace events.
const (
	TraceCreateReceived = "CreateSandbox received"
	TraceReadySent      = "READY sent on WatchSandbox"
	TraceReadyAnswered  = "READY answered on GetSandbox"
)

func (g *Gateway) traced(event, sandbox string) {
	g.mu.Lock()
	fn := g.trace
	g.mu.Unlock()
	if fn != nil {
		fn(event, sandbox)
	}
}

// Calls returns how often each method was called (by short name).
func (g *Gateway) Calls() map[string]int {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := map[string]int{}
	for k, v := range g.calls {
		out[k[len("/openshell.v1.OpenShell/"):]] = v
	}
	return out
}

// RequestIDs are the x-request-id values received, in order.
func (g *Gateway) RequestIDs() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string{}, g.requestIDs...)
}

// Created counts the sandboxes CreateSandbox made; a create refused (the
// name taken, say) or answered from a replay is not one.
func (g *Gateway) Created() int { g.mu.Lock(); defer g.mu.Unlock(); return g.created }

// AuthFailures counts rejected calls.
func (g *Gateway) AuthFailures() int { g.mu.Lock(); defer g.mu.Unlock(); return g.authFailures }

// StoredCredentials returns a provider's stored (unredacted) credentials.
func (g *Gateway) StoredCredentials(workspace, name string) map[string]string {
	g.mu.Lock()
	defer g.mu.Unlock()
	p, ok := g.providers[wsName{workspace, name}]
	if !ok {
		return nil
	}
	out := map[string]string{}
	for k, v := range p.Credentials {
		out[k] = v
	}
	return out
}

// SandboxPolicyVersion returns the policy version of a sandbox (0: none).
func (g *Gateway) SandboxPolicyVersion(workspace, name string) uint32 {
	g.mu.Lock()
	defer g.mu.Unlock()
	if r, ok := g.sandboxes[wsName{workspace, name}]; ok {
		return r.policyV
	}
	return 0
}

// SandboxEnv returns the environment a sandbox was created with (nil: no
// such sandbox).
func (g *Gateway) SandboxEnv(workspace, name string) map[string]string {
	g.mu.Lock()
	defer g.mu.Unlock()
	if r, ok := g.sandboxes[wsName{workspace, name}]; ok {
		return maps.Clone(r.sb.GetSpec().GetEnvironment())
	}
	return nil
}

// Attachments counts the provider attachments of a workspace's sandbox rows.
func (g *Gateway) Attachments(workspace string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for k, r := range g.sandboxes {
		if k.ws == workspace {
			n += len(r.sb.GetSpec().GetProviders())
		}
	}
	return n
}

// SandboxNames lists the sandbox rows of a workspace.
func (g *Gateway) SandboxNames(workspace string) []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []string
	for k := range g.sandboxes {
		if k.ws == workspace {
			out = append(out, k.name)
		}
	}
	return out
}

// Describe says, for a failing test's message, what the gateway holds of
// a workspace's sandboxes (name, ID, phase, whether a delete is under way,
// its Kubernetes object) and how many calls of each method it answered.
func (g *Gateway) Describe(workspace string) string {
	g.mu.Lock()
	var rows []string
	for k, r := range g.sandboxes {
		if k.ws == workspace {
			rows = append(rows, fmt.Sprintf("%s id=%s phase=%s deleting=%v cr=%s", k.name, r.sb.GetMetadata().GetId(),
				r.sb.GetStatus().GetPhase(), r.deleting, r.crName))
		}
	}
	g.mu.Unlock()
	slices.Sort(rows)
	return fmt.Sprintf("gateway rows %v; calls %v", rows, g.Calls())
}

// notify wakes WatchSandbox streams of one sandbox; call with g.mu held.
func (g *Gateway) notify(id string) {
	for _, ch := range g.watchers[id] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

func newWorkspace(name string) *datamodelv1.Workspace {
	return &datamodelv1.Workspace{
		Metadata: &datamodelv1.ObjectMeta{Id: gatewayapi.NewRequestID(), Name: name, CreatedAtMs: time.Now().UnixMilli(), ResourceVersion: 1},
		Status:   &datamodelv1.WorkspaceStatus{Phase: datamodelv1.WorkspacePhase_WORKSPACE_PHASE_ACTIVE},
	}
}

// workspaceOf resolves "" to default and requires an active workspace.
func (g *Gateway) workspaceOf(ws string) (string, error) {
	if ws == "" {
		ws = "default"
	}
	w, ok := g.workspaces[ws]
	if !ok {
		return "", status.Errorf(codes.NotFound, "workspace '%s' not found", ws)
	}
	if w.Status.Phase != datamodelv1.WorkspacePhase_WORKSPACE_PHASE_ACTIVE {
		return "", status.Errorf(codes.FailedPrecondition, "workspace '%s' is terminating", ws)
	}
	return ws, nil
}

// SeedSandbox inserts a row (without a compute object) as if another client
// had created it: tests use it for name conflicts and foreign sandboxes.
func (g *Gateway) SeedSandbox(workspace, name string, labels map[string]string, annotations ...map[string]string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.workspaces[workspace]; !ok {
		g.workspaces[workspace] = newWorkspace(workspace)
	}
	row := &sandboxRow{sb: &openshellv1.Sandbox{
		Metadata: &datamodelv1.ObjectMeta{Id: gatewayapi.NewRequestID(), Name: name, Workspace: workspace, ResourceVersion: 1, Labels: labels,
			CreatedAtMs: time.Now().UnixMilli()},
		Spec:   &openshellv1.SandboxSpec{},
		Status: &openshellv1.SandboxStatus{Phase: openshellv1.SandboxPhase_SANDBOX_PHASE_READY},
	}}
	row.ns, row.crName = g.placeOf(workspace, name)
	for _, a := range annotations {
		row.sb.Metadata.Annotations = a
	}
	g.sandboxes[wsName{workspace, name}] = row
	g.byID[row.sb.Metadata.Id] = row
}
