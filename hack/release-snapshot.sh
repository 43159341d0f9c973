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
#      signatures: of each image (pushed beside it) and of checksums.txt.
#
# Environment (the Makefile passes these): DIR, REGISTRY, VERSION, PLATFORMS, IMAGE_PROFILE,
# LINT_PROFILE, MAKE, one way to sign, and optionally ASSETS, TERRAFORM_IMAGE, TOFU_IMAGE and
# IMAGE_STORAGE_ROOT.
#
# Signing, one of:
#   COSIGN_KEY=<cosign private key> (COSIGN_PASSWORD unlocks it): nothing goes to a transparency
#     log (--tlog-upload=false, verify with --insecure-ignore-tlog); checksums.txt.sig and
#     cosign.pub, the key's public half, go into DIR.
#   COSIGN_KEYLESS=true: Sigstore keyless signing with the OIDC identity of the run (the release
#     workflow's, with id-token: write; or SIGSTORE_ID_TOKEN), recorded in Rekor;
#     checksums.txt.sigstore.json, the bundle of the checksum file's signature, goes into DIR.
#
# ASSETS names a folder of tfcapi-lint assets built elsewhere (the workflow's macOS and Windows
# runners: tfcapi-lint-darwin-amd64, tfcapi-lint-darwin-arm64, tfcapi-lint-windows-amd64.exe).
# They are copied into DIR, tfcapi-lint-checksums.txt is written over every asset, and each gets
# its SBOM. Registries on loopback are reached over plain HTTP.
set -euo pipefail

die() {
  echo "release-snapshot: $*" >&2
  exit 1
}

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
: "${DIR:?}" "${VERSION:?}" "${PLATFORMS:?}" "${MAKE:=make}"
[[ -n ${REGISTRY:-} ]] || die "set REGISTRY=<registry>/<path> to push the images to"
case ${COSIGN_KEYLESS:-false} in
  true | false) ;;
  *) die "COSIGN_KEYLESS=$COSIGN_KEYLESS: true or false" ;;
esac
if [[ -n ${COSIGN_KEY:-} ]]; then
  [[ ${COSIGN_KEYLESS:-false} == false ]] || die "set COSIGN_KEY or COSIGN_KEYLESS=true, not both"
  [[ -r $COSIGN_KEY ]] || die "COSIGN_KEY=$COSIGN_KEY is not a readable file"
  signing=key
elif [[ ${COSIGN_KEYLESS:-false} == true ]]; then
  [[ -n ${ACTIONS_ID_TOKEN_REQUEST_URL:-}${SIGSTORE_ID_TOKEN:-} ]] ||
    die "COSIGN_KEYLESS=true needs an OIDC identity: a GitHub Actions job with id-token: write, or SIGSTORE_ID_TOKEN"
  signing=keyless
else
  die "set COSIGN_KEY to a cosign private key (cosign generate-key-pair) and COSIGN_PASSWORD to its password, or COSIGN_KEYLESS=true in a CI job with an OIDC identity"
fi
[[ $VERSION =~ ^v[0-9]+\.[0-9]+\.[0-9]+ ]] || die "VERSION=$VERSION is not vX.Y.Z"
[[ ! -e $DIR ]] || die "$DIR exists: a snapshot is written into a new folder"

# The tfcapi-lint assets built elsewhere, with the target each was built for (for its SBOM).
declare -A asset_targets=(
  [tfcapi-lint-darwin-amd64]=x86_64-apple-darwin
  [tfcapi-lint-darwin-arm64]=aarch64-apple-darwin
  [tfcapi-lint-windows-amd64.exe]=x86_64-pc-windows-msvc
)
assets=()
if [[ -n ${ASSETS:-} ]]; then
  [[ -d $ASSETS ]] || die "ASSETS=$ASSETS is not a folder"
  for f in "$ASSETS"/* "$ASSETS"/.[!.]*; do
    [[ -e $f ]] || continue
    name=${f##*/}
    [[ -f $f && -n ${asset_targets[$name]:-} ]] ||
      die "ASSETS: $name is not one of the assets built elsewhere (${!asset_targets[*]})"
    assets+=("$f")
  done
fi

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
# The assets built elsewhere go in first: release-lint's checksum file covers every asset there.
((${#assets[@]} == 0)) || install -m 0755 -t "$DIR" "${assets[@]}"
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
for f in "${assets[@]}"; do
  name=${f##*/}
  cargo metadata --format-version 1 --locked --filter-platform "${asset_targets[$name]}" >"$meta"
  "$sbom" "$meta" tfcapi-lint "$DIR/$name" "${name%.exe}" "$VERSION" "$created" >"$DIR/${name%.exe}.spdx.json"
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
allow=()
((${#insecure[@]} == 0)) || allow=(--allow-insecure-registry)
# Keyless: cosign's defaults (Fulcio, Rekor). With a key: no transparency log.
key=() blob=(--bundle "$DIR/checksums.txt.sigstore.json")
if [[ $signing == key ]]; then
  key=(--key "$COSIGN_KEY" --tlog-upload=false) blob=(--output-signature "$DIR/checksums.txt.sig")
  "$cosign" public-key --key "$COSIGN_KEY" >"$DIR/cosign.pub"
fi
while read -r ref; do
  "$cosign" sign --yes "${key[@]}" "${allow[@]}" "$ref" >&2
done <"$DIR/images.txt"
"$cosign" sign-blob --yes "${key[@]}" "${blob[@]}" "$DIR/checksums.txt" >&2
echo "release-snapshot: $VERSION in $DIR and $REGISTRY ($(wc -l <"$DIR/images.txt") images signed)" >&2
