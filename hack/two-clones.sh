#!/usr/bin/env bash
# The Quick Start from two clones in turn (issue 13, "the Quick Start must work from a plain
# clone"): two fresh clones of this checkout's HEAD, on one machine, each build into their own
# target/ and run `make quickstart`; each run must read its own clone's files, never the other's
# (and never ../shared, which a fresh clone in a temporary directory does not have beside it).
#
# Usage: hack/two-clones.sh            (make two-clones)
#   TWO_CLONES_COLD=1   do not seed the clones' target/ from this checkout's (a cold Rust build
#                       each; by default dependencies are reused and only the workspace's own
#                       crates rebuild, since their paths differ)
#   TWO_CLONES_KEEP=1   keep the clones (printed) instead of removing them
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/captf-two-clones.XXXXXX")
if [[ -z "${TWO_CLONES_KEEP:-}" ]]; then
  trap 'rm -rf "$WORK"' EXIT
fi
echo "two-clones: clones of $(git -C "$ROOT" rev-parse --short HEAD) in $WORK"

for clone in one two; do
  dir="$WORK/$clone/captf"
  mkdir -p "$WORK/$clone"
  git clone --quiet --no-hardlinks "$ROOT" "$dir"
  if [[ -z "${TWO_CLONES_COLD:-}" && -d "$ROOT/target/debug" ]]; then
    mkdir -p "$dir/target"
    # Dependencies only: the workspace's own artifacts are rebuilt for this clone anyway.
    cp -a --reflink=auto "$ROOT/target/debug" "$dir/target/debug"
    if [[ -d "$ROOT/target/x86_64-unknown-linux-gnu" ]]; then
      cp -a --reflink=auto "$ROOT/target/x86_64-unknown-linux-gnu" "$dir/target/"
    fi
  fi
  start=$SECONDS
  # A clean environment for the build: this checkout's CARGO_TARGET_DIR and CAPTF_* settings
  # must not leak into the clone's run.
  (cd "$dir" && env -u CARGO_TARGET_DIR -u CAPTF_REPO_ROOT -u CAPTF_RUNNER_BIN make quickstart) 2>&1 |
    tee "$WORK/$clone.log"
  grep -q "checkout: $dir\$" "$WORK/$clone.log" || {
    echo "two-clones: the quick start in $dir did not run from its own checkout" >&2
    exit 1
  }
  grep -Fq "$ROOT" "$WORK/$clone.log" && {
    echo "two-clones: the quick start in $dir read files of $ROOT" >&2
    exit 1
  }
  echo "two-clones: $clone passed in $((SECONDS - start))s"
done
echo "two-clones: passed"
