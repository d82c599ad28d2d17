//go:build tools

// Package tools pins kwok, which runs the fake node and pods in e2e tests.
package tools

import _ "sigs.k8s.io/kwok/cmd/kwok"
