# CAPTF entry points. `make test` is what CI runs (.ci/run).
#
# Build outputs live outside the clone so a fresh clone reuses them: Rust artifacts in
# $(CARGO_TARGET_DIR), test binaries (kube-apiserver, etcd, tofu, ...) in $(CAPTF_TESTBIN).

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c

CAPTF_CACHE ?= $(HOME)/.cache/captf
export CARGO_TARGET_DIR ?= $(CAPTF_CACHE)/target
export CAPTF_TESTBIN ?= $(CAPTF_CACHE)/testbin
CARGO ?= cargo

.PHONY: help test lint fmt fmt-check clippy unit crds docs-check testbin

help: ## List the targets.
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | expand -t 16

test: fmt-check clippy docs-check unit ## Everything CI checks: formatting, clippy -D warnings, docs links, all tests.

lint: fmt-check clippy docs-check ## Formatting, clippy and docs checks only.

fmt: ## Format the code.
	$(CARGO) fmt --all

fmt-check:
	$(CARGO) fmt --all -- --check

clippy:
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings

unit: testbin ## All tests of the workspace (integration tests need the test binaries).
	$(CARGO) test --workspace --locked --no-fail-fast

crds: ## Regenerate config/crd/bases and docs/src/reference/api.md from the API types.
	$(CARGO) run --locked -q -p captf-api --bin crdgen -- .

docs-check: ## Every page docs/src/SUMMARY.md links to exists.
	hack/check-docs.sh

testbin: ## Build the test binaries (kube-apiserver, etcd, tofu, crane, ...) from source into $(CAPTF_TESTBIN).
	hack/testbin.sh
