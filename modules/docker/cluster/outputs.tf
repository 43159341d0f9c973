# Contract outputs of the cluster role, v1alpha1.

# A user or control-plane-provider endpoint wins; else the load balancer as the Docker host
# publishes it.
output "control_plane_endpoint" {
  value = var.control_plane_endpoint != null ? var.control_plane_endpoint : { host = local.host_ip, port = var.load_balancer_host_port }
}

# One Docker host is one failure domain: none is published, so Cluster API never asks for one.
output "failure_domains" {
  value = []
}

# Handed to machines and pools as captf_cluster_outputs: the network to join and the alias the
# control-plane nodes carry for the load balancer. Strings only (exports are hashed).
output "exports" {
  value = {
    network             = docker_network.cluster.name
    network_gateway     = local.network_gateway
    control_plane_alias = local.control_plane_alias
  }
}

# The load balancer is the cluster's only running part. The provider reads it on every refresh
# and marks a stopped container must_run = false in state: that reads as stopped here, and the
# next apply starts it again.
output "health" {
  value = docker_container.load_balancer.must_run ? { state = "running", healthy = true, message = null, reasons = [] } : { state = "stopped", healthy = false, message = "load balancer container ${docker_container.load_balancer.name} is not running", reasons = ["LoadBalancerNotRunning"] }
}
