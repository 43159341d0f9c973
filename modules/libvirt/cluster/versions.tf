terraform {
  required_version = ">= 1.6"

  required_providers {
    # The classic schema (libvirt_network, libvirt_pool, libvirt_volume, libvirt_domain,
    # libvirt_cloudinit_disk); 0.9 replaced it with a new one. The connection comes from
    # LIBVIRT_DEFAULT_URI, which the identity's Secret supplies (templates/identity-libvirt.yaml):
    # the module has no provider block, so the generated root configures it from the environment.
    libvirt = {
      source  = "dmacvicar/libvirt"
      version = "~> 0.8.3"
    }
  }
}
