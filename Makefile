# CAPTF entry points. `make test` is what CI runs (.ci/run).
#
# Test binaries (kube-apiserver, etcd, tofu, ...) are built once into $(CAPTF_TESTBIN), outside the
# clone, and reused by every clone. Everything Rust builds for one target with one set of flags
# (.cargo/config.toml: static glibc), into target/$(RUNNER_TARGET)/<profile>/, so each dependency
# is compiled once for the static binaries and the tests alike. Rust build output stays per
# checkout (Cargo's own target/):
# test binaries bake their checkout's paths in, so a target directory shared between clones could
# run one clone's tests against another clone's files.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c

# rust-toolchain.toml pins the Rust toolchain; rustup installs it here when it is missing, before
# any recipe runs cargo (the script is quiet and quick when the toolchain is there).
RUST_TOOLCHAIN_CHECK := $(shell hack/rust-toolchain.sh >&2 || echo failed)
ifneq ($(RUST_TOOLCHAIN_CHECK),)
$(error hack/rust-toolchain.sh could not install the Rust toolchain rust-toolchain.toml pins)
endif

CAPTF_CACHE ?= $(HOME)/.cache/captf
export CARGO_TARGET_DIR ?= $(CURDIR)/target
export CAPTF_TESTBIN ?= $(CAPTF_CACHE)/testbin
export CAPTF_NODE_IMAGES ?= $(CAPTF_CACHE)/node-images
CARGO ?= cargo
# The runner runs inside arbitrary module images: it is built static for this target. It is the
# workspace's default target (.cargo/config.toml, with the same flags): `--target` and STATIC only
# say so where a static binary is the point.
RUNNER_TARGET := x86_64-unknown-linux-gnu
STATIC := RUSTFLAGS='-C target-feature=+crt-static'
BIN_DIR := $(CARGO_TARGET_DIR)/$(RUNNER_TARGET)
# Integration tests run the static runner (debug build) inside real Job pods.
export CAPTF_RUNNER_BIN ?= $(BIN_DIR)/debug/runner
# The platforms of the static binaries and images (comma-separated): linux/amd64 and linux/arm64.
# linux/arm64 is cross-built with Debian's aarch64-linux-gnu toolchain (hack/cross.sh).
PLATFORMS ?= linux/amd64

.PHONY: help quickstart e2e e2e-upgrade node-images node-check two-clones test lint fmt fmt-check clippy unit chaos fuzz bench scale crds docs-check testbin runner-static runner-static-dev \
	static-binaries docker-build docker-push noop-images noop-images-push noop-registry-set manifests-release release-lint \
	testenv-deps docker-modules-check e2e-docker pre-commit-tool mdbook-tool cross-deps static-dev-arm64 actionlint release-snapshot lint-image lint-image-push

help: ## List the targets.
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | expand -t 16

# The test binaries the Quick Start runs (not Terraform, cert-manager, promtool or the arm64
# runtimes, which only tests use), built by Go beside the Rust build: the two overlap on the
# machine's cores, and both print their progress.
# FLAVOR=docker (real nodes) also needs the Docker provider for the docker modules' images and
# the node images, which build the node tools (kubectl among them) first.
QUICKSTART_TOOLS := $(strip tofu crane etcd kubernetes cluster-api $(if $(filter docker,$(FLAVOR)),terraform-provider-docker))
QUICKSTART_NODE_IMAGES := $(if $(filter docker,$(FLAVOR)),&& IMAGE_SOURCE='$(IMAGE_SOURCE)' hack/node-image.sh build >/dev/null)

quickstart: ## The book's Quick Start with Cluster API's real controllers, then the delete (KEEP=1 keeps it running; FLAVOR=docker: real nodes).
	@echo "quickstart: building the test binaries it needs ($(QUICKSTART_TOOLS)$(if $(filter docker,$(FLAVOR)), and the node images)) from source beside CAPTF's Rust build"
	{ hack/testbin.sh $(QUICKSTART_TOOLS) $(QUICKSTART_NODE_IMAGES); } & testbin=$$!; rc=0; \
	{ $(STATIC) $(CARGO) build --locked -p manager -p webhook -p runner --target $(RUNNER_TARGET) && \
	  $(CARGO) build --locked -p manager -p webhook -p captf-testenv -p captf-e2e --bins; } || rc=$$?; \
	wait $$testbin || rc=$$?; exit $$rc
	FLAVOR='$(FLAVOR)' $(BIN_DIR)/debug/quickstart

# two-clones runs last, after unit, even under -j: it lends this checkout's target/ to its clones.
# No incremental compilation: CI builds each checkout once, and the incremental caches of the
# workspace's ~100 test and binary crates took about 5 GB of disk.
test: export CARGO_INCREMENTAL = 0
test: fmt-check clippy docs-check actionlint unit ## Everything CI checks: formatting, clippy -D warnings, docs links, actionlint, all tests, then the Quick Start from two clones.
	$(MAKE) --no-print-directory two-clones

e2e: testbin runner-static-dev ## Only the end-to-end suite (Cluster API's real controllers).
	$(CARGO) build --locked -q -p manager -p webhook -p captf-testenv --bins
	$(CARGO) test --locked -p captf-e2e

# Not in `make test`: the first run builds the previous release (hack/previous-release) from
# source, in its own tree under $(CAPTF_CACHE)/previous-release, which later runs reuse.
e2e-upgrade: testbin runner-static-dev testenv-deps ## The upgrade test: clusterctl upgrade from the previous release (hack/previous-release) to this checkout with clusters running (docs/src/upgrading.md).
	$(CARGO) build --locked -q -p manager -p webhook -p captf-testenv --bins
	CAPTF_CACHE='$(CAPTF_CACHE)' $(CARGO) test --locked -p captf-e2e --test upgrade -- --ignored --nocapture

# Not in `make test`: the node images and the Docker provider are built from source the first
# time (about 20 minutes of Go builds and image builds here), which the cold `.ci/run` cannot
# afford beside its 60 minutes.
e2e-docker: testbin runner-static-dev testenv-deps ## The end-to-end suite on real nodes: the docker flavor through Cluster API's real controllers, a control plane that initializes, a worker and a MachinePool that join, a MachineHealthCheck remediation, and a delete that leaves nothing (docs/src/development/real-nodes.md).
	hack/testbin.sh terraform-provider-docker
	IMAGE_SOURCE='$(IMAGE_SOURCE)' hack/node-image.sh build >/dev/null
	$(CARGO) build --locked -q -p manager -p webhook -p captf-testenv --bins
	$(CARGO) test --locked -p captf-e2e --test real_nodes -- --ignored --nocapture

# Real workload nodes (issue 32; docs/src/development/real-nodes.md): the node image and the
# control-plane images kubeadm runs, built from source and Debian's packages. Not part of
# `make test`: the first build of the Kubernetes node binaries and images takes a while.
node-images: ## Build the node image of real workload clusters (kubelet, kubeadm, containerd, systemd, the control-plane images) into $(CAPTF_NODE_IMAGES).
	IMAGE_SOURCE='$(IMAGE_SOURCE)' hack/node-image.sh build

node-check: ## Boot one node container under a Docker daemon of its own and kubeadm init it to a Ready control-plane Node.
	IMAGE_SOURCE='$(IMAGE_SOURCE)' hack/node-image.sh check

docker-modules-check: ## Apply the docker modules (modules/docker) under a Docker daemon of their own: a load balancer, a control plane that initializes through it, a pool node that joins; then destroy them.
	IMAGE_SOURCE='$(IMAGE_SOURCE)' hack/docker-modules-check.sh

two-clones: ## Build and run the Quick Start from two fresh clones of HEAD in turn (hack/two-clones.sh).
	hack/two-clones.sh

lint: fmt-check clippy docs-check actionlint ## Formatting, clippy, docs and workflow checks only.

actionlint: ## Check .github/ (the release workflow) with actionlint, built from source into the test-binary cache.
	hack/testbin.sh actionlint >/dev/null
	$$(hack/testbin.sh --print-env | sed -n 's/^CAPTF_TESTBIN_ACTIONLINT=//p') -no-color

fmt: ## Format the code.
	$(CARGO) fmt --all

fmt-check:
	$(CARGO) fmt --all -- --check

clippy:
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings

unit: testbin runner-static-dev static-dev-arm64 testenv-deps pre-commit-tool ## All tests of the workspace (integration tests need the test binaries, a static runner, iproute2 and pre-commit), in two lanes at once (hack/test-lanes.sh).
	CARGO='$(CARGO)' hack/test-lanes.sh

# `make test` runs the same harness with 5 cycles (its default) as part of `unit`.
# Five namespaces side by side: 50 cycles take about 10 minutes on two cores.
CHAOS_CYCLES ?= 50
CHAOS_LANES ?= 5
chaos: testbin runner-static-dev testenv-deps ## The fault harness: bring-up-and-delete cycles under random manager and leader kills, runner pod kills, evictions and SIGTERMs, API-server restarts and etcd pauses, then the invariant table (CHAOS_CYCLES=50; CAPTF_CHAOS_SEED=N replays a run).
	CAPTF_CHAOS_CYCLES=$(CHAOS_CYCLES) CAPTF_CHAOS_LANES=$(CHAOS_LANES) $(CARGO) test --locked -p manager --test chaos -- --nocapture

# The fuzz targets run a small number of cases as part of `unit`; CAPTF_FUZZ_CASES raises it.
fuzz: ## Fuzz longer (issue 19, release build): 10^6 cases of each state, plan and HCL property, 10^5 of result documents, image labels and image layouts, 10^4 AdmissionReviews.
	CAPTF_FUZZ_CASES=1000000 $(CARGO) test --release --locked -p captf-contract --test fuzz_state --test fuzz_plan
	CAPTF_FUZZ_CASES=1000000 $(CARGO) test --release --locked -p tfcapi-lint --test fuzz_hcl
	CAPTF_FUZZ_CASES=100000 $(CARGO) test --release --locked -p captf-contract --test fuzz_result --test fuzz_image
	CAPTF_FUZZ_CASES=100000 $(CARGO) test --release --locked -p tfcapi-lint --test fuzz_image_manifest
	CAPTF_FUZZ_CASES=10000 $(CARGO) test --release --locked -p webhook --test proptest_admission

# Benchmarks against their peers, measured in the same run; one table at the end
# (docs/src/performance.md). tflint, the linter's peer, is built here only: not by `testbin`,
# so `make test` never builds it. Run it on a quiet machine; `nice -n 19 make bench` when shared.
bench: testbin testenv-deps ## Benchmarks against their peers (state reader vs gunzip, tfcapi-lint vs tflint, runner vs tofu by hand, webhook latency), then one table.
	hack/testbin.sh tflint
	CARGO='$(CARGO)' hack/bench.sh

# The scale harness (issue 18; docs/src/performance.md): release builds of the manager and the
# webhook, a fresh environment per fleet. `make test` runs a short version (100 adopted machines).
SCALE_ADOPTED ?= 100,300,1000
SCALE_APPLIED ?= 100,300
# Applied fleets on a manager whose drift interval (SCALE_DRIFT_INTERVAL) is inside the steady window.
SCALE_DRIFT ?= 100
SCALE_DRIFT_INTERVAL ?= 120s
# Unrelated Secrets (and a fifth as many ConfigMaps) next to a small fleet: the cost of the
# manager's watches on a busy management cluster. Empty or 0 runs none.
SCALE_UNRELATED ?=
scale: testbin runner-static-dev testenv-deps ## The scale harness: fleets of TerraformMachines adopted (SCALE_ADOPTED=100,300,1000) and applied (SCALE_APPLIED=100,300), and applied with drift checks in the steady window (SCALE_DRIFT=100) on one manager next to Cluster API's core manager; memory, CPU, API requests by verb, time to Ready, queue latency, then one table. SCALE_UNRELATED=10000 adds the manager's memory and CPU with that many unrelated Secrets (and 2,000 ConfigMaps) in the cluster.
	$(CARGO) build --release --locked -p manager -p webhook -p captf-testenv -p captf-e2e --bins
	CAPTF_SCALE_ADOPTED='$(SCALE_ADOPTED)' CAPTF_SCALE_APPLIED='$(SCALE_APPLIED)' CAPTF_SCALE_DRIFT='$(SCALE_DRIFT)' CAPTF_SCALE_DRIFT_INTERVAL='$(SCALE_DRIFT_INTERVAL)' CAPTF_SCALE_UNRELATED='$(SCALE_UNRELATED)' $(BIN_DIR)/release/scale

crds: ## Regenerate config/crd/bases and docs/src/reference/api.md from the API types.
	$(CARGO) run --locked -q -p captf-api --bin crdgen -- .

docs-check: mdbook-tool ## The book: every page is in docs/src/SUMMARY.md and names the part of the specification it covers, every relative link and anchor resolves, and `mdbook build` succeeds.
	hack/check-docs.sh
	@out=$$($(CAPTF_MDBOOK) build docs --dest-dir $(CARGO_TARGET_DIR)/book 2>&1) || { echo "$$out" >&2; exit 1; }; \
	  if grep -E '\b(WARN|ERROR)\b' <<<"$$out" >&2; then echo "docs-check: mdbook build warned" >&2; exit 1; fi

# mdBook from crates.io, pinned, built once into $(MDBOOK_ROOT) outside the clone (its build
# directory is removed afterwards). No default features: no `serve`, no `watch`.
MDBOOK_VERSION := 0.5.4
MDBOOK_ROOT ?= $(CAPTF_CACHE)/mdbook-$(MDBOOK_VERSION)
export CAPTF_MDBOOK ?= $(MDBOOK_ROOT)/bin/mdbook

mdbook-tool: ## Install mdBook $(MDBOOK_VERSION) from crates.io into $(MDBOOK_ROOT) (docs-check runs it).
	@test -x $(CAPTF_MDBOOK) || { rm -rf $(MDBOOK_ROOT).build && \
	  CARGO_TARGET_DIR=$(MDBOOK_ROOT).build $(CARGO) install --locked --quiet --no-default-features \
	    mdbook --version $(MDBOOK_VERSION) --root $(MDBOOK_ROOT) && rm -rf $(MDBOOK_ROOT).build; }

testbin: ## Build the test binaries (kube-apiserver, etcd, tofu, crane, Cluster API, clusterctl, cert-manager) from source into $(CAPTF_TESTBIN).
	hack/testbin.sh

runner-static: ## Build the static runner (release) that the runner image ships.
	$(STATIC) $(CARGO) build --release --locked -p runner --target $(RUNNER_TARGET)

# The manager and webhook are built with it, as `make docker-build IMAGE_PROFILE=dev` builds them:
# one feature set for the static target, so the install test's image build reuses this build.
runner-static-dev:
	$(STATIC) $(CARGO) build --locked -p manager -p webhook -p runner --target $(RUNNER_TARGET)

# The multi-platform test (crates/e2e/tests/release_snapshot.rs) builds images and tfcapi-lint for
# linux/arm64 too: built here, before the test lanes start, with the same package sets as
# static-binaries and release-lint, so the test's make runs find them built. It also runs them
# under qemu-user.
static-dev-arm64:
	hack/cross.sh deps linux/arm64
	hack/cross.sh qemu
	$(STATIC) $(CARGO) build --locked -p manager -p webhook -p runner --target aarch64-unknown-linux-gnu
	$(STATIC) $(CARGO) build --locked -p tfcapi-lint --target aarch64-unknown-linux-gnu

cross-deps: ## Install what building for PLATFORMS needs, when missing (rustup targets; Debian's aarch64 cross toolchain for linux/arm64).
	hack/cross.sh deps '$(PLATFORMS)'

# docker.io is installed here, before the test lanes start, so no test installs it while another
# lane's first image build installs buildah (both would need dpkg's lock).
testenv-deps: ## What the test environment needs from the machine: `ip` (iproute2) for the pod network and Debian's docker.io for its Docker daemon, installed when missing (root, Debian).
	@command -v ip >/dev/null || { \
	  [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null || { echo "testenv-deps: install iproute2 (the pod network runs ip)" >&2; exit 1; }; \
	  DEBIAN_FRONTEND=noninteractive apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends iproute2; }
	@{ command -v dockerd >/dev/null || [ -x /usr/sbin/dockerd ]; } && [ -x /usr/bin/docker ] || { \
	  [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null || { echo "testenv-deps: install Debian's docker.io (the test environment's Docker daemon)" >&2; exit 1; }; \
	  DEBIAN_FRONTEND=noninteractive apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends docker.io; }

# pre-commit from PyPI, in a virtualenv of its own, for the tfcapi-lint hook test.
PRE_COMMIT_VERSION := 4.7.0
PRE_COMMIT_VENV ?= $(CAPTF_CACHE)/pre-commit-$(PRE_COMMIT_VERSION)
export CAPTF_PRE_COMMIT ?= $(PRE_COMMIT_VENV)/bin/pre-commit

pre-commit-tool: ## Install pre-commit from PyPI into $(PRE_COMMIT_VENV) (the hook test runs it).
	@test -f $(PRE_COMMIT_VENV)/.installed || { rm -rf $(PRE_COMMIT_VENV) && python3 -m venv $(PRE_COMMIT_VENV) && \
	  $(PRE_COMMIT_VENV)/bin/pip install -q --disable-pip-version-check pre-commit==$(PRE_COMMIT_VERSION) && \
	  touch $(PRE_COMMIT_VENV)/.installed; }

# ---------------------------------------------------------------------------------------------
# Images and releases (docs/src/installation.md). hack/image.sh picks the engine: docker when its
# daemon answers, else podman, else buildah (installed from Debian's packages when missing, as
# root), with vfs storage and chroot isolation.

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo v0.0.0-dev)
# The manager image; the webhook and runner images sit beside it, with the same tag, unless set.
IMG ?= localhost/cluster-api-provider-terraform:$(VERSION)
image_repo = $(shell echo '$(1)' | sed -E 's#:[^:/]+$$##')
image_tag = $(shell echo '$(1)' | sed -nE 's#.*:([^:/]+)$$#\1#p')
WEBHOOK_IMG ?= $(call image_repo,$(IMG))-webhook:$(call image_tag,$(IMG))
RUNNER_IMG ?= $(call image_repo,$(IMG))-runner:$(call image_tag,$(IMG))
# Cargo profile of the image binaries (`dev` for quick local images; its output dir is debug/).
IMAGE_PROFILE ?= release
IMAGE_PROFILE_DIR = $(if $(filter dev,$(IMAGE_PROFILE)),debug,$(IMAGE_PROFILE))
IMAGE_CONTEXT = $(CARGO_TARGET_DIR)/image-context
CA_BUNDLE ?= /etc/ssl/certs/ca-certificates.crt
IMAGE_SOURCE ?= https://github.com/captf-io/cluster-api-provider-terraform
IMAGE_REVISION ?= $(shell git rev-parse HEAD 2>/dev/null)
IMAGE_ARGS = --build-arg VERSION=$(VERSION) --build-arg REVISION=$(IMAGE_REVISION) --build-arg SOURCE=$(IMAGE_SOURCE)

# One cargo run per platform: a run for both would unify their features and rebuild the
# linux/amd64 binaries the tests share.
static-binaries: cross-deps ## Build the static manager, webhook and runner binaries the images ship (IMAGE_PROFILE=release, PLATFORMS).
	targets=$$(hack/cross.sh targets '$(PLATFORMS)'); for t in $$targets; do \
	  $(STATIC) $(CARGO) build --locked --profile $(IMAGE_PROFILE) -p manager -p webhook -p runner --target $$t; done

# The build context of each image holds one folder per architecture (amd64/, arm64/), which its
# Containerfile picks with TARGETARCH; several PLATFORMS make each image a manifest list.
docker-build: static-binaries ## Build the manager (IMG), webhook (WEBHOOK_IMG) and runner (RUNNER_IMG) images, for PLATFORMS.
	@test -r $(CA_BUNDLE) || { echo "docker-build: no CA bundle at $(CA_BUNDLE): install ca-certificates or set CA_BUNDLE" >&2; exit 1; }
	rm -rf $(IMAGE_CONTEXT) && mkdir -p $(IMAGE_CONTEXT)/manager $(IMAGE_CONTEXT)/webhook $(IMAGE_CONTEXT)/runner
	cp $(CA_BUNDLE) $(IMAGE_CONTEXT)/manager/
	@# Symbols and debug information stay out of the images (the line tables of the release
	@# profile are for local debugging).
	platforms=$$(hack/cross.sh platforms '$(PLATFORMS)'); for p in $$platforms; do \
	  arch=$$(hack/cross.sh arch $$p); target=$$(hack/cross.sh targets $$p); strip=$$(hack/cross.sh strip $$p); \
	  for b in manager webhook runner; do mkdir -p $(IMAGE_CONTEXT)/$$b/$$arch && \
	    $$strip -o $(IMAGE_CONTEXT)/$$b/$$arch/$$b $(CARGO_TARGET_DIR)/$$target/$(IMAGE_PROFILE_DIR)/$$b; done; done
	hack/image.sh build --platform '$(PLATFORMS)' -f images/manager/Containerfile -t $(IMG) $(IMAGE_ARGS) $(IMAGE_CONTEXT)/manager
	hack/image.sh build --platform '$(PLATFORMS)' -f images/webhook/Containerfile -t $(WEBHOOK_IMG) $(IMAGE_ARGS) $(IMAGE_CONTEXT)/webhook
	hack/image.sh build --platform '$(PLATFORMS)' -f images/runner/Containerfile -t $(RUNNER_IMG) $(IMAGE_ARGS) $(IMAGE_CONTEXT)/runner

docker-push: ## Push the three images docker-build built (IMG must name your registry; the same PLATFORMS).
	@if [ "$(origin IMG)" = file ] || [ -z "$(IMG)" ]; then echo "docker-push: set IMG=<registry>/cluster-api-provider-terraform:<tag> (the webhook and runner images are pushed beside it)" >&2; exit 1; fi
	hack/image.sh push --platform '$(PLATFORMS)' $(IMG)
	hack/image.sh push --platform '$(PLATFORMS)' $(WEBHOOK_IMG)
	hack/image.sh push --platform '$(PLATFORMS)' $(RUNNER_IMG)

# The no-op module images: one per role in NOOP and runtime in NOOP_RUNTIMES, tagged
# $(NOOP_REGISTRY)/noop-<role>:$(VERSION)-<runtime>. TERRAFORM_IMAGE and TOFU_IMAGE, when set,
# choose the base images (the defaults are the upstream ones named in the Containerfiles).
NOOP ?= cluster machine machinepool
NOOP_RUNTIMES ?= terraform opentofu
NOOP_REGISTRY ?= localhost/captf
noop_base_arg = $(if $(filter terraform,$(1)),$(if $(TERRAFORM_IMAGE),--build-arg TERRAFORM_IMAGE=$(TERRAFORM_IMAGE)),$(if $(TOFU_IMAGE),--build-arg TOFU_IMAGE=$(TOFU_IMAGE)))

noop-registry-set:
	@if [ "$(origin NOOP_REGISTRY)" = file ] || [ -z "$(NOOP_REGISTRY)" ]; then \
	  echo "noop-images-push: set NOOP_REGISTRY=<registry>/<path> to push to" >&2; exit 1; fi

noop-images: ## Build the no-op module images (NOOP="cluster machine machinepool", NOOP_REGISTRY, VERSION).
	@for role in $(NOOP); do \
	  test -d modules/noop/$$role || { echo "noop-images: no module modules/noop/$$role (NOOP takes cluster, machine, machinepool)" >&2; exit 1; }; \
	done
	$(foreach role,$(NOOP),$(foreach rt,$(NOOP_RUNTIMES),\
	  hack/image.sh build --platform '$(PLATFORMS)' -f modules/noop/Containerfile.$(rt) -t $(NOOP_REGISTRY)/noop-$(role):$(VERSION)-$(rt) \
	    --build-arg ROLE=$(role) --build-arg IMAGE_VERSION=$(VERSION) --build-arg IMAGE_REVISION=$(IMAGE_REVISION) \
	    --build-arg IMAGE_SOURCE=$(IMAGE_SOURCE) $(call noop_base_arg,$(rt)) modules/noop/$(role) &&)) true

noop-images-push: noop-registry-set noop-images ## Build and push the no-op module images to NOOP_REGISTRY.
	$(foreach role,$(NOOP),$(foreach rt,$(NOOP_RUNTIMES),hack/image.sh push --platform '$(PLATFORMS)' $(NOOP_REGISTRY)/noop-$(role):$(VERSION)-$(rt) &&)) true

# A clusterctl local repository: infrastructure-components.yaml (config/default with the release
# images), metadata.yaml and the flavors of templates/.
RELEASE_DIR ?= out/infrastructure-terraform/$(VERSION)
RELEASE_IMG ?=
RELEASE_WEBHOOK_IMG ?= $(call image_repo,$(RELEASE_IMG))-webhook:$(call image_tag,$(RELEASE_IMG))
RELEASE_RUNNER_IMG ?= $(call image_repo,$(RELEASE_IMG))-runner:$(call image_tag,$(RELEASE_IMG))
KUSTOMIZE ?= $(shell hack/testbin.sh --print-env | sed -n 's/^CAPTF_TESTBIN_KUSTOMIZE=//p')

manifests-release: ## Render a clusterctl repository into RELEASE_DIR for RELEASE_IMG (manager image) and VERSION.
	@test -x "$(KUSTOMIZE)" || hack/testbin.sh kustomize
	RELEASE_DIR='$(RELEASE_DIR)' RELEASE_IMG='$(RELEASE_IMG)' RELEASE_WEBHOOK_IMG='$(RELEASE_WEBHOOK_IMG)' \
	  RELEASE_RUNNER_IMG='$(RELEASE_RUNNER_IMG)' VERSION='$(VERSION)' KUSTOMIZE='$(KUSTOMIZE)' hack/manifests-release.sh

# A release cut on this machine or by the release workflow (hack/release-snapshot.sh): every image
# for both platforms pushed to SNAPSHOT_REGISTRY and signed, and into SNAPSHOT_DIR the clusterctl
# repository, the tfcapi-lint assets (the Linux ones built here, those in SNAPSHOT_ASSETS built
# elsewhere), an SBOM per binary and platform, images.txt, checksums.txt and its signature. Signed
# with COSIGN_KEY, or keyless (COSIGN_KEYLESS=true, the workflow's OIDC identity).
SNAPSHOT_PLATFORMS ?= linux/amd64,linux/arm64
SNAPSHOT_DIR ?= out/release-snapshot/infrastructure-terraform/$(VERSION)
SNAPSHOT_REGISTRY ?=
SNAPSHOT_ASSETS ?=
COSIGN_KEY ?=
COSIGN_KEYLESS ?=

release-snapshot: ## Cut a signed release into SNAPSHOT_DIR and SNAPSHOT_REGISTRY (VERSION=vX.Y.Z; COSIGN_KEY and COSIGN_PASSWORD, or COSIGN_KEYLESS=true; SNAPSHOT_PLATFORMS, SNAPSHOT_ASSETS).
	DIR='$(SNAPSHOT_DIR)' REGISTRY='$(SNAPSHOT_REGISTRY)' VERSION='$(VERSION)' PLATFORMS='$(SNAPSHOT_PLATFORMS)' \
	  ASSETS='$(SNAPSHOT_ASSETS)' COSIGN_KEY='$(COSIGN_KEY)' COSIGN_KEYLESS='$(COSIGN_KEYLESS)' \
	  IMAGE_PROFILE='$(IMAGE_PROFILE)' LINT_PROFILE='$(LINT_PROFILE)' MAKE='$(MAKE)' \
	  hack/release-snapshot.sh

# tfcapi-lint release assets: the Linux ones build here (PLATFORMS); .github/workflows/release.yaml
# builds the macOS and Windows ones on their own runners. LINT_PROFILE=dev is for quick tests.
LINT_DIST ?= dist
LINT_PROFILE ?= release
LINT_PROFILE_DIR = $(if $(filter dev,$(LINT_PROFILE)),debug,$(LINT_PROFILE))

release-lint: cross-deps ## Build the static tfcapi-lint release assets for PLATFORMS (tfcapi-lint-linux-ARCH) and the checksum file into LINT_DIST.
	platforms=$$(hack/cross.sh platforms '$(PLATFORMS)'); mkdir -p $(LINT_DIST); \
	for p in $$platforms; do \
	  target=$$(hack/cross.sh targets $$p); asset=$(LINT_DIST)/tfcapi-lint-linux-$$(hack/cross.sh arch $$p); \
	  $(STATIC) $(CARGO) build --locked --profile $(LINT_PROFILE) -p tfcapi-lint --target $$target; \
	  $$(hack/cross.sh strip $$p) -o $$asset $(CARGO_TARGET_DIR)/$$target/$(LINT_PROFILE_DIR)/tfcapi-lint; chmod 0755 $$asset; done
	cd $(LINT_DIST) && sha256sum tfcapi-lint-*-* > tfcapi-lint-checksums.txt && cat tfcapi-lint-checksums.txt

# The tfcapi-lint image: the release assets of release-lint (in LINT_DIST) for PLATFORMS, with the CA
# bundle, as LINT_IMG.
LINT_IMG ?= $(dir $(call image_repo,$(IMG)))tfcapi-lint:$(call image_tag,$(IMG))

lint-image: release-lint ## Build the tfcapi-lint image (LINT_IMG) for PLATFORMS from the release-lint assets.
	@test -r $(CA_BUNDLE) || { echo "lint-image: no CA bundle at $(CA_BUNDLE): install ca-certificates or set CA_BUNDLE" >&2; exit 1; }
	rm -rf $(IMAGE_CONTEXT)/tfcapi-lint && mkdir -p $(IMAGE_CONTEXT)/tfcapi-lint
	cp $(CA_BUNDLE) $(IMAGE_CONTEXT)/tfcapi-lint/
	platforms=$$(hack/cross.sh platforms '$(PLATFORMS)'); for p in $$platforms; do arch=$$(hack/cross.sh arch $$p); \
	  mkdir -p $(IMAGE_CONTEXT)/tfcapi-lint/$$arch && cp $(LINT_DIST)/tfcapi-lint-linux-$$arch $(IMAGE_CONTEXT)/tfcapi-lint/$$arch/tfcapi-lint; done
	hack/image.sh build --platform '$(PLATFORMS)' -f images/tfcapi-lint/Containerfile -t $(LINT_IMG) $(IMAGE_ARGS) $(IMAGE_CONTEXT)/tfcapi-lint

lint-image-push: ## Push the tfcapi-lint image lint-image built (the same PLATFORMS).
	@if [ "$(origin IMG)" = file ] && [ "$(origin LINT_IMG)" = file ]; then echo "lint-image-push: set LINT_IMG=<registry>/tfcapi-lint:<tag> (or IMG)" >&2; exit 1; fi
	hack/image.sh push --platform '$(PLATFORMS)' $(LINT_IMG)
