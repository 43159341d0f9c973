# libvirt cluster module: implements the v1alpha1 cluster role on one libvirt host. It creates
# the cluster's network (unless it joins an existing one), a storage pool for its machines'
# volumes, and the lease volume that claims the control-plane VIP; the control-plane machines
# hold the VIP themselves (modules/libvirt/machine). Book: Job Inputs, "What a cluster hands to
# its machines and pools"; docs/src/libvirt-host.md.

locals {
  # Every libvirt object of the cluster carries this prefix: network, pool and volume names are
  # unique per host (volumes per pool), and namespace plus name is unique per management cluster.
  prefix = "captf-${var.captf_cluster.namespace}-${var.captf_cluster.name}"

  network = var.network_name != null ? var.network_name : local.prefix
  pool    = local.prefix
  vip     = cidrhost(var.network_cidr, var.vip_host)

  # The created network's DHCP range: from dhcp_first_host to the last host before broadcast.
  # The provider generates 2 .. broadcast-1; only the start is moved, above the VIP.
  dhcp_start = cidrhost(var.network_cidr, var.dhcp_first_host)

  api_server_port = try(coalesce(var.cluster_network.api_server_port, 6443), 6443)

  # Identity transform of the generated network XML, except the DHCP range's start.
  dhcp_range_xslt = <<-XSLT
    <?xml version="1.0" ?>
    <xsl:stylesheet version="1.0" xmlns:xsl="http://www.w3.org/1999/XSL/Transform">
      <xsl:output omit-xml-declaration="yes" indent="yes"/>
      <xsl:template match="node()|@*">
        <xsl:copy>
          <xsl:apply-templates select="node()|@*"/>
        </xsl:copy>
      </xsl:template>
      <xsl:template match="/network/ip/dhcp/range/@start">
        <xsl:attribute name="start">${local.dhcp_start}</xsl:attribute>
      </xsl:template>
    </xsl:stylesheet>
  XSLT
}

# A NAT network with DHCP and DNS for the cluster's machines. libvirt networks, pools and volumes
# carry no tags or labels, so var.captf_tags reaches only the machines' domains (their
# description); the names above say which cluster owns each object.
resource "libvirt_network" "cluster" {
  count = var.network_name == null ? 1 : 0

  name      = local.prefix
  mode      = "nat"
  addresses = [var.network_cidr]
  autostart = true

  dhcp {
    enabled = true
  }

  dns {
    enabled    = true
    local_only = true
  }

  xml {
    xslt = local.dhcp_range_xslt
  }

  lifecycle {
    precondition {
      condition     = var.vip_host < var.dhcp_first_host
      error_message = "vip_host must be below dhcp_first_host, so the network's DHCP never leases the VIP."
    }
    precondition {
      condition     = var.dhcp_first_host < pow(2, 32 - tonumber(split("/", var.network_cidr)[1])) - 2
      error_message = "dhcp_first_host lies outside network_cidr."
    }
  }
}

# The directory pool every machine of the cluster puts its root and cloud-init volumes in.
resource "libvirt_pool" "cluster" {
  name = local.pool
  type = "dir"

  target {
    path = "${trimsuffix(var.pool_root, "/")}/${local.prefix}"
  }
}

# The VIP's lease: an empty 1 MiB raw volume whose name is the claim on the VIP of this network.
# libvirt refuses a second volume of the same name in one pool, so with a shared lease_pool two
# clusters can never hold the same VIP on one network. The control-plane machines derive their
# VRRP router id and instance name from it, so all of them agree on one VRRP group per VIP.
resource "libvirt_volume" "vip_lease" {
  name   = "${local.network}-vip-${replace(local.vip, ".", "-")}.lease"
  pool   = var.lease_pool != null ? var.lease_pool : libvirt_pool.cluster.name
  format = "raw"
  size   = 1048576
}
