//go:build tools

// Package tools pins opm, used to serve and query the File-Based Catalog in tests.
package tools

import _ "github.com/operator-framework/operator-registry/cmd/opm"
