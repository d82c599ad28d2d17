// Package framework starts real Kubernetes control planes for tests: an
// envtest API server with our CRDs and the real upstream CRDs (OpenShift,
// cert-manager, OLM, Agent Sandbox), and a fuller local cluster with
// kube-controller-manager, kube-scheduler, kwok and the real Agent Sandbox
// controller. Every binary comes from bin/, built by `make tools` from pinned
// Go modules; nothing is downloaded at test time.
package framework
