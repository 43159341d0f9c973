terraform {
  required_version = ">= 1.6"

  required_providers {
    # The classic schema (see ../cluster/versions.tf); the connection comes from
    # LIBVIRT_DEFAULT_URI in the identity's Secret.
    libvirt = {
      source  = "dmacvicar/libvirt"
      version = "~> 0.8.3"
    }
    # Builds the MIME multi-part user data: the bootstrap data as Cluster API wrote it, plus the
    # VIP holder on control-plane machines.
    cloudinit = {
      source  = "hashicorp/cloudinit"
      version = "~> 2.3"
    }
  }
}
