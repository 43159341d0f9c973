#!/usr/bin/env bash
# Checks that every page docs/src/SUMMARY.md links to exists, and that every page under docs/src
# is reachable from SUMMARY.md (an orphan page is a page nobody finds), and that every relative
# link of every page leads to a file and heading that exist.
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
# Every relative link of every page resolves: the linked file exists and, for `page.md#anchor`
# or `#anchor`, the page has a heading with that anchor (mdBook's: lowercased, punctuation
# dropped, spaces as dashes). Code blocks and inline code are skipped.
anchors_of() {
  awk '/^```/{code=!code; next} !code && /^#+ /' "$1" |
    sed -E 's/^#+ +//; s/[[:space:]]+$//' | tr '[:upper:]' '[:lower:]' |
    sed -E 's/`//g; s/[^a-z0-9 _-]//g; s/ /-/g'
}
while IFS= read -r page; do
  page=${page#./}
  dir=$(dirname "$page")
  links=$(awk '/^```/{code=!code; next} !code' "$page" | sed -E 's/`[^`]*`//g' |
    grep -oE '\]\([^) ]+\)' | sed -E 's/^\]\(//; s/\)$//' || true)
  for link in $links; do
    case "$link" in http://* | https://* | mailto:*) continue ;; esac
    file=${link%%#*}
    anchor=
    [[ "$link" == *"#"* ]] && anchor=${link#*#}
    target=$page
    if [[ -n "$file" ]]; then
      target=$dir/$file
      if [[ ! -e "$target" ]]; then
        echo "docs/src/$page links to missing $link" >&2
        status=1
        continue
      fi
    fi
    if [[ -n "$anchor" && "$target" == *.md ]] && ! anchors_of "$target" | grep -qxF "$anchor"; then
      echo "docs/src/$page links to $link: no heading with that anchor" >&2
      status=1
    fi
  done
done < <(find . -name '*.md' ! -name SUMMARY.md | sort)
# Every page of the book proper names the part of the specification it covers in a line of its
# own: `*Covers ... the specification's ...*` (the generated API reference, the
# development pages and the "Not built yet" page are not chapters of the specification).
while IFS= read -r page; do
  page=${page#./}
  case "$page" in SUMMARY.md | reference/api.md | development/* | not-built-yet.md) continue ;; esac
  if ! grep -q '^\*Covers .*specification' "$page"; then
    echo "docs/src/$page does not say which part of the specification it covers (*Covers ... the specification's ...*)" >&2
    status=1
  fi
done < <(find . -name '*.md' | sort)
exit $status
