#!/usr/bin/env bash
# The platforms CAPTF's static binaries and images are built for (docs/src/installation.md,
# "Platforms"): linux/amd64 natively, linux/arm64 cross-built with Debian's aarch64-linux-gnu
# toolchain and run here under qemu-user for the tests.
#
# Usage:
#   hack/cross.sh platforms PLATFORMS   the platforms of PLATFORMS, checked, one per line
#   hack/cross.sh targets PLATFORMS     the Rust targets of PLATFORMS, one per line
#   hack/cross.sh arch PLATFORM         the platform's architecture (amd64, arm64)
#   hack/cross.sh strip PLATFORM        the strip program for the platform's binaries
#   hack/cross.sh deps PLATFORMS        install what building for PLATFORMS needs, when missing:
#                                       the Rust target (rustup) and, for linux/arm64, Debian's
#                                       gcc-aarch64-linux-gnu and libc6-dev-arm64-cross (as root)
#   hack/cross.sh qemu                  install qemu-user-static when missing (as root, Debian)
#
# PLATFORMS is a comma- or space-separated list of linux/amd64 and linux/arm64. Anything else is
# refused, naming the platforms that are supported.
set -euo pipefail

die() {
  echo "cross: $*" >&2
  exit 1
}

SUPPORTED="linux/amd64, linux/arm64"

# The platforms of a comma- or space-separated list, one per line, each checked.
platforms() {
  local p
  [[ -n ${1// /} ]] || die "PLATFORMS is empty: set one or more of $SUPPORTED"
  for p in ${1//,/ }; do
    case "$p" in
      linux/amd64 | linux/arm64) echo "$p" ;;
      *) die "platform \"$p\" is not supported: PLATFORMS takes $SUPPORTED" ;;
    esac
  done
}

target_of() {
  case "$1" in
    linux/amd64) echo x86_64-unknown-linux-gnu ;;
    linux/arm64) echo aarch64-unknown-linux-gnu ;;
  esac
}

apt_install() {
  [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null ||
    die "install $* (Debian package names), or build only for linux/amd64"
  echo "cross: installing $* from Debian's packages" >&2
  DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >&2
}

deps() {
  local p target
  for p in $1; do
    target=$(target_of "$p")
    if command -v rustup >/dev/null && ! rustup target list --installed | grep -qx "$target"; then
      rustup target add "$target" >&2
    fi
    if [[ $p == linux/arm64 ]] && ! command -v aarch64-linux-gnu-gcc >/dev/null; then
      apt_install gcc-aarch64-linux-gnu libc6-dev-arm64-cross binutils-aarch64-linux-gnu
    fi
  done
}

# One platform, checked.
one() {
  local list
  list=$(platforms "$1")
  [[ $list != *$'\n'* ]] || die "$2: one platform, not \"$1\""
  echo "$list"
}

cmd=${1:-}
case "$cmd" in
  platforms | targets | deps) list=$(platforms "${2:-}") ;;
  arch | strip) list=$(one "${2:-}" "$cmd") ;;
esac
case "$cmd" in
  platforms) echo "$list" ;;
  targets) for p in $list; do target_of "$p"; done ;;
  arch) echo "${list#linux/}" ;;
  strip) if [[ $list == linux/arm64 ]]; then echo aarch64-linux-gnu-strip; else echo strip; fi ;;
  deps) deps "$list" ;;
  qemu) command -v qemu-aarch64-static >/dev/null || apt_install qemu-user-static ;;
  *) die "usage: hack/cross.sh platforms|targets|deps PLATFORMS | arch|strip PLATFORM | qemu" ;;
esac
