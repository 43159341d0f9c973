//! Properties of the inputs hash: object metadata never changes it, key order never changes it,
//! and an autoscaled pool's observed replicas never changes it.
#![allow(clippy::unwrap_used)]

mod render_support;

use contract::inputs::{ClusterHandoff, MachineInputsSource, ObjectSource};
use contract::names::ObjectKind;
use contract::render::{render_cluster, render_machine, render_machinepool};
use contract::variables::{
    SourceKind, UserVariables, VariablesFormat, VariablesSource, merge_variables,
};
use proptest::prelude::*;
use render_support::{IMAGE, strategies};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

const CLONED_FROM_NAME: &str = "cluster.x-k8s.io/cloned-from-name";

/// The metadata of a Terraform* object, as the manager sees it.
#[derive(Debug, Clone)]
struct Metadata {
    uid: String,
    generation: i64,
    resource_version: String,
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
}

fn metadata() -> impl Strategy<Value = Metadata> {
    (
        "[0-9a-f-]{36}",
        any::<i64>(),
        "[0-9]{1,8}",
        proptest::collection::btree_map("[a-z./-]{1,20}", ".{0,10}", 0..5),
        proptest::collection::btree_map("[a-z./-]{1,30}", ".{0,10}", 0..5),
    )
        .prop_map(
            |(uid, generation, resource_version, labels, annotations)| Metadata {
                uid,
                generation,
                resource_version,
                labels,
                annotations,
            },
        )
}

/// What the manager takes from an object's metadata: its name and namespace and the one
/// annotation that feeds an input (`cloned-from-name`, for the `captf.io/template` tag).
fn object_source(base: &ObjectSource, meta: &Metadata) -> ObjectSource {
    let _ = (
        &meta.uid,
        meta.generation,
        &meta.resource_version,
        &meta.labels,
    );
    ObjectSource {
        cloned_from_name: meta.annotations.get(CLONED_FROM_NAME).cloned(),
        ..base.clone()
    }
}

fn shuffled_object(pairs: Vec<(String, Value)>) -> Value {
    Value::Object(pairs.into_iter().collect::<Map<_, _>>())
}

proptest! {
    #[test]
    fn metadata_never_changes_the_hash(
        source in strategies::machine_source(),
        a in metadata(),
        b in metadata(),
        digest in "sha256:[0-9a-f]{64}",
        pull_policy in prop_oneof![Just("Always"), Just("IfNotPresent"), Just("Never")],
    ) {
        // Only the cloned-from-name annotation is an input; keep it equal on both sides.
        let mut b = b;
        match a.annotations.get(CLONED_FROM_NAME) {
            Some(v) => { b.annotations.insert(CLONED_FROM_NAME.into(), v.clone()); }
            None => { b.annotations.remove(CLONED_FROM_NAME); }
        }
        let with = |meta: &Metadata| MachineInputsSource {
            object: object_source(&source.object, meta),
            ..source.clone()
        };
        // The resolved digest and the pull policy are not inputs: nothing takes them.
        let _ = (digest, pull_policy);
        let ha = render_machine(&with(&a), &UserVariables::none(), IMAGE).unwrap().inputs_hash;
        let hb = render_machine(&with(&b), &UserVariables::none(), IMAGE).unwrap().inputs_hash;
        prop_assert_eq!(ha, hb);
    }

    #[test]
    fn key_order_never_changes_the_hash(
        pairs in proptest::collection::btree_map("k_[a-z_]{0,8}", strategies::json_value(), 1..8),
        seed in any::<u64>(),
    ) {
        let forward: Vec<(String, Value)> = pairs.clone().into_iter().collect();
        let mut scrambled = forward.clone();
        // A deterministic permutation from the seed.
        let len = scrambled.len();
        for i in (1..len).rev() {
            let j = (seed.wrapping_mul(i as u64 + 7) % (i as u64 + 1)) as usize;
            scrambled.swap(i, j);
        }
        let reversed: Vec<_> = forward.iter().cloned().rev().collect();
        let hash = |exports: Value, inline: Value| {
            let source = MachineInputsSource {
                cluster: ClusterHandoff::State { exports, failure_domains: vec![] },
                ..render_support::machine_source()
            };
            let vars = merge_variables(ObjectKind::Machine, &[], Some(&inline)).unwrap();
            render_machine(&source, &vars, IMAGE).unwrap().inputs_hash
        };
        let h1 = hash(shuffled_object(forward.clone()), shuffled_object(forward));
        let h2 = hash(shuffled_object(scrambled.clone()), shuffled_object(reversed));
        let h3 = hash(shuffled_object(scrambled.iter().cloned().rev().collect()), shuffled_object(scrambled));
        prop_assert_eq!(&h1, &h2);
        prop_assert_eq!(&h1, &h3);
    }

    #[test]
    fn disjoint_sources_hash_the_same_in_any_order(
        a in proptest::collection::btree_map("a_[a-z]{1,6}", "[a-z0-9]{0,6}", 0..4),
        b in proptest::collection::btree_map("b_[a-z]{1,6}", "[a-z0-9]{0,6}", 0..4),
    ) {
        let source = |name: &str, kind, data: &BTreeMap<String, String>| VariablesSource {
            kind,
            name: name.into(),
            format: VariablesFormat::String,
            data: data.iter().map(|(k, v)| (k.clone(), v.clone().into_bytes())).collect(),
        };
        let sa = source("a", SourceKind::ConfigMap, &a);
        let sb = source("b", SourceKind::Secret, &b);
        let one = merge_variables(ObjectKind::Cluster, &[sa.clone(), sb.clone()], None).unwrap();
        let two = merge_variables(ObjectKind::Cluster, &[sb, sa], None).unwrap();
        let cluster = render_support::cluster_source();
        prop_assert_eq!(
            render_cluster(&cluster, &one, IMAGE).unwrap().inputs_hash,
            render_cluster(&cluster, &two, IMAGE).unwrap().inputs_hash
        );
    }

    #[test]
    fn observed_replicas_never_change_an_autoscaled_pools_hash(
        min in 0..50i32, span in 0..50i32, s1 in any::<i32>(), s2 in any::<i32>(), spec in proptest::option::of(any::<i32>()),
    ) {
        let pool = |status| contract::inputs::MachinePoolInputsSource {
            autoscaler_min_size: Some(min.to_string()),
            autoscaler_max_size: Some((min + span).to_string()),
            status_replicas: Some(status),
            spec_replicas: spec,
            ..render_support::pool_source()
        };
        prop_assert_eq!(
            render_machinepool(&pool(s1), &UserVariables::none(), IMAGE).unwrap().inputs_hash,
            render_machinepool(&pool(s2), &UserVariables::none(), IMAGE).unwrap().inputs_hash
        );
    }
}
