package wire

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"

	legacydatamodelv1 "github.com/openshell/openshell-operator/internal/gatewayapi/pb/datamodelv1"
	legacyopenshellv1 "github.com/openshell/openshell-operator/internal/gatewayapi/pb/openshellv1"
	legacysandboxv1 "github.com/openshell/openshell-operator/internal/gatewayapi/pb/sandboxv1"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/datamodelv1"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/openshellv1"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/sandboxv1"
	"github.com/openshell/openshell-operator/internal/gatewayline"
	"github.com/openshell/openshell-operator/test/framework"
	"github.com/openshell/openshell-operator/test/testgateway"
	"github.com/openshell/openshell-operator/test/wheel"
)

// v01Wheel is where `make tools` unpacks the pinned 0.1 wheel (the SDK);
// legacyWheel, the 0.0.111 wheel whose CLI test/e2e runs.
var (
	v01Wheel    = filepath.Join(framework.RepoRoot(), "bin", "openshell-wheel")
	legacyWheel = filepath.Join(framework.RepoRoot(), "bin", "openshell-cli")
)

// v01Files are the operator's 0.1 proto files; legacyFiles its 0.0.x ones.
var (
	v01Files = []protoreflect.FileDescriptor{
		openshellv1.File_v01_openshell_proto, datamodelv1.File_v01_datamodel_proto, sandboxv1.File_v01_sandbox_proto,
	}
	legacyFiles = []protoreflect.FileDescriptor{
		legacyopenshellv1.File_legacy_openshell_proto, legacydatamodelv1.File_legacy_datamodel_proto, legacysandboxv1.File_legacy_sandbox_proto,
	}
)

// release reads the descriptors of the openshell wheel of version
// unpacked in dir (the Makefile variable that pins it is named in the
// error).
func release(t *testing.T, dir, version, pin string) *protoregistry.Files {
	t.Helper()
	meta, err := os.ReadFile(filepath.Join(dir, "openshell-"+version+".dist-info", "METADATA"))
	if err != nil {
		t.Fatalf("the openshell %s wheel is not unpacked in %s (run `make tools`; the Makefile's %s "+
			"must be %s): %v", version, dir, pin, version, err)
	}
	if !strings.Contains(string(meta), "\nVersion: "+version+"\n") {
		t.Fatalf("the wheel unpacked in %s is not openshell %s", dir, version)
	}
	files, err := wheel.Files(filepath.Join(dir, "openshell", "_proto"))
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func v01Release(t *testing.T) *protoregistry.Files {
	return release(t, v01Wheel, gatewayline.V01WireRelease, "OPENSHELL_WHEEL_VERSION")
}

// compareAll reports every difference of files from the release, and
// fails if fewer than floor messages and enums were compared (a proto
// that lost its declarations compares vacuously).
func compareAll(t *testing.T, files []protoreflect.FileDescriptor, rel *protoregistry.Files, floor int,
	rename func(protoreflect.FullName) protoreflect.FullName) {
	t.Helper()
	var compared int
	for _, f := range files {
		for _, m := range CompareRenamed(f, rel, rename) {
			t.Error(m)
		}
		compared += f.Messages().Len() + f.Enums().Len()
	}
	if compared < floor {
		t.Fatalf("compared %d messages and enums: the protos lost declarations", compared)
	}
}

// TestV01ProtosAreTheReleaseWire: every message, field, enum value and
// method of the operator's 0.1 protos is the pinned release's, by name,
// number, type, cardinality and presence. A wrong number would be silent
// data loss at a real gateway.
func TestV01ProtosAreTheReleaseWire(t *testing.T) {
	compareAll(t, v01Files, v01Release(t), 80, func(n protoreflect.FullName) protoreflect.FullName { return n })
}

// TestLegacyProtosAreTheReleaseWire: the same for the 0.0.x protos
// against 0.0.111's own descriptors (the wheel whose CLI test/e2e runs):
// the line the operator still speaks to gateways not yet upgraded.
func TestLegacyProtosAreTheReleaseWire(t *testing.T) {
	compareAll(t, legacyFiles, release(t, legacyWheel, gatewayline.LegacyManaged, "OPENSHELL_CLI_VERSION"), 60, unlegacy)
}

// unlegacy is the release's name of a proto/legacy declaration: the
// package openshell.legacy.* is the release's openshell.*.
func unlegacy(n protoreflect.FullName) protoreflect.FullName {
	if rest, ok := strings.CutPrefix(string(n), "openshell.legacy."); ok {
		return protoreflect.FullName("openshell." + rest)
	}
	return n
}

// TestCompareFindsEveryKindOfDifference: the comparison is not vacuous.
// Mistakes of the kinds 0.1 made breaking (a field at a number the release
// uses for another, a 0.0.x field the release dropped, a renamed field, a
// changed type, an enum value the release lacks) are each reported.
func TestCompareFindsEveryKindOfDifference(t *testing.T) {
	files := v01Release(t)
	fd := protodesc.ToFileDescriptorProto(openshellv1.File_v01_openshell_proto)
	msg := func(name string) *descriptorpb.DescriptorProto {
		for _, m := range fd.MessageType {
			if m.GetName() == name {
				return m
			}
		}
		t.Fatalf("no message %s", name)
		return nil
	}
	field := func(m, f string) *descriptorpb.FieldDescriptorProto {
		for _, x := range msg(m).Field {
			if x.GetName() == f {
				return x
			}
		}
		t.Fatalf("no field %s.%s", m, f)
		return nil
	}
	field("CreateSandboxRequest", "workspace_scope").Number = proto.Int32(5)
	del := msg("DeleteSandboxResponse")
	del.Field = append(del.Field, &descriptorpb.FieldDescriptorProto{Name: proto.String("deleted"), JsonName: proto.String("deleted"), Number: proto.Int32(1),
		Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum(), Type: descriptorpb.FieldDescriptorProto_TYPE_BOOL.Enum()})
	field("GetSandboxRequest", "name").Name = proto.String("id")
	field("HealthResponse", "version").Type = descriptorpb.FieldDescriptorProto_TYPE_INT32.Enum()
	for _, e := range fd.EnumType {
		if e.GetName() == "SandboxPhase" {
			e.Value = append(e.Value, &descriptorpb.EnumValueDescriptorProto{Name: proto.String("SANDBOX_PHASE_SUSPENDED"), Number: proto.Int32(10)})
		}
	}
	mutated, err := protodesc.NewFile(fd, protoregistry.GlobalFiles)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(Compare(mutated, files), "\n")
	for _, want := range []string{
		"openshell.v1.CreateSandboxRequest field 5: named workspace_scope, the release calls it await_main_process_attachment",
		"openshell.v1.DeleteSandboxResponse: field 1 (deleted) not in the release",
		"openshell.v1.GetSandboxRequest field 1: named id, the release calls it name",
		"openshell.v1.HealthResponse field 2: version is int32, the release has string",
		"enum openshell.v1.SandboxPhase: value SANDBOX_PHASE_SUSPENDED = 10 not in the release",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("not reported: %s\ngot:\n%s", want, got)
		}
	}
}

// TestTestGatewayWorkspaceRolesAreTheRelease: the workspace role the test
// gateway requires of each workspace-scoped 0.1 request is the one the
// release's descriptors give its method (the authorization option's
// workspace_role), so the operator's calls are refused there exactly where
// a real gateway would refuse them.
func TestTestGatewayWorkspaceRolesAreTheRelease(t *testing.T) {
	rel := v01Release(t)
	d, err := rel.FindDescriptorByName("openshell.options.v1.authorization")
	if err != nil {
		t.Fatalf("the release declares no authorization option: %v", err)
	}
	ext := dynamicpb.NewExtensionType(d.(protoreflect.ExtensionDescriptor))
	types := new(protoregistry.Types)
	if err := types.RegisterExtension(ext); err != nil {
		t.Fatal(err)
	}
	relSvc, err := rel.FindDescriptorByName("openshell.v1.OpenShell")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	ours := openshellv1.File_v01_openshell_proto.Services().ByName("OpenShell").Methods()
	for i := range ours.Len() {
		m := ours.Get(i)
		if m.Input().Fields().ByName("workspace_scope") == nil {
			continue
		}
		relMethod := relSvc.(protoreflect.ServiceDescriptor).Methods().ByName(m.Name())
		raw, err := proto.Marshal(relMethod.Options())
		if err != nil {
			t.Fatal(err)
		}
		opts := &descriptorpb.MethodOptions{}
		if err := (proto.UnmarshalOptions{Resolver: types}).Unmarshal(raw, opts); err != nil {
			t.Fatal(err)
		}
		auth := opts.ProtoReflect().Get(ext.TypeDescriptor()).Message()
		want := auth.Get(auth.Descriptor().Fields().ByName("workspace_role")).String()
		req, err := protoregistry.GlobalTypes.FindMessageByName(m.Input().FullName())
		if err != nil {
			t.Fatal(err)
		}
		got := strings.ToLower(strings.TrimPrefix(testgateway.RequiredWorkspaceRole(req.New().Interface()).String(), "WORKSPACE_ROLE_"))
		if want != got {
			t.Errorf("%s: the test gateway requires workspace role %q, the release %q", m.Name(), got, want)
		}
		checked++
	}
	if checked < 20 {
		t.Fatalf("checked %d methods: the comparison lost its subject", checked)
	}
}
