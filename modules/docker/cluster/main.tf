# docker cluster module: implements the v1alpha1 cluster role on one Docker host, the way Cluster
# API's Docker provider lays a cluster out. It creates the cluster's own bridge network and a
# load balancer container (HAProxy) published on the Docker host: the control-plane endpoint.
# The load balancer finds the control-plane nodes by a network alias they carry
# (modules/docker/machine), through Docker's embedded DNS, so machines come and go without
# touching this module. Book: Job Inputs, "What a cluster hands to its machines and pools";
# docs/src/development/real-nodes.md.

locals {
  # Docker names are unique per host; namespace plus name is unique per management cluster.
  prefix = "captf-${var.captf_cluster.namespace}-${var.captf_cluster.name}"

  network_gateway = cidrhost(var.network_cidr, 1)
  host_ip         = var.load_balancer_host_ip != null ? var.load_balancer_host_ip : local.network_gateway

  # The name every control-plane node of the cluster answers to on the cluster network.
  control_plane_alias = "${local.prefix}-control-plane"

  # The port kube-apiserver listens on inside each control-plane node (kubeadm's
  # localAPIEndpoint.bindPort): the Cluster's apiServerPort, else kubeadm's default.
  api_server_port = try(coalesce(var.cluster_network.api_server_port, 6443), 6443)

  labels = merge(var.captf_tags, {
    "io.captf.cluster" = "${var.captf_cluster.namespace}/${var.captf_cluster.name}"
  })

  # HAProxy in TCP mode: the API servers serve TLS themselves. Backends are resolved from the
  # alias every few seconds; a node is used once its /healthz answers.
  haproxy_cfg = <<-CFG
    # Written by the CAPTF docker cluster module for ${var.captf_cluster.namespace}/${var.captf_cluster.name}.
    global
      log stdout format raw local0 info
      maxconn 4096

    resolvers docker
      nameserver dns 127.0.0.11:53
      resolve_retries 3
      timeout resolve 1s
      timeout retry 1s
      hold valid 5s
      hold nx 5s
      hold obsolete 5s

    defaults
      log global
      mode tcp
      option dontlognull
      timeout connect 5s
      timeout client 1h
      timeout server 1h

    frontend control-plane
      bind *:6443
      default_backend kube-apiservers

    backend kube-apiservers
      option httpchk GET /healthz
      http-check expect status 200
      default-server check check-ssl verify none inter 2s fall 3 rise 1 init-addr none
      server-template apiserver 16 ${local.control_plane_alias}:${local.api_server_port} resolvers docker resolve-prefer ipv4
  CFG
}

resource "docker_network" "cluster" {
  name   = local.prefix
  driver = "bridge"

  ipam_config {
    subnet  = var.network_cidr
    gateway = local.network_gateway
  }

  dynamic "labels" {
    for_each = local.labels
    content {
      label = labels.key
      value = labels.value
    }
  }
}

# Read, not pulled: the image must already be on the Docker host.
data "docker_image" "load_balancer" {
  name = var.load_balancer_image
}

resource "docker_container" "load_balancer" {
  name     = "${local.prefix}-lb"
  hostname = "${local.prefix}-lb"
  image    = data.docker_image.load_balancer.id
  command  = ["haproxy", "-W", "-db", "-f", "/etc/haproxy/haproxy.cfg"]
  restart  = "unless-stopped"

  networks_advanced {
    name = docker_network.cluster.name
  }

  ports {
    internal = 6443
    external = var.load_balancer_host_port
    ip       = local.host_ip
    protocol = "tcp"
  }

  upload {
    file    = "/etc/haproxy/haproxy.cfg"
    content = local.haproxy_cfg
  }

  dynamic "labels" {
    for_each = local.labels
    content {
      label = labels.key
      value = labels.value
    }
  }
}
