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

# ---- Module variables (spec.variables of the TerraformCluster); every one has a default. ----

# The cluster network's IPv4 subnet: a user-defined Docker bridge network of its own, so the
# nodes find the load balancer, and it them, by name. Each cluster on a Docker host needs its own
# subnet, which must not overlap the Cluster's pod or service CIDRs.
variable "network_cidr" {
  type    = string
  default = "172.31.0.0/24"

  validation {
    condition     = try(!strcontains(var.network_cidr, ":") && cidrhost(var.network_cidr, 0) != "" && tonumber(split("/", var.network_cidr)[1]) <= 28, false)
    error_message = "network_cidr must be an IPv4 subnet of /28 or larger, such as 172.31.0.0/24."
  }
}

# The load balancer's image: HAProxy, run as `haproxy -W -db -f /etc/haproxy/haproxy.cfg`
# (make docker-images builds localhost/captf-haproxy:2.6 from Debian's haproxy).
variable "load_balancer_image" {
  type    = string
  default = "localhost/captf-haproxy:2.6"
}

# Where the Docker host publishes the load balancer: the control-plane endpoint. The nodes, the
# management cluster and users must all reach this address, so it is an address of the Docker
# host. null publishes on the cluster network's gateway, the host's own address on that network:
# fine for a management cluster on the same host. A management cluster whose pods reach the host
# at another address (the test environment's pod gateway, for example) names it here.
variable "load_balancer_host_ip" {
  type    = string
  default = null

  validation {
    condition     = var.load_balancer_host_ip == null ? true : can(cidrhost("${var.load_balancer_host_ip}/32", 0))
    error_message = "load_balancer_host_ip must be an IPv4 address of the Docker host, such as 10.244.0.1."
  }
}

# The endpoint's port on load_balancer_host_ip. Two clusters published on one address need
# different ports. A fixed port keeps the endpoint when the load balancer is recreated: Cluster
# API never changes a Cluster's control-plane endpoint once set.
variable "load_balancer_host_port" {
  type    = number
  default = 6443

  validation {
    condition     = var.load_balancer_host_port >= 1 && var.load_balancer_host_port <= 65535 && floor(var.load_balancer_host_port) == var.load_balancer_host_port
    error_message = "load_balancer_host_port must be a port number between 1 and 65535."
  }
}
