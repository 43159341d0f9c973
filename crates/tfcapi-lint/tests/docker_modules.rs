//! The docker modules (`modules/docker`, real nodes as containers on a Docker host): lint-clean
//! under `--strict` with their own `.tfcapi-lint.hcl`, formatted as `tofu fmt` writes them, the
//! cluster module exporting what machines and pools need, and the validation blocks judged by a
//! real `tofu plan`. Applying them needs a Docker daemon, the node images and the Docker
//! provider: `make docker-modules-check` (hack/docker-modules-check.sh) does that.

#![allow(clippy::unwrap_used)] // Test helpers: a failed setup step should fail the test.

mod module_tools;

use module_tools::{check_formatted, finding_ids, lint, plan_variables, tofu};
use serde_json::{Value, json};
use std::path::PathBuf;

const ROLES: [&str; 3] = ["cluster", "machine", "machinepool"];

fn docker(role: &str) -> PathBuf {
    module_tools::module("docker", role)
}

/// All three modules pass `--strict` without a single finding, with and without naming the role
/// (each directory's `.tfcapi-lint.hcl` names it); linted as the wrong role, each fails, so the
/// clean result is the role's.
#[test]
fn the_docker_modules_are_clean_under_strict() {
    for role in ROLES {
        let dir = docker(role);
        let dir = dir.to_str().unwrap();
        for args in [
            vec!["module", "--strict", "--json", dir],
            vec!["module", "--role", role, "--strict", "--json", dir],
        ] {
            let (code, report) = lint(&args);
            assert_eq!(code, 0, "{role}: {report:#}");
            assert_eq!(finding_ids(&report), [], "{role}: {report:#}");
        }
        let other = if role == "cluster" {
            "machine"
        } else {
            "cluster"
        };
        let (code, report) = lint(&["module", "--role", other, "--json", dir]);
        assert_eq!(code, 1, "{role} as {other}: {report:#}");
    }
}

#[test]
fn the_docker_modules_are_formatted_as_tofu_fmt_writes_them() {
    let Some(tofu) = tofu() else {
        return;
    };
    if let Err(diff) = check_formatted(&tofu, &docker("")) {
        panic!("{diff}");
    }
}

/// The cluster module's `exports` carry the network and the control-plane alias by name, as the
/// machine and pool modules read them.
#[test]
fn the_docker_cluster_exports_its_network_and_control_plane_alias() {
    let keys: Vec<String> = module_tools::output_object(&docker("cluster"), "exports")
        .into_iter()
        .map(|(key, _)| key)
        .collect();
    assert_eq!(keys, ["network", "network_gateway", "control_plane_alias"]);
    for role in ["machine", "machinepool"] {
        let main = std::fs::read_to_string(docker(role).join("main.tf")).unwrap();
        assert!(main.contains("local.exports.network"), "{role}");
    }
    let machine = std::fs::read_to_string(docker("machine").join("main.tf")).unwrap();
    assert!(machine.contains("local.exports.control_plane_alias"));
}

fn common(kind: &str, name: &str) -> Value {
    json!({
        "captf_contract": "v1alpha1",
        "captf_cluster": { "name": "dev", "namespace": "team-a" },
        "captf_object": { "kind": kind, "name": name, "namespace": "team-a" },
        "captf_tags": { "captf.io/cluster": "dev" }
    })
}

fn exports() -> Value {
    json!({
        "network": "captf-team-a-dev",
        "network_gateway": "172.31.0.1",
        "control_plane_alias": "captf-team-a-dev-control-plane"
    })
}

fn machine_inputs(exports: Option<Value>) -> Value {
    let mut inputs = common("TerraformMachine", "dev-md-0-abcde");
    let extra = json!({
        "machine_name": "dev-md-0-abcde",
        "bootstrap_data": "I2Nsb3VkLWNvbmZpZwo=",
        "bootstrap_format": "cloud-config",
        "failure_domain": null,
        "kubernetes_version": "v1.36.3",
        "control_plane": false
    });
    inputs
        .as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    if let Some(exports) = exports {
        inputs["captf_cluster_outputs"] = exports;
    }
    inputs
}

fn pool_inputs() -> Value {
    let mut inputs = common("TerraformMachinePool", "dev-mp-0");
    let extra = json!({
        "captf_cluster_outputs": exports(),
        "machinepool_name": "dev-mp-0",
        "replicas": 2,
        "bootstrap_data": "I2Nsb3VkLWNvbmZpZwo=",
        "bootstrap_format": "cloud-config",
        "node_labels": {},
        "failure_domains": [],
        "cluster_failure_domains": [],
        "kubernetes_version": "v1.36.3",
        "autoscaling": { "enabled": false, "min": 0, "max": 0 }
    });
    inputs
        .as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    inputs
}

/// The machine module refuses cluster outputs without the network or the alias (`{}` from an
/// externally managed cluster, none at all, empty or non-string values) with its own message;
/// the docker cluster module's exports pass. Ignition and a requested failure domain are refused.
#[test]
fn the_docker_machine_refuses_what_it_cannot_boot() {
    let Some(tofu) = tofu() else {
        return;
    };
    let machine = docker("machine");
    let (ok, out) = plan_variables(&tofu, &machine, &machine_inputs(Some(exports())));
    assert!(ok, "{out}");
    let mut refused = vec![
        ("externally managed", Some(json!({}))),
        ("unset", None),
        ("a string", Some(json!("captf-team-a-dev"))),
    ];
    for key in ["network", "control_plane_alias"] {
        let mut without = exports();
        without.as_object_mut().unwrap().remove(key);
        refused.push(("missing a key", Some(without)));
        let mut empty = exports();
        empty[key] = json!(" ");
        refused.push(("an empty key", Some(empty)));
    }
    for (what, value) in refused {
        let (ok, out) = plan_variables(&tofu, &machine, &machine_inputs(value.clone()));
        assert!(!ok, "{what} {value:?} was accepted:\n{out}");
        assert!(
            out.contains(
                "captf_cluster_outputs must carry non-empty network and control_plane_alias"
            ),
            "{what} {value:?}: {out}"
        );
    }
    for (name, value, message) in [
        (
            "bootstrap_format",
            json!("ignition"),
            "bootstrap_format must be cloud-config",
        ),
        (
            "failure_domain",
            json!("rack-1"),
            "publishes no failure domains",
        ),
    ] {
        let mut bad = machine_inputs(Some(exports()));
        bad[name] = value.clone();
        let (ok, out) = plan_variables(&tofu, &machine, &bad);
        assert!(!ok && out.contains(message), "{name} = {value}: {out}");
    }
}

/// The pool module plans with the cluster's exports and refuses autoscaling (a Docker host has
/// no autoscaler), a requested failure domain, Ignition and cluster outputs without a network.
#[test]
fn the_docker_machinepool_refuses_what_it_cannot_run() {
    let Some(tofu) = tofu() else {
        return;
    };
    let pool = docker("machinepool");
    let (ok, out) = plan_variables(&tofu, &pool, &pool_inputs());
    assert!(ok, "{out}");
    for (name, value, message) in [
        (
            "autoscaling",
            json!({ "enabled": true, "min": 1, "max": 3 }),
            "A Docker host has no autoscaler",
        ),
        (
            "failure_domains",
            json!(["rack-1"]),
            "publishes no failure domains",
        ),
        (
            "bootstrap_format",
            json!("ignition"),
            "bootstrap_format must be cloud-config",
        ),
        (
            "captf_cluster_outputs",
            json!({}),
            "must carry a non-empty network string",
        ),
    ] {
        let mut bad = pool_inputs();
        bad[name] = value.clone();
        let (ok, out) = plan_variables(&tofu, &pool, &bad);
        assert!(!ok && out.contains(message), "{name} = {value}: {out}");
    }
}

/// The cluster module's defaults plan; an IPv6 or too small subnet, a host IP that is not an
/// IPv4 address and a port out of range are refused.
#[test]
fn the_docker_cluster_refuses_a_network_or_endpoint_it_cannot_publish() {
    let Some(tofu) = tofu() else {
        return;
    };
    let cluster = docker("cluster");
    let mut inputs = common("TerraformCluster", "dev");
    inputs["control_plane_initialized"] = json!(false);
    let (ok, out) = plan_variables(&tofu, &cluster, &inputs);
    assert!(ok, "{out}");
    for (name, value, message) in [
        ("network_cidr", json!("fd00::/64"), "must be an IPv4 subnet"),
        (
            "network_cidr",
            json!("172.31.0.0/29"),
            "must be an IPv4 subnet",
        ),
        (
            "load_balancer_host_ip",
            json!("localhost"),
            "must be an IPv4 address",
        ),
        (
            "load_balancer_host_port",
            json!(70000),
            "must be a port number",
        ),
    ] {
        let mut bad = inputs.clone();
        bad[name] = value.clone();
        let (ok, out) = plan_variables(&tofu, &cluster, &bad);
        assert!(!ok && out.contains(message), "{name} = {value}: {out}");
    }
}
