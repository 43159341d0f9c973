#!/usr/bin/env bash
# The tfcapi-lint pre-commit hook (.pre-commit-hooks.yaml): runs `tfcapi-lint module` once for
# every directory holding a changed .tf/.tofu file. Arguments: the hook's `args` (--role is
# required; --strict, --allow-warning, --contract and --format pass through), then the file names
# pre-commit hands over (files under a .terraform/ directory are skipped). tfcapi-lint comes from
# $TFCAPI_LINT, else PATH.
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
    --contract | --allow-warning | --format) flags+=("$1" "${2:-}"); shift ;;
    --*) flags+=("$1") ;;
    *) files+=("$1") ;;
  esac
  shift
done
if [[ -z $role ]]; then
  echo "tfcapi-lint hook: no --role: add args: [--role, cluster|machine|machinepool] to the hook in .pre-commit-config.yaml" >&2
  exit 3
fi

# The worst exit code of all runs (tfcapi-lint: 1 findings, 2 unreadable module, 3 usage).
status=0
while IFS= read -r dir; do
  [[ -n $dir ]] || continue
  rc=0
  "$lint" module "${flags[@]}" "$dir" || rc=$?
  ((rc > status)) && status=$rc
done < <(for f in "${files[@]}"; do
  # Never what `init` downloaded (.terraform/), even when a configuration's own files: or exclude:
  # lets it through.
  [[ /$f == */.terraform/* ]] && continue
  dirname -- "$f"
done | sort -u)
exit "$status"
