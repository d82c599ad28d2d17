package testgateway

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/openshellv1"
	v01datamodel "github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/datamodelv1"
	v01 "github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/openshellv1"
	"github.com/openshell/openshell-operator/internal/gatewayline"
)

// Workspace membership and consumer access, as 0.1 documents them
// (reference §6.4): workspace-scoped methods need the user role and
// membership of the target workspace, keyed by the token's subject;
// platform admins bypass membership; managing members needs the workspace
// admin role. Exec runs a small command set in place of a container (see
// run); logs are the lines the gateway recorded for the sandbox.

// maxLogLines bounds each sandbox's log buffer (a real gateway's is
// bounded too; its size is not established).
const maxLogLines = 1000

// wrappedStream carries the authenticated context into a stream handler.
type wrappedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (w wrappedStream) Context() context.Context { return w.ctx }

// Grant makes subject a member of workspace with role, as a gateway admin
// would with the CLI.
func (g *Gateway) Grant(workspace, subject string, role v01.WorkspaceRole) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.members[workspace] == nil {
		g.members[workspace] = map[string]v01.WorkspaceRole{}
	}
	g.members[workspace][subject] = role
}

// Members lists workspace's members (subject → role).
func (g *Gateway) Members(workspace string) map[string]v01.WorkspaceRole {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := map[string]v01.WorkspaceRole{}
	for k, v := range g.members[workspace] {
		out[k] = v
	}
	return out
}

// requireMember refuses a caller below role in workspace (platform admins
// pass).
func (g *Gateway) requireMember(ctx context.Context, workspace string, role v01.WorkspaceRole) error {
	p, _ := ctx.Value(principalKey{}).(*principal)
	if p == nil || p.admin {
		return nil
	}
	g.mu.Lock()
	got, ok := g.members[workspace][p.Subject]
	g.mu.Unlock()
	if !ok || got < role {
		return status.Errorf(codes.PermissionDenied, "principal '%s' is not a member of workspace '%s' with role %s", p.Subject, workspace, role)
	}
	return nil
}

// checkScope applies membership to a decoded 0.1 request that names a
// workspace: all_workspaces is for platform admins only.
func (g *Gateway) checkScope(ctx context.Context, req any) error {
	if g.line() != gatewayline.V01 {
		return nil
	}
	m, ok := req.(proto.Message)
	if !ok {
		return nil
	}
	r := m.ProtoReflect()
	fd := r.Descriptor().Fields().ByName("workspace_scope")
	if fd == nil || !r.Has(fd) {
		return nil
	}
	sel, ok := r.Get(fd).Message().Interface().(*v01datamodel.WorkspaceSelector)
	if !ok {
		return nil
	}
	role := RequiredWorkspaceRole(m)
	if sel.GetAllWorkspaces() != nil {
		if p, _ := ctx.Value(principalKey{}).(*principal); p != nil && !p.admin {
			return status.Error(codes.PermissionDenied, "all_workspaces requires the platform admin role")
		}
		return nil
	}
	return g.requireMember(ctx, sel.GetWorkspace(), role)
}

// RequiredWorkspaceRole is the workspace role a 0.1 request needs of a
// caller without the platform admin role: admin for the requests whose
// method the release's descriptors give workspace_role "admin", else user
// (test/wire checks the two agree).
func RequiredWorkspaceRole(req proto.Message) v01.WorkspaceRole {
	switch req.(type) {
	case *v01.AddWorkspaceMemberRequest, *v01.RemoveWorkspaceMemberRequest, *v01.CreateSandboxTemplateRequest, *v01.DeleteSandboxTemplateRequest,
		*v01.RejectDraftChunkRequest, *v01.UpdateConfigRequest,
		*v01.ConfigureProviderRefreshRequest, *v01.RotateProviderCredentialRequest, *v01.DeleteProviderRefreshRequest,
		*v01.CreateProviderRequest, *v01.UpdateProviderRequest, *v01.DeleteProviderRequest,
		*v01.ImportProviderProfilesRequest, *v01.UpdateProviderProfilesRequest, *v01.DeleteProviderProfileRequest:
		return v01.WorkspaceRole_WORKSPACE_ROLE_ADMIN
	}
	return v01.WorkspaceRole_WORKSPACE_ROLE_USER
}

func (s *v01Server) AddWorkspaceMember(_ context.Context, in *v01.AddWorkspaceMemberRequest) (*v01.AddWorkspaceMemberResponse, error) {
	ws := in.GetWorkspaceScope().GetWorkspace()
	if ws == "" || in.GetPrincipalSubject() == "" || in.GetRole() == v01.WorkspaceRole_WORKSPACE_ROLE_UNSPECIFIED {
		return nil, status.Error(codes.InvalidArgument, "workspace, principal_subject and role are required")
	}
	if !s.g.workspaceExists(ws) {
		return nil, status.Errorf(codes.NotFound, "workspace '%s' not found", ws)
	}
	s.g.mu.Lock()
	defer s.g.mu.Unlock()
	if _, ok := s.g.members[ws][in.GetPrincipalSubject()]; ok {
		return nil, status.Errorf(codes.AlreadyExists, "principal '%s' is already a member of workspace '%s'", in.GetPrincipalSubject(), ws)
	}
	if s.g.members[ws] == nil {
		s.g.members[ws] = map[string]v01.WorkspaceRole{}
	}
	s.g.members[ws][in.GetPrincipalSubject()] = in.GetRole()
	return &v01.AddWorkspaceMemberResponse{Member: member(ws, in.GetPrincipalSubject(), in.GetRole())}, nil
}

func (s *v01Server) RemoveWorkspaceMember(_ context.Context, in *v01.RemoveWorkspaceMemberRequest) (*v01.RemoveWorkspaceMemberResponse, error) {
	ws := in.GetWorkspaceScope().GetWorkspace()
	s.g.mu.Lock()
	defer s.g.mu.Unlock()
	if _, ok := s.g.members[ws][in.GetPrincipalSubject()]; !ok {
		if in.GetAllowMissing() {
			return &v01.RemoveWorkspaceMemberResponse{Outcome: v01.DeletionOutcome_DELETION_OUTCOME_ALREADY_ABSENT}, nil
		}
		return nil, status.Errorf(codes.NotFound, "principal '%s' is not a member of workspace '%s'", in.GetPrincipalSubject(), ws)
	}
	delete(s.g.members[ws], in.GetPrincipalSubject())
	return &v01.RemoveWorkspaceMemberResponse{Outcome: v01.DeletionOutcome_DELETION_OUTCOME_COMPLETED}, nil
}

func (s *v01Server) ListWorkspaceMembers(_ context.Context, in *v01.ListWorkspaceMembersRequest) (*v01.ListWorkspaceMembersResponse, error) {
	ws := in.GetWorkspaceScope().GetWorkspace()
	s.g.mu.Lock()
	defer s.g.mu.Unlock()
	subjects := make([]string, 0, len(s.g.members[ws]))
	for k := range s.g.members[ws] {
		subjects = append(subjects, k)
	}
	slices.Sort(subjects)
	out := &v01.ListWorkspaceMembersResponse{}
	for _, sub := range subjects {
		out.Members = append(out.Members, member(ws, sub, s.g.members[ws][sub]))
	}
	return out, nil
}

func member(ws, subject string, role v01.WorkspaceRole) *v01.WorkspaceMember {
	return &v01.WorkspaceMember{Metadata: &v01datamodel.ObjectMeta{Name: subject, Workspace: ws}, PrincipalSubject: subject, Role: role}
}

func (g *Gateway) workspaceExists(ws string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	_, ok := g.workspaces[ws]
	return ok
}

// ExecSandbox runs a command without stdin beyond the request's.
func (s *v01Server) ExecSandbox(in *v01.ExecSandboxRequest, stream grpc.ServerStreamingServer[v01.ExecSandboxEvent]) error {
	ctx := stream.Context()
	if err := s.g.checkScope(ctx, in); err != nil {
		return err
	}
	stdin := make(chan []byte, 1)
	stdin <- in.GetStdin()
	close(stdin)
	return s.g.exec(ctx, in, stdin, nil, stream.Send)
}

// OpenExecs is the number of ExecSandboxInteractive streams being served
// (benchmarks wait for their sessions to open and to end).
func (g *Gateway) OpenExecs() int { return int(g.openExecs.Load()) }

// ExecSandboxInteractive: the first message starts the command; then stdin
// and resizes until the client half-closes.
func (s *v01Server) ExecSandboxInteractive(stream grpc.BidiStreamingServer[v01.ExecSandboxInput, v01.ExecSandboxEvent]) error {
	s.g.openExecs.Add(1)
	defer s.g.openExecs.Add(-1)
	ctx := stream.Context()
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	start := first.GetStart()
	if start == nil {
		return status.Error(codes.InvalidArgument, "the first message must be start")
	}
	if err := s.g.checkScope(ctx, start); err != nil {
		return err
	}
	stdin := make(chan []byte, 16)
	resize := make(chan *v01.ExecSandboxWindowResize, 4)
	go func() {
		defer close(stdin)
		for {
			m, err := stream.Recv()
			if err != nil {
				return
			}
			switch p := m.Payload.(type) {
			case *v01.ExecSandboxInput_Stdin:
				select {
				case stdin <- p.Stdin:
				case <-ctx.Done():
					return
				}
			case *v01.ExecSandboxInput_Resize:
				select {
				case resize <- p.Resize:
				default:
				}
			}
		}
	}()
	return s.g.exec(ctx, start, stdin, resize, stream.Send)
}

// exec runs one command in a READY sandbox and records it in the
// sandbox's log.
func (g *Gateway) exec(ctx context.Context, in *v01.ExecSandboxRequest, stdin <-chan []byte, resize <-chan *v01.ExecSandboxWindowResize,
	send func(*v01.ExecSandboxEvent) error) error {
	row, err := g.readyRow(in.GetWorkspaceScope().GetWorkspace(), in.GetSandbox())
	if err != nil {
		return err
	}
	if len(in.GetCommand()) == 0 {
		return status.Error(codes.InvalidArgument, "command is required")
	}
	who := "?"
	if p, _ := ctx.Value(principalKey{}).(*principal); p != nil {
		who = p.Subject
	}
	g.logLine(row, "exec", fmt.Sprintf("exec %q by %s", strings.Join(in.GetCommand(), " "), who))
	code := run(ctx, in, stdin, resize, func(out, errOut []byte) error {
		if len(out) > 0 {
			if err := send(&v01.ExecSandboxEvent{Payload: &v01.ExecSandboxEvent_Stdout{Stdout: &v01.ExecSandboxStdout{Data: out}}}); err != nil {
				return err
			}
		}
		if len(errOut) > 0 {
			if in.GetTty() {
				// A terminal has one output stream.
				return send(&v01.ExecSandboxEvent{Payload: &v01.ExecSandboxEvent_Stdout{Stdout: &v01.ExecSandboxStdout{Data: errOut}}})
			}
			return send(&v01.ExecSandboxEvent{Payload: &v01.ExecSandboxEvent_Stderr{Stderr: &v01.ExecSandboxStderr{Data: errOut}}})
		}
		return nil
	})
	if ctx.Err() != nil {
		return status.FromContextError(ctx.Err()).Err()
	}
	return send(&v01.ExecSandboxEvent{Payload: &v01.ExecSandboxEvent_Exit{Exit: &v01.ExecSandboxExit{ExitCode: int32(code)}}})
}

// run plays a shell with a few commands, enough to show each part of the
// protocol: echo ARGS (stdout), warn ARGS (stderr), cat (stdin to stdout
// until EOF), size (the terminal's last size, after waiting for a resize
// when given "wait"), exit N, sleep SECONDS, sh (these commands read line
// by line from stdin, until exit or EOF); anything else is "command not
// found" with exit code 127, as a shell says it.
func run(ctx context.Context, in *v01.ExecSandboxRequest, stdin <-chan []byte, resize <-chan *v01.ExecSandboxWindowResize,
	write func(out, errOut []byte) error) int {
	cmd := in.GetCommand()
	args := cmd[1:]
	switch cmd[0] {
	case "echo":
		_ = write([]byte(strings.Join(args, " ")+"\n"), nil)
	case "warn":
		_ = write(nil, []byte(strings.Join(args, " ")+"\n"))
	case "cat":
		for b := range stdin {
			if write(b, nil) != nil {
				return 1
			}
		}
	case "size":
		cols, rows := in.GetCols(), in.GetRows()
		if len(args) > 0 && args[0] == "wait" && resize != nil {
			select {
			case r := <-resize:
				cols, rows = r.GetCols(), r.GetRows()
			case <-ctx.Done():
				return 1
			}
		}
		_ = write([]byte(fmt.Sprintf("%d %d\n", rows, cols)), nil)
	case "sh":
		return shell(ctx, in, stdin, write)
	case "exit":
		n := 0
		if len(args) > 0 {
			n, _ = strconv.Atoi(args[0])
		}
		return n
	case "sleep":
		d := time.Second
		if len(args) > 0 {
			if f, err := strconv.ParseFloat(args[0], 64); err == nil {
				d = time.Duration(f * float64(time.Second))
			}
		}
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return 1
		}
	default:
		_ = write(nil, []byte(cmd[0]+": command not found\n"))
		return 127
	}
	return 0
}

// shell runs each line of stdin as a command of run's set, as sh does
// for a user typing: "exit N" ends it with N, EOF with the last status.
func shell(ctx context.Context, in *v01.ExecSandboxRequest, stdin <-chan []byte,
	write func(out, errOut []byte) error) int {
	var pending []byte
	status := 0
	noInput := make(chan []byte) // a line's own command reads no stdin
	close(noInput)
	for b := range stdin {
		pending = append(pending, b...)
		for {
			i := bytes.IndexByte(pending, '\n')
			if i < 0 {
				break
			}
			fields := strings.Fields(string(pending[:i]))
			pending = pending[i+1:]
			if len(fields) == 0 {
				continue
			}
			line := &v01.ExecSandboxRequest{Command: fields, Cols: in.GetCols(), Rows: in.GetRows()}
			status = run(ctx, line, noInput, nil, write)
			if fields[0] == "exit" {
				return status
			}
		}
	}
	return status
}

// readyRow is the sandbox of that name in workspace, refused unless READY
// (as a gateway refuses to exec into a sandbox whose supervisor is not
// connected).
func (g *Gateway) readyRow(workspace, name string) (*sandboxRow, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	row, err := g.lookup(workspace, name)
	if err != nil {
		return nil, err
	}
	if row.sb.GetStatus().GetPhase() != openshellv1.SandboxPhase_SANDBOX_PHASE_READY {
		return nil, status.Errorf(codes.FailedPrecondition, "sandbox '%s' is not ready", name)
	}
	return row, nil
}

// logLine appends a line to a sandbox's bounded log buffer.
func (g *Gateway) logLine(row *sandboxRow, source, msg string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	row.logs = append(row.logs, &v01.SandboxLogLine{SandboxId: row.sb.GetMetadata().GetId(), Level: "INFO", Source: source,
		Message: msg, EventTime: timestamppb.Now()})
	if len(row.logs) > maxLogLines {
		row.logs = row.logs[len(row.logs)-maxLogLines:]
	}
}

// AppendLog records a line an agent wrote (tests use it as the agent's
// output).
func (g *Gateway) AppendLog(workspace, name, msg string) error {
	g.mu.Lock()
	row, err := g.lookup(workspace, name)
	g.mu.Unlock()
	if err != nil {
		return fmt.Errorf("sandbox %s/%s: %w", workspace, name, err)
	}
	g.logLine(row, "agent", msg)
	return nil
}

// GetSandboxLogs answers the last lines lines since since_time.
func (s *v01Server) GetSandboxLogs(ctx context.Context, in *v01.GetSandboxLogsRequest) (*v01.GetSandboxLogsResponse, error) {
	s.g.mu.Lock()
	defer s.g.mu.Unlock()
	row, err := s.g.lookup(in.GetWorkspaceScope().GetWorkspace(), in.GetSandbox())
	if err != nil {
		return nil, err
	}
	var out []*v01.SandboxLogLine
	for _, l := range row.logs {
		if in.GetSinceTime() != nil && !l.GetEventTime().AsTime().After(in.GetSinceTime().AsTime()) {
			continue
		}
		out = append(out, proto.Clone(l).(*v01.SandboxLogLine))
	}
	if n := int(in.GetLines()); n > 0 && len(out) > n {
		out = out[len(out)-n:]
	}
	return &v01.GetSandboxLogsResponse{Logs: out, BufferTotal: uint32(len(row.logs))}, nil
}

// ForwardTcp plays services inside the sandbox: the first frame names
// the sandbox, its workspace and the port; data sent to port 7 (echo) is
// sent back, port 8000 serves HTTP (sandboxHTTP), any other port refuses
// the connection as nothing listens there. The sandbox must be READY and
// the caller a member of the workspace.
func (s *v01Server) ForwardTcp(stream grpc.BidiStreamingServer[v01.TcpForwardFrame, v01.TcpForwardFrame]) error {
	ctx := stream.Context()
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	init := first.GetInit()
	if init == nil || init.GetTcp() == nil {
		return status.Error(codes.InvalidArgument, "the first frame must be init with a tcp target")
	}
	// The workspace is a string here, not a selector: checkScope does not
	// see it.
	if err := s.g.requireMember(ctx, init.GetWorkspace(), v01.WorkspaceRole_WORKSPACE_ROLE_USER); err != nil {
		return err
	}
	row, err := s.g.readyRow(init.GetWorkspace(), init.GetSandbox())
	if err != nil {
		return err
	}
	port := init.GetTcp().GetPort()
	if port != EchoPort && port != HTTPPort {
		return status.Errorf(codes.Unavailable, "connect to %s:%d in sandbox '%s': connection refused", init.GetTcp().GetHost(), port, init.GetSandbox())
	}
	s.g.logLine(row, "forward", fmt.Sprintf("forward to port %d", port))
	if port == HTTPPort {
		return serveOverStream(stream)
	}
	for {
		f, err := stream.Recv()
		if err != nil {
			return nil // the client closed its side: close ours
		}
		if d := f.GetData(); len(d) > 0 {
			if err := stream.Send(&v01.TcpForwardFrame{Payload: &v01.TcpForwardFrame_Data{Data: d}}); err != nil {
				return err
			}
		}
	}
}

// EchoPort is the port the test gateway's sandboxes serve an echo on.
const EchoPort = 7

// HTTPPort is the port the test gateway's sandboxes serve HTTP on
// (sandboxHTTP).
const HTTPPort = 8000
