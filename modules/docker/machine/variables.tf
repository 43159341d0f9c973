# Contract inputs of the machine role, v1alpha1 (Common "Inputs", Machine Role "Inputs").

variable "captf_contract" {
  type = string
}

variable "captf_cluster" {
  type = object({
    name      = string
    namespace = string
  })
}

variable "captf_object" {
  type = object({
    kind      = string
    name      = string
    namespace = string
  })
}

# The docker cluster module's exports (modules/docker/cluster/outputs.tf). A node cannot be placed
# without the cluster's network and the alias the load balancer resolves, so anything else is
# refused here with a clear message: {} from an externally managed TerraformCluster, or the
# exports of another cluster module.
variable "captf_cluster_outputs" {
  type    = any
  default = null

  validation {
    condition     = alltrue([for key in ["network", "control_plane_alias"] : try(trimspace(var.captf_cluster_outputs[key]) != "", false)])
    error_message = "captf_cluster_outputs must carry non-empty network and control_plane_alias strings, the exports of the docker cluster module (modules/docker/cluster). An externally managed TerraformCluster passes {}: the docker machine module cannot run without a docker cluster module's network."
  }
}

variable "captf_tags" {
  type = map(string)
}

variable "machine_name" {
  type = string
}

# Base64 of the bootstrap Secret's value.
variable "bootstrap_data" {
  type      = string
  sensitive = true
}

# The node boots with cloud-init from a NoCloud seed; Ignition is not supported.
variable "bootstrap_format" {
  type = string

  validation {
    condition     = var.bootstrap_format == "cloud-config"
    error_message = "The docker machine module boots its node with cloud-init: bootstrap_format must be cloud-config (KubeadmConfig's default format), not ignition."
  }
}

# One Docker host is one failure domain and the cluster module publishes none, so Cluster API
# never requests one; a Machine that names one anyway is refused instead of placed nowhere.
variable "failure_domain" {
  type    = string
  default = null

  validation {
    condition     = var.failure_domain == null
    error_message = "The docker cluster module publishes no failure domains: a docker machine cannot be placed in one."
  }
}

variable "kubernetes_version" {
  type    = string
  default = null
}

variable "control_plane" {
  type = bool
}

# ---- Module variables (spec.variables of the TerraformMachineTemplate); every one has a default. ----

# The node image, already on the Docker host (make node-images builds it). null means
# localhost/captf-node:<kubernetes_version>, so a Kubernetes upgrade rolls onto the image of the
# new version.
variable "node_image" {
  type    = string
  default = null
}
