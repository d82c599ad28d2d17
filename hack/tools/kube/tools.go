//go:build tools

// Package tools pins the Kubernetes control-plane binaries that the e2e
// harness runs (kube-apiserver, kube-controller-manager, kube-scheduler),
// and kubectl, which runs the kubectl-openshell plugin in test/e2e.
// k8s.io/kubernetes is never imported by the operator itself.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
