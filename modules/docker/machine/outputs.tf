# Contract outputs of the machine role, v1alpha1.

# null once the container is gone from state (InstanceTerminated), else the Node's providerID.
output "provider_id" {
  value = try(docker_container.node.id, null) != null ? local.provider_id : null
}

# The node's address on the cluster network, and its hostname.
output "addresses" {
  value = concat(
    [for n in try(docker_container.node.network_data, []) : { type = "InternalIP", address = n.ip_address } if try(n.ip_address, "") != ""],
    [{ type = "Hostname", address = var.machine_name }],
  )
}

# Always null: the variable's validation refuses a requested domain.
output "failure_domain" {
  value = var.failure_domain
}

output "interruptible" {
  value = false
}

# The provider reads the container on every refresh and marks a stopped one must_run = false in
# state: a stopped node reads as stopped, which Machine Remediation counts.
output "health" {
  value = try(docker_container.node.must_run, false) ? { state = "running", healthy = true, message = null, reasons = [] } : { state = "stopped", healthy = false, message = "node container ${local.container_name} is not running", reasons = ["ContainerNotRunning"] }
}
