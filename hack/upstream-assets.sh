#!/usr/bin/env bash
# Copies the upstream manifests the tests use (the CRDs of OpenShift,
# cert-manager, OLM, the Prometheus Operator, sig-network's AdminNetworkPolicy, the Gateway API and Agent Sandbox, and kwok's fast Stage objects) from the
# Go module cache into one folder, so tests read a fixed layout and never
# download anything at run time. Versions are pinned here, in go.mod and in
# hack/tools/*/go.mod.
set -euo pipefail
out=${1:?usage: upstream-crds.sh OUTDIR}
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

# moddir prints the folder of a module (path@version, or a path alone for
# the version the current module requires), downloading it first: `go list
# -m` prints no folder for a module not yet in the cache (a fresh machine).
moddir() { go mod download -json "$1" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p'; }
mainmod() { moddir "$1"; }

rm -rf "$out.tmp" && mkdir -p "$out.tmp"/crds/{openshift,cert-manager,olm,monitoring,network-policy-api,gateway-api}

os=$(mainmod github.com/openshift/api)
cp "$os/route/v1/zz_generated.crd-manifests/routes.crd.yaml" "$out.tmp/crds/openshift/"
cp "$os/security/v1/zz_generated.crd-manifests/"*securitycontextconstraints.crd.yaml "$out.tmp/crds/openshift/"
cp "$os/config/v1/zz_generated.crd-manifests/"*imagedigestmirrorsets.crd.yaml "$out.tmp/crds/openshift/"
cp "$os/config/v1/zz_generated.crd-manifests/"*imagetagmirrorsets.crd.yaml "$out.tmp/crds/openshift/"
cp "$os/console/v1/zz_generated.crd-manifests/"*consoleyamlsamples.crd.yaml "$out.tmp/crds/openshift/"
cp "$os/config/v1/zz_generated.crd-manifests/"*apiservers-Default.crd.yaml "$out.tmp/crds/openshift/"
cp "$os/config/v1/zz_generated.crd-manifests/"*networks-Default.crd.yaml "$out.tmp/crds/openshift/"
# OLM on OpenShift reads the cluster-wide Proxy (and waits for it to list).
cp "$os/config/v1/zz_generated.crd-manifests/"*_proxies.crd.yaml "$out.tmp/crds/openshift/"

cm=$(mainmod github.com/cert-manager/cert-manager)
cp "$cm"/deploy/crds/cert-manager.io_*.yaml "$out.tmp/crds/cert-manager/"

olm=$(mainmod github.com/operator-framework/api)
cp "$olm"/crds/operators.coreos.com_*.yaml "$out.tmp/crds/olm/"

# The Prometheus Operator's rules API (its pkg/apis/monitoring module has
# the types; the CRDs are in the main module).
pm=$(moddir "github.com/prometheus-operator/prometheus-operator@v0.85.0")
cp "$pm"/example/prometheus-operator-crd/monitoring.coreos.com_{prometheusrules,servicemonitors}.yaml "$out.tmp/crds/monitoring/"

# sig-network's AdminNetworkPolicy (OVN-Kubernetes serves the same API on
# OpenShift), for tenant egress.
np=$(mainmod sigs.k8s.io/network-policy-api)
cp "$np"/config/crd/standard/policy.networking.k8s.io_adminnetworkpolicies.yaml "$out.tmp/crds/network-policy-api/"

# The Gateway API's standard channel: the Gateway an HTTPRoute attaches
# to, the HTTPRoute and the BackendTLSPolicy of external ports.
ga=$(mainmod sigs.k8s.io/gateway-api)
cp "$ga"/config/crd/standard/gateway.networking.k8s.io_{gateways,httproutes,backendtlspolicies}.yaml "$out.tmp/crds/gateway-api/"

# Agent Sandbox in its three API shapes: v1alpha1 only, v1alpha1+v1beta1, v1beta1 only.
for v in v0.4.6 v0.5.6 v1.0.3; do
	d=$(moddir "sigs.k8s.io/agent-sandbox@$v")
	mkdir -p "$out.tmp/crds/agent-sandbox/$v"
	cp "$d"/k8s/crds/*.yaml "$out.tmp/crds/agent-sandbox/$v/"
done
kwok=$(cd hack/tools/kwok && moddir sigs.k8s.io/kwok)
mkdir -p "$out.tmp/kwok-stages"
cp "$kwok"/kustomize/stage/node/fast/node-*.yaml "$kwok"/kustomize/stage/pod/fast/pod-*.yaml "$out.tmp/kwok-stages/"

chmod -R u+w "$out.tmp"
rm -rf "$out" && mv "$out.tmp" "$out"
