# Contract outputs of the cluster role, v1alpha1.

# A user or control-plane-provider endpoint wins; else the VIP the control-plane machines hold.
output "control_plane_endpoint" {
  value = var.control_plane_endpoint != null ? var.control_plane_endpoint : { host = local.vip, port = local.api_server_port }
}

# One libvirt host is one failure domain: none is published, so Cluster API never asks for one.
output "failure_domains" {
  value = []
}

# Handed to machines as captf_cluster_outputs: the network to attach to, the pool for their
# volumes, the VIP and its lease. Strings only (exports are hashed). The machine module refuses
# a value without network, pool or lease.
output "exports" {
  value = {
    network = local.network
    pool    = local.pool
    vip     = local.vip
    lease   = libvirt_volume.vip_lease.name
  }
}

# The cluster's objects have no running state of their own to read: a network, pool or volume
# removed behind the module's back shows as drift at the next check and is recreated by the next
# apply. The VIP's health is the control plane's, which Cluster API watches through its Machines.
output "health" {
  value = { state = "running", healthy = true, message = null, reasons = [] }
}
