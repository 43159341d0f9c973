#!/usr/bin/env bash
# Builds the test binaries CAPTF's integration and end-to-end tests run, from source,
# through the Go module proxy. See docs/src/development/test-binaries.md.
#
# Usage:
#   hack/testbin.sh                 build every tool that is not cached yet (all but tflint)
#   hack/testbin.sh TOOL...         only these tools (tofu, crane, etcd, kubernetes, kustomize,
#                                   terraform, cluster-api, cert-manager, promtool, tflint,
#                                   tofu-linux-arm64, terraform-linux-arm64, cluster-api-operator,
#                                   actionlint, cosign)
#   hack/testbin.sh --rebuild TOOL  delete TOOL's cached directory first, then build it
#   hack/testbin.sh --print-env     print KEY=PATH lines (no build; paths may not exist yet)
#   hack/testbin.sh --list          print "tool version dir" lines (no build)
#   hack/testbin.sh --module-dir T  print the Go module cache directory of T's pinned module
#
# Layout (a Rust crate reads the same layout; keep the two in step):
#   ${CAPTF_TESTBIN:-$HOME/.cache/captf/testbin}/<tool>-<version>/<binary>
#     tofu-v1.12.6/tofu
#     crane-v0.22.1/crane
#     etcd-v3.6.16/etcd
#     kubernetes-v1.36.3/kube-apiserver
#     kubernetes-v1.36.3/kube-controller-manager
#     kustomize-v5.8.1/kustomize
#     terraform-v1.8.5/terraform
#     cluster-api-v1.14.2/{capi-manager,kubeadm-bootstrap-manager,kubeadm-control-plane-manager,clusterctl}
#     cert-manager-v1.11.5/{cert-manager-controller,cert-manager-cainjector,cert-manager-webhook,helm}
#     cert-manager-v1.11.5/cert-manager.yaml   (its install manifest, rendered from its chart by
#                                               hack/cert-manager-manifest.sh with that helm)
#     promtool-v0.316.0/promtool
#     cluster-api-operator-v0.29.0/cluster-api-operator  (the Operator install test runs it)
#     tofu-v1.12.6-linux-arm64/tofu, terraform-v1.8.5-linux-arm64/terraform
#                                (the runtimes for linux/arm64, GOARCH=arm64: the multi-platform
#                                 test builds no-op module images for both platforms from them)
#     tflint-v0.64.0/tflint      (only when named: `make bench` builds it, `make testbin` does not)
#     actionlint-v1.7.12/actionlint  (only when named: `make lint` builds it)
#     cosign-v2.6.5/cosign       (only when named: `make release-snapshot` builds it)
#     terraform-provider-docker-v0.0.0-20260916201441-96d331c98ff4/terraform-provider-docker
#                                (only when named: `make docker-modules` builds it; a commit
#                                 after kreuzwerker/docker v4.6.0, mirrored as 4.6.0)
#   <version> is the version of the tool's main module as pinned in
#   hack/testbin/<tool>/go.mod (the single source of truth; bump it there + `go mod tidy`).
#
# --print-env variables (one per binary, plus the root):
#   CAPTF_TESTBIN, CAPTF_TESTBIN_TOFU, CAPTF_TESTBIN_CRANE, CAPTF_TESTBIN_ETCD,
#   CAPTF_TESTBIN_KUBE_APISERVER, CAPTF_TESTBIN_KUBE_CONTROLLER_MANAGER, CAPTF_TESTBIN_KUSTOMIZE,
#   CAPTF_TESTBIN_TERRAFORM, CAPTF_TESTBIN_CAPI_MANAGER, CAPTF_TESTBIN_KUBEADM_BOOTSTRAP_MANAGER,
#   CAPTF_TESTBIN_KUBEADM_CONTROL_PLANE_MANAGER, CAPTF_TESTBIN_CLUSTERCTL,
#   CAPTF_TESTBIN_CERT_MANAGER_CONTROLLER, CAPTF_TESTBIN_CERT_MANAGER_CAINJECTOR,
#   CAPTF_TESTBIN_CERT_MANAGER_WEBHOOK, CAPTF_TESTBIN_HELM, CAPTF_TESTBIN_CERT_MANAGER_MANIFEST,
#   CAPTF_TESTBIN_PROMTOOL, CAPTF_TESTBIN_TFLINT, CAPTF_TESTBIN_TOFU_LINUX_ARM64,
#   CAPTF_TESTBIN_TERRAFORM_LINUX_ARM64, CAPTF_TESTBIN_CLUSTER_API_OPERATOR,
#   CAPTF_TESTBIN_ACTIONLINT, CAPTF_TESTBIN_COSIGN
#
# Cluster API's CRDs and webhook manifests are not copied anywhere: the test environment reads
# them from the pinned module in the Go module cache (`--module-dir cluster-api` prints it).
#
# A tool is "cached" when all of its binaries exist in its directory: nothing is built.
# Builds go to a temporary directory first and are moved into place at the end, so an
# interrupted build never leaves a half-written directory that counts as cached.
# GOMODCACHE stays at Go's default (outside the clone): the test environment reads Cluster API's
# CRDs from it. GOCACHE, unless the caller sets it, is a temporary directory under $CAPTF_TESTBIN
# that lives for one run of this script and is removed at its end: the binaries are what is
# cached, and Go's build cache for all of them (about 10 GB) would otherwise stay on the disk
# beside the Rust build (a cold `make test` once ran out of disk). Builds run under
# `nice -n 19` (the machine is shared) with CGO_ENABLED=0 (static binaries), -trimpath, GOWORK=off,
# GOTOOLCHAIN=local and -mod=readonly (go.mod/go.sum are committed; nothing is re-resolved).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WRAPPERS="$ROOT/hack/testbin"
TESTBIN="${CAPTF_TESTBIN:-$HOME/.cache/captf/testbin}"
ALL_TOOLS=(tofu crane etcd kubernetes kustomize terraform cluster-api cert-manager promtool tofu-linux-arm64 terraform-linux-arm64 cluster-api-operator) # build order: fastest useful first
# Tools built only when named: the peers `make bench` measures against. They stay out of the
# default build, so `make testbin` (and CI's cold path) never builds them.
BENCH_TOOLS=(tflint)
# Tools built when a target needs them: actionlint checks .github/ (`make lint`); cosign signs and
# verifies what `make release-snapshot` publishes.
LINT_TOOLS=(actionlint cosign)
# Tools built when a real node is needed (`make node-images`, hack/node-image.sh): the binaries
# of a workload cluster's node and of the control-plane images kubeadm runs, at the versions
# kubeadm deploys by default for the test binaries' Kubernetes; and the Docker provider the docker
# modules' images carry (`make docker-modules`).
NODE_TOOLS=(kubernetes-node etcd-node coredns cri-tools cni-plugins terraform-provider-docker)

# A tool NAME-linux-arm64 is NAME built for linux/arm64 (GOARCH=arm64), into a directory of its
# own; only the runtimes have one.
base_of() {
  case "$1" in
    tofu-linux-arm64 | terraform-linux-arm64) echo "${1%-linux-arm64}" ;;
    *) echo "$1" ;;
  esac
}

# The wrapper module (hack/testbin/<wrapper>) a tool builds from: its base's, except for
# kubernetes-node, which builds other binaries of the kubernetes wrapper's module.
wrapper_of() {
  case "$1" in
    kubernetes-node) echo kubernetes ;;
    *) base_of "$1" ;;
  esac
}

# The GOARCH a tool is built for: empty for the machine's own.
goarch_of() {
  if [[ $1 == *-linux-arm64 ]]; then echo arm64; fi
}

# tool -> main module (its version names the directory)
module_of() {
  [[ $1 == "$(base_of "$1")" ]] || { module_of "$(base_of "$1")"; return; }
  case "$1" in
    tofu) echo github.com/opentofu/opentofu ;;
    crane) echo github.com/google/go-containerregistry ;;
    etcd) echo go.etcd.io/etcd/server/v3 ;;
    kubernetes | kubernetes-node) echo k8s.io/kubernetes ;;
    etcd-node) echo go.etcd.io/etcd/server/v3 ;;
    coredns) echo github.com/coredns/coredns ;;
    cri-tools) echo sigs.k8s.io/cri-tools ;;
    cni-plugins) echo github.com/containernetworking/plugins ;;
    terraform-provider-docker) echo github.com/terraform-providers/terraform-provider-docker ;;
    kustomize) echo sigs.k8s.io/kustomize/kustomize/v5 ;;
    terraform) echo github.com/hashicorp/terraform ;;
    cluster-api) echo sigs.k8s.io/cluster-api ;;
    cluster-api-operator) echo sigs.k8s.io/cluster-api-operator ;;
    cert-manager) echo github.com/cert-manager/cert-manager ;;
    promtool) echo github.com/prometheus/prometheus ;;
    tflint) echo github.com/terraform-linters/tflint ;;
    actionlint) echo github.com/rhysd/actionlint ;;
    cosign) echo github.com/sigstore/cosign/v2 ;;
    *) echo "testbin: unknown tool '$1' (known: ${ALL_TOOLS[*]} ${BENCH_TOOLS[*]} ${LINT_TOOLS[*]} ${NODE_TOOLS[*]})" >&2; return 1 ;;
  esac
}

# tool -> "binary=package" pairs
binaries_of() {
  case "$(base_of "$1")" in
    tofu) echo "tofu=github.com/opentofu/opentofu/cmd/tofu" ;;
    crane) echo "crane=github.com/google/go-containerregistry/cmd/crane" ;;
    etcd | etcd-node) echo "etcd=go.etcd.io/etcd/server/v3" ;;
    kubernetes) echo "kube-apiserver=k8s.io/kubernetes/cmd/kube-apiserver" \
      "kube-controller-manager=k8s.io/kubernetes/cmd/kube-controller-manager" ;;
    kubernetes-node) echo "kubelet=k8s.io/kubernetes/cmd/kubelet" "kubeadm=k8s.io/kubernetes/cmd/kubeadm" \
      "kubectl=k8s.io/kubernetes/cmd/kubectl" "kube-scheduler=k8s.io/kubernetes/cmd/kube-scheduler" \
      "kube-proxy=k8s.io/kubernetes/cmd/kube-proxy" ;;
    coredns) echo "coredns=github.com/coredns/coredns" ;;
    cri-tools) echo "crictl=sigs.k8s.io/cri-tools/cmd/crictl" ;;
    cni-plugins) echo "bridge=github.com/containernetworking/plugins/plugins/main/bridge" \
      "host-local=github.com/containernetworking/plugins/plugins/ipam/host-local" \
      "loopback=github.com/containernetworking/plugins/plugins/main/loopback" \
      "portmap=github.com/containernetworking/plugins/plugins/meta/portmap" ;;
    terraform-provider-docker) echo "terraform-provider-docker=github.com/terraform-providers/terraform-provider-docker" ;;
    kustomize) echo "kustomize=sigs.k8s.io/kustomize/kustomize/v5" ;;
    terraform) echo "terraform=github.com/hashicorp/terraform" ;;
    # clusterctl first: it is the quickest, and the managers share most of its packages.
    cluster-api) echo "clusterctl=sigs.k8s.io/cluster-api/cmd/clusterctl" \
      "capi-manager=sigs.k8s.io/cluster-api/core" \
      "kubeadm-bootstrap-manager=sigs.k8s.io/cluster-api/bootstrap/kubeadm" \
      "kubeadm-control-plane-manager=sigs.k8s.io/cluster-api/controlplane/kubeadm" ;;
    # v1.11 is the last cert-manager whose main module holds its cmd/ packages (later releases
    # keep them in modules of their own that the Go module proxy does not serve); helm is the
    # release cert-manager's own go.mod pins, so the two share one module graph.
    cert-manager) echo "cert-manager-controller=github.com/cert-manager/cert-manager/cmd/controller" \
      "cert-manager-cainjector=github.com/cert-manager/cert-manager/cmd/cainjector" \
      "cert-manager-webhook=github.com/cert-manager/cert-manager/cmd/webhook" \
      "helm=helm.sh/helm/v3/cmd/helm" ;;
    promtool) echo "promtool=github.com/prometheus/prometheus/cmd/promtool" ;;
    cluster-api-operator) echo "cluster-api-operator=sigs.k8s.io/cluster-api-operator/cmd" ;;
    tflint) echo "tflint=github.com/terraform-linters/tflint" ;;
    actionlint) echo "actionlint=github.com/rhysd/actionlint/cmd/actionlint" ;;
    cosign) echo "cosign=github.com/sigstore/cosign/v2/cmd/cosign" ;;
  esac
}

# Pinned version of the tool's main module, read from the wrapper's go.mod (no Go needed).
version_of() {
  local mod
  mod=$(module_of "$1")
  awk -v m="$mod" '
    $1 == "require" && $2 == m { print $3; exit }
    $1 == m && $2 ~ /^v/ { print $2; exit }' "$WRAPPERS/$(wrapper_of "$1")/go.mod"
}

dir_of() {
  local suffix=""
  [[ -z $(goarch_of "$1") ]] || suffix=-linux-$(goarch_of "$1")
  echo "$TESTBIN/$(base_of "$1")-$(version_of "$1")$suffix"
}

# The release's commit time as served by the proxy: a deterministic build date.
release_date() {
  (cd "$WRAPPERS/$(wrapper_of "$1")" && GOTOOLCHAIN=local GOWORK=off go list -m -f '{{.Time.UTC.Format "2006-01-02T15:04:05Z"}}' "$(module_of "$1")")
}

# The directory of the tool's pinned main module in the Go module cache (downloaded if needed).
module_dir() {
  (cd "$WRAPPERS/$(wrapper_of "$1")" && GOTOOLCHAIN=local GOWORK=off GOFLAGS=-mod=readonly go mod download "$(module_of "$1")" &&
    GOTOOLCHAIN=local GOWORK=off go list -m -f '{{.Dir}}' "$(module_of "$1")")
}

# Extra -ldflags per tool (on top of -s -w).
ldflags_of() {
  local tool version
  tool=$(base_of "$1")
  version=$(version_of "$tool")
  case "$tool" in
    tofu)
      # Without dev=no, `tofu version` reports "v1.12.6-dev".
      echo "-X github.com/opentofu/opentofu/version.dev=no" ;;
    terraform)
      # Without dev=no, `terraform version` reports "v1.8.5-dev".
      echo "-X github.com/hashicorp/terraform/version.dev=no" ;;
    kustomize)
      # Without it, `kustomize version` reports "(devel)".
      echo "-X sigs.k8s.io/kustomize/api/provenance.version=$version" ;;
    kubernetes | kubernetes-node)
      # Without these /version reports v0.0.0-master and Cluster API refuses to start.
      local minor major date
      major=${version#v}; major=${major%%.*}
      minor=${version#v*.}; minor=${minor%%.*}
      date=$(release_date "$tool")
      local pkg out=""
      for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        out+=" -X $pkg.gitVersion=$version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
        out+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$date"
      done
      echo "$out" ;;
    cert-manager)
      # Without it the binaries report "canary" as their version.
      echo "-X github.com/cert-manager/cert-manager/pkg/util.AppVersion=$version" \
        "-X github.com/cert-manager/cert-manager/pkg/util.AppGitState=clean" ;;
    cluster-api)
      # The managers and clusterctl check versions (clusterctl's contract, the managers' own
      # /version); without these they report an empty version.
      local pkg=sigs.k8s.io/cluster-api/version major minor
      major=${version#v}; major=${major%%.*}
      minor=${version#v*.}; minor=${minor%%.*}
      echo "-X $pkg.gitVersion=$version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor" \
        "-X $pkg.gitTreeState=clean -X $pkg.buildDate=$(release_date "$tool")" ;;
    cluster-api-operator)
      # Without it the Operator logs an empty version at start.
      echo "-X sigs.k8s.io/cluster-api-operator/version.gitVersion=$version" ;;
    cri-tools)
      # Without it `crictl --version` reports an empty version.
      echo "-X sigs.k8s.io/cri-tools/pkg/version.Version=$version" ;;
    cni-plugins)
      # Without it the plugins' VERSION command reports an unknown build.
      echo "-X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=$version" ;;
    terraform-provider-docker)
      # The provider reports its version to the runtime; without it, "dev".
      echo "-X main.version=4.6.0 -X main.commit=96d331c98ff4" ;;
    cosign)
      # Without it `cosign version` reports "devel".
      echo "-X sigs.k8s.io/release-utils/version.gitVersion=$version" ;;
    promtool)
      # Prometheus 3.M.P is published as Go module v0.(300+M).P; without this `promtool
      # --version` reports an empty version.
      local rest=${version#v0.}
      echo "-X github.com/prometheus/common/version.Version=3.$((${rest%%.*} - 300)).${rest#*.}" ;;
  esac
}

# Files a tool's directory holds besides its binaries, made by post_build.
extra_files_of() {
  case "$1" in
    cert-manager) echo cert-manager.yaml ;;
  esac
}

# Runs after a tool's binaries are built into $2 (the temporary directory).
post_build() {
  case "$1" in
    cert-manager)
      "$ROOT/hack/cert-manager-manifest.sh" "$(module_dir cert-manager)" "$(version_of cert-manager)" \
        "$2/helm" >"$2/cert-manager.yaml" ;;
  esac
}

is_cached() {
  local tool=$1 dir pair file
  dir=$(dir_of "$tool")
  for pair in $(binaries_of "$tool"); do
    [[ -x "$dir/${pair%%=*}" ]] || return 1
  done
  for file in $(extra_files_of "$tool"); do
    [[ -s "$dir/$file" ]] || return 1
  done
}

# Sets CPU to the CPU seconds (user + system) of this shell's finished children so far: a build's
# CPU time, which unlike its wall time does not grow when other work shares the machine. `times`
# runs in this shell itself (a subshell's children counters start at zero).
children_cpu() {
  local f
  f=$(mktemp)
  times >"$f"
  CPU=$(awk 'NR == 2 { n = 0; for (i = 1; i <= 2; i++) { split($i, p, /[ms]/); n += p[1] * 60 + p[2] }
    printf "%d", n }' "$f")
  rm -f "$f"
}

# Go's build cache for this run (see the header): made when the first tool is built.
BUILDING="" GO_BUILD_CACHE=""
build_cache() {
  [[ -z ${GOCACHE:-} ]] || return 0
  GO_BUILD_CACHE=$(mktemp -d "$TESTBIN/.gocache.XXXXXX")
  export GOCACHE=$GO_BUILD_CACHE
}

# At exit: a build cut short leaves nothing that counts as cached, and the run's build cache goes.
clean_up() {
  [[ -z $BUILDING ]] || rm -rf "$BUILDING"
  if [[ -n $GO_BUILD_CACHE ]]; then
    chmod -R u+w "$GO_BUILD_CACHE" 2>/dev/null || true
    rm -rf "$GO_BUILD_CACHE"
  fi
}
trap clean_up EXIT

build() {
  local tool=$1 dir tmp pair start cpu
  dir=$(dir_of "$tool")
  if is_cached "$tool"; then
    echo "testbin: $tool $(version_of "$tool") cached ($dir)"
    return
  fi
  start=$SECONDS
  children_cpu
  cpu=$CPU
  mkdir -p "$TESTBIN"
  tmp=$(mktemp -d "$TESTBIN/.$tool.XXXXXX")
  BUILDING=$tmp
  build_cache
  local ldflags goarch
  ldflags="-s -w $(ldflags_of "$tool")"
  goarch=$(goarch_of "$tool")
  for pair in $(binaries_of "$tool"); do
    (
      cd "$WRAPPERS/$(wrapper_of "$tool")"
      [[ -z $goarch ]] || export GOARCH=$goarch
      CGO_ENABLED=0 GOTOOLCHAIN=local GOWORK=off GOFLAGS="${GOFLAGS:-} -mod=readonly -buildvcs=false" \
        nice -n 19 go build -trimpath -ldflags "$ldflags" -o "$tmp/${pair%%=*}" "${pair#*=}"
    )
  done
  post_build "$tool" "$tmp"
  rm -rf "$dir"
  mv "$tmp" "$dir"
  chmod 0755 "$dir"
  BUILDING=""
  children_cpu
  echo "testbin: $tool $(version_of "$tool") built in $((SECONDS - start))s, $((CPU - cpu))s of CPU ($dir)"
}

# The variable of a binary of a tool: CAPTF_TESTBIN_<BINARY>, with _LINUX_ARM64 for the arm64 tools.
env_name() {
  local b=${1^^}
  # A node tool's binary that its base tool builds too (etcd-node's etcd, at the version kubeadm
  # deploys) gets _NODE, so it never shadows the test environment's.
  if [[ $2 == *-node ]] && [[ " $(binaries_of "${2%-node}") " == *" $1="* ]]; then b+=_NODE; fi
  [[ -z $(goarch_of "$2") ]] || b+=_LINUX_$(goarch_of "$2" | tr a-z A-Z)
  echo "CAPTF_TESTBIN_${b//-/_}"
}

print_env() {
  local tool pair
  echo "CAPTF_TESTBIN=$TESTBIN"
  for tool in "${ALL_TOOLS[@]}" "${BENCH_TOOLS[@]}" "${LINT_TOOLS[@]}" "${NODE_TOOLS[@]}"; do
    for pair in $(binaries_of "$tool"); do
      echo "$(env_name "${pair%%=*}" "$tool")=$(dir_of "$tool")/${pair%%=*}"
    done
  done
  echo "CAPTF_TESTBIN_CERT_MANAGER_MANIFEST=$(dir_of cert-manager)/cert-manager.yaml"
}

main() {
  local rebuild=0 tools=() tool
  while (($#)); do
    case "$1" in
      --print-env) print_env; return ;;
      --module-dir) shift; module_of "${1:?--module-dir needs a tool}" >/dev/null; module_dir "$1"; return ;;
      --list) for tool in "${ALL_TOOLS[@]}" "${BENCH_TOOLS[@]}" "${LINT_TOOLS[@]}" "${NODE_TOOLS[@]}"; do echo "$tool $(version_of "$tool") $(dir_of "$tool")"; done; return ;;
      --rebuild) rebuild=1 ;;
      -h | --help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; return ;;
      -*) echo "testbin: unknown option $1" >&2; return 2 ;;
      *) module_of "$1" >/dev/null; tools+=("$1") ;;
    esac
    shift
  done
  ((${#tools[@]})) || tools=("${ALL_TOOLS[@]}")
  for tool in "${tools[@]}"; do
    if ((rebuild)); then rm -rf "$(dir_of "$tool")"; fi
    build "$tool"
  done
}

main "$@"
