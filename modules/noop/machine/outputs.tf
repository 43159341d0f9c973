# Contract outputs of the machine role, v1alpha1.

# Stable per TerraformMachine. No Node ever carries it: the no-op module boots nothing.
output "provider_id" {
  value = "noop:///${var.captf_object.namespace}/${var.captf_object.name}"
}

output "addresses" {
  value = [{ type = "InternalIP", address = "10.0.0.1" }]
}

# Placed where asked; null when no domain was requested.
output "failure_domain" {
  value = var.failure_domain
}

output "interruptible" {
  value = false
}

output "health" {
  value = { state = "running", healthy = true, message = null, reasons = [] }
}
