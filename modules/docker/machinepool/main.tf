# docker machinepool module: implements the v1alpha1 machinepool role on one Docker host. The
# pool is a set of node containers, one per replica, named <pool>-<n>; scaling adds or removes
# the highest-numbered ones. Every member boots from the pool's bootstrap data as its own
# NoCloud instance (docs/src/development/real-nodes.md; the machine module has the details).

locals {
  exports = var.captf_cluster_outputs
  prefix  = "captf-${var.captf_object.namespace}-${var.machinepool_name}"

  # Member name (container, hostname, Node name and NoCloud instance id) => its index.
  members = { for i in range(var.replicas) : format("%s-%d", local.prefix, i) => i }

  node_image = var.node_image != null ? var.node_image : (var.kubernetes_version != null ? "localhost/captf-node:${var.kubernetes_version}" : null)

  labels = merge(var.captf_tags, {
    "io.captf.cluster"     = "${var.captf_cluster.namespace}/${var.captf_cluster.name}"
    "io.captf.machinepool" = "${var.captf_object.namespace}/${var.machinepool_name}"
  })
}

# Read, not pulled: the image must already be on the Docker host.
data "docker_image" "node" {
  name = local.node_image

  lifecycle {
    precondition {
      condition     = local.node_image != null
      error_message = "The machine pool has no Kubernetes version and the node_image variable is not set: name the node image in the template's variables."
    }
  }
}

# The same container as the machine module's node (see there for the options).
resource "docker_container" "node" {
  for_each = local.members

  name     = each.key
  hostname = each.key
  image    = data.docker_image.node.id
  restart  = "unless-stopped"

  capabilities {
    add  = ["ALL"]
    drop = ["SYS_RESOURCE"]
  }
  security_opts       = ["seccomp=unconfined", "apparmor=unconfined", "systempaths=unconfined"]
  device_cgroup_rules = ["a *:* rwm"]
  tmpfs = {
    "/run"      = ""
    "/run/lock" = ""
    "/tmp"      = ""
  }

  volumes {
    host_path      = "/sys/fs/cgroup"
    container_path = "/sys/fs/cgroup"
  }
  volumes {
    host_path      = "/lib/modules"
    container_path = "/lib/modules"
    read_only      = true
  }

  networks_advanced {
    name = local.exports.network
  }

  upload {
    file           = "/var/lib/cloud/seed/nocloud/user-data"
    content_base64 = var.bootstrap_data
  }
  upload {
    file    = "/var/lib/cloud/seed/nocloud/meta-data"
    content = yamlencode({ "instance-id" = each.key, "local-hostname" = each.key })
  }

  dynamic "labels" {
    for_each = local.labels
    content {
      label = labels.key
      value = labels.value
    }
  }
}
