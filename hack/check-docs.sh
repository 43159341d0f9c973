#!/usr/bin/env bash
# Checks that every page docs/src/SUMMARY.md links to exists, and that every page under docs/src
# is reachable from SUMMARY.md (an orphan page is a page nobody finds).
set -euo pipefail
cd "$(dirname "$0")/../docs/src"
status=0
linked=$(grep -oE '\]\([^)]+\.md\)' SUMMARY.md | sed -E 's/^\]\(//; s/\)$//' | sort -u)
for page in $linked; do
  if [[ ! -f "$page" ]]; then
    echo "docs/src/SUMMARY.md links to missing page: $page" >&2
    status=1
  fi
done
while IFS= read -r page; do
  page=${page#./}
  [[ "$page" == "SUMMARY.md" ]] && continue
  if ! grep -qxF "$page" <<<"$linked"; then
    echo "docs/src/$page is not linked from SUMMARY.md" >&2
    status=1
  fi
done < <(find . -name '*.md' | sort)
exit $status
