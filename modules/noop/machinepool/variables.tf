# Contract inputs of the machinepool role, v1alpha1 (Common "Inputs", MachinePool Role "Inputs").

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

# The cluster module's exports; {} when the TerraformCluster is externally managed.
variable "captf_cluster_outputs" {
  type    = any
  default = null
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

variable "bootstrap_format" {
  type = string
}

variable "node_labels" {
  type = map(string)
}

# Always set by the controller (may be []): no default.
variable "failure_domains" {
  type = list(string)
}

# Always set by the controller (may be []): no default.
variable "cluster_failure_domains" {
  type = list(string)
}

variable "kubernetes_version" {
  type    = string
  default = null
}

variable "autoscaling" {
  type = object({
    enabled = bool
    min     = number
    max     = number
  })
}

# Not part of the contract: the desired capacity the no-op "cloud autoscaler" reports while
# autoscaling is enabled (set through spec.variables); unset, the group keeps var.replicas.
variable "noop_autoscaled_replicas" {
  type    = number
  default = null
}
