// Package preflight detects what the cluster offers the operator: the Agent
// Sandbox CRD and the versions it serves, cert-manager, the OpenShift Route,
// SecurityContextConstraints and ImageDigestMirrorSet APIs, and whether the
// Kubernetes version is supported. Evaluation is pure (unit-tested without a
// cluster); Probe gathers the inputs from the API server.
package preflight

import (
	"context"
	"fmt"
	"slices"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Names of the CRDs and API groups the operator depends on.
const (
	AgentSandboxCRD   = "sandboxes.agents.x-k8s.io"
	AgentSandboxGroup = "agents.x-k8s.io"
	CertificateCRD    = "certificates.cert-manager.io"
	IssuerCRD         = "issuers.cert-manager.io"
	RouteCRD          = "routes.route.openshift.io"
	// PrometheusRuleCRD is the Prometheus Operator's alerting rules.
	PrometheusRuleCRD = "prometheusrules.monitoring.coreos.com"
	// ServiceMonitorCRD is the Prometheus Operator's scrape targets.
	ServiceMonitorCRD = "servicemonitors.monitoring.coreos.com"
	// ConsoleYAMLSampleCRD is the OpenShift console's YAML editor samples.
	ConsoleYAMLSampleCRD = "consoleyamlsamples.console.openshift.io"
	// AdminNetworkPolicyCRD is sig-network's cluster-scoped policy API
	// (OVN-Kubernetes serves it on OpenShift 4.16 and later).
	AdminNetworkPolicyCRD = "adminnetworkpolicies.policy.networking.k8s.io"
	SCCCRD                = "securitycontextconstraints.security.openshift.io"
	IDMSCRD               = "imagedigestmirrorsets.config.openshift.io"
	// NetworkCRD is OpenShift's cluster network configuration, whose
	// status names the network plugin.
	NetworkCRD = "networks.config.openshift.io"

	// MinKubernetesVersion is the oldest Kubernetes the operator supports.
	MinKubernetesVersion = "1.31.0"

	// AgentSandboxInstallHint tells an admin how to fix a missing CRD.
	AgentSandboxInstallHint = "install the Agent Sandbox controller and CRDs " +
		"(the sandbox.yaml release manifest of kubernetes-sigs/agent-sandbox v0.5.2 or later, " +
		"or manifest.yaml of v0.4.x) and it will be detected automatically"

	// AgentSandboxOpenShiftHint tells an OpenShift admin how to install
	// Agent Sandbox: Red Hat ships it as an OLM package. The bundle cannot
	// declare the dependency (OLM v1 refuses bundles that do), so the
	// operator detects it at run time and names the Subscription.
	AgentSandboxOpenShiftHint = "on OpenShift, install the Red Hat build of Agent Sandbox (Technology Preview) from OLM: " +
		"a Subscription to package agent-sandbox-operator, channel preview-0.9, source redhat-operators in openshift-marketplace, " +
		"in namespace agent-sandbox-system with an OperatorGroup whose spec is {} (docs/quickstart.md, step 1); it will be detected automatically"
)

// WatchedCRDs are the CRDs whose creation, change or removal triggers a new
// probe. Route and SCC may instead be aggregated APIs (OpenShift serves
// Routes from openshift-apiserver); the periodic re-probe catches changes
// of those.
var WatchedCRDs = []string{AgentSandboxCRD, CertificateCRD, IssuerCRD, RouteCRD, SCCCRD, IDMSCRD, NetworkCRD, PrometheusRuleCRD, ServiceMonitorCRD, ConsoleYAMLSampleCRD, AdminNetworkPolicyCRD}

// Agent Sandbox API versions the operator can drive, most preferred first.
var supportedAgentSandboxVersions = []string{"v1beta1", "v1alpha1"}

// Reasons of the AgentSandboxAvailable condition.
const (
	// ReasonAvailable means the API is served (also of CertManagerAvailable
	// and RouteAPIAvailable).
	ReasonAvailable = "Available"
	// ReasonCRDNotFound means the CRD is not installed.
	ReasonCRDNotFound = "CRDNotFound"
	// ReasonCRDNotEstablished means the CRD exists but is not established yet.
	ReasonCRDNotEstablished = "CRDNotEstablished"
	// ReasonNoSupportedVersion means the CRD serves no version the operator can drive.
	ReasonNoSupportedVersion = "NoSupportedVersion"
	// ReasonProbeFailed means discovery failed; the probe is retried.
	ReasonProbeFailed = "ProbeFailed"
)

// AgentSandbox is what is known about the sandboxes.agents.x-k8s.io CRD.
type AgentSandbox struct {
	// Available is true when a supported version is served by an
	// established CRD.
	Available bool
	// Served lists every served version, sorted.
	Served []string
	// Preferred is the version to use: v1beta1 when served, else v1alpha1.
	Preferred string
	// ConversionWebhook is true for releases (v0.5.x) that serve both
	// versions through a conversion webhook.
	ConversionWebhook bool
	// Gone is true when the CRD is absent or being deleted: its deletion
	// deletes every agents.x-k8s.io Sandbox, so none runs.
	Gone bool
	// Reason and Message explain the state for a condition.
	Reason, Message string
}

// SelectVersion picks the Agent Sandbox version to use among those served.
func SelectVersion(served []string) (string, bool) {
	for _, v := range supportedAgentSandboxVersions {
		if slices.Contains(served, v) {
			return v, true
		}
	}
	return "", false
}

// EvaluateAgentSandbox turns the CRD (nil when absent) into a verdict.
func EvaluateAgentSandbox(crd *apiextensionsv1.CustomResourceDefinition) AgentSandbox {
	if crd == nil {
		return AgentSandbox{Reason: ReasonCRDNotFound, Gone: true,
			Message: "CustomResourceDefinition " + AgentSandboxCRD + " not found: " + AgentSandboxInstallHint}
	}
	var served []string
	for _, v := range crd.Spec.Versions {
		if v.Served {
			served = append(served, v.Name)
		}
	}
	slices.Sort(served)
	as := AgentSandbox{Served: served}
	if crd.Spec.Conversion != nil && crd.Spec.Conversion.Strategy == apiextensionsv1.WebhookConverter {
		as.ConversionWebhook = true
	}
	if !established(crd) {
		as.Reason = ReasonCRDNotEstablished
		as.Message = fmt.Sprintf("CustomResourceDefinition %s exists but is not Established yet (served versions: %s)",
			AgentSandboxCRD, list(served))
		if !crd.DeletionTimestamp.IsZero() {
			as.Gone = true
			as.Message = fmt.Sprintf("CustomResourceDefinition %s is being deleted", AgentSandboxCRD)
		}
		return as
	}
	pref, ok := SelectVersion(served)
	if !ok {
		as.Reason = ReasonNoSupportedVersion
		as.Message = fmt.Sprintf("CustomResourceDefinition %s serves %s; the operator needs %s: install Agent Sandbox v0.4.x, v0.5.x or v1.0.x",
			AgentSandboxCRD, list(served), strings.Join(supportedAgentSandboxVersions, " or "))
		return as
	}
	as.Available, as.Preferred, as.Reason = true, pref, ReasonAvailable
	as.Message = fmt.Sprintf("%s/%s served (served versions: %s)", AgentSandboxGroup, pref, list(served))
	if as.ConversionWebhook {
		as.Message += "; versions are converted by the Agent Sandbox conversion webhook"
	}
	return as
}

// onOpenShift is the verdict's message with the OpenShift install step
// instead of the upstream manifests.
func onOpenShift(as AgentSandbox) string {
	msg := strings.TrimSuffix(as.Message, ": "+AgentSandboxInstallHint)
	if as.Reason == ReasonNoSupportedVersion {
		msg, _, _ = strings.Cut(msg, ": install Agent Sandbox")
	}
	return msg + ": " + AgentSandboxOpenShiftHint
}

func established(crd *apiextensionsv1.CustomResourceDefinition) bool {
	if !crd.DeletionTimestamp.IsZero() {
		return false
	}
	for _, c := range crd.Status.Conditions {
		if c.Type == apiextensionsv1.Established {
			return c.Status == apiextensionsv1.ConditionTrue
		}
	}
	return false
}

func list(vs []string) string {
	if len(vs) == 0 {
		return "none"
	}
	return strings.Join(vs, ", ")
}

// KubernetesVersion is the API server's version against the minimum.
type KubernetesVersion struct {
	Version   string
	Supported bool
	Message   string
}

// EvaluateKubernetesVersion compares a server gitVersion with the minimum.
func EvaluateKubernetesVersion(gitVersion string) KubernetesVersion {
	kv := KubernetesVersion{Version: gitVersion}
	v, err := version.ParseGeneric(gitVersion)
	if err != nil {
		kv.Message = fmt.Sprintf("cannot parse Kubernetes version %q: %v", gitVersion, err)
		return kv
	}
	min := version.MustParseGeneric(MinKubernetesVersion)
	kv.Supported = v.AtLeast(min)
	if kv.Supported {
		kv.Message = fmt.Sprintf("Kubernetes %s (minimum %s)", gitVersion, MinKubernetesVersion)
	} else {
		kv.Message = fmt.Sprintf("Kubernetes %s is older than the minimum %s: upgrade the cluster", gitVersion, MinKubernetesVersion)
	}
	return kv
}

// Result is one probe of the cluster.
type Result struct {
	AgentSandbox AgentSandbox
	// CertManager is true when cert-manager.io/v1 Certificates and Issuers are served.
	CertManager bool
	// Route is true when route.openshift.io/v1 Routes are served.
	Route bool
	// SCC is true when security.openshift.io/v1 SecurityContextConstraints are served.
	SCC bool
	// IDMS is true when config.openshift.io/v1 ImageDigestMirrorSets are served.
	IDMS bool
	// PrometheusRule is true when monitoring.coreos.com/v1 PrometheusRules
	// are served (the Prometheus Operator, OpenShift's cluster monitoring).
	PrometheusRule bool
	// ServiceMonitor is true when monitoring.coreos.com/v1 ServiceMonitors
	// are served.
	ServiceMonitor bool
	// ConsoleYAMLSample is true when console.openshift.io/v1
	// ConsoleYAMLSamples are served (the OpenShift console).
	ConsoleYAMLSample bool
	// AdminNetworkPolicy is true when policy.networking.k8s.io/v1alpha1
	// AdminNetworkPolicies are served.
	AdminNetworkPolicy bool
	// NetworkType is the network plugin OpenShift reports
	// (config.openshift.io/v1 Network "cluster", status.networkType), or
	// "" where it is not known: not OpenShift, or not readable.
	NetworkType string
	Kubernetes  KubernetesVersion
}

// OpenShift reports whether the OpenShift APIs the operator uses are served.
func (r Result) OpenShift() bool { return r.Route && r.SCC }

// Capabilities flattens the result for metrics and transition events.
func (r Result) Capabilities() map[string]bool {
	return map[string]bool{
		"AgentSandbox":               r.AgentSandbox.Available,
		"CertManager":                r.CertManager,
		"Route":                      r.Route,
		"SecurityContextConstraints": r.SCC,
		"ImageDigestMirrorSet":       r.IDMS,
		"PrometheusRule":             r.PrometheusRule,
		"ServiceMonitor":             r.ServiceMonitor,
		"ConsoleYAMLSample":          r.ConsoleYAMLSample,
		"AdminNetworkPolicy":         r.AdminNetworkPolicy,
		"KubernetesVersion":          r.Kubernetes.Supported,
	}
}

// Probe reads the CRDs it depends on (reader should be uncached: the cache
// holds CRD metadata only) and falls back to discovery for APIs that have
// no CRD.
func Probe(ctx context.Context, reader client.Reader, disc discovery.DiscoveryInterface) (Result, error) {
	var r Result
	crd := &apiextensionsv1.CustomResourceDefinition{}
	switch err := reader.Get(ctx, client.ObjectKey{Name: AgentSandboxCRD}, crd); {
	case apierrors.IsNotFound(err):
		r.AgentSandbox = EvaluateAgentSandbox(nil)
	case err != nil:
		return r, fmt.Errorf("get CRD %s: %w", AgentSandboxCRD, err)
	default:
		r.AgentSandbox = EvaluateAgentSandbox(crd)
	}

	for _, api := range []struct {
		served *bool
		gv     string
		crds   []string
	}{
		{&r.CertManager, "cert-manager.io/v1", []string{CertificateCRD, IssuerCRD}},
		{&r.Route, "route.openshift.io/v1", []string{RouteCRD}},
		{&r.SCC, "security.openshift.io/v1", []string{SCCCRD}},
		{&r.IDMS, "config.openshift.io/v1", []string{IDMSCRD}},
		{&r.PrometheusRule, "monitoring.coreos.com/v1", []string{PrometheusRuleCRD}},
		{&r.ServiceMonitor, "monitoring.coreos.com/v1", []string{ServiceMonitorCRD}},
		{&r.ConsoleYAMLSample, "console.openshift.io/v1", []string{ConsoleYAMLSampleCRD}},
		{&r.AdminNetworkPolicy, "policy.networking.k8s.io/v1alpha1", []string{AdminNetworkPolicyCRD}},
	} {
		served, err := apiServed(ctx, reader, disc, api.gv, api.crds...)
		if err != nil {
			return r, err
		}
		*api.served = served
	}
	if r.SCC && (r.AgentSandbox.Reason == ReasonCRDNotFound || r.AgentSandbox.Reason == ReasonNoSupportedVersion) {
		r.AgentSandbox.Message = onOpenShift(r.AgentSandbox)
	}
	network, err := networkType(ctx, reader, disc)
	if err != nil {
		return r, err
	}
	r.NetworkType = network
	info, err := disc.ServerVersion()
	if err != nil {
		return r, fmt.Errorf("discover server version: %w", err)
	}
	r.Kubernetes = EvaluateKubernetesVersion(info.GitVersion)
	return r, nil
}

// networkType reads the network plugin OpenShift's cluster network
// configuration names; "" where that API is not served or the object is
// absent or not readable (then the platform admin says, on the gateway).
func networkType(ctx context.Context, reader client.Reader, disc discovery.DiscoveryInterface) (string, error) {
	served, err := apiServed(ctx, reader, disc, "config.openshift.io/v1", NetworkCRD)
	if err != nil || !served {
		return "", err
	}
	n := &unstructured.Unstructured{}
	n.SetAPIVersion("config.openshift.io/v1")
	n.SetKind("Network")
	switch err := reader.Get(ctx, client.ObjectKey{Name: "cluster"}, n); {
	case apierrors.IsNotFound(err), apierrors.IsForbidden(err):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("get the cluster network configuration: %w", err)
	}
	t, _, _ := unstructured.NestedString(n.Object, "status", "networkType")
	return t, nil
}

// apiServed reports whether every resource (named by its CRD name,
// <plural>.<group>) is served at group-version gv. A CRD that exists decides
// by itself (Established and serving the version): discovery lags behind CRD
// changes. Without a CRD the API may be aggregated (OpenShift serves Routes
// from openshift-apiserver), so discovery decides.
func apiServed(ctx context.Context, reader client.Reader, disc discovery.DiscoveryInterface, gv string, crdNames ...string) (bool, error) {
	version := gv[strings.Index(gv, "/")+1:]
	var resources *metav1.APIResourceList
	for _, name := range crdNames {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		err := reader.Get(ctx, client.ObjectKey{Name: name}, crd)
		if err == nil {
			if !established(crd) || !slices.ContainsFunc(crd.Spec.Versions, func(v apiextensionsv1.CustomResourceDefinitionVersion) bool {
				return v.Name == version && v.Served
			}) {
				return false, nil
			}
			continue
		}
		if !apierrors.IsNotFound(err) {
			return false, fmt.Errorf("get CRD %s: %w", name, err)
		}
		if resources == nil {
			resources, err = disc.ServerResourcesForGroupVersion(gv)
			if apierrors.IsNotFound(err) {
				return false, nil
			}
			if err != nil {
				return false, fmt.Errorf("discover %s: %w", gv, err)
			}
		}
		plural := name[:strings.Index(name, ".")]
		if !slices.ContainsFunc(resources.APIResources, func(r metav1.APIResource) bool { return r.Name == plural }) {
			return false, nil
		}
	}
	return true, nil
}
