#!/usr/bin/env bash
# Builds and pushes container images with whichever engine this machine has (docs/src/installation.md).
#
# Usage:
#   hack/image.sh engine                                   print the engine that would be used
#   hack/image.sh build -f FILE -t TAG [--build-arg K=V]... CONTEXT
#   hack/image.sh push TAG
#
# The engine: $CONTAINER_ENGINE when set (docker, podman or buildah); else docker when its daemon
# answers, else podman, else buildah. When none is there and this runs as root on Debian, buildah
# is installed from Debian's packages (apt-get). buildah and podman run with the vfs storage
# driver and chroot isolation, which need no daemon, no overlay mounts and no user namespaces.
#
# IMAGE_STORAGE_ROOT, when set, keeps podman's and buildah's images under that directory instead
# of the machine's default store (the tests use a scratch directory).
#
# Registries on loopback (localhost, 127.0.0.0/8, [::1]) are reached over plain HTTP, as docker
# does by default: the test environment's registry is one. Set IMAGE_TLS_VERIFY=false to turn TLS
# verification off for other registries too (podman and buildah only; docker reads its daemon's
# insecure-registries).
set -euo pipefail

die() {
  echo "image: $*" >&2
  exit 1
}

engine_works() {
  case "$1" in
    docker) command -v docker >/dev/null && docker info >/dev/null 2>&1 ;;
    *) command -v "$1" >/dev/null ;;
  esac
}

install_buildah() {
  if [[ $(id -u) != 0 ]] || ! command -v apt-get >/dev/null; then
    die "no container engine: install docker, podman or buildah (Debian: apt-get install buildah), or set CONTAINER_ENGINE"
  fi
  echo "image: no docker daemon, podman or buildah here; installing buildah from Debian's packages" >&2
  DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2 ||
    die "apt-get update failed; install docker, podman or buildah, or set CONTAINER_ENGINE"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends buildah >&2 ||
    die "apt-get install buildah failed; install docker, podman or buildah, or set CONTAINER_ENGINE"
}

engine() {
  if [[ -n ${CONTAINER_ENGINE:-} ]]; then
    case "$CONTAINER_ENGINE" in
      docker | podman | buildah) ;;
      *) die "CONTAINER_ENGINE=$CONTAINER_ENGINE: expected docker, podman or buildah" ;;
    esac
    engine_works "$CONTAINER_ENGINE" ||
      die "CONTAINER_ENGINE=$CONTAINER_ENGINE, but $CONTAINER_ENGINE is not installed (or its daemon does not answer)"
    echo "$CONTAINER_ENGINE"
    return
  fi
  local e
  for e in docker podman buildah; do
    if engine_works "$e"; then
      echo "$e"
      return
    fi
  done
  install_buildah
  echo buildah
}

# True when the image reference's registry is on loopback.
on_loopback() {
  local host=${1%%/*}
  [[ $1 == */* ]] || return 1
  host=${host%:*}
  [[ $host == localhost || $host == 127.* || $host == "[::1]" ]]
}

# --tls-verify=false for podman and buildah when any of the given references is on loopback.
tls_flags() {
  local ref
  if [[ ${IMAGE_TLS_VERIFY:-} == false ]]; then
    echo "--tls-verify=false"
    return
  fi
  for ref in "$@"; do
    if on_loopback "$ref"; then
      echo "--tls-verify=false"
      return
    fi
  done
}

# The engine's command line: podman and buildah get vfs storage (under IMAGE_STORAGE_ROOT when set).
run_engine() {
  local e=$1 store=()
  shift
  if [[ -n ${IMAGE_STORAGE_ROOT:-} ]]; then
    store=(--root "$IMAGE_STORAGE_ROOT/root" --runroot "$IMAGE_STORAGE_ROOT/run")
  fi
  case "$e" in
    docker) docker "$@" ;;
    podman | buildah) "$e" --storage-driver vfs "${store[@]}" "$@" ;;
  esac
}

build() {
  local file="" tag="" context="" refs=() args=()
  while (($#)); do
    case "$1" in
      -f) file=$2; shift ;;
      -t) tag=$2; refs+=("$2"); shift ;;
      --build-arg) args+=(--build-arg "$2"); refs+=("${2#*=}"); shift ;;
      -*) die "build: unknown option $1" ;;
      *) context=$1 ;;
    esac
    shift
  done
  [[ -n $file && -n $tag && -n $context ]] || die "build: usage: build -f FILE -t TAG [--build-arg K=V]... CONTEXT"
  [[ -f $file ]] || die "build: no Containerfile at $file"
  [[ -d $context ]] || die "build: no build context at $context"
  local e
  e=$(engine)
  echo "image: $e build $tag" >&2
  case "$e" in
    docker) run_engine docker build -f "$file" -t "$tag" "${args[@]}" "$context" ;;
    podman) run_engine podman build --isolation chroot $(tls_flags "${refs[@]}") -f "$file" -t "$tag" "${args[@]}" "$context" ;;
    buildah) run_engine buildah bud --isolation chroot $(tls_flags "${refs[@]}") -f "$file" -t "$tag" "${args[@]}" "$context" ;;
  esac
}

push() {
  local tag=${1:?push: usage: push TAG} e
  [[ $tag == */* ]] || die "push: $tag names no registry: tag it <registry>/<repository>:<tag>"
  e=$(engine)
  echo "image: $e push $tag" >&2
  case "$e" in
    docker) run_engine docker push "$tag" ;;
    podman | buildah) run_engine "$e" push $(tls_flags "$tag") "$tag" "docker://$tag" ;;
  esac
}

case "${1:-}" in
  engine) engine ;;
  build) shift; build "$@" ;;
  push) shift; push "$@" ;;
  *) die "usage: hack/image.sh engine | build -f FILE -t TAG [--build-arg K=V]... CONTEXT | push TAG" ;;
esac
