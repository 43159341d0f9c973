#!/usr/bin/env bash
# Regenerates the plan and state fixtures of the contract crate with a real OpenTofu.
#
# Every scenario applies a "before" configuration, then plans an "after" configuration with a
# saved plan and writes `tofu show -json <plan>` to crates/contract/tests/fixtures/plans/<name>.json
# and the runtime's own "Plan: ..." summary line to <name>.summary.
# Only the built-in terraform_data resource is used and state lives in a local backend in a
# temporary directory, so nothing is fetched from the network.
#
# Usage: hack/gen-plan-fixtures.sh            (TOFU=/path/to/tofu to pick the binary)
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
plans="$repo/crates/contract/tests/fixtures/plans"
states="$repo/crates/contract/tests/fixtures/states"
testbin="${CAPTF_TESTBIN:-$HOME/.cache/captf/testbin}"
tofu="${TOFU:-}"
if [[ -z "$tofu" ]]; then
  tofu="$(ls -d "$testbin"/tofu-*/tofu 2>/dev/null | sort -V | tail -n 1 || true)"
fi
if [[ -z "$tofu" || ! -x "$tofu" ]]; then
  echo "no tofu binary: build it with hack/testbin.sh or set TOFU" >&2
  exit 1
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
: >"$work/tofurc"
export TF_CLI_CONFIG_FILE="$work/tofurc" TF_IN_AUTOMATION=1 CHECKPOINT_DISABLE=1
mkdir -p "$plans" "$states"

tf() { "$tofu" -chdir="$1" "${@:2}" -no-color >/dev/null; }

# scenario NAME BEFORE_HCL AFTER_HCL [MODULE_BEFORE_HCL MODULE_AFTER_HCL]
scenario() {
  local name="$1" before="$2" after="$3" mod_before="${4:-}" mod_after="${5:-}"
  local dir="$work/$name"
  mkdir -p "$dir/module"
  printf '%s\n' "$before" >"$dir/main.tf"
  printf '%s\n' "$mod_before" >"$dir/module/main.tf"
  tf "$dir" init -input=false
  tf "$dir" apply -input=false -auto-approve
  printf '%s\n' "$after" >"$dir/main.tf"
  printf '%s\n' "$mod_after" >"$dir/module/main.tf"
  tf "$dir" plan -input=false -out=plan.bin
  "$tofu" -chdir="$dir" show -json -no-color plan.bin | jq_pretty >"$plans/$name.json"
  # The runtime's own summary line, which the analysis must agree with ("" when it prints none).
  { "$tofu" -chdir="$dir" show -no-color plan.bin | grep -E '^Plan: ' || true; } >"$plans/$name.summary"
  echo "wrote $plans/$name.json"
}

# Pretty-prints JSON when python3 is around (smaller diffs), else keeps it as is.
jq_pretty() {
  if command -v python3 >/dev/null; then
    python3 -c 'import json,sys; json.dump(json.load(sys.stdin), sys.stdout, indent=1, sort_keys=True); print()'
  else
    cat
  fi
}

scenario create \
  '' \
  'resource "terraform_data" "a" { input = "one" }
resource "terraform_data" "b" {
  count = 2
  input = count.index
}
output "id" { value = terraform_data.a.id }'

scenario update \
  'resource "terraform_data" "a" { input = "one" }
resource "terraform_data" "same" { input = "x" }' \
  'resource "terraform_data" "a" { input = "two" }
resource "terraform_data" "same" { input = "x" }'

scenario replace-delete-first \
  'resource "terraform_data" "a" { triggers_replace = ["one"] }' \
  'resource "terraform_data" "a" { triggers_replace = ["two"] }'

scenario replace-create-first \
  'resource "terraform_data" "a" {
  triggers_replace = ["one"]
  lifecycle { create_before_destroy = true }
}' \
  'resource "terraform_data" "a" {
  triggers_replace = ["two"]
  lifecycle { create_before_destroy = true }
}'

scenario delete \
  'resource "terraform_data" "keep" { input = 1 }
resource "terraform_data" "gone" {
  for_each = toset(["x", "y"])
  input    = each.key
}' \
  'resource "terraform_data" "keep" { input = 1 }'

scenario output-only \
  'resource "terraform_data" "a" { input = "one" }
output "note" { value = "before" }
output "same" { value = "same" }' \
  'resource "terraform_data" "a" { input = "one" }
output "note" { value = "after" }
output "same" { value = "same" }
output "added" { value = 1 }'

scenario no-changes \
  'resource "terraform_data" "a" { input = "one" }' \
  'resource "terraform_data" "a" { input = "one" }'

scenario move-and-forget \
  'resource "terraform_data" "old" { input = "one" }
resource "terraform_data" "dropped" { input = "two" }' \
  'resource "terraform_data" "new" { input = "one" }
moved {
  from = terraform_data.old
  to   = terraform_data.new
}
removed {
  from = terraform_data.dropped
  lifecycle { destroy = false }
}'

scenario deferred-read \
  '' \
  'resource "terraform_data" "a" { input = "one" }
data "terraform_remote_state" "later" {
  backend = "local"
  config  = { path = "${terraform_data.a.id}.tfstate" }
}'

root='module "role" { source = "./module" }
output "provider_id" {
  value     = module.role.provider_id
  sensitive = true
}
output "addresses" {
  value     = module.role.addresses
  sensitive = true
}
output "failure_domain" {
  value     = module.role.failure_domain
  sensitive = true
}
output "interruptible" {
  value     = module.role.interruptible
  sensitive = true
}
output "health" {
  value     = module.role.health
  sensitive = true
}'
module_outputs='output "provider_id" { value = "noop:///team-a/${terraform_data.instance.id}" }
output "addresses" { value = [{ type = "Hostname", address = "node-1" }, { type = "InternalIP", address = "10.0.0.1" }] }
output "failure_domain" { value = null }
output "interruptible" { value = false }
output "health" { value = { state = "running", healthy = true, message = null, reasons = [] } }'

scenario module-role \
  "$root" "$root" \
  "resource \"terraform_data\" \"instance\" { input = \"v1\" }
resource \"terraform_data\" \"disk\" {
  count = 2
  input = \"v1\"
}
resource \"terraform_data\" \"nic\" { triggers_replace = [\"v1\"] }
$module_outputs" \
  "resource \"terraform_data\" \"instance\" { input = \"v2\" }
resource \"terraform_data\" \"disk\" {
  count = 3
  input = \"v1\"
}
resource \"terraform_data\" \"nic\" { triggers_replace = [\"v2\"] }
resource \"terraform_data\" \"extra\" { input = 1 }
$module_outputs"

# The applied "before" state of the module-role scenario: a real state v4 document written by a
# generated-style root (sensitive re-exports; the null failure_domain is dropped by the runtime).
cp "$work/module-role/terraform.tfstate" "$states/machine-role.tfstate"
echo "wrote $states/machine-role.tfstate"

# A state written with OpenTofu client-side encryption.
enc="$work/encrypted"
mkdir -p "$enc"
cat >"$enc/main.tf" <<'EOF'
terraform {
  encryption {
    key_provider "pbkdf2" "fixture" {
      passphrase = "fixture-passphrase-not-a-secret"
    }
    method "aes_gcm" "fixture" {
      keys = key_provider.pbkdf2.fixture
    }
    state {
      method = method.aes_gcm.fixture
    }
  }
}
resource "terraform_data" "a" { input = "one" }
output "x" { value = "hidden" }
EOF
tf "$enc" init -input=false
tf "$enc" apply -input=false -auto-approve
cp "$enc/terraform.tfstate" "$states/encrypted.tfstate"
echo "wrote $states/encrypted.tfstate"
