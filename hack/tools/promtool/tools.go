//go:build tools

// Package tools pins promtool, which unit-tests the operator's
// PrometheusRule (config/prometheus) with `promtool test rules`.
package tools

import _ "github.com/prometheus/prometheus/cmd/promtool"
