//! The libvirt modules (`modules/libvirt`, the book's libvirt flavor) as far as this machine can
//! check them without the libvirt provider: lint-clean under `--strict` with their own
//! `.tfcapi-lint.hcl`, formatted as `tofu fmt` writes them, the cluster module exporting network,
//! pool, vip and lease, and the machine module's validation blocks judged by a real `tofu plan`
//! (the variables file needs no provider). `tofu validate` of the whole modules needs
//! `dmacvicar/libvirt`, which this machine cannot download (docs/src/libvirt-host.md).

#![allow(clippy::unwrap_used)] // Test helpers: a failed setup step should fail the test.

mod module_tools;

use module_tools::{check_formatted, lint, tofu};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

fn libvirt(role: &str) -> PathBuf {
    module_tools::module("libvirt", role)
}

/// Both modules pass `--strict`, with and without naming the role (each directory's
/// `.tfcapi-lint.hcl` names it). The cluster module's one allowed warning is `input/tags-unused`:
/// libvirt networks, pools and volumes take no tags; the machine module has no finding at all.
#[test]
fn the_libvirt_modules_are_clean_under_strict() {
    for role in ["cluster", "machine"] {
        let dir = libvirt(role);
        let dir = dir.to_str().unwrap();
        for args in [
            vec!["module", "--strict", "--json", dir],
            vec!["module", "--role", role, "--strict", "--json", dir],
        ] {
            let (code, report) = lint(&args);
            assert_eq!(code, 0, "{role}: {report:#}");
            let ids: Vec<(&str, &str)> = report["findings"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| (f["id"].as_str().unwrap(), f["severity"].as_str().unwrap()))
                .collect();
            let expected: &[(&str, &str)] = if role == "cluster" {
                &[("input/tags-unused", "info")]
            } else {
                &[]
            };
            assert_eq!(ids, expected, "{role}: {report:#}");
        }
    }
    // Linted as the wrong role, the machine module is missing the cluster's outputs: the clean
    // result above is the role's, not an empty check.
    let (code, report) = lint(&[
        "module",
        "--role",
        "cluster",
        "--json",
        libvirt("machine").to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{report:#}");
}

/// The cluster module's `exports` output is the book's object: network, pool, vip and lease, the
/// lease being the VIP lease volume's name.
#[test]
fn the_libvirt_cluster_exports_network_pool_vip_and_lease() {
    let entries = module_tools::output_object(&libvirt("cluster"), "exports");
    assert_eq!(
        entries,
        [
            ("network".to_owned(), "local.network".to_owned()),
            ("pool".to_owned(), "local.pool".to_owned()),
            ("vip".to_owned(), "local.vip".to_owned()),
            (
                "lease".to_owned(),
                "libvirt_volume.vip_lease.name".to_owned()
            ),
        ]
    );
    let main = std::fs::read_to_string(libvirt("cluster").join("main.tf")).unwrap();
    assert!(main.contains("resource \"libvirt_volume\" \"vip_lease\" {"));
}

#[test]
fn the_libvirt_modules_are_formatted_as_tofu_fmt_writes_them() {
    let Some(tofu) = tofu() else {
        return;
    };
    if let Err(diff) = check_formatted(&tofu, &libvirt("")) {
        panic!("{diff}");
    }
}

fn plan_variables(tofu: &Path, role: &str, values: &Value) -> (bool, String) {
    module_tools::plan_variables(tofu, &libvirt(role), values)
}

/// The inputs the controller renders for a machine of a libvirt cluster, with `exports` as
/// `captf_cluster_outputs` (absent when null, as for a variable the root never sets).
fn machine_inputs(exports: Option<Value>) -> Value {
    let mut inputs = json!({
        "captf_contract": "v1alpha1",
        "captf_cluster": { "name": "dev", "namespace": "team-a" },
        "captf_object": { "kind": "TerraformMachine", "name": "dev-md-0-abcde", "namespace": "team-a" },
        "captf_tags": { "captf.io/cluster": "dev" },
        "machine_name": "dev-md-0-abcde",
        "bootstrap_data": "I2Nsb3VkLWNvbmZpZwo=",
        "bootstrap_format": "cloud-config",
        "failure_domain": null,
        "kubernetes_version": "v1.36.3",
        "control_plane": false
    });
    if let Some(exports) = exports {
        inputs["captf_cluster_outputs"] = exports;
    }
    inputs
}

fn exports() -> Value {
    json!({
        "network": "captf-team-a-dev",
        "pool": "captf-team-a-dev",
        "vip": "10.77.0.10",
        "lease": "captf-team-a-dev-vip-10-77-0-10.lease"
    })
}

/// The book's validation block: `captf_cluster_outputs` without network, pool or lease — `{}`
/// from an externally managed cluster, a cluster module that publishes no lease, an empty or
/// non-string value, or none at all — fails the plan with the module's own message; the libvirt
/// cluster module's exports pass. Bootstrap formats other than cloud-config and a requested
/// failure domain are refused the same way.
#[test]
fn the_libvirt_machine_refuses_cluster_outputs_without_network_pool_or_lease() {
    let Some(tofu) = tofu() else {
        return;
    };
    let (ok, out) = plan_variables(&tofu, "machine", &machine_inputs(Some(exports())));
    assert!(ok, "{out}");

    let mut refused = vec![
        ("externally managed", Some(json!({}))),
        ("unset", None),
        ("null", Some(Value::Null)),
        ("a string", Some(json!("captf-team-a-dev"))),
    ];
    for key in ["network", "pool", "lease"] {
        let mut without = exports();
        without.as_object_mut().unwrap().remove(key);
        refused.push(("missing a key", Some(without)));
        let mut empty = exports();
        empty[key] = json!(" ");
        refused.push(("an empty key", Some(empty)));
        let mut object = exports();
        object[key] = json!({ "name": "x" });
        refused.push(("a non-string key", Some(object)));
    }
    for (what, value) in refused {
        let (ok, out) = plan_variables(&tofu, "machine", &machine_inputs(value.clone()));
        assert!(!ok, "{what} {value:?} was accepted:\n{out}");
        assert!(
            out.contains("captf_cluster_outputs must carry non-empty network, pool and lease"),
            "{what} {value:?}: {out}"
        );
    }

    let mut ignition = machine_inputs(Some(exports()));
    ignition["bootstrap_format"] = json!("ignition");
    let (ok, out) = plan_variables(&tofu, "machine", &ignition);
    assert!(
        !ok && out.contains("bootstrap_format must be cloud-config"),
        "{out}"
    );

    let mut placed = machine_inputs(Some(exports()));
    placed["failure_domain"] = json!("rack-1");
    let (ok, out) = plan_variables(&tofu, "machine", &placed);
    assert!(!ok && out.contains("publishes no failure domains"), "{out}");
}

/// The cluster module's own variables: its defaults plan, an IPv6 or too small subnet and a VIP
/// on the host's own address are refused.
#[test]
fn the_libvirt_cluster_refuses_a_subnet_it_cannot_hold_a_vip_in() {
    let Some(tofu) = tofu() else {
        return;
    };
    let inputs = json!({
        "captf_contract": "v1alpha1",
        "captf_cluster": { "name": "dev", "namespace": "team-a" },
        "captf_object": { "kind": "TerraformCluster", "name": "dev", "namespace": "team-a" },
        "captf_tags": {},
        "control_plane_initialized": false
    });
    let (ok, out) = plan_variables(&tofu, "cluster", &inputs);
    assert!(ok, "{out}");
    for (name, value, message) in [
        ("network_cidr", json!("fd00::/64"), "must be an IPv4 subnet"),
        (
            "network_cidr",
            json!("10.77.0.0/28"),
            "must be an IPv4 subnet",
        ),
        (
            "network_cidr",
            json!("not-a-cidr"),
            "must be an IPv4 subnet",
        ),
        ("vip_host", json!(1), "must be at least 2"),
        (
            "pool_root",
            json!("relative/dir"),
            "must be an absolute path",
        ),
    ] {
        let mut bad = inputs.clone();
        bad[name] = value.clone();
        let (ok, out) = plan_variables(&tofu, "cluster", &bad);
        assert!(!ok && out.contains(message), "{name} = {value}: {out}");
    }
}
