// Package wheel reads the protobuf descriptors that a release of the
// `openshell` Python package (its PyPI wheel, unpacked by `make tools` into
// bin/) carries in its generated `*_pb2.py` modules: the release's own
// wire contract, which the operator's hand-written protos are checked
// against (test/wire). Each module embeds its FileDescriptorProto as a
// Python bytes literal passed to AddSerializedFile; no Python runs here.
package wheel

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"

	// The well-known types the release's files import.
	_ "google.golang.org/protobuf/types/known/durationpb"
	_ "google.golang.org/protobuf/types/known/structpb"
	_ "google.golang.org/protobuf/types/known/timestamppb"
)

const marker = "AddSerializedFile(b'"

// Files reads every `*_pb2.py` under dir (the wheel's package directory)
// and returns the files they describe, linked with each other and the
// well-known types.
func Files(dir string) (*protoregistry.Files, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*_pb2.py"))
	if err != nil {
		return nil, err
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("no *_pb2.py in %s: run `make tools` (it unpacks the pinned openshell wheel)", dir)
	}
	sort.Strings(paths)
	set := &descriptorpb.FileDescriptorSet{}
	for _, p := range paths {
		fd, err := readModule(p)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Base(p), err)
		}
		set.File = append(set.File, fd)
	}
	return link(set)
}

// link resolves the files in dependency order; imports outside the set
// come from the global registry (the well-known types).
func link(set *descriptorpb.FileDescriptorSet) (*protoregistry.Files, error) {
	files := &protoregistry.Files{}
	pending := set.File
	for len(pending) > 0 {
		var next []*descriptorpb.FileDescriptorProto
		var lastErr error
		for _, fd := range pending {
			f, err := protodesc.NewFile(fd, resolver{files})
			if err != nil {
				next, lastErr = append(next, fd), err
				continue
			}
			if err := files.RegisterFile(f); err != nil {
				return nil, err
			}
		}
		if len(next) == len(pending) {
			return nil, fmt.Errorf("link the release's descriptors: %w", lastErr)
		}
		pending = next
	}
	return files, nil
}

// resolver finds a file among the release's, then among the well-known types.
type resolver struct{ files *protoregistry.Files }

func (r resolver) FindFileByPath(p string) (protoreflect.FileDescriptor, error) {
	if f, err := r.files.FindFileByPath(p); err == nil {
		return f, nil
	}
	return protoregistry.GlobalFiles.FindFileByPath(p)
}

func (r resolver) FindDescriptorByName(n protoreflect.FullName) (protoreflect.Descriptor, error) {
	if d, err := r.files.FindDescriptorByName(n); err == nil {
		return d, nil
	}
	return protoregistry.GlobalFiles.FindDescriptorByName(n)
}

func readModule(path string) (*descriptorpb.FileDescriptorProto, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	i := strings.Index(string(src), marker)
	if i < 0 {
		return nil, errors.New("no AddSerializedFile call")
	}
	raw, err := pyBytes(string(src[i+len(marker):]))
	if err != nil {
		return nil, err
	}
	fd := &descriptorpb.FileDescriptorProto{}
	if err := proto.Unmarshal(raw, fd); err != nil {
		return nil, fmt.Errorf("decode the descriptor: %w", err)
	}
	return fd, nil
}

// pyBytes decodes a single-quoted Python bytes literal whose opening quote
// has been consumed, up to its closing quote: the escapes Python's repr of
// bytes uses (\xNN, \n, \r, \t, \\, \', \").
func pyBytes(s string) ([]byte, error) {
	var out []byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\'':
			return out, nil
		case c != '\\':
			out = append(out, c)
			continue
		}
		if i+1 >= len(s) {
			break
		}
		i++
		switch s[i] {
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case '\\', '\'', '"':
			out = append(out, s[i])
		case 'x':
			if i+2 >= len(s) {
				return nil, errors.New("truncated \\x escape")
			}
			v, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
			if err != nil {
				return nil, fmt.Errorf("bad \\x escape %q", s[i+1:i+3])
			}
			out = append(out, byte(v))
			i += 2
		default:
			return nil, fmt.Errorf("unexpected escape \\%c", s[i])
		}
	}
	return nil, errors.New("unterminated bytes literal")
}
