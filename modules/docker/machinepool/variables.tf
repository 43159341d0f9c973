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

# The docker cluster module's exports (modules/docker/cluster/outputs.tf); see the machine
# module's variable of the same name.
variable "captf_cluster_outputs" {
  type    = any
  default = null

  validation {
    condition     = try(trimspace(var.captf_cluster_outputs["network"]) != "", false)
    error_message = "captf_cluster_outputs must carry a non-empty network string, the exports of the docker cluster module (modules/docker/cluster). An externally managed TerraformCluster passes {}: the docker machinepool module cannot run without a docker cluster module's network."
  }
}

variable "captf_tags" {
  type = map(string)
}

variable "machinepool_name" {
  type = string
}

variable "replicas" {
  type = number
}

# Base64 of the bootstrap Secret's value.
variable "bootstrap_data" {
  type      = string
  sensitive = true
}

# The nodes boot with cloud-init from a NoCloud seed; Ignition is not supported.
variable "bootstrap_format" {
  type = string

  validation {
    condition     = var.bootstrap_format == "cloud-config"
    error_message = "The docker machinepool module boots its nodes with cloud-init: bootstrap_format must be cloud-config (KubeadmConfig's default format), not ignition."
  }
}

variable "node_labels" {
  type = map(string)
}

# Always set by the controller (may be []): no default. The docker cluster module publishes no
# failure domains, so a pool that asks for one is refused instead of placed nowhere.
variable "failure_domains" {
  type = list(string)

  validation {
    condition     = length(var.failure_domains) == 0
    error_message = "The docker cluster module publishes no failure domains: a docker machine pool cannot be placed in one."
  }
}

# Always set by the controller (may be []): no default.
variable "cluster_failure_domains" {
  type = list(string)
}

variable "kubernetes_version" {
  type    = string
  default = null
}

# A Docker host has no autoscaler: the pool's count is always spec.replicas.
variable "autoscaling" {
  type = object({
    enabled = bool
    min     = number
    max     = number
  })

  validation {
    condition     = !var.autoscaling.enabled
    error_message = "A Docker host has no autoscaler: the docker machinepool module keeps spec.replicas nodes and cannot hand its count to one (autoscaling.enabled must be false)."
  }
}

# ---- Module variables (spec.variables of the TerraformMachinePool); every one has a default. ----

# The node image, already on the Docker host; null means localhost/captf-node:<kubernetes_version>.
variable "node_image" {
  type    = string
  default = null
}
