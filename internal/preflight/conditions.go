package preflight

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
)

// Condition types the preflight result sets on every OpenShellGateway.
const (
	// ConditionAgentSandboxAvailable is True when the agents.x-k8s.io
	// Sandbox CRD is established and serves a supported version.
	ConditionAgentSandboxAvailable = openshellv1alpha1.ConditionAgentSandboxAvailable
	// ConditionCertManagerAvailable is True when cert-manager.io/v1 is served.
	ConditionCertManagerAvailable = "CertManagerAvailable"
	// ConditionRouteAPIAvailable is True when route.openshift.io/v1 is served.
	ConditionRouteAPIAvailable = "RouteAPIAvailable"
	// ConditionKubernetesVersionSupported is True when the cluster is at
	// least the supported minimum.
	ConditionKubernetesVersionSupported = "KubernetesVersionSupported"
)

// Reasons of the cert-manager, Route and Kubernetes version conditions.
const (
	// ReasonPreflightPending means no probe has completed yet.
	ReasonPreflightPending = "PreflightPending"
	// ReasonNotInstalled means cert-manager is absent (the built-in PKI is used).
	ReasonNotInstalled = "NotInstalled"
	// ReasonNotOpenShift means the Route API is absent (vanilla Kubernetes).
	ReasonNotOpenShift = "NotOpenShift"
	// ReasonSupported means the Kubernetes version is supported.
	ReasonSupported = "Supported"
	// ReasonTooOld means the Kubernetes version is below the minimum.
	ReasonTooOld = "TooOld"
)

// Condition is a condition without bookkeeping fields; callers stamp the
// generation and transition time.
type Condition struct {
	Type    string
	Status  metav1.ConditionStatus
	Reason  string
	Message string
}

// GatewayConditions renders the preflight conditions of a gateway. Before the
// first probe (known=false) they are Unknown.
func GatewayConditions(r Result, known bool) []Condition {
	types := []string{ConditionAgentSandboxAvailable, ConditionCertManagerAvailable,
		ConditionRouteAPIAvailable, ConditionKubernetesVersionSupported}
	if !known {
		out := make([]Condition, 0, len(types))
		for _, t := range types {
			out = append(out, Condition{t, metav1.ConditionUnknown, ReasonPreflightPending, "waiting for the first cluster probe"})
		}
		return out
	}
	as := Condition{ConditionAgentSandboxAvailable, metav1.ConditionFalse, r.AgentSandbox.Reason, r.AgentSandbox.Message}
	if r.AgentSandbox.Available {
		as.Status = metav1.ConditionTrue
	}
	cm := Condition{ConditionCertManagerAvailable, metav1.ConditionTrue, ReasonAvailable,
		"cert-manager.io/v1 is served: cert-manager issues the gateway certificates unless the built-in PKI is chosen"}
	if !r.CertManager {
		cm = Condition{ConditionCertManagerAvailable, metav1.ConditionFalse, ReasonNotInstalled,
			"cert-manager.io/v1 is not served: the operator's built-in PKI issues the gateway certificates; " +
				"install the cert-manager Operator for Red Hat OpenShift to use cert-manager instead"}
	}
	rt := Condition{ConditionRouteAPIAvailable, metav1.ConditionTrue, ReasonAvailable,
		"route.openshift.io/v1 is served: the gateway is exposed by a passthrough Route"}
	if !r.Route {
		rt = Condition{ConditionRouteAPIAvailable, metav1.ConditionFalse, ReasonNotOpenShift,
			"route.openshift.io/v1 is not served (vanilla Kubernetes): no Route is created; " +
				"reach the gateway through its Service or an ingress of your own"}
	}
	kv := Condition{ConditionKubernetesVersionSupported, metav1.ConditionTrue, ReasonSupported, r.Kubernetes.Message}
	if !r.Kubernetes.Supported {
		kv.Status, kv.Reason = metav1.ConditionFalse, ReasonTooOld
	}
	return []Condition{as, cm, rt, kv}
}

// Blocking reports why sandboxes cannot proceed, if they cannot: the Agent
// Sandbox CRD is missing or unusable, or the preflight has not run yet.
func Blocking(r Result, known bool) (blocked bool, message string) {
	if !known {
		return true, "waiting for the first cluster probe"
	}
	if !r.AgentSandbox.Available {
		return true, r.AgentSandbox.Message
	}
	return false, ""
}
