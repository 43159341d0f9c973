//! The admission dispatch, kind by kind, through `admission::review` with in-memory lookups: what
//! each kind's CREATE, UPDATE and DELETE allow, and the exact message of every refusal the rules
//! produce only in combination with a request (SubjectAccessReview, owner lookups, dry-runs).

mod common;

use api::capi::{Cluster, ClusterSpec, ContractVersionedObjectReference, Machine, MachineSpec};
use api::identity::TerraformClusterIdentity;
use common::{review, set, with};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::core::DynamicObject;
use kube::core::admission::AdmissionReview;
use serde_json::{Value, json};
use webhook::admission;
use webhook::fake::{StaticLookups, World};
use webhook::kinds::Kind;
use webhook::rules::Rule;

/// (allowed, message, rules).
async fn run(lookups: &StaticLookups, kind: Kind, body: &[u8]) -> (bool, String, Vec<Rule>) {
    let (out, outcome): (AdmissionReview<DynamicObject>, _) =
        admission::review(kind, body, lookups).await;
    let response = out.response.expect("every review has a response");
    assert_eq!(response.allowed, outcome.allowed());
    (response.allowed, response.result.message, outcome.rules)
}

async fn create(lookups: &StaticLookups, kind: Kind, obj: &Value) -> (bool, String, Vec<Rule>) {
    run(
        lookups,
        kind,
        &review(kind, "CREATE", Some(obj), None, "alice", false),
    )
    .await
}

async fn update(
    lookups: &StaticLookups,
    kind: Kind,
    new: &Value,
    old: &Value,
) -> (bool, String, Vec<Rule>) {
    run(
        lookups,
        kind,
        &review(kind, "UPDATE", Some(new), Some(old), "alice", false),
    )
    .await
}

async fn delete(lookups: &StaticLookups, kind: Kind, old: &Value) -> (bool, String, Vec<Rule>) {
    run(
        lookups,
        kind,
        &review(kind, "DELETE", None, Some(old), "alice", false),
    )
    .await
}

fn world() -> StaticLookups {
    StaticLookups::new(World::default())
}

#[tokio::test]
async fn a_valid_object_of_every_kind_is_admitted_and_the_uid_echoed() {
    let l = world();
    l.update(|w| {
        w.secret_readers
            .insert(("alice".into(), "creds".into(), "aws".into()));
    });
    let objects = [
        (Kind::Cluster, common::cluster("c", "ns")),
        (Kind::Machine, common::machine("m", "ns")),
        (Kind::MachinePool, common::pool("p", "ns")),
        (
            Kind::ClusterTemplate,
            common::template(Kind::ClusterTemplate, "t", "ns"),
        ),
        (
            Kind::MachineTemplate,
            common::template(Kind::MachineTemplate, "t", "ns"),
        ),
        (
            Kind::MachinePoolTemplate,
            common::template(Kind::MachinePoolTemplate, "t", "ns"),
        ),
        (
            Kind::ClusterIdentity,
            common::identity("aws", "creds", "aws"),
        ),
    ];
    for (kind, obj) in objects {
        let body = review(kind, "CREATE", Some(&obj), None, "alice", false);
        let (out, _) = admission::review(kind, &body, &l).await;
        let response = out.response.expect("a response");
        assert!(response.allowed, "{kind:?}: {}", response.result.message);
        assert_eq!(response.uid, "0d6c5b0e-1111-2222-3333-444455556666");
        assert_eq!(out.types.api_version, "admission.k8s.io/v1");
        assert_eq!(out.types.kind, "AdmissionReview");
    }
}

#[tokio::test]
async fn the_image_is_checked_on_every_workload_kind_and_template() {
    let l = world();
    for (kind, obj, field) in [
        (
            Kind::Cluster,
            common::cluster("c", "ns"),
            "/spec/source/image",
        ),
        (
            Kind::Machine,
            common::machine("m", "ns"),
            "/spec/source/image",
        ),
        (
            Kind::MachinePool,
            common::pool("p", "ns"),
            "/spec/source/image",
        ),
        (
            Kind::MachineTemplate,
            common::template(Kind::MachineTemplate, "t", "ns"),
            "/spec/template/spec/source/image",
        ),
    ] {
        let bad = with(obj, field, json!("ghcr.io/Example/module:v1"));
        let (allowed, message, _) = create(&l, kind, &bad).await;
        assert!(!allowed);
        let path = field.trim_start_matches('/').replace('/', ".");
        assert_eq!(
            message,
            format!(
                "{path} \"ghcr.io/Example/module:v1\" is not a valid image reference: the repository path component \"Example\" must be lowercase letters and digits, joined by '.', '_', '__' or dashes"
            )
        );
    }
}

/// Runs a CREATE and returns (allowed, the response's warnings, the outcome's warned rules).
async fn create_warnings(
    lookups: &StaticLookups,
    kind: Kind,
    obj: &Value,
) -> (bool, Vec<String>, Vec<Rule>) {
    let body = review(kind, "CREATE", Some(obj), None, "alice", false);
    let (out, outcome): (AdmissionReview<DynamicObject>, _) =
        admission::review(kind, &body, lookups).await;
    let response = out.response.expect("a response");
    assert!(outcome.rules.is_empty() || !response.allowed);
    (
        response.allowed,
        response.warnings.unwrap_or_default(),
        outcome.warnings,
    )
}

#[tokio::test]
async fn an_image_without_tag_or_digest_is_admitted_with_a_warning() {
    let l = world();
    let bare = with(
        common::cluster("c", "ns"),
        "/spec/source/image",
        json!("ghcr.io/example/module"),
    );
    let (allowed, warnings, rules) = create_warnings(&l, Kind::Cluster, &bare).await;
    assert!(allowed);
    assert_eq!(rules, [Rule::ImageReference]);
    assert_eq!(
        warnings,
        [
            "spec.source.image \"ghcr.io/example/module\" names neither a tag nor a digest: the runtime pulls latest, which can move; pin a tag or a digest"
        ]
    );
    let (allowed, warnings, _) =
        create_warnings(&l, Kind::Cluster, &common::cluster("c", "ns")).await;
    assert!(allowed && warnings.is_empty());
}

#[tokio::test]
async fn reserved_jobs_env_names_are_admitted_with_a_warning() {
    let l = world();
    let env =
        json!({"env": [{"name": "TF_LOG", "value": "TRACE"}, {"name": "HOME", "value": "/x"}]});
    let obj = with(common::machine("m", "ns"), "/spec/jobs", env);
    let (allowed, warnings, rules) = create_warnings(&l, Kind::Machine, &obj).await;
    assert!(allowed);
    assert_eq!(rules, [Rule::JobsEnv, Rule::JobsEnv]);
    assert_eq!(warnings.len(), 2);
    assert!(warnings[0].starts_with("spec.jobs.env[0].name \"TF_LOG\": names starting with TF_"));
    assert!(
        warnings[1].starts_with("spec.jobs.env[1].name \"HOME\": the Job itself sets this name")
    );
    assert!(
        warnings
            .iter()
            .all(|w| !w.contains("TRACE") && !w.contains("/x"))
    );
    // A warning does not hide a denial of the same request.
    let both = with(
        obj,
        "/spec/jobs/securityContext",
        json!({"privileged": true}),
    );
    let (allowed, warnings, _) = create_warnings(&l, Kind::Machine, &both).await;
    assert!(!allowed);
    assert_eq!(warnings.len(), 2);
}

#[tokio::test]
async fn jobs_policies_are_checked_wherever_one_appears() {
    let l = world();
    let privileged = json!({"securityContext": {"privileged": true}});
    for (kind, obj, pointer) in [
        (Kind::Cluster, common::cluster("c", "ns"), "/spec/jobs"),
        (
            Kind::Cluster,
            common::cluster("c", "ns"),
            "/spec/defaults/jobs",
        ),
        (Kind::Machine, common::machine("m", "ns"), "/spec/jobs"),
        (Kind::MachinePool, common::pool("p", "ns"), "/spec/jobs"),
        (
            Kind::ClusterTemplate,
            common::template(Kind::ClusterTemplate, "t", "ns"),
            "/spec/template/spec/jobs",
        ),
        (
            Kind::ClusterTemplate,
            common::template(Kind::ClusterTemplate, "t", "ns"),
            "/spec/template/spec/defaults/jobs",
        ),
        (
            Kind::MachineTemplate,
            common::template(Kind::MachineTemplate, "t", "ns"),
            "/spec/template/spec/jobs",
        ),
        (
            Kind::MachinePoolTemplate,
            common::template(Kind::MachinePoolTemplate, "t", "ns"),
            "/spec/template/spec/jobs",
        ),
    ] {
        let bad = with(obj, pointer, privileged.clone());
        let (allowed, message, rules) = create(&l, kind, &bad).await;
        let path = pointer.trim_start_matches('/').replace('/', ".");
        assert!(!allowed, "{kind:?} {pointer}");
        assert_eq!(rules, [Rule::JobsSecurityContext]);
        assert_eq!(
            message,
            format!(
                "{path}.securityContext.privileged: true is not allowed: the module container holds the identity's cloud credentials"
            )
        );
    }
}

#[tokio::test]
async fn variables_use_the_role_of_the_kind_and_the_field_path_of_the_object() {
    let l = world();
    let tmt = with(
        common::template(Kind::MachineTemplate, "t", "ns"),
        "/spec/template/spec/variables",
        json!({"machine_name": "x"}),
    );
    assert_eq!(
        create(&l, Kind::MachineTemplate, &tmt).await.1,
        "spec.template.spec.variables: key \"machine_name\" is a contract input of the machine role"
    );
    let tc = with(
        common::cluster("c", "ns"),
        "/spec/variables",
        json!({"machine_name": "x"}),
    );
    assert!(create(&l, Kind::Cluster, &tc).await.0);
}

#[tokio::test]
async fn several_violations_are_reported_together() {
    let l = world();
    let mut obj = common::pool("p", "ns");
    set(&mut obj, "/spec/drift", json!({"intervalSeconds": 0}));
    set(&mut obj, "/spec/membershipRefreshIntervalSeconds", json!(5));
    set(
        &mut obj,
        "/spec/jobs",
        json!({"lockTimeoutSeconds": 10, "activeDeadlineSeconds": 5}),
    );
    let (allowed, message, rules) = create(&l, Kind::MachinePool, &obj).await;
    assert!(!allowed);
    assert_eq!(rules, [Rule::JobsLockTimeout, Rule::DriftInterval]);
    assert_eq!(
        message,
        "spec.jobs.lockTimeoutSeconds (10) must be less than spec.jobs.activeDeadlineSeconds (5): a state-lock wait alone could use up the whole Job deadline; spec.drift.intervalSeconds: 0 is not allowed on a TerraformMachinePool: a pool's drift checks cannot be turned off (leave it unset for the default interval)"
    );
}

/// Contract Changelog: the membership interval is 15-86400, "rejected below 15 by the CRD schema,
/// not the webhook" — 0 included. The webhook leaves it to the CRD.
#[tokio::test]
async fn the_membership_interval_is_bounded_by_the_crd_schema_not_the_webhook() {
    let l = world();
    for seconds in [0, 5, 86_401] {
        let obj = with(
            common::pool("p", "ns"),
            "/spec/membershipRefreshIntervalSeconds",
            json!(seconds),
        );
        assert!(create(&l, Kind::MachinePool, &obj).await.0, "{seconds}");
    }
}

#[tokio::test]
async fn a_pool_is_mutable_in_every_field() {
    let l = world();
    let old = common::pool("p", "ns");
    let mut new = with(
        old.clone(),
        "/spec/source/image",
        json!("ghcr.io/example/other:v2"),
    );
    set(&mut new, "/spec/identityRef", json!({"name": "gcp"}));
    set(&mut new, "/spec/variables", json!({"size": 3}));
    set(
        &mut new,
        "/spec/variablesFrom",
        json!([{"configMapRef": {"name": "a"}}]),
    );
    set(&mut new, "/spec/providerID", json!("asg://x"));
    assert!(update(&l, Kind::MachinePool, &new, &old).await.0);
}

#[tokio::test]
async fn a_machine_update_of_a_fixed_field_is_refused_and_metadata_allowed() {
    let l = world();
    let old = common::machine("m", "ns");
    let new = with(old.clone(), "/spec/identityRef", json!({"name": "aws"}));
    let (allowed, message, rules) = update(&l, Kind::Machine, &new, &old).await;
    assert!(!allowed);
    assert_eq!(rules, [Rule::MachineImmutable]);
    assert_eq!(
        message,
        "spec.identityRef (including from unset to a value) is immutable on a TerraformMachine: replace the machine through a MachineDeployment or control-plane rollout instead of editing it"
    );
    let mut relabelled = with(old.clone(), "/metadata/labels", json!({"a": "b"}));
    set(&mut relabelled, "/metadata/annotations", json!({"c": "d"}));
    set(
        &mut relabelled,
        "/metadata/finalizers",
        json!(["terraformmachine.infrastructure.cluster.x-k8s.io"]),
    );
    assert!(update(&l, Kind::Machine, &relabelled, &old).await.0);
    // spec.providerID moves from empty to a value too, but only for the manager (see
    // only_the_managers_service_account_writes_provider_id_the_first_time).
}

#[tokio::test]
async fn a_cluster_endpoint_with_a_host_is_refused_through_the_dispatch() {
    let l = world();
    let old = with(
        common::cluster("c", "ns"),
        "/spec/controlPlaneEndpoint",
        json!({"host": "10.0.0.1", "port": 6443}),
    );
    let new = with(old.clone(), "/spec/controlPlaneEndpoint/port", json!(443));
    let (allowed, message, _) = update(&l, Kind::Cluster, &new, &old).await;
    assert!(!allowed);
    assert_eq!(
        message,
        "spec.controlPlaneEndpoint is immutable once it has a host (it is 10.0.0.1:6443): every Machine and kubeconfig of the cluster points at it"
    );
    let image = with(
        old.clone(),
        "/spec/source/image",
        json!("ghcr.io/example/module:v2"),
    );
    assert!(update(&l, Kind::Cluster, &image, &old).await.0);
}

#[tokio::test]
async fn a_template_spec_is_fixed_except_in_a_topology_dry_run() {
    let l = world();
    let old = common::template(Kind::MachineTemplate, "t", "ns");
    let new = with(
        old.clone(),
        "/spec/template/spec/source/image",
        json!("ghcr.io/example/module:v2"),
    );
    let (allowed, message, rules) = update(&l, Kind::MachineTemplate, &new, &old).await;
    assert!(!allowed);
    assert_eq!(rules, [Rule::TemplateImmutable]);
    assert_eq!(
        message,
        "spec.template.spec is immutable on a TerraformMachineTemplate: create a new template and point its owner at it (only spec.template.metadata may change)"
    );
    // Metadata of the template and of the objects it stamps stays mutable.
    let meta = with(
        old.clone(),
        "/spec/template/metadata",
        json!({"labels": {"tier": "gold"}}),
    );
    assert!(update(&l, Kind::MachineTemplate, &meta, &old).await.0);
    // A topology dry-run is exempt, but only with both the dry-run flag and the annotation.
    let annotated = with(
        new.clone(),
        "/metadata/annotations",
        json!({"topology.cluster.x-k8s.io/dry-run": ""}),
    );
    let body = review(
        Kind::MachineTemplate,
        "UPDATE",
        Some(&annotated),
        Some(&old),
        "capi",
        true,
    );
    assert!(run(&l, Kind::MachineTemplate, &body).await.0);
    let body = review(
        Kind::MachineTemplate,
        "UPDATE",
        Some(&annotated),
        Some(&old),
        "capi",
        false,
    );
    assert!(!run(&l, Kind::MachineTemplate, &body).await.0);
    let body = review(
        Kind::MachineTemplate,
        "UPDATE",
        Some(&new),
        Some(&old),
        "capi",
        true,
    );
    assert!(!run(&l, Kind::MachineTemplate, &body).await.0);
    // The dry-run still validates what changed.
    let bad = with(
        annotated,
        "/spec/template/spec/source/image",
        json!("no tag"),
    );
    let body = review(
        Kind::MachineTemplate,
        "UPDATE",
        Some(&bad),
        Some(&old),
        "capi",
        true,
    );
    let (allowed, _, rules) = run(&l, Kind::MachineTemplate, &body).await;
    assert!(!allowed);
    assert_eq!(rules, [Rule::ImageReference]);
}

#[tokio::test]
async fn an_identity_needs_a_creator_who_may_read_its_secret() {
    let l = world();
    let obj = common::identity("aws", "creds", "aws");
    let (allowed, message, rules) = create(&l, Kind::ClusterIdentity, &obj).await;
    assert!(!allowed);
    assert_eq!(rules, [Rule::SecretAccess]);
    assert_eq!(
        message,
        "spec.secretRef: alice may not get Secret creds/aws; an identity may only name a Secret its creator can read (ask for get on that Secret, or name one you can read)"
    );
    l.update(|w| {
        w.secret_readers
            .insert(("alice".into(), "creds".into(), "aws".into()));
    });
    assert!(create(&l, Kind::ClusterIdentity, &obj).await.0);
    // Changing secretRef re-checks; other updates do not.
    let moved = with(obj.clone(), "/spec/secretRef/name", json!("other"));
    assert_eq!(
        update(&l, Kind::ClusterIdentity, &moved, &obj).await.2,
        [Rule::SecretAccess]
    );
    l.update(|w| w.secret_readers.clear());
    let widened = with(
        obj.clone(),
        "/spec/allowedNamespaces",
        json!({"selector": {}}),
    );
    assert!(update(&l, Kind::ClusterIdentity, &widened, &obj).await.0);
}

#[tokio::test]
async fn a_keyless_identity_needs_a_creator_who_may_create_its_tokens_where_it_allows() {
    let l = world();
    let obj = json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
        "kind": "TerraformClusterIdentity",
        "metadata": {"name": "aws-keyless"},
        "spec": {
            "workloadIdentity": {
                "serviceAccountName": "cloud",
                "audience": "sts.amazonaws.com",
                "aws": {"roleARN": "arn:aws:iam::123456789012:role/captf"}
            },
            "allowedNamespaces": {"list": ["team-a", "team-b"]}
        }
    });
    let (allowed, message, rules) = create(&l, Kind::ClusterIdentity, &obj).await;
    assert!(!allowed);
    assert_eq!(rules, [Rule::TokenAccess, Rule::TokenAccess]);
    assert!(
        message.contains(
            "spec.workloadIdentity.serviceAccountName: alice may not create tokens for ServiceAccount cloud in namespace team-a"
        ),
        "{message}"
    );
    l.update(|w| {
        for ns in ["team-a", "team-b"] {
            w.token_creators
                .insert(("alice".into(), ns.into(), "cloud".into()));
        }
    });
    assert!(create(&l, Kind::ClusterIdentity, &obj).await.0);
    // Widening to a selector needs the right in every namespace; other updates are not checked.
    let widened = with(
        obj.clone(),
        "/spec/allowedNamespaces",
        json!({"selector": {}}),
    );
    let (allowed, message, rules) = update(&l, Kind::ClusterIdentity, &widened, &obj).await;
    assert!(!allowed);
    assert_eq!(rules, [Rule::TokenAccess]);
    assert!(message.contains("in every namespace"), "{message}");
    let audience = with(
        obj.clone(),
        "/spec/workloadIdentity/audience",
        json!("other"),
    );
    assert!(update(&l, Kind::ClusterIdentity, &audience, &obj).await.0);
    l.update(|w| {
        w.token_creators
            .insert(("alice".into(), String::new(), "cloud".into()));
    });
    assert!(update(&l, Kind::ClusterIdentity, &widened, &obj).await.0);
    // Another ServiceAccount is checked again.
    let other = with(
        widened.clone(),
        "/spec/workloadIdentity/serviceAccountName",
        json!("admin"),
    );
    assert_eq!(
        update(&l, Kind::ClusterIdentity, &other, &widened).await.2,
        [Rule::TokenAccess]
    );
}

#[tokio::test]
async fn an_identity_with_an_empty_allowed_namespaces_object_is_refused() {
    let l = world();
    l.update(|w| {
        w.secret_readers
            .insert(("alice".into(), "creds".into(), "aws".into()));
    });
    let obj = with(
        common::identity("aws", "creds", "aws"),
        "/spec/allowedNamespaces",
        json!({}),
    );
    let (allowed, _, rules) = create(&l, Kind::ClusterIdentity, &obj).await;
    assert!(!allowed);
    assert_eq!(rules, [Rule::AllowedNamespaces]);
}

#[tokio::test]
async fn a_lookup_failure_fails_closed_with_a_message() {
    let l = world();
    l.update(|w| w.fail = Some("connection refused".into()));
    let (allowed, message, rules) = create(
        &l,
        Kind::ClusterIdentity,
        &common::identity("aws", "creds", "aws"),
    )
    .await;
    assert!(!allowed);
    assert_eq!(rules, [Rule::Lookup]);
    assert_eq!(
        message,
        "could not check access to spec.secretRef: creating a SubjectAccessReview: connection refused; try again"
    );
}

fn identity_in_use_world() -> StaticLookups {
    let mut tc: api::TerraformCluster =
        serde_json::from_value(common::cluster("tc1", "team-a")).expect("a TerraformCluster");
    tc.spec.workspace.identity_ref = Some(api::shared::IdentityReference {
        name: "other".into(),
    });
    tc.spec.defaults = Some(api::cluster::ClusterDefaults {
        identity_ref: Some(api::shared::IdentityReference { name: "aws".into() }),
        ..Default::default()
    });
    let mut capi = Cluster::new(
        "c1",
        ClusterSpec {
            infrastructure_ref: Some(ContractVersionedObjectReference {
                api_group: api::GROUP.into(),
                kind: "TerraformCluster".into(),
                name: "tc1".into(),
            }),
            ..ClusterSpec::default()
        },
    );
    capi.metadata.namespace = Some("team-a".into());
    let tm: api::TerraformMachine = serde_json::from_value(with(
        common::machine("m1", "team-a"),
        "/metadata/labels",
        json!({"cluster.x-k8s.io/cluster-name": "c1"}),
    ))
    .expect("a TerraformMachine");
    StaticLookups::new(World {
        inventory: webhook::rules::identity::Inventory {
            clusters: vec![tc],
            machines: vec![tm],
            capi_clusters: vec![capi],
            ..Default::default()
        },
        ..World::default()
    })
}

#[tokio::test]
async fn an_identity_in_use_or_still_mirrored_cannot_be_deleted() {
    let l = identity_in_use_world();
    let obj = common::identity("aws", "creds", "aws");
    let (allowed, message, rules) = delete(&l, Kind::ClusterIdentity, &obj).await;
    assert!(!allowed);
    assert_eq!(rules, [Rule::IdentityInUse]);
    assert_eq!(
        message,
        "TerraformClusterIdentity aws cannot be deleted while it is in use: TerraformMachine team-a/m1 (through TerraformCluster team-a/tc1 spec.defaults.identityRef) resolves to it (an object being deleted still needs it for its destroy)"
    );
    let mirrored = with(
        common::identity("gcp", "creds", "gcp"),
        "/status/namespaces",
        json!(["team-a", "team-b"]),
    );
    let (allowed, message, rules) = delete(&l, Kind::ClusterIdentity, &mirrored).await;
    assert!(!allowed);
    assert_eq!(rules, [Rule::IdentityMirrors]);
    assert_eq!(
        message,
        "TerraformClusterIdentity gcp cannot be deleted while status.namespaces lists namespaces still holding its credential mirror: team-a, team-b"
    );
    let unused = common::identity("gcp", "creds", "gcp");
    assert!(delete(&l, Kind::ClusterIdentity, &unused).await.0);
    let _: TerraformClusterIdentity = serde_json::from_value(unused).expect("an identity");
}

fn owned_machine() -> Value {
    let mut tm = common::machine("m1", "ns");
    set(
        &mut tm,
        "/metadata/labels",
        json!({"cluster.x-k8s.io/cluster-name": "c1"}),
    );
    set(
        &mut tm,
        "/metadata/ownerReferences",
        json!([{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine", "name": "machine-1", "uid": "uid-1"}]),
    );
    tm
}

fn capi_machine(infra: &str, uid: &str) -> Machine {
    let mut m = Machine::new(
        "machine-1",
        MachineSpec {
            cluster_name: "c1".into(),
            infrastructure_ref: Some(ContractVersionedObjectReference {
                api_group: api::GROUP.into(),
                kind: "TerraformMachine".into(),
                name: infra.into(),
            }),
            ..MachineSpec::default()
        },
    );
    m.metadata.namespace = Some("ns".into());
    m.metadata.uid = Some(uid.into());
    m
}

#[tokio::test]
async fn a_machine_with_a_live_owner_cannot_be_deleted_directly() {
    let l = StaticLookups::new(World {
        machines: vec![capi_machine("m1", "uid-1")],
        ..World::default()
    });
    let (allowed, message, rules) = delete(&l, Kind::Machine, &owned_machine()).await;
    assert!(!allowed);
    assert_eq!(rules, [Rule::MachineDelete]);
    assert_eq!(
        message,
        "TerraformMachine ns/m1 is owned by Machine ns/machine-1, which is not being deleted: delete the Machine (or scale its owner down) so drain and pre-terminate hooks run first"
    );
    // The guard reads metadata only, so it holds for a stored object that no longer decodes.
    let stored = with(owned_machine(), "/spec/source", json!("not-an-object"));
    assert_eq!(
        delete(&l, Kind::Machine, &stored).await.2,
        [Rule::MachineDelete]
    );
}

#[tokio::test]
async fn a_machine_delete_is_allowed_for_orphans_gone_or_mismatched_or_deleting_owners() {
    let l = world();
    assert!(
        delete(&l, Kind::Machine, &common::machine("m1", "ns"))
            .await
            .0,
        "orphan"
    );
    assert!(
        delete(&l, Kind::Machine, &owned_machine()).await.0,
        "owner gone"
    );
    l.update(|w| w.machines = vec![capi_machine("someone-else", "uid-1")]);
    assert!(
        delete(&l, Kind::Machine, &owned_machine()).await.0,
        "owner names another object"
    );
    l.update(|w| w.machines = vec![capi_machine("m1", "uid-2")]);
    assert!(
        delete(&l, Kind::Machine, &owned_machine()).await.0,
        "UID mismatch"
    );
    l.update(|w| {
        let mut m = capi_machine("m1", "uid-1");
        m.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        w.machines = vec![m];
    });
    assert!(
        delete(&l, Kind::Machine, &owned_machine()).await.0,
        "owner deleting"
    );
}

#[tokio::test]
async fn a_machine_delete_for_move_is_allowed_only_while_the_cluster_is_paused() {
    let l = StaticLookups::new(World {
        machines: vec![capi_machine("m1", "uid-1")],
        ..World::default()
    });
    let tm = with(
        owned_machine(),
        "/metadata/annotations",
        json!({"clusterctl.cluster.x-k8s.io/delete-for-move": ""}),
    );
    let (allowed, message, _) = delete(&l, Kind::Machine, &tm).await;
    assert!(!allowed);
    assert_eq!(
        message,
        "TerraformMachine ns/m1 carries clusterctl.cluster.x-k8s.io/delete-for-move but its Cluster ns/c1 was not found, so it cannot be confirmed paused"
    );
    let mut cluster = Cluster::new("c1", ClusterSpec::default());
    cluster.metadata.namespace = Some("ns".into());
    l.update(|w| w.clusters = vec![cluster.clone()]);
    assert!(!delete(&l, Kind::Machine, &tm).await.0, "not paused");
    cluster.spec.paused = Some(true);
    l.update(|w| w.clusters = vec![cluster]);
    assert!(delete(&l, Kind::Machine, &tm).await.0, "paused");
}

#[tokio::test]
async fn deletes_of_other_kinds_and_connects_are_not_judged() {
    let l = world();
    assert!(
        delete(&l, Kind::Cluster, &common::cluster("c", "ns"))
            .await
            .0
    );
    assert!(
        delete(&l, Kind::MachinePool, &json!({"not": "even a pool"}))
            .await
            .0
    );
    let body = review(Kind::Cluster, "CONNECT", None, None, "alice", false);
    assert!(run(&l, Kind::Cluster, &body).await.0);
}

#[tokio::test]
async fn a_request_for_another_kind_or_an_undecodable_object_is_denied() {
    let l = world();
    let body = review(
        Kind::Cluster,
        "CREATE",
        Some(&common::cluster("c", "ns")),
        None,
        "alice",
        false,
    );
    let (allowed, message, rules) = run(&l, Kind::Machine, &body).await;
    assert!(!allowed);
    assert_eq!(rules, [Rule::Request]);
    assert_eq!(
        message,
        "this endpoint validates infrastructure.cluster.x-k8s.io/v1alpha1 TerraformMachine, not infrastructure.cluster.x-k8s.io/v1alpha1 TerraformCluster: check the webhook configuration"
    );
    let bad = with(
        common::cluster("c", "ns"),
        "/spec/source",
        json!("not an object"),
    );
    let (allowed, message, rules) = create(&l, Kind::Cluster, &bad).await;
    assert!(!allowed);
    assert_eq!(rules, [Rule::Decode]);
    assert!(
        message.starts_with("the object is not a valid TerraformCluster: "),
        "{message}"
    );
    let (allowed, message, rules) = run(&l, Kind::Cluster, b"{\"kind\": 3").await;
    assert!(!allowed);
    assert_eq!(rules, [Rule::Request]);
    assert!(
        message.starts_with("the body is not an AdmissionReview: "),
        "{message}"
    );
}

/// Collects everything a tracing subscriber writes.
#[derive(Clone, Default)]
struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .expect("the log buffer")
            .extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Captured;
    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

#[tokio::test]
async fn logs_never_carry_object_contents_or_messages() {
    use tower::ServiceExt as _;
    let captured = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(captured.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let router = webhook::server::webhook_router(webhook::server::AppState::new(
        world(),
        webhook::metrics::Metrics::new(),
    ));
    let mut tm = common::machine("m1", "ns");
    set(
        &mut tm,
        "/spec/jobs",
        json!({"env": [{"name": "TF_TOKEN", "value": "s3cr3t-env-value"}]}),
    );
    set(
        &mut tm,
        "/spec/variables",
        json!({"db_password": "hunter2-variable", "captf_x": "y"}),
    );
    set(
        &mut tm,
        "/spec/source/image",
        json!("ghcr.io/secret-marker-image/m"),
    );
    for (kind, body) in [
        (
            Kind::Machine,
            review(Kind::Machine, "CREATE", Some(&tm), None, "alice", false),
        ),
        (
            Kind::ClusterIdentity,
            review(
                Kind::ClusterIdentity,
                "CREATE",
                Some(&common::identity("aws", "creds", "aws")),
                None,
                "alice",
                false,
            ),
        ),
        (
            Kind::Cluster,
            b"{\"request\": {\"uid\": \"x\", \"object\": {\"spec\": \"s3cr3t-garbage\"}}}".to_vec(),
        ),
    ] {
        let request = http::Request::post(kind.path())
            .body(axum::body::Body::from(body))
            .expect("a request");
        let response = router.clone().oneshot(request).await.expect("an answer");
        assert_eq!(response.status(), 200);
    }
    let logs =
        String::from_utf8(captured.0.lock().expect("the log buffer").clone()).expect("UTF-8 logs");
    assert!(logs.contains("denied"), "{logs}");
    assert!(
        logs.contains("variable-name"),
        "rule labels are logged: {logs}"
    );
    for secret in [
        "s3cr3t",
        "hunter2",
        "secret-marker-image",
        "TF_TOKEN",
        "db_password",
        "not a valid",
    ] {
        assert!(
            !logs.contains(secret),
            "{secret} leaked into the logs: {logs}"
        );
    }
}

const MANAGER: &str = "system:serviceaccount:captf-system:captf-controller-manager";

#[tokio::test]
async fn only_the_managers_service_account_writes_provider_id_the_first_time() {
    let l = world();
    let old = common::machine("m", "ns");
    let new = with(old.clone(), "/spec/providerID", json!("aws:///i-1"));
    let as_user = |user: &'static str| {
        let (new, old) = (new.clone(), old.clone());
        let l = l.clone();
        // Boxed: a TerraformMachine with its jobs policy makes a large future.
        Box::pin(async move {
            run(
                &l,
                Kind::Machine,
                &review(Kind::Machine, "UPDATE", Some(&new), Some(&old), user, false),
            )
            .await
        })
    };
    let (allowed, message, rules) = as_user("alice").await;
    assert!(!allowed);
    assert_eq!(rules, [Rule::ProviderId]);
    assert_eq!(
        message,
        format!(
            "spec.providerID may only be set by the CAPTF manager ({MANAGER}), which copies it from the module's provider_id output; alice may not set it"
        )
    );
    assert!(as_user(MANAGER).await.0);
    // A manager installed elsewhere is named by --manager-service-account.
    l.update(|w| w.manager = Some("system:serviceaccount:infra:captf".into()));
    assert!(!as_user(MANAGER).await.0);
    assert!(as_user("system:serviceaccount:infra:captf").await.0);
    // A create may carry a providerID (clusterctl move recreates machines with theirs).
    assert!(create(&l, Kind::Machine, &new).await.0);
}

/// A stored object as it might be after a schema change: its spec no longer decodes.
fn undecodable(mut obj: Value) -> Value {
    set(&mut obj, "/spec/source", json!("not-an-object"));
    obj
}

#[tokio::test]
async fn a_stored_object_that_no_longer_decodes_can_still_be_deleted_and_released() {
    let l = world();
    // DELETE reads metadata only.
    let stored = undecodable(owned_machine());
    let (allowed, message, _) = delete(&l, Kind::Machine, &stored).await;
    assert!(allowed, "{message}");
    let mut identity = common::identity("aws", "creds", "aws");
    set(&mut identity, "/spec/allowedNamespaces", json!("broken"));
    assert!(delete(&l, Kind::ClusterIdentity, &identity).await.0);
    set(&mut identity, "/status/namespaces", json!(["team-a"]));
    let (allowed, message, rules) = delete(&l, Kind::ClusterIdentity, &identity).await;
    assert!(!allowed);
    assert_eq!(rules, [Rule::IdentityMirrors], "{message}");

    // An UPDATE that changes only metadata — finalizer removal, labels — is allowed.
    for kind in [Kind::Machine, Kind::Cluster] {
        let base = match kind {
            Kind::Machine => common::machine("m", "ns"),
            _ => common::cluster("c", "ns"),
        };
        let old = with(
            undecodable(base),
            "/metadata/finalizers",
            json!(["x.infrastructure.cluster.x-k8s.io"]),
        );
        let released = with(old.clone(), "/metadata/finalizers", json!([]));
        let (allowed, message, _) = update(&l, kind, &released, &old).await;
        assert!(allowed, "{kind:?}: {message}");
        let relabelled = with(old.clone(), "/metadata/labels", json!({"a": "b"}));
        assert!(update(&l, kind, &relabelled, &old).await.0, "{kind:?}");
    }

    // A machine's spec may not change while the stored one cannot be compared with it.
    let old = undecodable(common::machine("m", "ns"));
    let repaired = common::machine("m", "ns");
    let (allowed, message, rules) = update(&l, Kind::Machine, &repaired, &old).await;
    assert!(!allowed);
    assert_eq!(rules, [Rule::Decode]);
    assert!(
        message.starts_with("the stored TerraformMachine no longer decodes, so spec cannot be checked for an allowed change and may not change: the oldObject is not a valid TerraformMachine"),
        "{message}"
    );
    // A mutable kind may be repaired: the new object is checked as if created.
    let old = undecodable(common::cluster("c", "ns"));
    assert!(
        update(&l, Kind::Cluster, &common::cluster("c", "ns"), &old)
            .await
            .0
    );
    let bad = with(
        common::cluster("c", "ns"),
        "/spec/jobs",
        json!({"securityContext": {"privileged": true}}),
    );
    let (allowed, _, rules) = update(&l, Kind::Cluster, &bad, &old).await;
    assert!(!allowed);
    assert_eq!(rules, [Rule::JobsSecurityContext]);
    // A change of spec that does not decode either is still refused.
    let still_bad = with(old.clone(), "/spec/source", json!(7));
    assert_eq!(
        update(&l, Kind::Cluster, &still_bad, &old).await.2,
        [Rule::Decode]
    );
}
