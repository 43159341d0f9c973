# Contract outputs of the cluster role, v1alpha1.

# A user or control-plane-provider endpoint wins; else the one this module "created".
output "control_plane_endpoint" {
  value = var.control_plane_endpoint != null ? var.control_plane_endpoint : local.created_endpoint
}

output "failure_domains" {
  value = []
}

# Handed to machine and pool modules as captf_cluster_outputs (strings only: exports are hashed).
output "exports" {
  value = {
    cluster    = "${var.captf_cluster.namespace}/${var.captf_cluster.name}"
    backend_id = "noop:///${var.captf_cluster.namespace}/${var.captf_cluster.name}/backend"
  }
}

output "health" {
  value = { state = "running", healthy = true, message = null, reasons = [] }
}
