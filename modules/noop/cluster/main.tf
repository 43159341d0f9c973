# No-op cluster module: implements the v1alpha1 cluster role and creates nothing.

locals {
  # The endpoint this module "creates" when neither the user nor a control-plane provider gave
  # one: a stable name under the reserved .invalid domain, on the cluster's API server port.
  created_endpoint = {
    host = "${var.captf_cluster.name}.${var.captf_cluster.namespace}.noop.invalid"
    port = try(coalesce(var.cluster_network.api_server_port, 6443), 6443)
  }
}

# Stands in for the cluster's cloud resources: it only records the tags every resource must
# carry (captf_tags) and the inputs a real module would act on.
resource "terraform_data" "cluster" {
  input = {
    tags                      = var.captf_tags
    contract                  = var.captf_contract
    object                    = var.captf_object
    kubernetes_version        = var.kubernetes_version
    control_plane_initialized = var.control_plane_initialized
  }
}
