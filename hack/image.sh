#!/usr/bin/env bash
# Builds and pushes container images with whichever engine this machine has (docs/src/installation.md).
#
# Usage:
#   hack/image.sh engine                                   print the engine that would be used
#   hack/image.sh build [--platform PLATFORMS] -f FILE -t TAG [--build-arg K=V]... CONTEXT
#   hack/image.sh push [--platform PLATFORMS] TAG
#   hack/image.sh save TAG FILE                            write the image TAG (one platform) to
#                                                          FILE as a docker archive (`docker load`,
#                                                          `ctr images import` read it)
#
# PLATFORMS (comma-separated, linux/amd64 by default): with one platform TAG is a plain image and
# the build gets TARGETARCH as a build argument; with several, podman or buildah build one image
# per platform into the manifest list TAG (replacing any image or list of that name first; the
# engine sets TARGETARCH per platform), and push pushes the list with every image in it, as an
# OCI index. docker builds one platform at a time here (several need `docker buildx`).
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

# The platforms of a --platform value, comma-separated, each os/arch.
platform_list() {
  local list=${1:-linux/amd64} p
  for p in ${list//,/ }; do
    [[ $p =~ ^[a-z0-9]+/[a-z0-9]+(/[a-z0-9]+)?$ ]] || die "platform \"$p\" is not os/arch"
    echo "$p"
  done
}

# Removes the image or manifest list TAG from podman's or buildah's store, when there.
forget() {
  local e=$1 tag=$2
  run_engine "$e" manifest rm "$tag" >/dev/null 2>&1 || true
  run_engine "$e" rmi -f "$tag" >/dev/null 2>&1 || true
}

build() {
  local file="" tag="" context="" refs=() args=() platforms=linux/amd64
  while (($#)); do
    case "$1" in
      --platform) platforms=$2; shift ;;
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
  local e list
  list=$(platform_list "$platforms")
  e=$(engine)
  echo "image: $e build $tag for $(echo $list | tr ' ' ,)" >&2
  if [[ $list == *$'\n'* ]]; then
    [[ $e != docker ]] || die "build: several platforms ($platforms) need podman or buildah (or docker buildx); set CONTAINER_ENGINE"
    forget "$e" "$tag"
    local flags=(--isolation chroot $(tls_flags "${refs[@]}") --platform "$(echo $list | tr ' ' ,)" --manifest "$tag")
    case "$e" in
      podman) run_engine podman build "${flags[@]}" -f "$file" "${args[@]}" "$context" ;;
      buildah) run_engine buildah bud "${flags[@]}" -f "$file" "${args[@]}" "$context" ;;
    esac
    return
  fi
  args+=(--platform "$list" --build-arg "TARGETARCH=$(cut -d/ -f2 <<<"$list")")
  case "$e" in
    docker) run_engine docker build -f "$file" -t "$tag" "${args[@]}" "$context" ;;
    podman) forget podman "$tag"; run_engine podman build --isolation chroot $(tls_flags "${refs[@]}") -f "$file" -t "$tag" "${args[@]}" "$context" ;;
    buildah) forget buildah "$tag"; run_engine buildah bud --isolation chroot $(tls_flags "${refs[@]}") -f "$file" -t "$tag" "${args[@]}" "$context" ;;
  esac
}

push() {
  local platforms=linux/amd64 e list
  if [[ ${1:-} == --platform ]]; then
    platforms=${2:-}
    shift 2
  fi
  local tag=${1:?push: usage: push [--platform PLATFORMS] TAG}
  [[ $tag == */* ]] || die "push: $tag names no registry: tag it <registry>/<repository>:<tag>"
  list=$(platform_list "$platforms")
  e=$(engine)
  echo "image: $e push $tag" >&2
  if [[ $list == *$'\n'* ]]; then
    [[ $e != docker ]] || die "push: several platforms ($platforms) need podman or buildah; set CONTAINER_ENGINE"
    run_engine "$e" manifest push --all --format oci $(tls_flags "$tag") "$tag" "docker://$tag"
    return
  fi
  case "$e" in
    docker) run_engine docker push "$tag" ;;
    podman | buildah) run_engine "$e" push $(tls_flags "$tag") "$tag" "docker://$tag" ;;
  esac
}

save() {
  local tag=${1:?save: usage: save TAG FILE} file=${2:?save: usage: save TAG FILE} e
  e=$(engine)
  echo "image: $e save $tag to $file" >&2
  rm -f "$file"
  case "$e" in
    docker) run_engine docker save -o "$file" "$tag" ;;
    podman) run_engine podman save --format docker-archive -o "$file" "$tag" ;;
    buildah) run_engine buildah push "$tag" "docker-archive:$file:$tag" ;;
  esac
}

case "${1:-}" in
  engine) engine ;;
  build) shift; build "$@" ;;
  push) shift; push "$@" ;;
  save) shift; save "$@" ;;
  *) die "usage: hack/image.sh engine | build [--platform PLATFORMS] -f FILE -t TAG [--build-arg K=V]... CONTEXT | push [--platform PLATFORMS] TAG | save TAG FILE" ;;
esac
