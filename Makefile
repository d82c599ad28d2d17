# openshell-operator

# Everything the build and the tests run is built from pinned Go modules into
# bin/ (git-ignored). Nothing is downloaded at test time.
LOCALBIN ?= $(CURDIR)/bin
TOOLS_DIR := $(CURDIR)/hack/tools
export PATH := $(LOCALBIN):$(PATH)

# Control-plane level used by envtest and the e2e cluster (OpenShift 4.21 = Kubernetes 1.34).
KUBE_VERSION ?= v1.34.4
KUBE_MINOR := $(word 2,$(subst ., ,$(KUBE_VERSION)))
KUBE_LDFLAGS := -s -w \
	-X k8s.io/component-base/version.gitVersion=$(KUBE_VERSION) \
	-X k8s.io/component-base/version.gitMajor=1 \
	-X k8s.io/component-base/version.gitMinor=$(KUBE_MINOR) \
	-X k8s.io/component-base/version.gitTreeState=clean \
	-X k8s.io/client-go/pkg/version.gitVersion=$(KUBE_VERSION) \
	-X k8s.io/client-go/pkg/version.gitMajor=1 \
	-X k8s.io/client-go/pkg/version.gitMinor=$(KUBE_MINOR)

CONTROLLER_GEN ?= $(LOCALBIN)/controller-gen
STATICCHECK ?= $(LOCALBIN)/staticcheck
UPSTREAM_ASSETS := $(LOCALBIN)/upstream/.stamp

IMG ?= quay.io/openshell/openshell-operator:v0.1.0
# go test's own 10-minute default ends a busy e2e package mid-run; a
# package that hangs still ends, and what it started is reaped (test/framework).
GO_TEST_FLAGS ?= -count=1 -timeout=30m
# Bounded fuzzing in CI, by count: a time bound races the fuzzing engine's
# own deadline on a loaded machine ("context deadline exceeded" reported as
# a failure). Run longer by hand, e.g. make fuzz FUZZTIME=10m.
FUZZTIME ?= 20000x

.PHONY: all
all: build

##@ General

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "\nUsage:\n  make \033[36m<target>\033[0m\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-18s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) } ' $(MAKEFILE_LIST)

##@ Development

.PHONY: generate
generate: $(CONTROLLER_GEN) $(LOCALBIN)/buf $(LOCALBIN)/protoc-gen-go $(LOCALBIN)/protoc-gen-go-grpc ## Generate deepcopy code, the gateway gRPC client and docs/conditions.md.
	$(CONTROLLER_GEN) object:headerFile="hack/boilerplate.go.txt" paths="./api/..."
	cd proto && $(LOCALBIN)/buf generate
	go run ./hack/conditions > docs/conditions.md

.PHONY: manifests
manifests: $(CONTROLLER_GEN) ## Generate CRDs, RBAC, webhook configuration, config/scc and config/operand.
	$(CONTROLLER_GEN) rbac:roleName=manager-role crd webhook paths="./..." \
		output:crd:artifacts:config=config/crd/bases \
		output:rbac:artifacts:config=config/rbac \
		output:webhook:artifacts:config=config/webhook
	go run ./hack/manifests

.PHONY: fmt
fmt: ## Run gofmt on the code.
	gofmt -s -w $$(git ls-files '*.go')

.PHONY: vet
vet: ## Run go vet.
	go vet ./...

.PHONY: lint
lint: $(STATICCHECK) ## Check formatting, go vet and staticcheck.
	@out=$$(gofmt -s -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	go vet ./...
	$(STATICCHECK) ./...
	cd $(RELEASE_DIR) && go vet ./... && $(STATICCHECK) ./...

.PHONY: verify
verify: ## Regenerate everything and fail if the tree changed.
	$(MAKE) generate manifests bundle catalog
	@if [ -n "$$(git status --porcelain -- api config bundle bundle.Dockerfile catalog internal/gatewayapi/pb docs/conditions.md)" ]; then \
		git status --short -- api config bundle bundle.Dockerfile catalog internal/gatewayapi/pb docs/conditions.md; git --no-pager diff --stat -- api config bundle catalog internal/gatewayapi/pb docs/conditions.md; \
		echo "generated files are stale: run 'make generate manifests bundle catalog' and commit"; exit 1; fi
	@if [ -n "$$(git status --porcelain -- go.mod go.sum $(RELEASE_DIR)/go.mod $(RELEASE_DIR)/go.sum)" ]; then echo "go.mod/go.sum changed"; exit 1; fi

##@ Test

.PHONY: test
test: tools ## Run all tests: unit, API (CEL) and integration on envtest, e2e on a local cluster, OLM packaging, bounded fuzzing.
	@hack/disk-room.sh $(TOOLS_GOCACHE) $(TEST_DISK_GIB)
	go test $(GO_TEST_FLAGS) ./...
	cd $(RELEASE_DIR) && go test $(GO_TEST_FLAGS) ./...
	$(MAKE) fuzz FUZZTIME=$(FUZZTIME)

# Fuzz targets as package:Target. `make fuzz FUZZTIME=10m` for a long run.
FUZZ_TARGETS := \
	./internal/imagepolicy:FuzzParseReference \
	./internal/imagepolicy:FuzzEvaluate

.PHONY: fuzz
fuzz: ## Run every fuzz target for FUZZTIME each (default 20000 inputs).
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		echo "fuzz $$pkg $$name ($(FUZZTIME))"; \
		go test $$pkg -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME); \
	done

# The fault scenarios of docs/reliability.md, larger and repeated; make test
# runs each once at a bounded size. Prints the figures.
CHAOS_SANDBOXES ?= 200
CHAOS_ROUNDS ?= 3
.PHONY: chaos
chaos: tools ## Run the fault scenarios (CHAOS_SANDBOXES creates, CHAOS_ROUNDS rounds) and print their figures.
	@CHAOS_SANDBOXES=$(CHAOS_SANDBOXES) go test ./test/e2e -count=$(CHAOS_ROUNDS) -v -timeout 60m \
		-run 'TestLeaderFailover|TestRotationsUnderLoad|TestOperatorKilledDuringCreates|TestAPIServerPausedDuringCreates|TestDeleteDuringCreate|TestSickGatewayDoesNotStarveOthers|TestGatewayDeletionDrains|TestTenancy/ForceRelease|TestTenancy/CreateDeleteRaces' \
		> bin/chaos.txt 2>&1; rc=$$?; grep -E 'figure:|^(--- |ok|FAIL)' bin/chaos.txt; exit $$rc

.PHONY: test-unit
test-unit: ## Run only the tests that need no control plane.
	go test $(GO_TEST_FLAGS) -short ./...
	cd $(RELEASE_DIR) && go test $(GO_TEST_FLAGS) -short ./...

.PHONY: bench
bench: tools ## Run the benchmarks and print their tables (BENCH_N=100,500,1000 for the full cluster run).
	go test -run '^$$' -bench . -benchmem ./... > bin/go-bench.txt || { cat bin/go-bench.txt; exit 1; }
	cat bin/go-bench.txt
	BENCH_GO_RESULTS=bin/go-bench.txt go run ./test/bench

##@ OLM packaging

# The release tooling (bundle, catalog, images) is a module of its own, so
# that operator-registry, kustomize and go-containerregistry stay out of the
# operator's go.mod; its command is built into bin/ like the other tools.
RELEASE_DIR := $(CURDIR)/hack/release
RELEASE_TOOL := $(LOCALBIN)/openshell-release
$(RELEASE_TOOL): $(RELEASE_DIR)/go.mod $(shell find $(RELEASE_DIR) -name '*.go' -not -name '*_test.go')
	mkdir -p $(LOCALBIN) && cd $(RELEASE_DIR) && go build -o $(RELEASE_TOOL) ./cmd/bundle

VERSION ?= 0.1.0
CHANNELS ?= candidate-v0
DEFAULT_CHANNEL ?= candidate-v0

.PHONY: bundle
bundle: manifests $(RELEASE_TOOL) ## Generate the OLM bundle (bundle/, bundle.Dockerfile) from config/manifests.
	$(RELEASE_TOOL) generate -version $(VERSION) -channels $(CHANNELS) -default-channel $(DEFAULT_CHANNEL) \
		-skip-range '>=0.0.0 <$(VERSION)'

.PHONY: catalog
catalog: $(RELEASE_TOOL) ## Render the File-Based Catalog (catalog/configs) from the bundle, by the bundle image digest.
	$(RELEASE_TOOL) catalog -channels $(CHANNELS) -default-channel $(DEFAULT_CHANNEL)

.PHONY: catalog-validate
catalog-validate: $(RELEASE_TOOL) ## Validate the catalog as opm validate does, plus digest checks.
	$(RELEASE_TOOL) catalog-validate

.PHONY: pin-images
pin-images: $(RELEASE_TOOL) ## Resolve the operand image tags in config/manifests/images.yaml to digests (needs registry access), then regenerate.
	$(RELEASE_TOOL) pin
	$(MAKE) bundle catalog

# The operator image's architectures (hack/release/images Platforms and the
# CSV's operatorframework.io/arch.* labels name the same).
PLATFORMS ?= amd64 arm64 ppc64le s390x

.PHONY: images
images: $(LOCALBIN)/opm $(LOCALBIN)/grpc_health_probe $(RELEASE_TOOL) ## Build the operator, bundle and catalog images (OCI layouts in bin/images) and pin the operator digest.
	for arch in $(PLATFORMS); do \
		CGO_ENABLED=0 GOOS=linux GOARCH=$$arch go build -trimpath -ldflags "-s -w -buildid=" -o $(LOCALBIN)/manager-linux-$$arch ./cmd || exit 1; \
	done
	$(RELEASE_TOOL) images -version $(VERSION)
	$(MAKE) bundle catalog
	$(RELEASE_TOOL) images -version $(VERSION)

.PHONY: bundle-validate
bundle-validate: $(RELEASE_TOOL) ## Validate the bundle: operator-framework validators plus digest and consistency checks.
	$(RELEASE_TOOL) validate -dir bundle -k8s-version 1.34

##@ Build

.PHONY: build
build: generate ## Build the manager binary.
	go build -o $(LOCALBIN)/manager ./cmd

.PHONY: run
run: manifests generate ## Run the manager against the cluster in ~/.kube/config.
	go run ./cmd

# What the demo runs, and only that: the control plane, kwok, the Agent
# Sandbox controller, their CRDs, and the demo itself (the operator and the
# test gateway). What only `make test` needs (OLM, cert-manager, opm,
# promtool, the code generators, the Python SDK) is built by `make test`.
# They build two at a time in this order: kube-apiserver first, and the
# controller-manager and scheduler, which share its dependencies, only once
# it is done (built side by side they compile those twice: measured slower).
DEMO_BINS := $(LOCALBIN)/kube-apiserver $(LOCALBIN)/demo $(LOCALBIN)/etcd $(LOCALBIN)/kwok $(LOCALBIN)/agent-sandbox-controller \
	$(LOCALBIN)/kube-controller-manager $(LOCALBIN)/kube-scheduler $(UPSTREAM_ASSETS)
BUILD_LOG ?= $(LOCALBIN)/build.log
# Nothing built into bin/ is run under a debugger, so none of it carries
# debug information: without DWARF the compiler does less (measured: kwok
# cold in 99 s instead of 113 s), and stack traces keep their lines. The
# demo and the cluster's components keep their paths (no -trimpath): the
# demo finds the repository from them, and Go compiles a package once for
# all of them only when they are built with the same flags — the standard
# library, and what kwok shares with the demo (measured cold on two cores:
# etcd 40 s alone, 22 s after the demo; kwok 79 s alone, 14 s after it).
# What an image carries (opm, the health probe, scorecard) is built
# reproducibly, with -trimpath.
NODWARF := -gcflags=all=-dwarf=false
REPRODUCIBLE := -trimpath $(NODWARF)

# The tools, the control plane and the demo are compiled into a Go build
# cache of their own, in bin/ (TOOLS_GOCACHE overrides it; GOCACHE does not):
# about 9.4 GiB once all are built, read again only when a pin or the demo
# changes. The tests need TEST_DISK_GIB more
# (their build cache and the linker's temporary files; measured in
# docs/first-run.md); on a machine with less room than that, `make test`
# removes the tools' cache first (hack/disk-room.sh) instead of running
# out of room half-way.
TOOLS_GOCACHE ?= $(LOCALBIN)/.cache/go-build
TEST_DISK_GIB ?= 6

$(LOCALBIN)/demo: go.mod go.sum $(shell find api cmd controllers internal operator test -name '*.go' -not -name '*_test.go') | $(LOCALBIN)
	go build $(NODWARF) -ldflags "-s -w" -o $@ ./test/demo

.PHONY: demo
demo: ## Bring up a local cluster, the operator and a test gateway, and show sandboxes.
	@hack/build-with-progress.sh $(BUILD_LOG) $(DEMO_BINS)
	$(LOCALBIN)/demo

##@ Tools

TOOL_BINS := $(LOCALBIN)/buf $(LOCALBIN)/controller-gen $(LOCALBIN)/staticcheck $(LOCALBIN)/protoc-gen-go $(LOCALBIN)/protoc-gen-go-grpc \
	$(LOCALBIN)/etcd $(LOCALBIN)/kube-apiserver $(LOCALBIN)/kube-controller-manager $(LOCALBIN)/kube-scheduler $(LOCALBIN)/kubectl \
	$(LOCALBIN)/kwok $(LOCALBIN)/agent-sandbox-controller $(LOCALBIN)/opm \
	$(LOCALBIN)/olm $(LOCALBIN)/catalog $(LOCALBIN)/cert-manager-controller $(LOCALBIN)/grpc_health_probe $(LOCALBIN)/scorecard-test \
	$(LOCALBIN)/promtool $(LOCALBIN)/otelcol
# (TOOLS_GOCACHE, above; set on TOOL_BINS once they are defined.)
$(TOOL_BINS) $(LOCALBIN)/demo: export GOCACHE := $(TOOLS_GOCACHE)

# The `openshell` Python package of the newest 0.1 release on PyPI (newer
# releases publish no wheel there): its generated *_pb2.py carry the
# release's protobuf descriptors, which test/wire checks the operator's 0.1
# protos against. Pinned by version and digest, unpacked into bin/.
OPENSHELL_WHEEL_VERSION := 0.1.5
OPENSHELL_WHEEL_SHA256 := 2f29c7f7da5c9b99b17ec5ad75d6236ec19a178ece10c672b4d0fee35231f7f3
OPENSHELL_WHEEL_DIR := $(LOCALBIN)/openshell-wheel
OPENSHELL_WHEEL := $(OPENSHELL_WHEEL_DIR)/.unpacked-$(OPENSHELL_WHEEL_VERSION)
$(OPENSHELL_WHEEL): | $(LOCALBIN)
	rm -rf $(OPENSHELL_WHEEL_DIR) && mkdir -p $(OPENSHELL_WHEEL_DIR)
	python3 -m pip download --quiet --no-deps --only-binary=:all: --dest $(OPENSHELL_WHEEL_DIR) openshell==$(OPENSHELL_WHEEL_VERSION)
	echo "$(OPENSHELL_WHEEL_SHA256)  $(OPENSHELL_WHEEL_DIR)/openshell-$(OPENSHELL_WHEEL_VERSION)-py3-none-any.whl" | sha256sum -c -
	cd $(OPENSHELL_WHEEL_DIR) && python3 -m zipfile -e openshell-$(OPENSHELL_WHEEL_VERSION)-py3-none-any.whl .
	touch $@

# The `openshell` CLI of the 0.0.111 release, the newest that ships one (the
# 0.1 wheels carry only the SDK): a real client of the 0.0.x line for
# test/e2e, and that release's protobuf descriptors for test/wire. It is
# built for glibc 2.39, newer than a Debian 12 machine's, so it runs under
# the loader and libraries of Debian 13's glibc, unpacked beside it (the
# wrapper bin/openshell).
OPENSHELL_CLI_VERSION := 0.0.111
OPENSHELL_CLI_SHA256 := 5ed0484beb2a725e5acce42046007ca6b140fdc74d0416ca8eac3fb73c8b0fcf
OPENSHELL_CLI_WHEEL := openshell-$(OPENSHELL_CLI_VERSION)-py3-none-manylinux_2_39_x86_64.whl
OPENSHELL_CLI_RUNTIME := libc6=2.41-12 libgcc-s1=14.2.0-19
OPENSHELL_CLI_DIR := $(LOCALBIN)/openshell-cli
OPENSHELL_CLI := $(OPENSHELL_CLI_DIR)/.unpacked-$(OPENSHELL_CLI_VERSION)
$(OPENSHELL_CLI): hack/debian-package.sh | $(LOCALBIN)
	@[ "$$(uname -m)" = x86_64 ] || { echo "the pinned openshell CLI is the x86_64 build"; exit 1; }
	rm -rf $(OPENSHELL_CLI_DIR) && mkdir -p $(OPENSHELL_CLI_DIR)
	python3 -m pip download --quiet --no-deps --only-binary=:all: --platform manylinux_2_39_x86_64 \
		--dest $(OPENSHELL_CLI_DIR) openshell==$(OPENSHELL_CLI_VERSION)
	echo "$(OPENSHELL_CLI_SHA256)  $(OPENSHELL_CLI_DIR)/$(OPENSHELL_CLI_WHEEL)" | sha256sum -c -
	cd $(OPENSHELL_CLI_DIR) && python3 -m zipfile -e $(OPENSHELL_CLI_WHEEL) . && rm $(OPENSHELL_CLI_WHEEL)
	chmod +x $(OPENSHELL_CLI_DIR)/openshell-$(OPENSHELL_CLI_VERSION).data/scripts/openshell
	for p in $(OPENSHELL_CLI_RUNTIME); do hack/debian-package.sh trixie $${p%%=*} $${p#*=} $(OPENSHELL_CLI_DIR)/glibc || exit 1; done
	printf '#!/bin/sh\nd="$$(dirname "$$0")/openshell-cli"\nlib="$$d/glibc/usr/lib/x86_64-linux-gnu"\nexec "$$lib/ld-linux-x86-64.so.2" --library-path "$$lib" "$$d/openshell-$(OPENSHELL_CLI_VERSION).data/scripts/openshell" "$$@"\n' \
		> $(LOCALBIN)/openshell && chmod +x $(LOCALBIN)/openshell
	$(LOCALBIN)/openshell --version | grep -qx "openshell $(OPENSHELL_CLI_VERSION)"
	touch $@

# The SDK's runtime, for running it as a client in test/e2e.
PYTHON_SDK := $(LOCALBIN)/python-sdk/.installed
$(PYTHON_SDK): $(TOOLS_DIR)/python/requirements.txt | $(LOCALBIN)
	rm -rf $(LOCALBIN)/python-sdk && mkdir -p $(LOCALBIN)/python-sdk
	python3 -m pip install --quiet --disable-pip-version-check --no-deps --only-binary=:all: --require-hashes \
		--target $(LOCALBIN)/python-sdk -r $(TOOLS_DIR)/python/requirements.txt
	touch $@

.PHONY: tools
tools: $(TOOL_BINS) $(UPSTREAM_ASSETS) $(RELEASE_TOOL) $(OPENSHELL_WHEEL) $(OPENSHELL_CLI) $(PYTHON_SDK) ## Build every tool and control-plane binary the tests need into bin/ (cached).

$(LOCALBIN):
	mkdir -p $(LOCALBIN)

# Each binary depends on the go.mod that pins it, so a version bump rebuilds it
# and a second `make tools` does nothing.
$(LOCALBIN)/controller-gen: $(TOOLS_DIR)/codegen/go.mod | $(LOCALBIN)
	cd $(TOOLS_DIR)/codegen && go build -o $@ sigs.k8s.io/controller-tools/cmd/controller-gen
$(LOCALBIN)/staticcheck: $(TOOLS_DIR)/codegen/go.mod | $(LOCALBIN)
	cd $(TOOLS_DIR)/codegen && go build -o $@ honnef.co/go/tools/cmd/staticcheck
$(LOCALBIN)/protoc-gen-go: $(TOOLS_DIR)/codegen/go.mod | $(LOCALBIN)
	cd $(TOOLS_DIR)/codegen && go build -o $@ google.golang.org/protobuf/cmd/protoc-gen-go
$(LOCALBIN)/protoc-gen-go-grpc: $(TOOLS_DIR)/codegen/go.mod | $(LOCALBIN)
	cd $(TOOLS_DIR)/codegen && go build -o $@ google.golang.org/grpc/cmd/protoc-gen-go-grpc
$(LOCALBIN)/buf: $(TOOLS_DIR)/buf/go.mod | $(LOCALBIN)
	cd $(TOOLS_DIR)/buf && go build -o $@ github.com/bufbuild/buf/cmd/buf
$(LOCALBIN)/etcd: $(TOOLS_DIR)/etcd/go.mod | $(LOCALBIN)
	cd $(TOOLS_DIR)/etcd && go build $(NODWARF) -ldflags "-s -w" -o $@ go.etcd.io/etcd/server/v3
$(LOCALBIN)/kube-%: $(TOOLS_DIR)/kube/go.mod | $(LOCALBIN)
	cd $(TOOLS_DIR)/kube && go build $(NODWARF) -ldflags "$(KUBE_LDFLAGS)" -o $@ k8s.io/kubernetes/cmd/kube-$*
# kubectl runs the kubectl-openshell plugin in test/e2e, as a consumer would.
$(LOCALBIN)/kubectl: $(TOOLS_DIR)/kube/go.mod | $(LOCALBIN)
	cd $(TOOLS_DIR)/kube && go build $(NODWARF) -ldflags "$(KUBE_LDFLAGS)" -o $@ k8s.io/kubernetes/cmd/kubectl
# kwok is built on the main module's versions of what it shares with the
# demo (hack/tools/kwok/go.mod, checked by test/arch): built after the
# demo, it reuses the demo's compiled packages.
$(LOCALBIN)/kwok: $(TOOLS_DIR)/kwok/go.mod | $(LOCALBIN)
	cd $(TOOLS_DIR)/kwok && go build $(NODWARF) -ldflags "-s -w" -o $@ sigs.k8s.io/kwok/cmd/kwok
$(LOCALBIN)/agent-sandbox-controller: $(TOOLS_DIR)/agentsandbox/go.mod | $(LOCALBIN)
	cd $(TOOLS_DIR)/agentsandbox && go build $(NODWARF) -ldflags "-s -w" -o $@ sigs.k8s.io/agent-sandbox/cmd/agent-sandbox-controller
# Static and reproducible: the tests run it and the catalog image carries it.
$(LOCALBIN)/opm: $(TOOLS_DIR)/opm/go.mod | $(LOCALBIN)
	cd $(TOOLS_DIR)/opm && CGO_ENABLED=0 GOOS=linux GOARCH=amd64 go build $(REPRODUCIBLE) -tags containers_image_openpgp \
		-ldflags "-s -w -buildid=" -o $@ github.com/operator-framework/operator-registry/cmd/opm
$(LOCALBIN)/olm $(LOCALBIN)/catalog: $(LOCALBIN)/%: $(TOOLS_DIR)/olm/go.mod | $(LOCALBIN)
	cd $(TOOLS_DIR)/olm && go build $(NODWARF) -ldflags "-s -w" -o $@ github.com/operator-framework/operator-lifecycle-manager/cmd/$*
$(LOCALBIN)/cert-manager-controller: $(TOOLS_DIR)/certmanager/go.mod $(TOOLS_DIR)/certmanager/main.go | $(LOCALBIN)
	cd $(TOOLS_DIR)/certmanager && go build $(NODWARF) -ldflags "-s -w" -o $@ .
# Static, for the catalog image (OLM's registry pod execs it).
$(LOCALBIN)/grpc_health_probe: $(TOOLS_DIR)/healthprobe/go.mod | $(LOCALBIN)
	cd $(TOOLS_DIR)/healthprobe && CGO_ENABLED=0 GOOS=linux GOARCH=amd64 go build $(REPRODUCIBLE) -ldflags "-s -w -buildid=" -o $@ github.com/grpc-ecosystem/grpc-health-probe
$(LOCALBIN)/promtool: $(TOOLS_DIR)/promtool/go.mod | $(LOCALBIN)
	cd $(TOOLS_DIR)/promtool && go build $(NODWARF) -ldflags "-s -w" -o $@ github.com/prometheus/prometheus/cmd/promtool
# An OpenTelemetry Collector (OTLP receiver, debug exporter) from the
# collector's pinned modules: the traces test/e2e asserts arrive.
$(LOCALBIN)/otelcol: $(TOOLS_DIR)/otelcol/go.mod $(TOOLS_DIR)/otelcol/main.go | $(LOCALBIN)
	cd $(TOOLS_DIR)/otelcol && go build $(NODWARF) -ldflags "-s -w" -o $@ .
# Static: the scorecard test runs it chrooted into a folder holding the bundle.
$(LOCALBIN)/scorecard-test: $(TOOLS_DIR)/scorecard/go.mod | $(LOCALBIN)
	cd $(TOOLS_DIR)/scorecard && CGO_ENABLED=0 go build $(REPRODUCIBLE) -ldflags "-s -w" -o $@ github.com/operator-framework/operator-sdk/images/scorecard-test

$(UPSTREAM_ASSETS): go.mod hack/upstream-assets.sh hack/tools/kwok/go.mod | $(LOCALBIN)
	hack/upstream-assets.sh $(LOCALBIN)/upstream
	touch $@

.PHONY: clean
clean: ## Remove built binaries and the tools' build cache (keeps the tests' Go build cache).
	rm -rf $(LOCALBIN)
