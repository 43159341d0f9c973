# libvirt machine module: implements the v1alpha1 machine role on one libvirt host. One domain
# per TerraformMachine, on a copy-on-write root volume over the node image, booted by cloud-init
# from a NoCloud seed carrying the machine's bootstrap data; control-plane machines also hold the
# cluster's VIP with keepalived. Everything goes into the network and pool the libvirt cluster
# module exported (captf_cluster_outputs). Book: Machine Role; docs/src/libvirt-host.md.

locals {
  exports = var.captf_cluster_outputs

  # Unique on the host (domain and volume names) and stable for the machine's life.
  domain_name = "captf-${var.captf_object.namespace}-${var.machine_name}"

  # The NoCloud instance id, and so the Node's providerID: the flavor's kubelet registers with
  # provider-id libvirt:///{{ ds.meta_data.instance_id }} (templates/cluster-template-libvirt.yaml).
  instance_id = local.domain_name
  provider_id = "libvirt:///${local.instance_id}"

  # A fixed, locally administered QEMU MAC, so the guest's network configuration can name the
  # interface before the domain exists.
  mac_hash = md5(local.domain_name)
  mac      = format("52:54:00:%s:%s:%s", substr(local.mac_hash, 0, 2), substr(local.mac_hash, 2, 2), substr(local.mac_hash, 4, 2))
  nic      = "captf0"

  base_volume = var.base_volume != null ? var.base_volume : (var.kubernetes_version != null ? "captf-node-${var.kubernetes_version}.qcow2" : null)

  # One VRRP group per VIP lease: every control-plane machine of the cluster derives the same id
  # and instance name from the lease the cluster module created.
  vrrp_router_id = var.vrrp_router_id != null ? var.vrrp_router_id : parseint(substr(sha256(local.exports.lease), 0, 2), 16) % 255 + 1
  vrrp_instance  = replace(local.exports.lease, "/[^A-Za-z0-9_]/", "_")

  meta_data = yamlencode({
    "instance-id"    = local.instance_id
    "local-hostname" = var.machine_name
  })

  network_config = yamlencode({
    version = 2
    ethernets = {
      (local.nic) = {
        match      = { macaddress = local.mac }
        "set-name" = local.nic
        dhcp4      = true
      }
    }
  })

  keepalived_conf = <<-CONF
    # Written by the CAPTF libvirt machine module: holds the control-plane VIP ${try(local.exports.vip, "")}.
    global_defs {
      router_id ${var.machine_name}
      enable_script_security
      script_user root
    }

    vrrp_script apiserver {
      script "/etc/keepalived/captf-apiserver-check.sh"
      interval 3
      timeout 4
      fall 3
      rise 2
      weight -50
    }

    vrrp_instance ${local.vrrp_instance} {
      state BACKUP
      interface ${local.nic}
      virtual_router_id ${local.vrrp_router_id}
      priority 100
      advert_int 1
      virtual_ipaddress {
        ${try(local.exports.vip, "")}/32 dev ${local.nic}
      }
      track_script {
        apiserver
      }
    }
  CONF

  # A node whose kube-apiserver does not answer drops to priority 50: a healthy peer takes the
  # VIP, while the first control-plane node, alone during kubeadm init, keeps it.
  apiserver_check = <<-SH
    #!/bin/sh
    exec curl --silent --fail --insecure --max-time 3 --output /dev/null https://127.0.0.1:${var.api_server_bind_port}/livez
  SH

  # Merged after the bootstrap data (merge_type below): its commands run before kubeadm's, so the
  # VIP is up when kubeadm init reaches the control-plane endpoint.
  vip_holder = "#cloud-config\n${yamlencode({
    package_update = true
    packages       = ["keepalived", "curl"]
    write_files = [
      { path = "/etc/keepalived/keepalived.conf", permissions = "0644", content = local.keepalived_conf },
      { path = "/etc/keepalived/captf-apiserver-check.sh", permissions = "0755", content = local.apiserver_check },
    ]
    runcmd = [
      ["systemctl", "enable", "keepalived.service"],
      ["systemctl", "restart", "keepalived.service"],
    ]
  })}"
}

# The user data: Cluster API's bootstrap data as written (a "## template: jinja" cloud-config,
# which cloud-init recognises in a text/plain part), then on control-plane machines the VIP
# holder, merged into it.
data "cloudinit_config" "user_data" {
  gzip          = false
  base64_encode = false

  part {
    filename     = "bootstrap"
    content_type = "text/plain"
    content      = base64decode(var.bootstrap_data)
  }

  dynamic "part" {
    for_each = var.control_plane ? [local.vip_holder] : []
    content {
      filename     = "captf-vip-holder"
      content_type = "text/cloud-config"
      content      = part.value
      merge_type   = "list(prepend)+dict(no_replace,recurse_list)+str()"
    }
  }
}

# The root disk: a qcow2 overlay on the node image, grown to disk_gib.
resource "libvirt_volume" "root" {
  name             = "${local.domain_name}-root.qcow2"
  pool             = local.exports.pool
  base_volume_name = local.base_volume
  base_volume_pool = var.base_volume_pool
  format           = "qcow2"
  size             = var.disk_gib * 1073741824

  lifecycle {
    precondition {
      condition     = local.base_volume != null
      error_message = "Set base_volume: without a kubernetes_version the node image's name cannot be derived."
    }
  }
}

# The NoCloud seed (an ISO volume in the cluster's pool). It holds the bootstrap data, so the
# machine's state does too, as every cloud module's instance user data does.
resource "libvirt_cloudinit_disk" "seed" {
  name           = "${local.domain_name}-seed.iso"
  pool           = local.exports.pool
  user_data      = data.cloudinit_config.user_data.rendered
  meta_data      = local.meta_data
  network_config = local.network_config

  lifecycle {
    precondition {
      condition     = !var.control_plane || try(trimspace(local.exports.vip) != "", false)
      error_message = "A control-plane machine needs the cluster's vip in captf_cluster_outputs."
    }
  }
}

resource "libvirt_domain" "node" {
  name = local.domain_name
  # libvirt domains take no labels: the contract's tags go into the description (virsh desc).
  description = jsonencode(var.captf_tags)
  vcpu        = var.vcpu
  memory      = var.memory_mib
  running     = true
  autostart   = true
  cloudinit   = libvirt_cloudinit_disk.seed.id

  cpu {
    mode = var.cpu_mode
  }

  disk {
    volume_id = libvirt_volume.root.id
  }

  # wait_for_lease: the apply ends once the network's DHCP has leased the domain an address, so
  # addresses is known when the machine is provisioned.
  network_interface {
    network_name   = local.exports.network
    mac            = local.mac
    hostname       = var.machine_name
    wait_for_lease = true
  }

  console {
    type        = "pty"
    target_type = "serial"
    target_port = "0"
  }
}
