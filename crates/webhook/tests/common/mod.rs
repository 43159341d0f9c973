//! Builders shared by the webhook's test targets: AdmissionReview bodies and minimal objects of
//! each kind, as JSON the way the API server sends them.

#![allow(dead_code)]

pub mod pki;

use serde_json::{Value, json};
use webhook::kinds::Kind;

pub const GROUP: &str = "infrastructure.cluster.x-k8s.io";
pub const API_VERSION: &str = "infrastructure.cluster.x-k8s.io/v1alpha1";
pub const IMAGE: &str = "ghcr.io/example/module:v1.0.0";

/// An AdmissionReview v1 body for `kind`.
pub fn review(
    kind: Kind,
    op: &str,
    object: Option<&Value>,
    old: Option<&Value>,
    user: &str,
    dry_run: bool,
) -> Vec<u8> {
    let name = object
        .or(old)
        .and_then(|o| o.pointer("/metadata/name"))
        .cloned()
        .unwrap_or(json!("x"));
    let namespace = object
        .or(old)
        .and_then(|o| o.pointer("/metadata/namespace"))
        .cloned();
    let body = json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "0d6c5b0e-1111-2222-3333-444455556666",
            "kind": {"group": GROUP, "version": "v1alpha1", "kind": kind.name()},
            "resource": {"group": GROUP, "version": "v1alpha1", "resource": kind.plural()},
            "name": name,
            "namespace": namespace,
            "operation": op,
            "userInfo": {"username": user, "groups": ["system:authenticated"]},
            "object": object,
            "oldObject": old,
            "dryRun": dry_run,
        }
    });
    serde_json::to_vec(&body).expect("a JSON value serializes")
}

fn meta(name: &str, ns: Option<&str>) -> Value {
    match ns {
        Some(ns) => json!({"name": name, "namespace": ns}),
        None => json!({"name": name}),
    }
}

pub fn cluster(name: &str, ns: &str) -> Value {
    json!({
        "apiVersion": API_VERSION, "kind": "TerraformCluster", "metadata": meta(name, Some(ns)),
        "spec": {"source": {"image": IMAGE}, "identityRef": {"name": "aws"}}
    })
}

pub fn machine(name: &str, ns: &str) -> Value {
    json!({
        "apiVersion": API_VERSION, "kind": "TerraformMachine", "metadata": meta(name, Some(ns)),
        "spec": {"source": {"image": IMAGE}}
    })
}

pub fn pool(name: &str, ns: &str) -> Value {
    json!({
        "apiVersion": API_VERSION, "kind": "TerraformMachinePool", "metadata": meta(name, Some(ns)),
        "spec": {"source": {"image": IMAGE}}
    })
}

pub fn template(kind: Kind, name: &str, ns: &str) -> Value {
    let spec = match kind {
        Kind::ClusterTemplate => {
            json!({"source": {"image": IMAGE}, "identityRef": {"name": "aws"}})
        }
        _ => json!({"source": {"image": IMAGE}}),
    };
    json!({
        "apiVersion": API_VERSION, "kind": kind.name(), "metadata": meta(name, Some(ns)),
        "spec": {"template": {"spec": spec}}
    })
}

pub fn identity(name: &str, secret_ns: &str, secret: &str) -> Value {
    json!({
        "apiVersion": API_VERSION, "kind": "TerraformClusterIdentity", "metadata": meta(name, None),
        "spec": {"secretRef": {"name": secret, "namespace": secret_ns}, "allowedNamespaces": {"list": ["team-a"]}}
    })
}

/// Sets `value` at a JSON pointer, creating objects on the way.
pub fn set(obj: &mut Value, pointer: &str, value: Value) {
    let mut cur = obj;
    let parts: Vec<&str> = pointer.trim_start_matches('/').split('/').collect();
    for (i, part) in parts.iter().enumerate() {
        let part = part.replace("~1", "/").replace("~0", "~");
        if i + 1 == parts.len() {
            cur.as_object_mut()
                .expect("an object on the path")
                .insert(part, value);
            return;
        }
        cur = cur
            .as_object_mut()
            .expect("an object on the path")
            .entry(part)
            .or_insert_with(|| json!({}));
    }
}

/// Sets a value and returns the object.
pub fn with(mut obj: Value, pointer: &str, value: Value) -> Value {
    set(&mut obj, pointer, value);
    obj
}
