# No-op machinepool module: implements the v1alpha1 machinepool role and creates nothing.

locals {
  # The group's desired capacity. With autoscaling enabled the group owns its count: a real module
  # reads it back from the cloud; this one stands in for the cloud's autoscaler with
  # noop_autoscaled_replicas when set (any value, even outside [min, max], as a cloud may report).
  desired = var.autoscaling.enabled && var.noop_autoscaled_replicas != null ? var.noop_autoscaled_replicas : var.replicas

  # One made-up member per desired replica, in no particular order: provider_id_list sorts them
  # in its own expression.
  members = { for i in range(local.desired) : "noop:///${var.captf_object.namespace}/${var.captf_object.name}/${i}" => "noop-${var.captf_object.name}-${i}" }
  raw_ids = keys(local.members)
}

# Stands in for the scaling group and its launch configuration.
resource "terraform_data" "group" {
  input = {
    tags                    = var.captf_tags
    contract                = var.captf_contract
    cluster                 = var.captf_cluster
    machinepool_name        = var.machinepool_name
    backend_id              = try(var.captf_cluster_outputs.backend_id, null)
    bootstrap_sha256        = sha256(var.bootstrap_data)
    bootstrap_format        = var.bootstrap_format
    node_labels             = var.node_labels
    failure_domains         = var.failure_domains
    cluster_failure_domains = var.cluster_failure_domains
    kubernetes_version      = var.kubernetes_version
    autoscaling             = var.autoscaling
    replicas                = var.replicas
    desired                 = local.desired
  }
}
