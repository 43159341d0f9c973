#!/usr/bin/env bash
# The tfcapi-lint pre-commit hook (.pre-commit-hooks.yaml): runs `tfcapi-lint module` once for
# every module holding a changed .tf/.tofu file. `tfcapi-lint modules` names those modules: with a
# module map in the repository root's .tfcapi-lint.hcl, the mapped module at or above each file;
# else the nearest directory at or above it that holds a .tfcapi-lint.hcl (so a nested module
# folder is linted as part of its root module, not as a module of the role), else the file's own
# directory. Files under the root file's skip folders or under .terraform/ belong to no module.
# Arguments: the hook's `args` (--role unless the map or each module's .tfcapi-lint.hcl sets
# role; --strict, --allow-warning, --runtime, --contract and --format pass through; --config
# names the map), then the file names pre-commit hands over. tfcapi-lint comes from
# $TFCAPI_LINT, else PATH.
set -uo pipefail

lint=${TFCAPI_LINT:-tfcapi-lint}
if ! command -v "$lint" >/dev/null 2>&1; then
  echo "tfcapi-lint hook: $lint not found: install a tfcapi-lint release asset on PATH (docs/src/tfcapi-lint.md) or set TFCAPI_LINT" >&2
  exit 3
fi

flags=() files=() config=()
while (($#)); do
  case "$1" in
    --config) config=(--config "${2:-}"); flags+=("$1" "${2:-}"); shift ;;
    --config=*) config=("$1"); flags+=("$1") ;;
    --role | --contract | --allow-warning | --format | --runtime) flags+=("$1" "${2:-}"); shift ;;
    --*) flags+=("$1") ;;
    *) files+=("$1") ;;
  esac
  shift
done
((${#files[@]})) || exit 0

# Paths are relative to the repository root, where pre-commit runs.
dirs=$("$lint" modules "${config[@]}" -- "${files[@]}") || exit $?

# The worst exit code of all runs (tfcapi-lint: 1 findings, 2 unreadable module, 3 usage).
status=0
while IFS= read -r dir; do
  [[ -n $dir ]] || continue
  rc=0
  "$lint" module "${flags[@]}" "$dir" || rc=$?
  ((rc > status)) && status=$rc
done <<<"$dirs"
exit "$status"
