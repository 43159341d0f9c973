# docker machine module: implements the v1alpha1 machine role on one Docker host. One node
# container per TerraformMachine, from the node image (images/node), on the network the docker
# cluster module exported; its bootstrap data is the node's NoCloud seed, which cloud-init runs
# at first boot, as on a cloud instance. Control-plane nodes carry the alias the cluster's load
# balancer resolves. Book: Machine Role; docs/src/development/real-nodes.md.

locals {
  exports = var.captf_cluster_outputs

  # Unique on the Docker host and stable for the machine's life.
  container_name = "captf-${var.captf_object.namespace}-${var.machine_name}"

  # The NoCloud instance id, and so the Node's providerID: the flavor's kubelet registers with
  # provider-id docker:///{{ ds.meta_data.instance_id }} (templates/cluster-template-docker.yaml).
  instance_id = local.container_name
  provider_id = "docker:///${local.instance_id}"

  node_image = var.node_image != null ? var.node_image : (var.kubernetes_version != null ? "localhost/captf-node:${var.kubernetes_version}" : null)

  meta_data = yamlencode({
    "instance-id"    = local.instance_id
    "local-hostname" = var.machine_name
  })

  labels = merge(var.captf_tags, {
    "io.captf.cluster" = "${var.captf_cluster.namespace}/${var.captf_cluster.name}"
    "io.captf.machine" = "${var.captf_object.namespace}/${var.machine_name}"
  })
}

# Read, not pulled: the image must already be on the Docker host.
data "docker_image" "node" {
  name = local.node_image

  lifecycle {
    precondition {
      condition     = local.node_image != null
      error_message = "The machine has no Kubernetes version and the node_image variable is not set: name the node image in the template's variables."
    }
  }
}

# A node runs systemd, containerd and kubelet, so it needs what a privileged container has. The
# options are those of hack/node-image.sh's check: every capability but CAP_SYS_RESOURCE (a host
# whose bounding set lacks it refuses --privileged), no seccomp or AppArmor profile, a writable
# /proc/sys, every device, the host's cgroups (the node's entrypoint narrows them to its own) and
# kernel modules, and tmpfs for /run and /tmp.
resource "docker_container" "node" {
  name     = local.container_name
  hostname = var.machine_name
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
    name    = local.exports.network
    aliases = var.control_plane ? [local.exports.control_plane_alias] : []
  }

  # The NoCloud seed, in place before the container first starts.
  upload {
    file           = "/var/lib/cloud/seed/nocloud/user-data"
    content_base64 = var.bootstrap_data
  }
  upload {
    file    = "/var/lib/cloud/seed/nocloud/meta-data"
    content = local.meta_data
  }

  dynamic "labels" {
    for_each = local.labels
    content {
      label = labels.key
      value = labels.value
    }
  }
}
