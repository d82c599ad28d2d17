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
	return CompareRenamed(ours, release, func(n protoreflect.FullName) protoreflect.FullName { return n })
}

// CompareRenamed is Compare for protos whose package was renamed so that
// two lines can be linked into one binary (proto/legacy): rename maps each
// of our full names to the release's. Message and package names never
// reach the wire; everything else is compared as Compare does.
func CompareRenamed(ours protoreflect.FileDescriptor, release Finder, rename func(protoreflect.FullName) protoreflect.FullName) []string {
	c := comparer{release: release, rename: rename}
	var out []string
	for i := 0; i < ours.Messages().Len(); i++ {
		out = append(out, c.message(ours.Messages().Get(i))...)
	}
	for i := 0; i < ours.Enums().Len(); i++ {
		out = append(out, c.enum(ours.Enums().Get(i))...)
	}
	for i := 0; i < ours.Services().Len(); i++ {
		out = append(out, c.service(ours.Services().Get(i))...)
	}
	return out
}

type comparer struct {
	release Finder
	rename  func(protoreflect.FullName) protoreflect.FullName
}

func (c comparer) message(m protoreflect.MessageDescriptor) []string {
	if m.IsMapEntry() {
		return nil // compared through the map field
	}
	d, err := c.release.FindDescriptorByName(c.rename(m.FullName()))
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
		if diff := c.fieldDiff(f, t); diff != "" {
			out = append(out, fmt.Sprintf("%s field %d: %s", m.FullName(), f.Number(), diff))
		}
	}
	for i := 0; i < m.Messages().Len(); i++ {
		out = append(out, c.message(m.Messages().Get(i))...)
	}
	for i := 0; i < m.Enums().Len(); i++ {
		out = append(out, c.enum(m.Enums().Get(i))...)
	}
	return out
}

// fieldDiff says how two fields of the same number differ on the wire or
// in generated code's meaning ("" when they do not).
func (c comparer) fieldDiff(f, t protoreflect.FieldDescriptor) string {
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
	case c.rename(typeName(f)) != typeName(t):
		return fmt.Sprintf("%s has type %s, the release %s", f.Name(), c.rename(typeName(f)), typeName(t))
	case oneofName(f) != oneofName(t):
		return fmt.Sprintf("%s in oneof %q, the release %q", f.Name(), oneofName(f), oneofName(t))
	}
	if f.IsMap() {
		if d := c.fieldDiff(f.MapKey(), t.MapKey()); d != "" {
			return "map key: " + d
		}
		if d := c.fieldDiff(f.MapValue(), t.MapValue()); d != "" {
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

func (c comparer) enum(e protoreflect.EnumDescriptor) []string {
	d, err := c.release.FindDescriptorByName(c.rename(e.FullName()))
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

func (c comparer) service(s protoreflect.ServiceDescriptor) []string {
	d, err := c.release.FindDescriptorByName(c.rename(s.FullName()))
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
		case t.Input().FullName() != c.rename(m.Input().FullName()) || t.Output().FullName() != c.rename(m.Output().FullName()):
			out = append(out, fmt.Sprintf("%s.%s: (%s) %s, the release (%s) %s", s.FullName(), m.Name(),
				c.rename(m.Input().FullName()), c.rename(m.Output().FullName()), t.Input().FullName(), t.Output().FullName()))
		case t.IsStreamingClient() != m.IsStreamingClient() || t.IsStreamingServer() != m.IsStreamingServer():
			out = append(out, fmt.Sprintf("%s.%s: streaming differs from the release", s.FullName(), m.Name()))
		}
	}
	return out
}
