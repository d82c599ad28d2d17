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

	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/datamodelv1"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/openshellv1"
	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/sandboxv1"
	"github.com/openshell/openshell-operator/internal/gatewayline"
	"github.com/openshell/openshell-operator/test/framework"
	"github.com/openshell/openshell-operator/test/wheel"
)

// wheelDir is where `make tools` unpacks the pinned openshell wheel.
var wheelDir = filepath.Join(framework.RepoRoot(), "bin", "openshell-wheel")

// v01Files are the operator's 0.1 proto files.
var v01Files = []protoreflect.FileDescriptor{
	openshellv1.File_v01_openshell_proto, datamodelv1.File_v01_datamodel_proto, sandboxv1.File_v01_sandbox_proto,
}

func release(t *testing.T) *protoregistry.Files {
	t.Helper()
	meta, err := os.ReadFile(filepath.Join(wheelDir, "openshell-"+gatewayline.V01WireRelease+".dist-info", "METADATA"))
	if err != nil {
		t.Fatalf("the openshell %s wheel is not unpacked in bin/ (run `make tools`; the Makefile's OPENSHELL_WHEEL_VERSION "+
			"must be gatewayline.V01WireRelease): %v", gatewayline.V01WireRelease, err)
	}
	if !strings.Contains(string(meta), "\nVersion: "+gatewayline.V01WireRelease+"\n") {
		t.Fatalf("the unpacked wheel is not openshell %s", gatewayline.V01WireRelease)
	}
	files, err := wheel.Files(filepath.Join(wheelDir, "openshell", "_proto"))
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestV01ProtosAreTheReleaseWire: every message, field, enum value and
// method of the operator's 0.1 protos is the pinned release's, by name,
// number, type, cardinality and presence. A wrong number would be silent
// data loss at a real gateway.
func TestV01ProtosAreTheReleaseWire(t *testing.T) {
	files := release(t)
	var compared int
	for _, f := range v01Files {
		for _, m := range Compare(f, files) {
			t.Error(m)
		}
		compared += f.Messages().Len() + f.Enums().Len()
	}
	if compared < 80 {
		t.Fatalf("compared %d messages and enums: the 0.1 protos lost declarations", compared)
	}
}

// TestCompareFindsEveryKindOfDifference: the comparison is not vacuous.
// Mistakes of the kinds 0.1 made breaking (a field at a number the release
// uses for another, a 0.0.x field the release dropped, a renamed field, a
// changed type, an enum value the release lacks) are each reported.
func TestCompareFindsEveryKindOfDifference(t *testing.T) {
	files := release(t)
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
