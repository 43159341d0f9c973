#!/usr/bin/env bash
# Runs a Docker daemon of the test environment's own, for real workload nodes (node containers;
# see docs/src/development/real-nodes.md). Everything it makes lives under one directory, and
# `stop` removes all of it.
#
# Usage:
#   hack/dockerd.sh start DIR   start dockerd with its data, state and socket under DIR, on a
#                               bridge of its own; prints DOCKER_HOST=unix://DIR/docker.sock
#   hack/dockerd.sh stop DIR    stop it, remove its containers, its bridge and DIR
#
# Settings (environment):
#   CAPTF_DOCKER_BRIDGE   the bridge's name (default captf-docker0; at most 15 characters)
#   CAPTF_DOCKER_SUBNET   the bridge's address and prefix (default 172.30.0.1/24)
#
# Debian's docker.io is installed with apt-get when dockerd is missing and this runs as root on
# Debian, as hack/image.sh installs buildah. The daemon touches nothing of the host's network but
# its bridges: no iptables rules and no masquerading. Containers reach each other and the host
# over their bridge, and nothing beyond it. A published port is served by Docker's userland proxy,
# a process listening on the host (the docker cluster module publishes its load balancer so).
set -euo pipefail

die() {
  echo "dockerd: $*" >&2
  exit 1
}

BRIDGE=${CAPTF_DOCKER_BRIDGE:-captf-docker0}
SUBNET=${CAPTF_DOCKER_SUBNET:-172.30.0.1/24}
DOCKER=/usr/bin/docker # Debian's client: the daemon's own API version

install_docker() {
  command -v dockerd >/dev/null && [[ -x $DOCKER ]] && return
  if [[ $(id -u) != 0 ]] || ! command -v apt-get >/dev/null; then
    die "dockerd is not installed: install Debian's docker.io (apt-get install docker.io)"
  fi
  echo "dockerd: installing Debian's docker.io" >&2
  DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2 || die "apt-get update failed"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends docker.io >&2 ||
    die "apt-get install docker.io failed"
}

make_bridge() {
  ((${#BRIDGE} <= 15)) || die "CAPTF_DOCKER_BRIDGE=$BRIDGE: a link name has at most 15 characters"
  if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
    ip link add "$BRIDGE" type bridge || die "cannot create the bridge $BRIDGE"
  fi
  ip addr replace "$SUBNET" dev "$BRIDGE"
  ip link set "$BRIDGE" up
}

start() {
  local dir=$1 i
  install_docker
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  if [[ -S $dir/docker.sock ]] && DOCKER_HOST=unix://$dir/docker.sock $DOCKER info >/dev/null 2>&1; then
    echo "DOCKER_HOST=unix://$dir/docker.sock"
    return
  fi
  make_bridge
  mkdir -p "$dir/data" "$dir/exec"
  # setsid: the daemon outlives this script and is stopped by `stop`, which reads its pid file.
  setsid dockerd --data-root "$dir/data" --exec-root "$dir/exec" -H "unix://$dir/docker.sock" \
    --pidfile "$dir/docker.pid" --bridge "$BRIDGE" --iptables=false --ip-masq=false \
    --ip-forward=false --userland-proxy=true --userland-proxy-path /usr/sbin/docker-proxy --storage-driver overlay2 \
    >"$dir/dockerd.log" 2>&1 </dev/null &
  for i in $(seq 1 60); do
    if DOCKER_HOST=unix://$dir/docker.sock $DOCKER info >/dev/null 2>&1; then
      echo "DOCKER_HOST=unix://$dir/docker.sock"
      return
    fi
    kill -0 $! 2>/dev/null || break
    sleep 1
  done
  tail -n 20 "$dir/dockerd.log" >&2 || true
  die "dockerd did not answer on $dir/docker.sock (its log: $dir/dockerd.log)"
}

stop() {
  local dir=$1 pid i
  [[ -d $dir ]] || return 0
  dir=$(cd "$dir" && pwd)
  if [[ -S $dir/docker.sock ]]; then
    local ids
    ids=$(DOCKER_HOST=unix://$dir/docker.sock $DOCKER ps -aq 2>/dev/null || true)
    [[ -z $ids ]] || DOCKER_HOST=unix://$dir/docker.sock $DOCKER rm -f -v $ids >/dev/null 2>&1 || true
  fi
  if [[ -s $dir/docker.pid ]]; then
    pid=$(cat "$dir/docker.pid")
    kill "$pid" 2>/dev/null || true
    for i in $(seq 1 30); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 1
    done
    kill -9 "$pid" 2>/dev/null || true
  fi
  # Mounts left by containers that did not stop cleanly keep their directories busy.
  grep -o " $dir/[^ ]*" /proc/self/mounts | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
  rm -rf "$dir"
  ip link del "$BRIDGE" 2>/dev/null || true
}

case "${1:-}" in
  start) start "${2:?usage: hack/dockerd.sh start DIR}" ;;
  stop) stop "${2:?usage: hack/dockerd.sh stop DIR}" ;;
  *) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 2 ;;
esac
