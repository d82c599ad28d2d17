// Package wire compares the operator's hand-written gateway protos with a
// release's own descriptors (test/wheel): every message, field, enum value
// and method the operator declares must exist in the release with the same
// name, number, type, cardinality and presence. The operator's files may
// leave things out (a subset); they may not differ.
package wire

import (
	"fmt"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// Finder finds a release descriptor by full name.
type Finder interface {
	FindDescriptorByName(protoreflect.FullName) (protoreflect.Descriptor, error)
}

// Compare lists every way the declarations in ours differ from the
// release's (nil: wire-identical as far as ours goes).
func Compare(ours protoreflect.FileDescriptor, release Finder) []string {
	var out []string
	for i := 0; i < ours.Messages().Len(); i++ {
		out = append(out, compareMessage(ours.Messages().Get(i), release)...)
	}
	for i := 0; i < ours.Enums().Len(); i++ {
		out = append(out, compareEnum(ours.Enums().Get(i), release)...)
	}
	for i := 0; i < ours.Services().Len(); i++ {
		out = append(out, compareService(ours.Services().Get(i), release)...)
	}
	return out
}

func compareMessage(m protoreflect.MessageDescriptor, release Finder) []string {
	if m.IsMapEntry() {
		return nil // compared through the map field
	}
	d, err := release.FindDescriptorByName(m.FullName())
	theirs, ok := d.(protoreflect.MessageDescriptor)
	if err != nil || !ok {
		return []string{fmt.Sprintf("message %s: not in the release", m.FullName())}
	}
	var out []string
	for i := 0; i < m.Fields().Len(); i++ {
		f := m.Fields().Get(i)
		t := theirs.Fields().ByNumber(f.Number())
		if t == nil {
			out = append(out, fmt.Sprintf("%s: field %d (%s) not in the release", m.FullName(), f.Number(), f.Name()))
			continue
		}
		if diff := fieldDiff(f, t); diff != "" {
			out = append(out, fmt.Sprintf("%s field %d: %s", m.FullName(), f.Number(), diff))
		}
	}
	for i := 0; i < m.Messages().Len(); i++ {
		out = append(out, compareMessage(m.Messages().Get(i), release)...)
	}
	for i := 0; i < m.Enums().Len(); i++ {
		out = append(out, compareEnum(m.Enums().Get(i), release)...)
	}
	return out
}

// fieldDiff says how two fields of the same number differ on the wire or
// in generated code's meaning ("" when they do not).
func fieldDiff(f, t protoreflect.FieldDescriptor) string {
	switch {
	case f.Name() != t.Name():
		return fmt.Sprintf("named %s, the release calls it %s", f.Name(), t.Name())
	case f.Kind() != t.Kind():
		return fmt.Sprintf("%s is %s, the release has %s", f.Name(), f.Kind(), t.Kind())
	case f.Cardinality() != t.Cardinality():
		return fmt.Sprintf("%s is %s, the release has %s", f.Name(), f.Cardinality(), t.Cardinality())
	case f.IsMap() != t.IsMap():
		return fmt.Sprintf("%s: map %v, the release %v", f.Name(), f.IsMap(), t.IsMap())
	case f.HasPresence() != t.HasPresence():
		return fmt.Sprintf("%s: presence %v, the release %v", f.Name(), f.HasPresence(), t.HasPresence())
	case f.IsPacked() != t.IsPacked():
		return fmt.Sprintf("%s: packed %v, the release %v", f.Name(), f.IsPacked(), t.IsPacked())
	case typeName(f) != typeName(t):
		return fmt.Sprintf("%s has type %s, the release %s", f.Name(), typeName(f), typeName(t))
	case oneofName(f) != oneofName(t):
		return fmt.Sprintf("%s in oneof %q, the release %q", f.Name(), oneofName(f), oneofName(t))
	}
	if f.IsMap() {
		if d := fieldDiff(f.MapKey(), t.MapKey()); d != "" {
			return "map key: " + d
		}
		if d := fieldDiff(f.MapValue(), t.MapValue()); d != "" {
			return "map value: " + d
		}
	}
	return ""
}

func typeName(f protoreflect.FieldDescriptor) protoreflect.FullName {
	switch {
	case f.IsMap():
		return ""
	case f.Message() != nil:
		return f.Message().FullName()
	case f.Enum() != nil:
		return f.Enum().FullName()
	}
	return ""
}

// oneofName is the real oneof a field belongs to (proto3 optional's
// synthetic oneof is presence, compared separately).
func oneofName(f protoreflect.FieldDescriptor) protoreflect.Name {
	if o := f.ContainingOneof(); o != nil && !o.IsSynthetic() {
		return o.Name()
	}
	return ""
}

func compareEnum(e protoreflect.EnumDescriptor, release Finder) []string {
	d, err := release.FindDescriptorByName(e.FullName())
	theirs, ok := d.(protoreflect.EnumDescriptor)
	if err != nil || !ok {
		return []string{fmt.Sprintf("enum %s: not in the release", e.FullName())}
	}
	var out []string
	for i := 0; i < e.Values().Len(); i++ {
		v := e.Values().Get(i)
		t := theirs.Values().ByNumber(v.Number())
		switch {
		case t == nil:
			out = append(out, fmt.Sprintf("enum %s: value %s = %d not in the release", e.FullName(), v.Name(), v.Number()))
		case t.Name() != v.Name():
			out = append(out, fmt.Sprintf("enum %s: %d is %s, the release calls it %s", e.FullName(), v.Number(), v.Name(), t.Name()))
		}
	}
	return out
}

func compareService(s protoreflect.ServiceDescriptor, release Finder) []string {
	d, err := release.FindDescriptorByName(s.FullName())
	theirs, ok := d.(protoreflect.ServiceDescriptor)
	if err != nil || !ok {
		return []string{fmt.Sprintf("service %s: not in the release", s.FullName())}
	}
	var out []string
	for i := 0; i < s.Methods().Len(); i++ {
		m := s.Methods().Get(i)
		t := theirs.Methods().ByName(m.Name())
		switch {
		case t == nil:
			out = append(out, fmt.Sprintf("%s.%s: not in the release", s.FullName(), m.Name()))
		case t.Input().FullName() != m.Input().FullName() || t.Output().FullName() != m.Output().FullName():
			out = append(out, fmt.Sprintf("%s.%s: (%s) %s, the release (%s) %s", s.FullName(), m.Name(),
				m.Input().FullName(), m.Output().FullName(), t.Input().FullName(), t.Output().FullName()))
		case t.IsStreamingClient() != m.IsStreamingClient() || t.IsStreamingServer() != m.IsStreamingServer():
			out = append(out, fmt.Sprintf("%s.%s: streaming differs from the release", s.FullName(), m.Name()))
		}
	}
	return out
}
