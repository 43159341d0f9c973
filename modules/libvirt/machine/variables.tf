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

# The libvirt cluster module's exports (modules/libvirt/cluster/outputs.tf). A machine cannot be
# built without the network, the pool and the VIP's lease, so anything else is refused here with
# a clear message instead of an "Unsupported attribute" deep inside the module: {} from an
# externally managed TerraformCluster, or the exports of a cluster module that publishes no lease.
variable "captf_cluster_outputs" {
  type    = any
  default = null

  validation {
    condition     = alltrue([for key in ["network", "pool", "lease"] : try(trimspace(var.captf_cluster_outputs[key]) != "", false)])
    error_message = "captf_cluster_outputs must carry non-empty network, pool and lease strings, the exports of the libvirt cluster module (modules/libvirt/cluster). An externally managed TerraformCluster passes {}: the libvirt machine module cannot run without a libvirt cluster module's network, pool and VIP lease."
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

# The machine boots with cloud-init from a NoCloud seed; Ignition is not supported.
variable "bootstrap_format" {
  type = string

  validation {
    condition     = var.bootstrap_format == "cloud-config"
    error_message = "The libvirt machine module boots its domain with cloud-init: bootstrap_format must be cloud-config (KubeadmConfig's default format), not ignition."
  }
}

# One libvirt host is one failure domain and the cluster module publishes none, so Cluster API
# never requests one; a Machine that names one anyway is refused instead of placed nowhere.
variable "failure_domain" {
  type    = string
  default = null

  validation {
    condition     = var.failure_domain == null
    error_message = "The libvirt cluster module publishes no failure domains: a libvirt machine cannot be placed in one."
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

variable "vcpu" {
  type    = number
  default = 2

  validation {
    condition     = var.vcpu >= 1 && floor(var.vcpu) == var.vcpu
    error_message = "vcpu must be a whole number of at least 1."
  }
}

# kubeadm's preflight wants 1700 MiB on a control-plane node.
variable "memory_mib" {
  type    = number
  default = 4096

  validation {
    condition     = var.memory_mib >= 2048 && floor(var.memory_mib) == var.memory_mib
    error_message = "memory_mib must be a whole number of at least 2048."
  }
}

# The root disk's size; the guest's cloud-init grows its filesystem to it.
variable "disk_gib" {
  type    = number
  default = 20

  validation {
    condition     = var.disk_gib >= 10 && floor(var.disk_gib) == var.disk_gib
    error_message = "disk_gib must be a whole number of at least 10."
  }
}

# The node image, a qcow2 volume already on the host with kubeadm, kubelet and a container
# runtime installed (docs/src/libvirt-host.md, "The node image"). The root disk is a copy-on-write
# overlay on it. null means captf-node-<kubernetes_version>.qcow2, so a Kubernetes upgrade rolls
# onto the image of the new version.
variable "base_volume" {
  type    = string
  default = null
}

variable "base_volume_pool" {
  type    = string
  default = "default"
}

# "host-passthrough" on a KVM host; "host-model" or "custom" where passthrough is refused.
variable "cpu_mode" {
  type    = string
  default = "host-passthrough"
}

# The VRRP router id (1-255) of the control-plane VIP; null derives it from the VIP's lease name.
# Set it when two clusters on one shared network happen to derive the same id.
variable "vrrp_router_id" {
  type    = number
  default = null

  validation {
    condition     = var.vrrp_router_id == null ? true : (var.vrrp_router_id >= 1 && var.vrrp_router_id <= 255)
    error_message = "vrrp_router_id must be between 1 and 255."
  }
}

# The port kube-apiserver listens on inside each control-plane node (the flavors' kubeadm
# localAPIEndpoint.bindPort); the VIP holder's health check probes it.
variable "api_server_bind_port" {
  type    = number
  default = 6443
}
