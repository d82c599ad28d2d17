//go:build tools

// Package tools pins the real Agent Sandbox controller used by e2e tests.
package tools

import _ "sigs.k8s.io/agent-sandbox/cmd/agent-sandbox-controller"
