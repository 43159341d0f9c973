#!/usr/bin/env bash
# Renders a clusterctl local repository for one release (docs/src/installation.md):
#   $RELEASE_DIR/infrastructure-components.yaml  config/default with the release's three images
#   $RELEASE_DIR/metadata.yaml                   metadata.yaml
#   $RELEASE_DIR/cluster-template*.yaml, clusterclass-*.yaml   the flavors of templates/, if any
#   $RELEASE_DIR/identity*.yaml                  the identity templates of templates/
#   $RELEASE_DIR/prometheus.yaml, network-policy.yaml   the opt-in overlays config/prometheus and
#                                                config/network-policy, rendered
#   $RELEASE_DIR/grafana-dashboard.json          config/grafana/captf.json
# Called by `make manifests-release` with RELEASE_DIR, RELEASE_IMG (the manager image),
# RELEASE_WEBHOOK_IMG, RELEASE_RUNNER_IMG, VERSION and KUSTOMIZE set. Refuses placeholder images
# and a VERSION that metadata.yaml has no release series for. Writes nothing on refusal.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

die() {
  echo "manifests-release: $*" >&2
  exit 1
}

: "${KUSTOMIZE:?}"
[[ -n ${RELEASE_DIR:-} ]] || die "set RELEASE_DIR to the directory to write (for example \$HOME/local-repository/infrastructure-terraform/v0.1.0)"
[[ -n ${RELEASE_IMG:-} ]] || die "set RELEASE_IMG to the manager image you pushed (for example registry.example.com/you/cluster-api-provider-terraform:v0.1.0)"

# A placeholder is config/'s own image name, an image without a registry or tag, or one on a
# .invalid host: a release naming one would install pods that can never pull.
check_image() {
  local what=$1 ref=$2 name=${2%%@*}
  case "${name##*/}" in
    captf-manager | captf-manager:* | captf-webhook | captf-webhook:* | captf-runner | captf-runner:*)
      die "$what=$ref is a placeholder image name: set it to an image you pushed" ;;
  esac
  [[ $ref == */* ]] || die "$what=$ref names no registry: use <registry>/<repository>:<tag>"
  [[ ${name##*/} == *:* || $ref == *@sha256:* ]] || die "$what=$ref has no tag or digest"
  [[ ${ref%%/*} != *.invalid && ${ref%%/*} != *.invalid:* ]] || die "$what=$ref is on a placeholder (.invalid) host"
}
check_image RELEASE_IMG "$RELEASE_IMG"
check_image RELEASE_WEBHOOK_IMG "${RELEASE_WEBHOOK_IMG:?}"
check_image RELEASE_RUNNER_IMG "${RELEASE_RUNNER_IMG:?}"

# clusterctl reads the version from the directory name and needs it in a release series.
[[ ${VERSION:-} =~ ^v([0-9]+)\.([0-9]+)\.([0-9]+)([-+].*)?$ ]] ||
  die "VERSION=${VERSION:-} is not a semantic version vX.Y.Z: set VERSION (for example VERSION=v0.1.0)"
major=${BASH_REMATCH[1]} minor=${BASH_REMATCH[2]}
awk -v M="$major" -v m="$minor" '
  /major:/ { maj = $NF } /minor:/ { if (maj == M && $NF == m) found = 1 }
  END { exit !found }' "$ROOT/metadata.yaml" ||
  die "VERSION=$VERSION: metadata.yaml has no release series $major.$minor; add one with its Cluster API contract"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r "$ROOT/config" "$work/config"
(
  cd "$work/config/default"
  "$KUSTOMIZE" edit set image "captf-manager=$RELEASE_IMG" "captf-webhook=$RELEASE_WEBHOOK_IMG" \
    "captf-runner=$RELEASE_RUNNER_IMG"
)
"$KUSTOMIZE" build "$work/config/default" >"$work/infrastructure-components.yaml"
for overlay in prometheus network-policy; do
  "$KUSTOMIZE" build "$work/config/$overlay" >"$work/$overlay.yaml"
done
if grep -nE '(image: |value: )"?captf-(manager|webhook|runner)(:|"|$)' "$work/infrastructure-components.yaml" >&2; then
  die "the rendered components still name a placeholder image (above)"
fi

mkdir -p "$RELEASE_DIR"
cp "$work/infrastructure-components.yaml" "$RELEASE_DIR/infrastructure-components.yaml"
cp "$ROOT/metadata.yaml" "$RELEASE_DIR/metadata.yaml"
shopt -s nullglob
flavors=("$ROOT"/templates/cluster-template*.yaml "$ROOT"/templates/clusterclass-*.yaml)
for f in "${flavors[@]}"; do cp "$f" "$RELEASE_DIR/"; done
for f in "$ROOT"/templates/identity*.yaml; do cp "$f" "$RELEASE_DIR/"; done
cp "$work/prometheus.yaml" "$work/network-policy.yaml" "$RELEASE_DIR/"
cp "$ROOT/config/grafana/captf.json" "$RELEASE_DIR/grafana-dashboard.json"
echo "manifests-release: wrote $RELEASE_DIR (infrastructure-components.yaml, metadata.yaml, ${#flavors[@]} flavor(s), the identity templates, prometheus.yaml, network-policy.yaml, grafana-dashboard.json) for $VERSION"
echo "manifests-release: images $RELEASE_IMG, $RELEASE_WEBHOOK_IMG, $RELEASE_RUNNER_IMG"
