# Contract outputs of the machine role, v1alpha1.

# null once the domain is gone from state (InstanceTerminated), else the Node's providerID.
output "provider_id" {
  value = try(libvirt_domain.node.id, null) != null ? local.provider_id : null
}

# The addresses the network's DHCP leased the domain, and its hostname.
output "addresses" {
  value = concat(
    [for ip in try(libvirt_domain.node.network_interface[0].addresses, []) : { type = "InternalIP", address = ip }],
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

# The provider reads the domain's run state on every refresh: a domain shut off or crashed reads
# as stopped, which Machine Remediation counts.
output "health" {
  value = try(libvirt_domain.node.running, false) ? { state = "running", healthy = true, message = null, reasons = [] } : { state = "stopped", healthy = false, message = "libvirt domain ${local.domain_name} is not running", reasons = ["DomainNotRunning"] }
}
