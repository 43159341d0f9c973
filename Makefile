# CAPTF entry points. `make test` is what CI runs (.ci/run).
#
# Test binaries (kube-apiserver, etcd, tofu, ...) are built once into $(CAPTF_TESTBIN), outside the
# clone, and reused by every clone. Rust build output stays per checkout (Cargo's own target/):
# test binaries bake their checkout's paths in, so a target directory shared between clones could
# run one clone's tests against another clone's files.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c

CAPTF_CACHE ?= $(HOME)/.cache/captf
export CARGO_TARGET_DIR ?= $(CURDIR)/target
export CAPTF_TESTBIN ?= $(CAPTF_CACHE)/testbin
CARGO ?= cargo
# The runner runs inside arbitrary module images: it is built static for this target.
RUNNER_TARGET := x86_64-unknown-linux-gnu
STATIC := RUSTFLAGS='-C target-feature=+crt-static'
# Integration tests run the static runner (debug build) inside real Job pods.
export CAPTF_RUNNER_BIN ?= $(CARGO_TARGET_DIR)/$(RUNNER_TARGET)/debug/runner

.PHONY: help quickstart e2e two-clones test lint fmt fmt-check clippy unit crds docs-check testbin runner-static runner-static-dev

help: ## List the targets.
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | expand -t 16

quickstart: testbin runner-static-dev ## The book's Quick Start with Cluster API's real controllers, then the delete (KEEP=1 keeps it running).
	$(CARGO) build --locked -q -p manager -p webhook -p captf-testenv -p captf-e2e --bins
	$(CARGO_TARGET_DIR)/debug/quickstart

test: fmt-check clippy docs-check unit ## Everything CI checks: formatting, clippy -D warnings, docs links, all tests.

e2e: testbin runner-static-dev ## Only the end-to-end suite (Cluster API's real controllers).
	$(CARGO) build --locked -q -p manager -p webhook -p captf-testenv --bins
	$(CARGO) test --locked -p captf-e2e

two-clones: ## Build and run the Quick Start from two fresh clones of HEAD in turn (hack/two-clones.sh).
	hack/two-clones.sh

lint: fmt-check clippy docs-check ## Formatting, clippy and docs checks only.

fmt: ## Format the code.
	$(CARGO) fmt --all

fmt-check:
	$(CARGO) fmt --all -- --check

clippy:
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings

unit: testbin runner-static-dev ## All tests of the workspace (integration tests need the test binaries and a static runner).
	$(CARGO) test --workspace --locked --no-fail-fast

crds: ## Regenerate config/crd/bases and docs/src/reference/api.md from the API types.
	$(CARGO) run --locked -q -p captf-api --bin crdgen -- .

docs-check: ## Every page docs/src/SUMMARY.md links to exists.
	hack/check-docs.sh

testbin: ## Build the test binaries (kube-apiserver, etcd, tofu, crane, Cluster API, clusterctl) from source into $(CAPTF_TESTBIN).
	hack/testbin.sh

runner-static: ## Build the static runner (release) that the runner image ships.
	$(STATIC) $(CARGO) build --release --locked -p runner --target $(RUNNER_TARGET)

runner-static-dev:
	$(STATIC) $(CARGO) build --locked -p runner --target $(RUNNER_TARGET)
