package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/openshell/openshell-operator/internal/mustgather"
)

// gatherName is the name `oc adm must-gather` runs the image's collector
// by (/usr/bin/gather, a link to this binary in the operator image).
const gatherName = "gather"

// gather runs the must-gather collection and returns the exit code.
func gather(args []string) int {
	fs := flag.NewFlagSet(gatherName, flag.ContinueOnError)
	dir := fs.String("dest-dir", "/must-gather", "Folder to write the collection to.")
	tail := fs.Int64("log-tail-lines", 5000, "Lines of each container log to keep.")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		fmt.Fprintln(os.Stderr, "gather:", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	g, err := mustgather.New(cfg, mustgather.Options{Dir: *dir, LogTailLines: *tail})
	if err == nil {
		err = g.Run(ctx)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gather:", err)
		return 1
	}
	fmt.Println("OpenShell operator data collected in", filepath.Clean(*dir))
	return 0
}
