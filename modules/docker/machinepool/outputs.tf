# Contract outputs of the machinepool role, v1alpha1.

output "provider_id" {
  value = "docker:///${local.prefix}"
}

# Members still in state, sorted in the output's own expression so the order never changes
# between refreshes.
output "provider_id_list" {
  value = sort([for name, c in docker_container.node : "docker:///${name}"])
}

output "replicas" {
  value = length(docker_container.node)
}

# A member the provider read as stopped (must_run = false in state) is reported stopped.
output "instances" {
  value = [for name in sort(keys(docker_container.node)) : {
    provider_id = "docker:///${name}"
    instance_id = name
    state       = docker_container.node[name].must_run ? "running" : "stopped"
  }]
}

output "health" {
  value = alltrue([for c in docker_container.node : c.must_run]) ? { state = "running", healthy = true, message = null, reasons = [] } : { state = "degraded", healthy = false, message = "node containers not running: ${join(", ", sort([for name, c in docker_container.node : name if !c.must_run]))}", reasons = ["ContainerNotRunning"] }
}
