terraform {
  required_version = ">= 1.6"

  required_providers {
    # The connection comes from DOCKER_HOST in the identity's Secret (../cluster/versions.tf).
    docker = {
      source  = "kreuzwerker/docker"
      version = "~> 4.6"
    }
  }
}
