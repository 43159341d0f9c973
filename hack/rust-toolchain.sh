#!/usr/bin/env bash
# Installs the Rust toolchain that rust-toolchain.toml pins when rustup does not have it yet
# (machines set RUSTUP_AUTO_INSTALL=0, so rustup would otherwise stop every cargo command with
# "toolchain is not installed"). Run by the Makefile before anything else; quiet when the
# toolchain is there. Without rustup (a distribution's cargo), it does nothing.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
command -v rustup >/dev/null || exit 0
channel=$(sed -n 's/^channel *= *"\([^"]*\)".*$/\1/p' "$root/rust-toolchain.toml")
if [[ -z "$channel" ]]; then
  echo "rust-toolchain: no channel in $root/rust-toolchain.toml" >&2
  exit 1
fi
if rustup toolchain list | grep -q "^${channel}-"; then
  exit 0
fi
echo "rust-toolchain: installing Rust ${channel} (rust-toolchain.toml) with rustup" >&2
rustup toolchain install "$channel" --profile minimal --component clippy,rustfmt >&2
