//go:build tools

// Package tools pins buf, which compiles our .proto files (with the local
// protoc-gen-go and protoc-gen-go-grpc plugins) without a protoc install.
package tools

import _ "github.com/bufbuild/buf/cmd/buf"
