//go:build tools

// Package tools pins the Operator Lifecycle Manager's olm and catalog
// operators, which the e2e runs against its control plane to install the
// bundle as OperatorHub does.
package tools

import (
	_ "github.com/operator-framework/operator-lifecycle-manager/cmd/catalog"
	_ "github.com/operator-framework/operator-lifecycle-manager/cmd/olm"
)
