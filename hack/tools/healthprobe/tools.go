//go:build tools

// Package tools pins grpc_health_probe, which OLM's catalog pods exec as
// their readiness and liveness probes: the catalog image carries it.
package tools

import _ "github.com/grpc-ecosystem/grpc-health-probe"
