#!/usr/bin/env bash
# Builds the node image of real workload clusters on a development host, and checks that one
# node container initializes a control plane (docs/src/development/real-nodes.md).
#
# Usage:
#   hack/node-image.sh build   build the node image unless cached; prints the archive's path
#   hack/node-image.sh check   start a Docker daemon of its own (hack/dockerd.sh), run one node
#                              container, `kubeadm init` it, and wait for its Node to be Ready
#
# What `build` makes, from source (hack/testbin.sh) and Debian's packages (mmdebstrap):
#   - the images kubeadm runs, named as `kubeadm config images list` names them for the test
#     binaries' Kubernetes version: kube-apiserver, kube-controller-manager, kube-scheduler,
#     kube-proxy, etcd, coredns and pause. Their versions must be the ones kubeadm names: the
#     pinned etcd-node and coredns tools are checked against that list.
#   - the node image localhost/captf-node:<version>: Debian bookworm with systemd, containerd
#     and runc, kubelet, kubeadm, kubectl, crictl and the CNI plugins, holding the images above
#     as archives that a unit imports into containerd at boot (images/node/).
# The result is $CAPTF_NODE_IMAGES/<version>-<inputs>/node.tar (a docker archive), where
# <inputs> hashes everything the build reads from this repository and the pinned tool versions;
# CAPTF_NODE_IMAGES defaults to ~/.cache/captf/node-images. A build goes to a temporary
# directory first and is moved into place at its end.
#
# `check` leaves nothing behind: the daemon, its bridge and its data are removed at exit (with
# CAPTF_NODE_CHECK_KEEP=1 they stay, and it says how to reach the node and remove them). It
# prints how long each step took and the node container's memory.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${CAPTF_NODE_IMAGES:-$HOME/.cache/captf/node-images}
TOOLS=(kubernetes kubernetes-node etcd-node coredns cri-tools cni-plugins)
NODE_PACKAGES=systemd,systemd-sysv,dbus,cloud-init,containerd,runc,iptables,nftables,conntrack,ethtool,socat,iproute2,ca-certificates,kmod,procps,ebtables,libseccomp2,iputils-ping,curl,less
PROXY_PACKAGES=iptables,nftables,conntrack,ipset,kmod
HAPROXY_PACKAGES=haproxy
HAPROXY_TAG=localhost/captf-haproxy:2.6
DEBIAN_SUITE=bookworm
DOCKER=/usr/bin/docker

die() {
  echo "node-image: $*" >&2
  exit 1
}
say() { echo "node-image: $*" >&2; }

# "tool version dir" of every test tool, read once (hack/testbin.sh --list builds nothing).
TOOL_LIST=$("$ROOT/hack/testbin.sh" --list)
tool_dir() {
  awk -v t="$1" '$1 == t { print $3 }' <<<"$TOOL_LIST"
}
tool_version() {
  awk -v t="$1" '$1 == t { print $2 }' <<<"$TOOL_LIST"
}

# A hash of what the build reads: images/node/, the build's own functions, and the pinned
# tools' versions (a change to `check` alone does not rebuild the image).
inputs_hash() {
  {
    (cd "$ROOT" && find images/node -type f -print0 | sort -z | xargs -0 sha256sum)
    declare -f rootfs image build_pause control_plane_images node_image node_tag haproxy_image build
    local t
    for t in "${TOOLS[@]}"; do echo "$t $(tool_version "$t")"; done
    echo "$NODE_PACKAGES $PROXY_PACKAGES $HAPROXY_PACKAGES $HAPROXY_TAG $DEBIAN_SUITE"
  } | sha256sum | cut -c1-12
}

output_dir() {
  echo "$CACHE/$(tool_version kubernetes)-$(inputs_hash)"
}

install_mmdebstrap() {
  command -v mmdebstrap >/dev/null && return
  [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null ||
    die "mmdebstrap is not installed (Debian: apt-get install mmdebstrap)"
  say "installing Debian's mmdebstrap"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2 || die "apt-get update failed"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mmdebstrap >&2 ||
    die "apt-get install mmdebstrap failed"
}

# rootfs PACKAGES FILE: a minimal Debian root file system with PACKAGES, as a tar archive.
rootfs() {
  nice -n 19 mmdebstrap --quiet --variant=minbase --include="$1" \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' "$DEBIAN_SUITE" "$2" ||
    die "mmdebstrap of $DEBIAN_SUITE with $1 failed"
}

# image FILE TAG ARCHIVE CONTEXT [BUILD-ARG]...: build TAG from images/node/FILE and save it.
image() {
  local file=$1 tag=$2 archive=$3 context=$4
  shift 4
  local args=(--build-arg "SOURCE=${IMAGE_SOURCE:-}") a
  for a in "$@"; do args+=(--build-arg "$a"); done
  "$ROOT/hack/image.sh" build -f "$ROOT/images/node/$file" -t "$tag" "${args[@]}" "$context" >&2
  "$ROOT/hack/image.sh" save "$tag" "$archive" >&2
}

# The pause binary, from the pause.c of the Kubernetes module the test binaries use.
build_pause() {
  local out=$1 version=$2 src
  src=$("$ROOT/hack/testbin.sh" --module-dir kubernetes)/build/pause/linux/pause.c
  [[ -f $src ]] || die "no pause.c at $src"
  command -v gcc >/dev/null || die "gcc is needed to compile pause.c (Debian: apt-get install gcc libc6-dev)"
  gcc -Os -static -Wall -Werror -DVERSION="v$version-captf" -o "$out" "$src" ||
    die "compiling pause.c failed (a static build needs libc6-dev)"
  strip "$out"
}

# control_plane_images WORK: every image kubeadm names, as archives under WORK/images.
control_plane_images() {
  local work=$1 kube node etcd coredns version ref name tag
  kube=$(tool_dir kubernetes) node=$(tool_dir kubernetes-node)
  etcd=$(tool_dir etcd-node) coredns=$(tool_dir coredns)
  version=$(tool_version kubernetes)
  mkdir -p "$work/images" "$work/ctx"
  while read -r ref; do
    name=${ref%:*} tag=${ref##*:}
    name=${name##*/}
    rm -rf "$work/ctx" && mkdir -p "$work/ctx"
    case "$name" in
      kube-apiserver | kube-controller-manager | kube-scheduler)
        [[ $tag == "$version" ]] || die "kubeadm names $ref, but the binaries are $version"
        local bin=$kube/$name
        [[ -x $bin ]] || bin=$node/$name
        cp "$bin" "$work/ctx/$name"
        image Containerfile.binary "$ref" "$work/images/$name.tar" "$work/ctx" "BINARY=$name" "VERSION=$tag" ;;
      kube-proxy)
        [[ $tag == "$version" ]] || die "kubeadm names $ref, but the binaries are $version"
        cp "$node/kube-proxy" "$work/ctx/kube-proxy"
        ln "$work/proxy-rootfs.tar" "$work/ctx/rootfs.tar"
        image Containerfile.kube-proxy "$ref" "$work/images/$name.tar" "$work/ctx" "VERSION=$tag" ;;
      etcd)
        [[ ${tag%-*} == "$(tool_version etcd-node | sed 's/^v//')" ]] ||
          die "kubeadm names $ref, but hack/testbin/etcd-node pins $(tool_version etcd-node): pin the version kubeadm names"
        cp "$etcd/etcd" "$work/ctx/etcd"
        image Containerfile.binary "$ref" "$work/images/$name.tar" "$work/ctx" "BINARY=etcd" "VERSION=$tag" ;;
      coredns)
        [[ $tag == "$(tool_version coredns)" ]] ||
          die "kubeadm names $ref, but hack/testbin/coredns pins $(tool_version coredns): pin the version kubeadm names"
        cp "$coredns/coredns" "$work/ctx/coredns"
        image Containerfile.coredns "$ref" "$work/images/$name.tar" "$work/ctx" "VERSION=$tag" ;;
      pause)
        build_pause "$work/ctx/pause" "$tag"
        echo "$ref" >"$work/sandbox-image"
        image Containerfile.pause "$ref" "$work/images/$name.tar" "$work/ctx" "VERSION=$tag" ;;
      *) die "kubeadm names an image this script does not build: $ref" ;;
    esac
  done < <("$node/kubeadm" config images list --kubernetes-version "$version" 2>/dev/null)
  [[ -s $work/sandbox-image ]] || die "kubeadm named no pause image"
}

# node_image WORK TAG: the node image, saved to WORK/node.tar.
node_image() {
  local work=$1 tag=$2 node cni ctx=$1/node-ctx
  node=$(tool_dir kubernetes-node) cni=$(tool_dir cni-plugins)
  mkdir -p "$ctx/bin" "$ctx/cni"
  ln "$work/node-rootfs.tar" "$ctx/rootfs.tar"
  cp "$node/kubelet" "$node/kubeadm" "$node/kubectl" "$(tool_dir cri-tools)/crictl" "$ctx/bin/"
  cp "$cni/bridge" "$cni/host-local" "$cni/loopback" "$cni/portmap" "$ctx/cni/"
  mv "$work/images" "$ctx/images"
  cp -a "$ROOT/images/node/rootfs" "$ctx/rootfs"
  sed -i "s|@SANDBOX_IMAGE@|$(cat "$work/sandbox-image")|" "$ctx/rootfs/etc/containerd/config.toml"
  image Containerfile "$tag" "$work/node.tar" "$ctx" "KUBERNETES_VERSION=$(tool_version kubernetes)"
}

# haproxy_image WORK: the docker cluster module's load balancer, saved to WORK/haproxy.tar.
haproxy_image() {
  local work=$1 ctx=$1/haproxy-ctx
  mkdir -p "$ctx"
  ln "$work/haproxy-rootfs.tar" "$ctx/rootfs.tar"
  image Containerfile.haproxy "$HAPROXY_TAG" "$work/haproxy.tar" "$ctx" "VERSION=${HAPROXY_TAG##*:}"
}

node_tag() {
  echo "localhost/captf-node:$(tool_version kubernetes)"
}

WORK="" # build's temporary directory, removed at exit
build() {
  local out work start=$SECONDS
  "$ROOT/hack/testbin.sh" "${TOOLS[@]}" >&2
  out=$(output_dir)
  if [[ -s $out/node.tar ]]; then
    say "node image $(node_tag) cached ($out)"
    echo "$out/node.tar"
    return
  fi
  install_mmdebstrap
  mkdir -p "$CACHE"
  work=$(mktemp -d "$CACHE/.build.XXXXXX")
  WORK=$work
  trap 'rm -rf "$WORK"' EXIT
  export IMAGE_STORAGE_ROOT=$work/store
  say "Debian root file systems ($DEBIAN_SUITE)"
  rootfs "$NODE_PACKAGES" "$work/node-rootfs.tar"
  rootfs "$PROXY_PACKAGES" "$work/proxy-rootfs.tar"
  rootfs "$HAPROXY_PACKAGES" "$work/haproxy-rootfs.tar"
  say "control-plane images"
  control_plane_images "$work"
  say "node image $(node_tag)"
  node_image "$work" "$(node_tag)"
  say "load balancer image $HAPROXY_TAG"
  haproxy_image "$work"
  mkdir -p "$out.tmp"
  mv "$work/node.tar" "$work/haproxy.tar" "$out.tmp/"
  rm -rf "$out"
  mv "$out.tmp" "$out"
  # Older builds of this version (other inputs) are replaced by this one.
  find "$CACHE" -mindepth 1 -maxdepth 1 -name "$(tool_version kubernetes)-*" ! -name "${out##*/}" -exec rm -rf {} +
  say "built in $((SECONDS - start))s: $out/node.tar ($(du -h "$out/node.tar" | cut -f1))"
  echo "$out/node.tar"
}

# The `docker run` options of a node container on a host without CAP_SYS_RESOURCE in its
# bounding set (no --privileged): every other capability, no seccomp or AppArmor profile,
# writable /proc/sys, every device, the host's cgroups (narrowed by the entrypoint), tmpfs for
# /run and /tmp, and the host's kernel modules for kube-proxy's lookups. The node's resolver is
# the bridge's own address, where nothing answers: names outside the cluster fail at once, and
# no query leaves the machine (CoreDNS forwards to the node's resolver).
NODE_RUN_OPTIONS=(--cap-add ALL --cap-drop SYS_RESOURCE --security-opt seccomp=unconfined
  --security-opt apparmor=unconfined --security-opt systempaths=unconfined
  --device-cgroup-rule 'a *:* rwm' --tmpfs /run --tmpfs /run/lock --tmpfs /tmp
  -v /sys/fs/cgroup:/sys/fs/cgroup:rw -v /lib/modules:/lib/modules:ro)

# The Docker daemon's bridge address (hack/dockerd.sh's CAPTF_DOCKER_SUBNET).
bridge_address() {
  local subnet=${CAPTF_DOCKER_SUBNET:-172.30.0.1/24}
  echo "${subnet%/*}"
}

# The node container's memory from its cgroup on the host (Docker's own figure is empty once
# the node's systemd has made cgroups of its own): usage, and the part of it that is not page
# cache.
node_memory() {
  local id dir
  id=$($DOCKER inspect -f '{{.Id}}' "$NODE")
  dir=/sys/fs/cgroup/memory/docker/$id
  if [[ -f $dir/memory.usage_in_bytes ]]; then
    awk -v usage="$(cat "$dir/memory.usage_in_bytes")" '$1 == "total_rss" { rss = $2 }
      END { printf "%.0f MiB (%.0f MiB without page cache)", usage / 1048576, rss / 1048576 }' "$dir/memory.stat"
  elif [[ -f /sys/fs/cgroup/docker/$id/memory.current ]]; then
    awk '{ printf "%.0f MiB", $1 / 1048576 }' "/sys/fs/cgroup/docker/$id/memory.current"
  else
    echo "unknown (no cgroup of the container found)"
  fi
}

# in_node COMMAND...: run COMMAND in the check's node container.
in_node() { $DOCKER exec "$NODE" "$@"; }

# wait_for_quietly SECONDS COMMAND...: retry COMMAND every second until it succeeds; false when
# it never does.
wait_for_quietly() {
  local limit=$1 i
  shift
  for ((i = 0; i < limit; i++)); do
    "$@" >/dev/null 2>&1 && return
    sleep 1
  done
  return 1
}

# wait_for SECONDS WHAT COMMAND...: the same, and the script stops when COMMAND never succeeds.
wait_for() {
  local limit=$1 what=$2
  shift 2
  wait_for_quietly "$limit" "$@" || die "$what: not within ${limit}s"
}

# kubeadm's preflight refuses a cgroup v1 host unless its SystemVerification is skipped (kubelet
# itself is told by /etc/default/kubelet); nothing else is skipped.
ignored_preflight_errors() {
  if [[ -f /sys/fs/cgroup/cgroup.controllers ]]; then echo " []"; else printf '\n  - SystemVerification'; fi
}

# The check's kubeadm configuration. The node's name is the control-plane endpoint (Docker puts
# it in the node's /etc/hosts): the address is known only once the container runs. kube-proxy
# keeps the host's connection-tracking maximum (maxPerCore 0): a node's network namespace may
# not write it, and kube-proxy exits when it cannot set the maximum it computed.
kubeadm_config() {
  local name=$1 version=$2
  cat <<EOF
apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
nodeRegistration:
  name: $name
  criSocket: unix:///run/containerd/containerd.sock
  ignorePreflightErrors:$(ignored_preflight_errors)
---
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
kubernetesVersion: $version
controlPlaneEndpoint: $name:6443
networking:
  podSubnet: 10.244.0.0/16
  serviceSubnet: 10.96.0.0/16
---
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
conntrack:
  maxPerCore: 0
EOF
}

# The check's bootstrap data: a cloud-config of the shape Cluster API's kubeadm bootstrap
# provider writes for a first control-plane machine (the kubeadm configuration as a file, then
# `kubeadm init` and the bootstrap-success sentinel).
user_data() {
  echo "#cloud-config"
  echo "write_files:"
  echo "- path: /run/kubeadm/kubeadm.yaml"
  echo "  owner: root:root"
  echo "  permissions: '0640'"
  echo "  content: |"
  kubeadm_config "$1" "$2" | sed 's/^/    /'
  echo "- path: /run/cluster-api/placeholder"
  echo "  owner: root:root"
  echo "  permissions: '0640'"
  echo "  content: This file is created by the node check."
  echo "runcmd:"
  echo "- 'kubeadm init --config /run/kubeadm/kubeadm.yaml --skip-token-print && echo success > /run/cluster-api/bootstrap-success.complete'"
}

# At the check's exit: its daemon, node and directory go, unless CAPTF_NODE_CHECK_KEEP=1.
check_clean_up() {
  if [[ ${CAPTF_NODE_CHECK_KEEP:-} == 1 ]]; then
    say "kept: DOCKER_HOST=unix://$CHECK_DIR/docker/docker.sock /usr/bin/docker exec -it $NODE bash;" \
      "remove with: hack/dockerd.sh stop $CHECK_DIR/docker"
    return
  fi
  "$ROOT/hack/dockerd.sh" stop "$CHECK_DIR/docker" >/dev/null 2>&1 || true
  rm -rf "$CHECK_DIR"
}

check() {
  local archive dir start t version
  archive=$(build)
  version=$(tool_version kubernetes)
  dir=$(mktemp -d "${TMPDIR:-/tmp}/captf-node-check.XXXXXX")
  CHECK_DIR=$dir
  NODE=captf-node-check
  trap check_clean_up EXIT
  start=$SECONDS
  export "$("$ROOT/hack/dockerd.sh" start "$dir/docker")"
  say "dockerd up in $((SECONDS - start))s"
  t=$SECONDS
  $DOCKER load -q -i "$archive" >&2
  say "node image loaded in $((SECONDS - t))s"
  t=$SECONDS
  # The bootstrap data is the node's NoCloud seed, in place before the container first starts.
  mkdir -p "$dir/seed"
  user_data "$NODE" "$version" >"$dir/seed/user-data"
  printf 'instance-id: %s\nlocal-hostname: %s\n' "$NODE" "$NODE" >"$dir/seed/meta-data"
  $DOCKER create --name "$NODE" --hostname "$NODE" "${NODE_RUN_OPTIONS[@]}" \
    --dns "$(bridge_address)" "$(node_tag)" >/dev/null
  $DOCKER cp "$dir/seed/." "$NODE:/var/lib/cloud/seed/nocloud/"
  $DOCKER start "$NODE" >/dev/null
  wait_for 120 "the node's preloaded images" in_node systemctl is-active --quiet captf-node-images.service
  say "node booted and images imported in $((SECONDS - t))s"
  if ! wait_for_quietly 300 in_node test -e /run/cluster-api/bootstrap-success.complete; then
    in_node tail -n 40 /var/log/cloud-init-output.log >&2 || true
    in_node journalctl -u kubelet --no-pager -n 40 >&2 || true
    die "the bootstrap data did not finish (no /run/cluster-api/bootstrap-success.complete within 300s)"
  fi
  say "bootstrap data (cloud-init, kubeadm init) done $((SECONDS - t))s after the container started"
  t=$SECONDS
  wait_for 300 "the control-plane Node Ready" in_node kubectl --kubeconfig /etc/kubernetes/admin.conf \
    wait --for=condition=Ready "node/$NODE" --timeout=1s
  say "Node Ready $((SECONDS - t))s after the bootstrap data finished"
  # CoreDNS Ready needs the pod network and kube-proxy's Service rules (it reads the API server
  # through the kubernetes Service); kube-proxy Ready needs its conntrack settings.
  local app
  for app in kube-proxy kube-dns; do
    wait_for 300 "the $app Pods Ready" in_node kubectl --kubeconfig /etc/kubernetes/admin.conf \
      -n kube-system wait --for=condition=Ready pod -l "k8s-app=$app" --timeout=1s
  done
  say "kube-proxy and CoreDNS Ready $((SECONDS - t))s after the bootstrap data finished"
  in_node kubectl --kubeconfig /etc/kubernetes/admin.conf get nodes -o wide
  in_node kubectl --kubeconfig /etc/kubernetes/admin.conf get pods -A -o wide
  say "node container memory: $(node_memory)"
  say "check passed in $((SECONDS - start))s"
}

case "${1:-}" in
  build) build ;;
  check) check ;;
  *) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 2 ;;
esac
