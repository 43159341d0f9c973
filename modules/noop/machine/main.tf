# No-op machine module: implements the v1alpha1 machine role and creates nothing.

# Stands in for the instance. The bootstrap payload is kept only as a hash (never decoded, so a
# gzipped payload works too, and the state does not hold the payload itself).
resource "terraform_data" "instance" {
  input = {
    tags               = var.captf_tags
    contract           = var.captf_contract
    cluster            = var.captf_cluster
    object             = var.captf_object
    machine_name       = var.machine_name
    backend_id         = try(var.captf_cluster_outputs.backend_id, null)
    bootstrap_sha256   = sha256(var.bootstrap_data)
    bootstrap_format   = var.bootstrap_format
    failure_domain     = var.failure_domain
    kubernetes_version = var.kubernetes_version
    control_plane      = var.control_plane
  }
}
