#!/usr/bin/env bash
# Every test of the workspace (make unit), in two lanes at once: the manager's suites in one, every
# other package's in the other. Most of the integration suites' time is waiting (for Jobs, for
# Cluster API's controllers): on two cores one lane leaves the machine about 70 % idle, and the
# manager's suites take about as long as all the others together. Each test binary still runs
# alone in its lane, with its own test environment (pod subnets are locked per environment:
# docs/src/development/test-environment.md, "Pod network").
#
# The workspace is built first, once, so the lanes only run tests. Each line a lane prints starts
# with its name ("[manager] ", "[others] "); a lane that fails does not stop the other, and the
# summary at the end names the failed tests of both. Exit status: 0 when both lanes passed.
#
# Usage: hack/test-lanes.sh   (make unit; CARGO overrides cargo)
set -euo pipefail

CARGO=${CARGO:-cargo}
LOGS=$(mktemp -d "${TMPDIR:-/tmp}/captf-test-lanes.XXXXXX")
trap 'rm -rf "$LOGS"' EXIT

$CARGO test --workspace --locked --no-run

lane() {
  local name=$1
  shift
  local start=$SECONDS rc=0
  "$@" > >(tee "$LOGS/$name.log" | sed -u "s/^/[$name] /") 2>&1 || rc=$?
  echo "[$name] lane finished in $((SECONDS - start))s with status $rc"
  return "$rc"
}

lane manager $CARGO test --locked --no-fail-fast -p manager &
manager=$!
lane others $CARGO test --workspace --locked --no-fail-fast --exclude manager &
others=$!

failed=()
wait "$manager" || failed+=(manager)
wait "$others" || failed+=(others)

if ((${#failed[@]})); then
  for name in "${failed[@]}"; do
    echo "test-lanes: lane $name failed; its failed tests:" >&2
    grep -E '^test .* FAILED$|^error: test failed|^    [a-z_:]+$' "$LOGS/$name.log" | sed 's/^/  /' >&2 || true
  done
  exit 1
fi
echo "test-lanes: both lanes passed"
