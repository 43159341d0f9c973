#!/usr/bin/env bash
# `make bench`: CAPTF's benchmarks against their peers, each pair measured in the same run, then
# one table (docs/src/performance.md):
#   - the state reader against gunzip alone on the same 64 MiB state (contract's `state_read`,
#     criterion; the ratio is read from criterion's estimates.json here);
#   - tfcapi-lint against tflint on the same modules (tfcapi-lint's `against_tflint`);
#   - the runner's apply against the same five OpenTofu commands by hand (runner's `overhead`
#     test, ignored by `make test`, run here with --ignored);
#   - the webhook's admission latency against Cluster API's core webhook, both at 500 and 2,000
#     requests/s on loopback in one run (webhook's `admission_latency`; it starts a test
#     environment with Cluster API's managers).
# Every piece prints `BENCH<TAB>figure<TAB>ours<TAB>peer<TAB>ratio<TAB>goal<TAB>verdict` lines;
# this script gathers them and prints the table last. A figure that misses its goal says MISS.
# Nothing here asserts a time: a miss is reported, not failed.
#
# Needs: the test binaries (`make testbin`) and tflint (`hack/testbin.sh tflint`); `make bench`
# builds both first. Environment: CARGO, CARGO_TARGET_DIR, CAPTF_BENCH_WEBHOOK_SECONDS (10),
# CAPTF_BENCH_LINT_RUNS (7).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
CARGO=${CARGO:-cargo}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
export CRITERION_HOME=$CARGO_TARGET_DIR/criterion
WEBHOOK_SECONDS=${CAPTF_BENCH_WEBHOOK_SECONDS:-10}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
lines=$work/bench.tsv
: >"$lines"

# Runs a command, shows its output, keeps its BENCH lines.
collect() {
  echo "bench: $*" >&2
  "$@" 2>&1 | tee "$work/out" >&2
  grep $'^BENCH\t' "$work/out" >>"$lines" || true
}

# The state reader's speed against gunzip alone: the ratio of their median times per iteration
# (the same decompressed bytes per iteration, so time ratio = speed ratio).
state_read() {
  rm -rf "$CRITERION_HOME/state_read_64MiB"
  collect "$CARGO" bench --locked -p captf-contract --bench state_read
  python3 - "$CRITERION_HOME/state_read_64MiB" >>"$lines" <<'EOF'
import json, pathlib, sys
group = pathlib.Path(sys.argv[1])
def read(function, parameter, name):
    return json.loads((group / function / parameter / "new" / name).read_text())
def median_ns(function, parameter):
    return read(function, parameter, "estimates.json")["median"]["point_estimate"]
ours = median_ns("read_state", "chunks+gunzip+parse")
peer = median_ns("baseline", "gunzip_only")
# Decompressed bytes per iteration, the same for both.
size = read("read_state", "chunks+gunzip+parse", "benchmark.json")["throughput"]["Bytes"]
ratio = peer / ours
print("\t".join([
    "BENCH", "state reader speed, 64 MiB state v4 in 1 MiB chunks (criterion median)",
    f"{size / ours * 1e9 / 2**20:.0f} MiB/s", f"gunzip alone {size / peer * 1e9 / 2**20:.0f} MiB/s",
    f"{ratio:.3f}", "≥ 0.7", "met" if ratio >= 0.7 else "MISS"]))
EOF
}

table() {
  echo
  echo "| figure | ours | peer (same run) | ratio | goal | verdict |"
  echo "| --- | --- | --- | --- | --- | --- |"
  awk -F'\t' '{ printf "| %s | %s | %s | %s | %s | %s |\n", $2, $3, $4, $5, $6, $7 }' "$lines"
  echo
  echo "Ratio: ours / peer for times and memory (lower is better); for the state reader, our speed /"
  echo "the peer's (higher is better). Not measured here: the scale harness (docs/src/performance.md)."
}

state_read
collect "$CARGO" bench --locked -p tfcapi-lint --bench against_tflint
collect "$CARGO" test --locked -p runner --test overhead -- --ignored --nocapture
CAPTF_BENCH_RPS=500,2000 CAPTF_BENCH_SECONDS=$WEBHOOK_SECONDS \
  collect "$CARGO" bench --locked -p webhook --bench admission_latency
table
