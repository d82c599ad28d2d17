package gatewayapi

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/google/go-cmp/cmp"

	legacydm "github.com/openshell/openshell-operator/internal/gatewayapi/pb/datamodelv1"
	legacy "github.com/openshell/openshell-operator/internal/gatewayapi/pb/openshellv1"
	legacysb "github.com/openshell/openshell-operator/internal/gatewayapi/pb/sandboxv1"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/datamodelv1"
	v01 "github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/openshellv1"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/sandboxv1"
)

// TestTranscodeTablesCoverEveryDifference walks every 0.1 message that has
// a 0.0.x twin, in each direction it is translated (requests to 0.0.x,
// responses from it, what they carry both ways), and requires each field
// to have a same-named, same-shaped twin or an entry in the rules: a field
// added to either proto without a decision fails here, not silently at a
// gateway.
func TestTranscodeTablesCoverEveryDifference(t *testing.T) {
	files := []protoreflect.FileDescriptor{v01.File_v01_openshell_proto, datamodelv1.File_v01_datamodel_proto, sandboxv1.File_v01_sandbox_proto}
	checked := 0
	for _, f := range files {
		for i := 0; i < f.Messages().Len(); i++ {
			md := f.Messages().Get(i)
			twin := legacyTwin(t, md.FullName())
			if twin == nil {
				continue // 0.1 only: reached through Unimplemented methods or a rule
			}
			for _, d := range directions(md.Name()) {
				src, dst := md, twin
				if d == fromLegacy {
					src, dst = twin, md
				}
				for _, problem := range uncovered(d, src, dst) {
					t.Errorf("%s", problem)
				}
				checked++
			}
		}
	}
	if checked < 60 {
		t.Fatalf("only %d message directions checked: the walk is broken", checked)
	}
}

// directions says which ways a message is translated: requests only to
// 0.0.x, responses only from it, anything they carry both ways.
func directions(name protoreflect.Name) []direction {
	switch {
	case strings.HasSuffix(string(name), "Request"):
		return []direction{toLegacy}
	case strings.HasSuffix(string(name), "Response"), strings.HasSuffix(string(name), "Event"):
		return []direction{fromLegacy}
	}
	return []direction{toLegacy, fromLegacy}
}

func legacyTwin(t *testing.T, n protoreflect.FullName) protoreflect.MessageDescriptor {
	t.Helper()
	name := strings.Replace(string(n), "openshell.", "openshell.legacy.", 1)
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(name))
	if err != nil {
		return nil
	}
	return d.(protoreflect.MessageDescriptor)
}

func uncovered(d direction, src, dst protoreflect.MessageDescriptor) []string {
	var out []string
	for i := 0; i < src.Fields().Len(); i++ {
		fd := src.Fields().Get(i)
		key := canonical(fd.FullName())
		name := fd.Name()
		if r, ok := rules[d][key]; ok {
			if r.drop != "" || r.convert != nil {
				continue
			}
			name = r.rename
		}
		dfd := dst.Fields().ByName(name)
		switch {
		case dfd == nil:
			out = append(out, key+": no twin and no rule")
		case fd.Kind() != dfd.Kind() || fd.Cardinality() != dfd.Cardinality() || fd.IsMap() != dfd.IsMap():
			out = append(out, key+": the twin differs in type and no rule converts it")
		case fd.Enum() != nil:
			for j := 0; j < fd.Enum().Values().Len(); j++ {
				v := fd.Enum().Values().Get(j)
				if dv := dfd.Enum().Values().ByName(v.Name()); dv != nil && dv.Number() != v.Number() {
					out = append(out, key+": enum value "+string(v.Name())+" has another number on the other line")
				}
			}
		}
	}
	return out
}

// TestTranscodeToLegacy: a 0.1 request becomes the 0.0.x request a 0.0.x
// client would have sent.
func TestTranscodeToLegacy(t *testing.T) {
	in := &v01.CreateSandboxRequest{Name: "sb", WorkspaceScope: Workspace("ws"), RequestId: "ignored",
		Labels: map[string]string{"a": "b"},
		Spec: &v01.SandboxSpec{Command: []string{"sleep"}, Environment: map[string]string{"K": "V"},
			Template: &v01.SandboxTemplate{Image: "img", RuntimeClassName: "kata"},
			Policy: &sandboxv1.SandboxPolicy{Version: 1, NetworkPolicies: map[string]*sandboxv1.NetworkPolicyRule{"gh": {
				Name: "gh", Binaries: []*sandboxv1.NetworkBinary{{Path: "/usr/bin/git"}},
				Endpoints: []*sandboxv1.NetworkEndpoint{{Host: "api.github.com", Port: 443,
					Enforcement: sandboxv1.NetworkEnforcementMode_NETWORK_ENFORCEMENT_MODE_ENFORCE,
					Access:      sandboxv1.NetworkAccessPreset_NETWORK_ACCESS_PRESET_READ_ONLY}}}}}}}
	want := &legacy.CreateSandboxRequest{Name: "sb", Workspace: "ws", Labels: map[string]string{"a": "b"},
		Spec: &legacy.SandboxSpec{Command: []string{"sleep"}, Environment: map[string]string{"K": "V"},
			Template: &legacy.SandboxTemplate{Image: "img", RuntimeClassName: "kata"},
			Policy: &legacysb.SandboxPolicy{Version: 1, NetworkPolicies: map[string]*legacysb.NetworkPolicyRule{"gh": {
				Name: "gh", Binaries: []*legacysb.NetworkBinary{{Path: "/usr/bin/git"}},
				Endpoints: []*legacysb.NetworkEndpoint{{Host: "api.github.com", Port: 443, Enforcement: "enforce", Access: "read-only"}}}}}}}
	check(t, toLegacy, in, &legacy.CreateSandboxRequest{}, want)

	check(t, toLegacy, &v01.ListSandboxesRequest{PageSize: 500, PageToken: "1000", WorkspaceScope: AllWorkspaces()},
		&legacy.ListSandboxesRequest{}, &legacy.ListSandboxesRequest{Limit: 500, Offset: 1000, AllWorkspaces: true})
	check(t, toLegacy, &v01.AttachSandboxProviderRequest{Sandbox: "s", Provider: "p", WorkspaceScope: Workspace("w"), ExpectedResourceVersion: 3},
		&legacy.AttachSandboxProviderRequest{}, &legacy.AttachSandboxProviderRequest{SandboxName: "s", ProviderName: "p", Workspace: "w", ExpectedResourceVersion: 3})
	check(t, toLegacy, &v01.UpdateConfigRequest{Sandbox: "s", WorkspaceScope: Workspace("w"), SettingKey: "k"},
		&legacy.UpdateConfigRequest{}, &legacy.UpdateConfigRequest{Name: "s", Workspace: "w", SettingKey: "k"})
	exp := time.UnixMilli(1_800_000_000_000)
	check(t, toLegacy, &v01.UpdateProviderRequest{Provider: &datamodelv1.Provider{Type: "github", Credentials: map[string]string{"T": "x"}},
		CredentialExpirationTimes: map[string]*timestamppb.Timestamp{"T": timestamppb.New(exp)}, ClearCredentialExpirationKeys: []string{"OLD"}},
		&legacy.UpdateProviderRequest{}, &legacy.UpdateProviderRequest{Provider: &legacydm.Provider{Type: "github", Credentials: map[string]string{"T": "x"}},
			CredentialExpiresAtMs: map[string]int64{"T": exp.UnixMilli(), "OLD": 0}})
}

// TestTranscodeFromLegacy: a 0.0.x response reads as the 0.1 response.
func TestTranscodeFromLegacy(t *testing.T) {
	created := time.UnixMilli(1_700_000_000_123)
	in := &legacy.SandboxResponse{Sandbox: &legacy.Sandbox{
		Metadata: &legacydm.ObjectMeta{Id: "id", Name: "n", Workspace: "w", CreatedAtMs: created.UnixMilli(), ResourceVersion: 7},
		Status: &legacy.SandboxStatus{SandboxName: "runtime-name", Phase: legacy.SandboxPhase_SANDBOX_PHASE_READY, CurrentPolicyVersion: 2,
			Conditions: []*legacy.SandboxCondition{{Type: "Ready", Status: "True", LastTransitionTime: created.UTC().Format(time.RFC3339Nano)}}},
		Spec: &legacy.SandboxSpec{Policy: &legacysb.SandboxPolicy{NetworkPolicies: map[string]*legacysb.NetworkPolicyRule{"x": {
			Binaries:  []*legacysb.NetworkBinary{{Path: "/bin/a", Harness: true}},
			Endpoints: []*legacysb.NetworkEndpoint{{Host: "h", Tls: "skip", Access: "full"}}}}}}}}
	want := &v01.SandboxResponse{Sandbox: &v01.Sandbox{
		Metadata: &datamodelv1.ObjectMeta{Id: "id", Name: "n", Workspace: "w", CreatedTime: timestamppb.New(created), ResourceVersion: 7},
		Status: &v01.SandboxStatus{Phase: v01.SandboxPhase_SANDBOX_PHASE_READY, CurrentPolicyVersion: 2,
			Conditions: []*v01.SandboxCondition{{Type: "Ready", Status: "True", TransitionTime: timestamppb.New(created)}}},
		Spec: &v01.SandboxSpec{Policy: &sandboxv1.SandboxPolicy{NetworkPolicies: map[string]*sandboxv1.NetworkPolicyRule{"x": {
			Binaries: []*sandboxv1.NetworkBinary{{Path: "/bin/a"}},
			Endpoints: []*sandboxv1.NetworkEndpoint{{Host: "h", Tls: sandboxv1.NetworkTlsMode_NETWORK_TLS_MODE_SKIP,
				Access: sandboxv1.NetworkAccessPreset_NETWORK_ACCESS_PRESET_FULL}}}}}}}}
	check(t, fromLegacy, in, &v01.SandboxResponse{}, want)
}

// TestTranscodeRefusesWhatTheOtherLineCannotSay: a request value with no
// twin is an error, never dropped; a policy spelling in a response that 0.1
// has no value for reads as the default instead of failing the response.
func TestTranscodeRefusesWhatTheOtherLineCannotSay(t *testing.T) {
	for name, c := range map[string]struct{ src, dst proto.Message }{
		"all workspaces where 0.0.x has no flag": {&v01.GetSandboxRequest{WorkspaceScope: AllWorkspaces()}, &legacy.GetSandboxRequest{}},
		"a watch cursor":                         {&v01.WatchSandboxRequest{ResumeAfterCursor: "c1"}, &legacy.WatchSandboxRequest{}},
		"a foreign page token":                   {&v01.ListSandboxesRequest{PageToken: "opaque"}, &legacy.ListSandboxesRequest{}},
		"an MCP endpoint's options": {&v01.UpdateConfigRequest{Policy: &sandboxv1.SandboxPolicy{NetworkPolicies: map[string]*sandboxv1.NetworkPolicyRule{
			"tools": {Endpoints: []*sandboxv1.NetworkEndpoint{{Host: "mcp.example.com", Mcp: &sandboxv1.McpOptions{}}}}}}}, &legacy.UpdateConfigRequest{}},
		"a sandbox from a workspace template": {&v01.CreateSandboxRequest{WorkloadTemplate: "t"}, &legacy.CreateSandboxRequest{}},
	} {
		if err := transcode(toLegacy, c.src.ProtoReflect(), c.dst.ProtoReflect()); err == nil {
			t.Errorf("%s: translated without an error", name)
		}
	}
	read := &sandboxv1.NetworkEndpoint{}
	if err := transcode(fromLegacy, (&legacysb.NetworkEndpoint{Host: "h", Access: "write-only"}).ProtoReflect(), read.ProtoReflect()); err != nil ||
		read.Host != "h" || read.Access != sandboxv1.NetworkAccessPreset_NETWORK_ACCESS_PRESET_UNSPECIFIED {
		t.Errorf("an unknown access preset in a response: %v, %v; want it read as unset", read, err)
	}
}

func check(t *testing.T, d direction, in, out, want proto.Message) {
	t.Helper()
	if err := transcode(d, in.ProtoReflect(), out.ProtoReflect()); err != nil {
		t.Fatalf("%T: %v", in, err)
	}
	if diff := cmp.Diff(want, out, protocmp.Transform()); diff != "" {
		t.Errorf("%T (-want +got):\n%s", in, diff)
	}
}
