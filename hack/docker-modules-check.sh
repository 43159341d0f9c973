#!/usr/bin/env bash
# Checks the docker modules (modules/docker) on a Docker daemon of their own, the way CAPTF's
# runner runs a module: each role's directory is a root module, applied with OpenTofu from a
# provider mirror, with the contract's inputs as a variables file and one state per object
# (docs/src/development/real-nodes.md, "The docker modules").
#
# Usage:
#   hack/docker-modules-check.sh
#
# What it proves, in order:
#   1. the cluster module makes the cluster network and the load balancer, published on the
#      Docker host at the endpoint it outputs;
#   2. the machine module boots a control-plane node from a Cluster API-shaped cloud-config
#      (`## template: jinja`, kubelet's provider-id from the NoCloud instance id): `kubeadm init`
#      through the load balancer's endpoint, and its Node Ready with the providerID the module
#      outputs, its InternalIP among the module's addresses;
#   3. the machinepool module's node joins that control plane with a bootstrap token
#      (`kubeadm join` through the endpoint) and is Ready with its member's providerID;
#   4. a stopped node container reads as stopped health after a refresh;
#   5. destroying the three states leaves no container and no network behind.
#
# Needs the node and load balancer images (hack/node-image.sh build), the Docker provider and
# OpenTofu (hack/testbin.sh). Everything it starts is removed at exit, unless
# CAPTF_NODE_CHECK_KEEP=1. It prints how long each step took.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DOCKER=/usr/bin/docker
# This check's own bridge and subnets, apart from hack/node-image.sh check's defaults.
export CAPTF_DOCKER_BRIDGE=${CAPTF_DOCKER_BRIDGE:-captf-dkcheck}
export CAPTF_DOCKER_SUBNET=${CAPTF_DOCKER_SUBNET:-172.30.1.1/24}
NETWORK_CIDR=172.31.201.0/24
NS=default
CLUSTER=check
CP=check-control-plane-0
POOL=check-pool

die() {
  echo "docker-modules-check: $*" >&2
  exit 1
}
say() { echo "docker-modules-check: $*" >&2; }

install_jq() {
  command -v jq >/dev/null && return
  [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null || die "jq is needed (Debian: apt-get install jq)"
  say "installing Debian's jq"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends jq >&2 ||
    die "apt-get install jq failed"
}

wait_for() {
  local limit=$1 what=$2 i
  shift 2
  for ((i = 0; i < limit; i++)); do
    "$@" >/dev/null 2>&1 && return
    sleep 1
  done
  die "$what: not within ${limit}s"
}

# The provider mirror of a module image (/captf/providers), for both runtimes' registry hosts.
provider_mirror() {
  local dir=$1 bin version=4.6.0 host
  bin=$(sed -n 's/^CAPTF_TESTBIN_TERRAFORM_PROVIDER_DOCKER=//p' <<<"$TESTBIN_ENV")
  [[ -x $bin ]] || die "no Docker provider at $bin (hack/testbin.sh terraform-provider-docker)"
  for host in registry.opentofu.org registry.terraform.io; do
    mkdir -p "$dir/$host/kreuzwerker/docker/$version/linux_amd64"
    cp "$bin" "$dir/$host/kreuzwerker/docker/$version/linux_amd64/terraform-provider-docker_v$version"
  done
  printf 'provider_installation {\n  filesystem_mirror {\n    path = "%s"\n  }\n}\n' "$dir" >"$WORK/tofurc"
}

# run_module ROLE OBJECT VARS-JSON COMMAND...: tofu COMMAND in OBJECT's copy of ROLE's module.
run_module() {
  local role=$1 object=$2 vars=$3
  shift 3
  local dir=$WORK/$object
  if [[ ! -d $dir ]]; then
    cp -r "$ROOT/modules/docker/$role" "$dir"
    TF_CLI_CONFIG_FILE=$WORK/tofurc "$TOFU" -chdir="$dir" init -input=false -no-color >/dev/null ||
      die "tofu init of the $role module failed"
  fi
  printf '%s' "$vars" >"$dir/terraform.tfvars.json"
  TF_CLI_CONFIG_FILE=$WORK/tofurc "$TOFU" -chdir="$dir" "$@" -input=false -no-color \
    -var-file=terraform.tfvars.json
}

output() { TF_CLI_CONFIG_FILE=$WORK/tofurc "$TOFU" -chdir="$WORK/$1" output -json "$2"; }

common_vars() {
  jq -n --arg kind "$1" --arg name "$2" --arg ns "$NS" --arg cluster "$CLUSTER" \
    '{captf_contract: "v1alpha1", captf_cluster: {name: $cluster, namespace: $ns},
      captf_object: {kind: $kind, name: $name, namespace: $ns}, captf_tags: {"io.captf.check": "docker-modules"}}'
}

# kubeadm's preflight refuses a cgroup v1 host unless its SystemVerification is skipped.
ignored_preflight_errors() {
  if [[ -f /sys/fs/cgroup/cgroup.controllers ]]; then echo "[]"; else echo "[SystemVerification]"; fi
}

# The cloud-config Cluster API's kubeadm bootstrap provider writes, in the shape that matters
# here: a jinja template (cloud-init renders {{ ds.meta_data.* }} from the NoCloud seed), the
# kubeadm configuration as a file, the command, and the bootstrap-success sentinel.
cloud_config() {
  local file=$1 command=$2
  printf '## template: jinja\n#cloud-config\nwrite_files:\n- path: /run/kubeadm/kubeadm.yaml\n'
  printf "  owner: root:root\n  permissions: '0640'\n  content: |\n"
  sed 's/^/    /' "$file"
  printf "runcmd:\n- '%s && echo success > /run/cluster-api/bootstrap-success.complete'\n" "$command"
}

# Every node's registration: its name and kubelet's provider-id from the NoCloud seed, as the
# docker machine module writes it.
node_registration() {
  cat <<EOF
nodeRegistration:
  name: '{{ ds.meta_data.local_hostname }}'
  criSocket: unix:///run/containerd/containerd.sock
  ignorePreflightErrors: $(ignored_preflight_errors)
  kubeletExtraArgs:
  - name: provider-id
    value: 'docker:///{{ ds.meta_data.instance_id }}'
EOF
}

# The kubeadm configuration of the first control-plane machine. kube-proxy keeps the host's
# connection-tracking maximum (a node may not write it; see real-nodes.md).
init_config() {
  cat <<EOF
apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
$(node_registration)
---
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
kubernetesVersion: $VERSION
controlPlaneEndpoint: $1
networking:
  podSubnet: 10.244.0.0/16
  serviceSubnet: 10.96.0.0/16
---
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
conntrack:
  maxPerCore: 0
EOF
}

join_config() {
  cat <<EOF
apiVersion: kubeadm.k8s.io/v1beta4
kind: JoinConfiguration
discovery:
  bootstrapToken:
    apiServerEndpoint: $1
    token: $2
    caCertHashes: [$3]
$(node_registration)
EOF
}

kubectl_cp() { $DOCKER exec "captf-$NS-$CP" kubectl --kubeconfig /etc/kubernetes/admin.conf "$@"; }

clean_up() {
  if [[ ${CAPTF_NODE_CHECK_KEEP:-} == 1 ]]; then
    say "kept: DOCKER_HOST=unix://$WORK/docker/docker.sock; remove with hack/dockerd.sh stop $WORK/docker"
    return
  fi
  "$ROOT/hack/dockerd.sh" stop "$WORK/docker" >/dev/null 2>&1 || true
  rm -rf "$WORK"
}

node_ready_with_provider_id() {
  local node=$1 want=$2
  [[ $(kubectl_cp get node "$node" -o jsonpath='{.spec.providerID}') == "$want" ]] &&
    kubectl_cp wait --for=condition=Ready "node/$node" --timeout=1s
}

main() {
  local start=$SECONDS t archive dir endpoint exports vars cp_id pool_ids token hash
  install_jq
  archive=$("$ROOT/hack/node-image.sh" build)
  dir=$(dirname "$archive")
  "$ROOT/hack/testbin.sh" tofu terraform-provider-docker >&2
  TESTBIN_ENV=$("$ROOT/hack/testbin.sh" --print-env)
  TOFU=$(sed -n 's/^CAPTF_TESTBIN_TOFU=//p' <<<"$TESTBIN_ENV")
  VERSION=$("$ROOT/hack/testbin.sh" --list | awk '$1 == "kubernetes" { print $2 }')
  WORK=$(mktemp -d "${TMPDIR:-/tmp}/captf-docker-modules-check.XXXXXX")
  trap clean_up EXIT
  provider_mirror "$WORK/providers"
  export "$("$ROOT/hack/dockerd.sh" start "$WORK/docker")"
  $DOCKER load -q -i "$archive" >&2
  $DOCKER load -q -i "$dir/haproxy.tar" >&2
  say "dockerd up and images loaded in $((SECONDS - start))s"

  t=$SECONDS
  vars=$(common_vars TerraformCluster "$CLUSTER" |
    jq --arg cidr "$NETWORK_CIDR" '. + {control_plane_initialized: false, network_cidr: $cidr}')
  run_module cluster cluster "$vars" apply -auto-approve >/dev/null || die "the cluster module's apply failed"
  endpoint=$(output cluster control_plane_endpoint | jq -r '"\(.host):\(.port)"')
  exports=$(output cluster exports)
  say "cluster module applied in $((SECONDS - t))s: endpoint $endpoint, exports $exports"
  [[ $($DOCKER inspect -f '{{.State.Running}}' "captf-$NS-$CLUSTER-lb") == true ]] || die "the load balancer is not running"

  t=$SECONDS
  init_config "$endpoint" >"$WORK/init.yaml"
  cloud_config "$WORK/init.yaml" "kubeadm init --config /run/kubeadm/kubeadm.yaml --skip-token-print" >"$WORK/init.cloud-config"
  vars=$(common_vars TerraformMachine "$CP" | jq --arg name "$CP" --arg data "$(base64 -w0 "$WORK/init.cloud-config")" \
    --argjson exports "$exports" --arg version "$VERSION" \
    '. + {captf_cluster_outputs: $exports, machine_name: $name, bootstrap_data: $data,
          bootstrap_format: "cloud-config", kubernetes_version: $version, control_plane: true}')
  run_module machine "$CP" "$vars" apply -auto-approve >/dev/null || die "the machine module's apply failed"
  cp_id=$(output "$CP" provider_id | jq -r .)
  say "machine module applied in $((SECONDS - t))s: provider_id $cp_id, addresses $(output "$CP" addresses | jq -c .)"
  wait_for 420 "the control plane's Node Ready with providerID $cp_id" node_ready_with_provider_id "$CP" "$cp_id"
  say "control-plane Node Ready with the module's providerID $((SECONDS - t))s after its apply started"
  local ip
  ip=$(kubectl_cp get node "$CP" -o jsonpath='{.status.addresses[?(@.type=="InternalIP")].address}')
  output "$CP" addresses | jq -e --arg ip "$ip" 'any(.[]; .type == "InternalIP" and .address == $ip)' >/dev/null ||
    die "the Node's InternalIP $ip is not among the module's addresses"
  curl -ks --max-time 5 "https://$endpoint/version" | jq -e .gitVersion >/dev/null ||
    die "the API server does not answer through the load balancer at $endpoint"

  t=$SECONDS
  # A bootstrap token and the CA's public key hash, as KubeadmConfig's join data carries them.
  local join
  join=$($DOCKER exec "captf-$NS-$CP" kubeadm token create --ttl 1h --print-join-command)
  token=$(sed -n 's/.*--token \([^ ]*\).*/\1/p' <<<"$join")
  hash=$(sed -n 's/.*--discovery-token-ca-cert-hash \([^ ]*\).*/\1/p' <<<"$join")
  [[ -n $token && -n $hash ]] || die "no token or CA hash in: $join"
  join_config "$endpoint" "$token" "$hash" >"$WORK/join.yaml"
  cloud_config "$WORK/join.yaml" "kubeadm join --config /run/kubeadm/kubeadm.yaml" >"$WORK/join.cloud-config"
  vars=$(common_vars TerraformMachinePool "$POOL" | jq --arg name "$POOL" --arg data "$(base64 -w0 "$WORK/join.cloud-config")" \
    --argjson exports "$exports" --arg version "$VERSION" \
    '. + {captf_cluster_outputs: $exports, machinepool_name: $name, replicas: 1, bootstrap_data: $data,
          bootstrap_format: "cloud-config", node_labels: {}, failure_domains: [], cluster_failure_domains: [],
          kubernetes_version: $version, autoscaling: {enabled: false, min: 0, max: 0}}')
  run_module machinepool "$POOL" "$vars" apply -auto-approve >/dev/null || die "the machinepool module's apply failed"
  pool_ids=$(output "$POOL" provider_id_list | jq -r '.[]')
  [[ $(wc -w <<<"$pool_ids") == 1 ]] || die "the pool reports $(wc -w <<<"$pool_ids") members, not 1"
  local member=${pool_ids#docker:///}
  wait_for 420 "the pool member's Node Ready with providerID $pool_ids" node_ready_with_provider_id "$member" "$pool_ids"
  say "pool member joined and Ready with the module's providerID $((SECONDS - t))s after its apply started"
  kubectl_cp get nodes -o wide

  t=$SECONDS
  $DOCKER stop "$member" >/dev/null
  run_module machinepool "$POOL" "$vars" apply -refresh-only -auto-approve >/dev/null || die "the pool's refresh failed"
  output "$POOL" health | jq -e '.state == "degraded" and .healthy == false' >/dev/null ||
    die "a stopped member does not read as unhealthy: $(output "$POOL" health)"
  output "$POOL" instances | jq -e 'any(.[]; .state == "stopped")' >/dev/null ||
    die "a stopped member is not reported stopped: $(output "$POOL" instances)"
  output "$CP" health | jq -e '.state == "running"' >/dev/null || die "the control plane does not read as running"
  say "a stopped pool member reads as stopped after a refresh ($((SECONDS - t))s)"

  t=$SECONDS
  run_module machinepool "$POOL" "$vars" destroy -auto-approve >/dev/null || die "the pool's destroy failed"
  vars=$(jq '.' "$WORK/$CP/terraform.tfvars.json")
  run_module machine "$CP" "$vars" destroy -auto-approve >/dev/null || die "the machine's destroy failed"
  vars=$(jq '.' "$WORK/cluster/terraform.tfvars.json")
  run_module cluster cluster "$vars" destroy -auto-approve >/dev/null || die "the cluster's destroy failed"
  [[ -z $($DOCKER ps -aq) ]] || die "containers left after the destroys: $($DOCKER ps -a --format '{{.Names}}')"
  [[ -z $($DOCKER network ls -q --filter "name=captf-$NS-$CLUSTER") ]] || die "the cluster network is left after the destroys"
  say "destroyed in $((SECONDS - t))s: no container and no cluster network left"
  say "check passed in $((SECONDS - start))s"
}

main "$@"
