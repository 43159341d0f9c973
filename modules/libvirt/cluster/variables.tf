# Contract inputs of the cluster role, v1alpha1 (Common "Inputs", Cluster Role "Inputs").

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

# Never passed to the cluster role; declared with a default as the skeleton does.
variable "captf_cluster_outputs" {
  type    = any
  default = null
}

variable "captf_tags" {
  type = map(string)
}

variable "control_plane_endpoint" {
  type = object({
    host = string
    port = number
  })
  default = null
}

variable "kubernetes_version" {
  type    = string
  default = null
}

variable "control_plane_initialized" {
  type = bool
}

variable "cluster_network" {
  # Always all four attributes when non-null (an unset CIDR list is [], an unset scalar null).
  type = object({
    pods            = list(string)
    services        = list(string)
    service_domain  = string
    api_server_port = number
  })
  default = null
}

# ---- Module variables (spec.variables of the TerraformCluster); every one has a default. ----

# The cluster network's IPv4 subnet. Each cluster on a host needs its own: libvirt refuses to
# start a second network on an overlapping subnet. It must not overlap the Cluster's pod or
# service CIDRs either.
variable "network_cidr" {
  type    = string
  default = "10.77.0.0/24"

  validation {
    condition     = try(!strcontains(var.network_cidr, ":") && cidrhost(var.network_cidr, 0) != "" && tonumber(split("/", var.network_cidr)[1]) <= 26, false)
    error_message = "network_cidr must be an IPv4 subnet of /26 or larger, such as 10.77.0.0/24."
  }
}

# An existing libvirt network to join instead of creating one (for example a routed or bridged
# network shared by several clusters). network_cidr must then describe that network's subnet, and
# the VIP must lie outside its DHCP range.
variable "network_name" {
  type    = string
  default = null
}

# The host number of the control-plane VIP inside network_cidr (10 gives 10.77.0.10). Host 1 is
# the host's own address on a network this module creates.
variable "vip_host" {
  type    = number
  default = 10

  validation {
    condition     = var.vip_host >= 2
    error_message = "vip_host must be at least 2: host 1 is the libvirt host's own address on the network."
  }
}

# The first host number the created network's DHCP serves; the hosts from 2 up to it are kept
# for the VIP and for static use, so it must be above vip_host (checked at plan).
variable "dhcp_first_host" {
  type    = number
  default = 32
}

# The directory under which the cluster's storage pool is created, one subdirectory per cluster.
# It is a path on the libvirt host, not in the Job.
variable "pool_root" {
  type    = string
  default = "/var/lib/libvirt/captf"

  validation {
    condition     = startswith(var.pool_root, "/")
    error_message = "pool_root must be an absolute path on the libvirt host."
  }
}

# The pool that holds the VIP's lease volume; null means the cluster's own pool. Clusters that
# share one network should name one pool they all use (for example "default"), so that a second
# cluster claiming the same VIP on that network fails at create instead of fighting over it.
variable "lease_pool" {
  type    = string
  default = null
}
