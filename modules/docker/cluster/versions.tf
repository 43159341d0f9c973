terraform {
  required_version = ">= 1.6"

  required_providers {
    # The connection comes from DOCKER_HOST (and DOCKER_CERT_PATH for TLS), which the identity's
    # Secret supplies (templates/identity-docker.yaml): the module has no provider block, so the
    # generated root configures the provider from the environment.
    docker = {
      source  = "kreuzwerker/docker"
      version = "~> 4.6"
    }
  }
}
