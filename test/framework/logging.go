package framework

import (
	"io"
	"os"

	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// SetupLogging routes controller logs to stderr when OPENSHELL_TEST_LOG is
// set, and discards them otherwise, so test output stays readable.
func SetupLogging() {
	var w io.Writer = io.Discard
	if os.Getenv("OPENSHELL_TEST_LOG") != "" {
		w = os.Stderr
	}
	log := zap.New(zap.WriteTo(w), zap.UseDevMode(true))
	ctrl.SetLogger(log)
	// The libraries that log through klog (the relay's front-proxy
	// controllers among them) follow the same switch.
	klog.SetLogger(log)
}
