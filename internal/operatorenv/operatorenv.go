// Package operatorenv reads the operator's environment: the namespaces it
// watches (WATCH_NAMESPACE, wired by OLM from olm.targetNamespaces), its own
// namespace, and the operand images it ships (RELATED_IMAGE_*, pinned to digests at release time).
package operatorenv

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Environment variable names.
const (
	// EnvWatchNamespace is empty for all namespaces, or a comma list.
	EnvWatchNamespace = "WATCH_NAMESPACE"
	// EnvOperatorNamespace is the namespace the operator runs in (downward API).
	EnvOperatorNamespace = "OPERATOR_NAMESPACE"
	// EnvOperatorConditionName names the OperatorCondition OLM created for
	// the installed CSV (OLM sets it on the Deployment).
	EnvOperatorConditionName = "OPERATOR_CONDITION_NAME"
	// EnvRelatedImageGateway is the OpenShell gateway image.
	EnvRelatedImageGateway = "RELATED_IMAGE_GATEWAY"
	// EnvRelatedImageSupervisor is the OpenShell supervisor image.
	EnvRelatedImageSupervisor = "RELATED_IMAGE_SUPERVISOR"
	// EnvRelatedImageSandbox is the default agent sandbox image.
	EnvRelatedImageSandbox = "RELATED_IMAGE_SANDBOX"
	// EnvRelatedImageSandboxRuntime is the OpenShell 0.1 sandbox-runtime
	// image (openshell-sandbox, the agent container's first process).
	EnvRelatedImageSandboxRuntime = "RELATED_IMAGE_SANDBOX_RUNTIME"
	// LegacyPrefix prefixes the variables of the 0.0.x release's images
	// (gatewayline.LegacyManaged), e.g. RELATED_IMAGE_LEGACY_GATEWAY; the
	// unprefixed ones are gatewayline.DefaultManaged's.
	LegacyPrefix = "RELATED_IMAGE_LEGACY_"
	// EnvGatewayNamespaces lists (comma-separated) further namespaces, besides
	// the operator's own, whose OpenShellGateways the operator reconciles. A
	// cluster admin sets it in the Subscription's spec.config.env; namespace
	// admins cannot.
	EnvGatewayNamespaces = "OPENSHELL_GATEWAY_NAMESPACES"
	// EnvAllowImageOverrides ("true") lets spec.managed.images of a gateway
	// replace the operator's RELATED_IMAGE_* operand images.
	EnvAllowImageOverrides = "OPENSHELL_ALLOW_OPERAND_IMAGE_OVERRIDES"
)

// WatchNamespaces parses WATCH_NAMESPACE. An empty (or blank) value means
// all namespaces and returns nil. Entries are trimmed, de-duplicated and
// must be valid namespace names.
func WatchNamespaces(v string) ([]string, error) { return Namespaces(EnvWatchNamespace, v) }

// Namespaces parses a comma list of namespace names from the variable env.
func Namespaces(env, v string) ([]string, error) {
	var out []string
	for _, raw := range strings.Split(v, ",") {
		ns := strings.TrimSpace(raw)
		if ns == "" {
			continue
		}
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			return nil, fmt.Errorf("%s: %q is not a namespace name: %s", env, ns, strings.Join(errs, "; "))
		}
		if !slices.Contains(out, ns) {
			out = append(out, ns)
		}
	}
	return out, nil
}

// RelatedImages are one OpenShell release's operand images. They come
// only from RELATED_IMAGE_* (never hard-coded tags) so that the CSV's
// relatedImages, oc-mirror and ImageDigestMirrorSets cover them.
type RelatedImages struct {
	Gateway    string
	Supervisor string
	Sandbox    string
	// SandboxRuntime is 0.1's; 0.0.x has none.
	SandboxRuntime string
}

// Releases are the operand images of each release the operator installs:
// its default (gatewayline.DefaultManaged) and the 0.0.x release gateways
// pinned to it keep running (gatewayline.LegacyManaged).
type Releases struct {
	Default, Legacy RelatedImages
}

// RelatedImagesFromEnv reads RELATED_IMAGE_* with getenv (os.Getenv in
// production). Missing values stay empty; callers report them as a condition.
func RelatedImagesFromEnv(getenv func(string) string) Releases {
	if getenv == nil {
		getenv = os.Getenv
	}
	legacy := func(name string) string { return getenv(LegacyPrefix + strings.TrimPrefix(name, "RELATED_IMAGE_")) }
	return Releases{
		Default: RelatedImages{
			Gateway:        getenv(EnvRelatedImageGateway),
			Supervisor:     getenv(EnvRelatedImageSupervisor),
			Sandbox:        getenv(EnvRelatedImageSandbox),
			SandboxRuntime: getenv(EnvRelatedImageSandboxRuntime),
		},
		Legacy: RelatedImages{
			Gateway:    legacy(EnvRelatedImageGateway),
			Supervisor: legacy(EnvRelatedImageSupervisor),
			Sandbox:    legacy(EnvRelatedImageSandbox),
		},
	}
}

// Env is the environment that RelatedImagesFromEnv reads back as r (what
// a Deployment of the operator sets).
func (r Releases) Env() []string {
	legacy := func(name string) string { return LegacyPrefix + strings.TrimPrefix(name, "RELATED_IMAGE_") }
	return []string{
		EnvRelatedImageGateway + "=" + r.Default.Gateway,
		EnvRelatedImageSupervisor + "=" + r.Default.Supervisor,
		EnvRelatedImageSandbox + "=" + r.Default.Sandbox,
		EnvRelatedImageSandboxRuntime + "=" + r.Default.SandboxRuntime,
		legacy(EnvRelatedImageGateway) + "=" + r.Legacy.Gateway,
		legacy(EnvRelatedImageSupervisor) + "=" + r.Legacy.Supervisor,
		legacy(EnvRelatedImageSandbox) + "=" + r.Legacy.Sandbox,
	}
}

// Missing lists the RELATED_IMAGE_* variables that are unset.
func (r Releases) Missing() []string {
	var out []string
	for _, kv := range r.Env() {
		if name, v, _ := strings.Cut(kv, "="); v == "" {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// Proxy is the cluster-wide egress proxy OLM injects into the operator's
// Deployment on a cluster with a proxy (HTTP_PROXY, HTTPS_PROXY, NO_PROXY
// from config.openshift.io/v1 Proxy "cluster"). The operator's own
// clients honour it through the environment; managed gateways get it
// passed on.
type Proxy struct {
	HTTPProxy, HTTPSProxy, NoProxy string
}

// ProxyFromEnv reads the proxy variables with getenv (os.Getenv in
// production), upper case first as OLM sets them.
func ProxyFromEnv(getenv func(string) string) Proxy {
	if getenv == nil {
		getenv = os.Getenv
	}
	get := func(name string) string {
		if v := getenv(name); v != "" {
			return v
		}
		return getenv(strings.ToLower(name))
	}
	return Proxy{HTTPProxy: get("HTTP_PROXY"), HTTPSProxy: get("HTTPS_PROXY"), NoProxy: get("NO_PROXY")}
}

// Set reports whether any proxy is configured.
func (p Proxy) Set() bool { return p.HTTPProxy != "" || p.HTTPSProxy != "" }
