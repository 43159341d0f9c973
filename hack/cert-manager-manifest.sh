#!/usr/bin/env bash
# Renders cert-manager's static install manifest (what its release ships as cert-manager.yaml)
# from the Helm chart in its Go module, the way cert-manager's own make/manifests.mk does:
# Chart.yaml from Chart.template.yaml with the release version, templates/crds.yaml from
# deploy/crds/ behind `installCRDs`, then `helm template` in namespace cert-manager with
# creator=static and startupapicheck off, after the Namespace.
#
# Usage: hack/cert-manager-manifest.sh MODULE_DIR VERSION HELM > cert-manager.yaml
#   KUBE_VERSION (default v1.26.0, the Kubernetes that release of helm was built against, as for
#   cert-manager's own render) answers the chart's kubeVersion check.
#   MODULE_DIR  the cert-manager module's directory in Go's module cache
#   VERSION     its version (vX.Y.Z), written into the chart and so into the image tags
#   HELM        the helm binary to render with (hack/testbin.sh builds it beside cert-manager)
set -euo pipefail

module=${1:?module directory}
version=${2:?version}
helm=${3:?helm binary}
chart_src="$module/deploy/charts/cert-manager"
[[ -f "$chart_src/Chart.template.yaml" && -d "$module/deploy/crds" ]] || {
  echo "cert-manager-manifest: $module has no deploy/charts/cert-manager/Chart.template.yaml or deploy/crds" >&2
  exit 1
}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
chart="$work/cert-manager"
cp -r "$chart_src" "$chart"
chmod -R u+w "$chart"
rm -f "$chart/Chart.template.yaml"
sed -e "s/^version: .*/version: $version/" -e "s/^appVersion: .*/appVersion: $version/" \
  -e 's/{{IS_PRERELEASE}}/false/' "$chart_src/Chart.template.yaml" >"$chart/Chart.yaml"
{
  echo '{{- if .Values.installCRDs }}'
  for crd in "$module"/deploy/crds/*.yaml; do
    echo '---'
    cat "$crd"
  done
  echo '{{- end }}'
} >"$chart/templates/crds.yaml"

echo "# cert-manager $version: rendered by hack/cert-manager-manifest.sh from the chart in its Go module"
cat "$module/deploy/manifests/namespace.yaml"
# helm keeps its caches and config in the scratch directory, never the user's home.
HELM_CACHE_HOME="$work/cache" HELM_CONFIG_HOME="$work/config" HELM_DATA_HOME="$work/data" \
  "$helm" template cert-manager "$chart" --namespace cert-manager --kube-version "${KUBE_VERSION:-v1.26.0}" \
  --set installCRDs=true --set creator=static --set startupapicheck.enabled=false
