#!/usr/bin/env bash
# The tfcapi-lint pre-commit hook (.pre-commit-hooks.yaml): runs `tfcapi-lint module` once for
# every module holding a changed .tf/.tofu file. A module is the nearest directory at or above the
# file's that holds a .tfcapi-lint.hcl (so a nested module folder is linted as part of its root
# module, not as a module of the role), else the file's own directory. Arguments: the hook's
# `args` (--role unless every module's .tfcapi-lint.hcl sets role; --strict, --allow-warning,
# --contract and --format pass through), then the file names pre-commit hands over (files under a
# .terraform/ directory are skipped). tfcapi-lint comes from $TFCAPI_LINT, else PATH.
set -uo pipefail

lint=${TFCAPI_LINT:-tfcapi-lint}
if ! command -v "$lint" >/dev/null 2>&1; then
  echo "tfcapi-lint hook: $lint not found: install a tfcapi-lint release asset on PATH (docs/src/tfcapi-lint.md) or set TFCAPI_LINT" >&2
  exit 3
fi

flags=() files=() role=""
while (($#)); do
  case "$1" in
    --role) role=${2:-}; flags+=("$1" "${2:-}"); shift ;;
    --role=*) role=${1#--role=}; flags+=("$1") ;;
    --contract | --allow-warning | --format | --config) flags+=("$1" "${2:-}"); shift ;;
    --*) flags+=("$1") ;;
    *) files+=("$1") ;;
  esac
  shift
done
# The module a file belongs to: the nearest directory at or above it holding a .tfcapi-lint.hcl,
# else its own directory (paths are relative to the repository root, where pre-commit runs).
module_of() {
  local dir
  dir=$(dirname -- "$1")
  local d=$dir
  while :; do
    if [[ -f $d/.tfcapi-lint.hcl ]]; then
      echo "$d"
      return
    fi
    [[ $d == . || $d == / ]] && break
    d=$(dirname -- "$d")
  done
  echo "$dir"
}

# The worst exit code of all runs (tfcapi-lint: 1 findings, 2 unreadable module, 3 usage).
status=0
while IFS= read -r dir; do
  [[ -n $dir ]] || continue
  if [[ -z $role && ! -f $dir/.tfcapi-lint.hcl ]]; then
    echo "tfcapi-lint hook: no --role for $dir: add args: [--role, cluster|machine|machinepool] to the hook in .pre-commit-config.yaml, or role = \"...\" to $dir/.tfcapi-lint.hcl" >&2
    status=3
    continue
  fi
  rc=0
  "$lint" module "${flags[@]}" "$dir" || rc=$?
  ((rc > status)) && status=$rc
done < <(for f in "${files[@]}"; do
  # Never what `init` downloaded (.terraform/), even when a configuration's own files: or exclude:
  # lets it through.
  [[ /$f == */.terraform/* ]] && continue
  module_of "$f"
done | sort -u)
exit "$status"
