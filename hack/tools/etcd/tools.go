//go:build tools

// Package tools pins etcd for the envtest and e2e control planes.
package tools

import _ "go.etcd.io/etcd/server/v3"
