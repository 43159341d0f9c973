# Contract outputs of the machinepool role, v1alpha1.

output "provider_id" {
  value = "noop-group:///${var.captf_object.namespace}/${var.captf_object.name}"
}

# Wrapped in sort() in the output's own expression, so the order never changes between refreshes.
output "provider_id_list" {
  value = sort(local.raw_ids)
}

output "replicas" {
  value = local.desired
}

output "instances" {
  value = [for id in sort(local.raw_ids) : { provider_id = id, instance_id = local.members[id], state = "running" }]
}

output "health" {
  value = { state = "running", healthy = true, message = null, reasons = [] }
}
