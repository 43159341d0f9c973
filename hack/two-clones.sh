#!/usr/bin/env bash
# The Quick Start from two clones in turn (issue 13, "the Quick Start must work from a plain
# clone"): two fresh clones of this checkout's HEAD on one machine, each building into its own
# target/ and running `make quickstart`. Each run must read its own clone's files, never the
# other's and never this checkout's (nor ../shared: the clones sit in a temporary directory with
# nothing beside them).
#
# Cost: this checkout's target/ is lent to each clone in turn (moved, not copied, and moved back
# at the end, also on failure), so dependencies are not rebuilt; the workspace's own crates are,
# since their paths differ. TWO_CLONES_COLD=1 lends nothing: a cold Rust build per clone.
#
# Usage: hack/two-clones.sh   (make two-clones)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/captf-two-clones.XXXXXX")
LENT="" # the clone holding this checkout's target/, if any

give_back() {
  if [[ -n "$LENT" && -d "$LENT/target" && ! -e "$ROOT/target" ]]; then
    mv "$LENT/target" "$ROOT/target"
  fi
  rm -rf "$WORK"
}
trap give_back EXIT

echo "two-clones: clones of $(git -C "$ROOT" rev-parse --short HEAD) in $WORK"
for clone in one two; do
  dir="$WORK/$clone/captf"
  mkdir -p "$WORK/$clone"
  git clone --quiet --no-hardlinks "$ROOT" "$dir"
  if [[ -z "${TWO_CLONES_COLD:-}" && -d "$ROOT/target" ]]; then
    mv "$ROOT/target" "$dir/target"
    LENT=$dir
  fi
  start=$SECONDS
  # Nothing of this checkout's environment may steer the clone's build or run.
  (cd "$dir" && env -u CARGO_TARGET_DIR -u CAPTF_REPO_ROOT -u CAPTF_RUNNER_BIN CARGO_INCREMENTAL=0 make quickstart) 2>&1 |
    tee "$WORK/$clone.log"
  if ! grep -q "checkout: $dir\$" "$WORK/$clone.log"; then
    echo "two-clones: the Quick Start in $dir did not run from its own checkout" >&2
    exit 1
  fi
  if grep -Fq "$ROOT/" "$WORK/$clone.log"; then
    echo "two-clones: the Quick Start in $dir read files of $ROOT" >&2
    exit 1
  fi
  if [[ -n "$LENT" ]]; then
    mv "$dir/target" "$ROOT/target"
    LENT=""
  fi
  echo "two-clones: $clone passed in $((SECONDS - start))s"
done
echo "two-clones: passed"
