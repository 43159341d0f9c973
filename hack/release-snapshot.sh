#!/usr/bin/env bash
# A release, cut on this machine into one folder and one registry (make release-snapshot;
# docs/src/installation.md, "Release snapshot"): what the release workflow publishes, signed.
#
#   1. the manager, webhook, runner and tfcapi-lint images and the six no-op module images, for
#      PLATFORMS (one OCI index each), pushed to REGISTRY;
#   2. the clusterctl repository of VERSION (make manifests-release) in DIR, whose layout
#      <provider>/<version>/ clusterctl reads with a file:// provider URL;
#   3. the Linux tfcapi-lint assets and their checksum file (make release-lint, run by
#      make lint-image);
#   4. an SPDX 2.3 SBOM per shipped binary and platform (<binary>-linux-<arch>.spdx.json, from the
#      stripped binary the image or asset holds);
#   5. images.txt (every image by digest), checksums.txt (sha256sum of every file), and cosign
#      signatures: of each image (pushed beside it) and of checksums.txt (checksums.txt.sig), with
#      cosign.pub, the public half of COSIGN_KEY.
#
# Environment (the Makefile passes these): DIR, REGISTRY, VERSION, PLATFORMS, COSIGN_KEY (a cosign
# private key; COSIGN_PASSWORD unlocks it), IMAGE_PROFILE, LINT_PROFILE, MAKE, and optionally
# TERRAFORM_IMAGE, TOFU_IMAGE and IMAGE_STORAGE_ROOT. Signing does not upload to a transparency
# log (--tlog-upload=false): verify with --insecure-ignore-tlog. Registries on loopback are
# reached over plain HTTP.
set -euo pipefail

die() {
  echo "release-snapshot: $*" >&2
  exit 1
}

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
: "${DIR:?}" "${VERSION:?}" "${PLATFORMS:?}" "${MAKE:=make}"
[[ -n ${REGISTRY:-} ]] || die "set REGISTRY=<registry>/<path> to push the images to"
[[ -n ${COSIGN_KEY:-} && -r ${COSIGN_KEY} ]] ||
  die "set COSIGN_KEY to a cosign private key (cosign generate-key-pair) and COSIGN_PASSWORD to its password"
[[ $VERSION =~ ^v[0-9]+\.[0-9]+\.[0-9]+ ]] || die "VERSION=$VERSION is not vX.Y.Z"
[[ ! -e $DIR ]] || die "$DIR exists: a snapshot is written into a new folder"

IMG="$REGISTRY/cluster-api-provider-terraform:$VERSION"
platforms=$(hack/cross.sh platforms "$PLATFORMS")

cosign=$(hack/testbin.sh --print-env | sed -n 's/^CAPTF_TESTBIN_COSIGN=//p')
crane=$(hack/testbin.sh --print-env | sed -n 's/^CAPTF_TESTBIN_CRANE=//p')
hack/testbin.sh cosign crane >&2

host=${REGISTRY%%/*}
insecure=()
case "${host%:*}" in
  localhost | 127.* | "[::1]") insecure=(--insecure) ;;
esac

echo "release-snapshot: images for $PLATFORMS into $REGISTRY" >&2
"$MAKE" --no-print-directory docker-build docker-push IMG="$IMG" PLATFORMS="$PLATFORMS" VERSION="$VERSION"
"$MAKE" --no-print-directory noop-images-push NOOP_REGISTRY="$REGISTRY" PLATFORMS="$PLATFORMS" VERSION="$VERSION"

echo "release-snapshot: the clusterctl repository and the tfcapi-lint assets into $DIR" >&2
"$MAKE" --no-print-directory manifests-release RELEASE_DIR="$DIR" RELEASE_IMG="$IMG" VERSION="$VERSION"
"$MAKE" --no-print-directory lint-image lint-image-push IMG="$IMG" PLATFORMS="$PLATFORMS" LINT_DIST="$DIR" \
  VERSION="$VERSION"

echo "release-snapshot: SBOMs" >&2
cargo build --locked -q -p captf-release --bin sbom
sbom="${CARGO_TARGET_DIR:-$ROOT/target}/x86_64-unknown-linux-gnu/debug/sbom"
created=$(TZ=UTC git log -1 --date=format-local:%Y-%m-%dT%H:%M:%SZ --format=%cd 2>/dev/null ||
  date -u +%Y-%m-%dT%H:%M:%SZ)
context="${CARGO_TARGET_DIR:-$ROOT/target}/image-context"
meta=$(mktemp)
trap 'rm -f "$meta"' EXIT
for p in $platforms; do
  arch=$(hack/cross.sh arch "$p")
  cargo metadata --format-version 1 --locked --filter-platform "$(hack/cross.sh targets "$p")" >"$meta"
  for b in manager webhook runner tfcapi-lint; do
    if [[ $b == tfcapi-lint ]]; then bin="$DIR/tfcapi-lint-linux-$arch"; else bin="$context/$b/$arch/$b"; fi
    "$sbom" "$meta" "$b" "$bin" "$b-linux-$arch" "$VERSION" "$created" >"$DIR/$b-linux-$arch.spdx.json"
  done
done

echo "release-snapshot: digests, checksums and signatures" >&2
refs=("$IMG" "$REGISTRY/cluster-api-provider-terraform-webhook:$VERSION"
  "$REGISTRY/cluster-api-provider-terraform-runner:$VERSION" "$REGISTRY/tfcapi-lint:$VERSION")
for role in cluster machine machinepool; do
  for rt in terraform opentofu; do refs+=("$REGISTRY/noop-$role:$VERSION-$rt"); done
done
: >"$DIR/images.txt"
for ref in "${refs[@]}"; do
  echo "${ref%:*}@$("$crane" digest "${insecure[@]}" "$ref")" >>"$DIR/images.txt"
done
(cd "$DIR" && find . -maxdepth 1 -type f ! -name checksums.txt -printf '%P\n' | LC_ALL=C sort |
  xargs sha256sum >checksums.txt)
"$cosign" public-key --key "$COSIGN_KEY" >"$DIR/cosign.pub"
allow=()
((${#insecure[@]} == 0)) || allow=(--allow-insecure-registry)
while read -r ref; do
  "$cosign" sign --yes --key "$COSIGN_KEY" --tlog-upload=false "${allow[@]}" "$ref" >&2
done <"$DIR/images.txt"
"$cosign" sign-blob --yes --key "$COSIGN_KEY" --tlog-upload=false \
  --output-signature "$DIR/checksums.txt.sig" "$DIR/checksums.txt" >&2
echo "release-snapshot: $VERSION in $DIR and $REGISTRY ($(wc -l <"$DIR/images.txt") images signed)" >&2
