//go:build tools

// Package tools pins operator-sdk's scorecard-test, the image the bundle's
// scorecard config runs; make test runs its tests against bundle/.
package tools

import _ "github.com/operator-framework/operator-sdk/images/scorecard-test"
