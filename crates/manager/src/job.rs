//! The runner Job of one operation and the two Secrets that feed it (spec: Tuning Jobs; Job Inputs
//! §1 "Why two Secrets exist"; Runtime Environment; Security Model "Pod security"; the Job
//! Environment reference, INTERFACE-FACTS §6).
//!
//! Everything here is a pure function of a [`JobRequest`]: no client, no clock. The same request
//! always builds the same Job, so a retried reconcile finds the Job it already created by name.
//!
//! - [`build_job`]: the Job itself. An init container `runner` copies the runner binary out of the
//!   runner image into an `emptyDir`; the main container `source` runs it inside the module image
//!   with the per-run Secret at `/captf/config` and the identity's credential mirror both as
//!   `envFrom` and as files under `/var/run/captf/credentials`.
//! - [`run_secret`]: the per-run Secret `captf-run-<job>`, owned by the Job, a private copy of the
//!   rendered root and inputs that a later rewrite of the durable Secret can never change.
//! - [`durable_inputs_secret`]: `captf-inputs-<c|m|mp>-<name>`, owned by the Terraform* object,
//!   the record destroy and drift render from.

use contract::hcl::hcl_string;
use std::collections::BTreeMap;

use api::constants::{annotations, labels};
use api::identity::WorkloadIdentity;
use api::shared::{JobPolicy, PullPolicy};
use contract::names::{self, JobNameParts, ObjectKind, Operation};
use contract::render::{MAIN_TF_JSON, TFVARS_JSON};
use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    Capabilities, Container, EmptyDirVolumeSource, EnvFromSource, EnvVar, KeyToPath,
    LocalObjectReference, PodSecurityContext, PodSpec, PodTemplateSpec, ProjectedVolumeSource,
    ResourceRequirements, SeccompProfile, Secret, SecretEnvSource, SecretProjection,
    SecretVolumeSource, SecurityContext, ServiceAccountTokenProjection, Volume, VolumeMount,
    VolumeProjection,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::{ByteString, Resource};

/// The init container that copies the runner binary into the shared volume.
pub const RUNNER_CONTAINER: &str = "runner";
/// The main container: the module image running the runner (its termination message is the
/// result document, its image ID the digest to pin).
pub const SOURCE_CONTAINER: &str = "source";
/// The runner's UID: the init container runs as it, and the pod's default `fsGroup` is it, so a
/// non-root image user can read the 0440 credential and config files through that group.
pub const RUNNER_UID: i64 = 65532;
/// The pod's `terminationGracePeriodSeconds`.
pub const TERMINATION_GRACE_PERIOD_SECONDS: i64 = 600;
/// The runner's `--stop-timeout`: the grace period less the 30 s the runner needs to write its
/// result after stopping the runtime.
pub const STOP_TIMEOUT_SECONDS: i64 = TERMINATION_GRACE_PERIOD_SECONDS - 30;
/// The mode of the files of the config and credential Secret volumes (0440).
pub const SECRET_FILE_MODE: i32 = 0o440;

/// Where the init container copies the runner binary (the `runner` volume).
pub const RUNNER_DIR: &str = "/captf/bin";
/// The runner binary the main container executes.
pub const RUNNER_BIN: &str = "/captf/bin/runner";
/// The runtime (`tofu` or `terraform`) the module image ships.
pub const RUNTIME_BIN: &str = "/captf/runtime";
/// The module the image ships.
pub const MODULE_DIR: &str = "/captf/module";
/// The image's optional provider mirror.
pub const PROVIDERS_DIR: &str = "/captf/providers";
/// The writable work directory (`HOME`; the generated root is `<workdir>/root`).
pub const WORK_DIR: &str = "/captf/work";
/// The writable temporary directory (`TMPDIR`).
pub const TMP_DIR: &str = "/tmp";
/// The per-run Secret's mount.
pub const CONFIG_DIR: &str = "/captf/config";
/// The credential mirror's file mount, one file per key.
pub const CREDENTIALS_DIR: &str = "/var/run/captf/credentials";
/// Where a restore Job finds backup chunk `<i>`: `<config>/restore/<i>`.
pub const RESTORE_SUBDIR: &str = "restore";
/// The key of a state (and state backup) Secret that holds the gzipped state.
pub const TFSTATE_KEY: &str = "tfstate";

const VOLUME_RUNNER: &str = "runner";
const VOLUME_WORK: &str = "work";
const VOLUME_TMP: &str = "tmp";
const VOLUME_CONFIG: &str = "config";
const VOLUME_CREDS: &str = "creds";
const VOLUME_IDENTITY: &str = "identity";

/// Where a keyless identity's projected ServiceAccount token is mounted (its file is `token`).
pub const TOKEN_DIR: &str = "/var/run/captf/identity";
/// The projected token's file name under [`TOKEN_DIR`].
pub const TOKEN_FILE_NAME: &str = "token";

pub use crate::pass::observed::RestoreBackup;

/// Everything one runner Job is built from. Defaults are already resolved by the caller except
/// the [`JobPolicy`] ones, which are read through its `*_or_default` methods.
#[derive(Debug, Clone, Copy)]
pub struct JobRequest<'a> {
    /// The Terraform* object's kind.
    pub kind: ObjectKind,
    /// The object's namespace (the Job's, and `KUBE_NAMESPACE`).
    pub namespace: &'a str,
    /// The object's name.
    pub name: &'a str,
    /// The object's UID (owner reference and `--event-object`).
    pub uid: &'a str,
    /// The Cluster API cluster the object belongs to (`cluster.x-k8s.io/cluster-name`).
    pub cluster_name: &'a str,
    /// The operation.
    pub operation: Operation,
    /// One more than the highest attempt retained for this operation.
    pub attempt: u32,
    /// The Job name's tick (refresh, drift, drift-remediation apply, restore); see
    /// [`JobNameParts::tick`].
    pub tick: Option<&'a str>,
    /// The inputs hash the Job renders (`captf.io/inputs-hash`).
    pub inputs_hash: &'a str,
    /// The image the main container runs: the pinned `repo@sha256:…` or `spec.source.image`.
    pub image: &'a str,
    /// `spec.source.image` as written, echoed by the runner into its result (`--image=`).
    pub image_ref: &'a str,
    /// `spec.source.imagePullPolicy`; unset means `IfNotPresent`.
    pub pull_policy: Option<PullPolicy>,
    /// The object's Job policy, already merged over its cluster's `spec.defaults.jobs`.
    pub policy: &'a JobPolicy,
    /// The resolved TerraformClusterIdentity; its mirror `captf-creds-<identity>` is mounted
    /// unless it is keyless.
    pub identity: &'a str,
    /// The ServiceAccount the pod runs as (`spec.jobs.serviceAccountName`, else a keyless
    /// identity's, else `captf-runner`).
    pub service_account: &'a str,
    /// A keyless identity: a projected token for its audience at
    /// `/var/run/captf/identity/token` instead of the mirror, and its cloud fields as runner
    /// flags.
    pub keyless: Option<&'a WorkloadIdentity>,
    /// The runner image (`--runner-image`), run by the init container.
    pub runner_image: &'a str,
    /// The backend's `secret_suffix` ([`names::state_suffix`]).
    pub state_suffix: &'a str,
    /// Stop an apply whose plan deletes or replaces a resource (`--guard-deletes` with
    /// `--inputs-hash`).
    pub guard_deletes: bool,
    /// The inputs hash approved for a destructive plan (`captf.io/approve-destructive-plan`).
    pub allow_deletes_hash: Option<&'a str>,
    /// The approved plan hash an apply must reproduce (`--expect-plan`).
    pub expect_plan: Option<&'a str>,
    /// A stale state lock ID to force-unlock right after init.
    pub force_unlock: Option<&'a str>,
    /// The manager's `--runner-events`: the runner posts events on the object.
    pub runner_events: bool,
    /// The apply remediates drift (`captf.io/drift-remediation: "true"`).
    pub drift_remediation: bool,
    /// The `captf.io/requested-at` value this check answers (On-demand checks).
    pub requested: Option<&'a str>,
    /// The plan hash this apply was created for (`captf.io/approved-plan`).
    pub approved_plan: Option<&'a str>,
    /// For a restore Job: the backup to push (`captf.io/restore-serial`, the projected backup
    /// chunks under `<config>/restore/`, `--restore-chunks` and `--restore-resources`).
    pub restore: Option<RestoreBackup>,
}

impl<'a> JobRequest<'a> {
    /// What the durable inputs Secret written alongside this (apply) Job records, with the
    /// pinned digest when one is known.
    pub fn durable_inputs(&self, image_digest: Option<&'a str>) -> DurableInputs<'a> {
        DurableInputs {
            kind: self.kind,
            namespace: self.namespace,
            name: self.name,
            uid: self.uid,
            cluster_name: self.cluster_name,
            image: self.image_ref,
            image_digest,
            identity: self.identity,
        }
    }
}

/// A built Job and the `spec.jobs.env` names it left out (`TF_*`, `KUBE_*`), for the event that
/// reports them.
#[derive(Debug, Clone, PartialEq)]
pub struct BuiltJob {
    /// The Job to create.
    pub job: Job,
    /// Names of `spec.jobs.env` entries dropped because they start with `TF_` or `KUBE_`, in
    /// policy order.
    pub dropped_env: Vec<String>,
}

/// The Job's deterministic name ([`names::job_name`]).
pub fn job_name(req: &JobRequest<'_>) -> String {
    names::job_name(&JobNameParts {
        kind: req.kind,
        name: req.name,
        operation: req.operation,
        attempt: req.attempt,
        inputs_hash: req.inputs_hash,
        tick: req.tick,
    })
}

/// Whether `spec.jobs.env` may not set `name`: the runner and the Job own every `TF_*` and
/// `KUBE_*` variable and every name the Job sets itself (`contract::job_env`).
pub fn is_reserved_env_name(name: &str) -> bool {
    contract::job_env::reserved_env_name(name).is_some()
}

/// Builds the Job of one operation, exactly as the Job Environment reference shapes it.
pub fn build_job(req: &JobRequest<'_>) -> BuiltJob {
    let name = job_name(req);
    let labels = job_labels(req);
    let (env, dropped_env) = main_env(req);
    let policy = req.policy;

    let main = Container {
        name: SOURCE_CONTAINER.to_owned(),
        image: Some(req.image.to_owned()),
        image_pull_policy: Some(req.pull_policy.unwrap_or_default().as_str().to_owned()),
        command: Some(vec![RUNNER_BIN.to_owned()]),
        args: Some(main_args(req, &name)),
        env: Some(env),
        // A keyless identity has no mirror: its token is a file, its cloud fields runner flags.
        env_from: req.keyless.is_none().then(|| {
            vec![EnvFromSource {
                secret_ref: Some(SecretEnvSource {
                    name: names::credential_mirror_secret_name(req.identity),
                    ..SecretEnvSource::default()
                }),
                ..EnvFromSource::default()
            }]
        }),
        resources: Some(main_resources(policy.resources.as_ref())),
        security_context: Some(main_security_context(policy.security_context.as_ref())),
        termination_message_policy: Some("File".to_owned()),
        volume_mounts: Some(vec![
            mount(VOLUME_RUNNER, RUNNER_DIR, true),
            mount(VOLUME_WORK, WORK_DIR, false),
            mount(VOLUME_TMP, TMP_DIR, false),
            mount(VOLUME_CONFIG, CONFIG_DIR, true),
            match req.keyless {
                None => mount(VOLUME_CREDS, CREDENTIALS_DIR, true),
                Some(_) => mount(VOLUME_IDENTITY, TOKEN_DIR, true),
            },
        ]),
        ..Container::default()
    };

    let init = Container {
        name: RUNNER_CONTAINER.to_owned(),
        image: Some(req.runner_image.to_owned()),
        command: Some(vec![
            "/runner".to_owned(),
            "copy".to_owned(),
            RUNNER_BIN.to_owned(),
        ]),
        resources: Some(ResourceRequirements {
            requests: Some(quantities(&[("cpu", "10m"), ("memory", "32Mi")])),
            limits: Some(quantities(&[("cpu", "100m"), ("memory", "64Mi")])),
            ..ResourceRequirements::default()
        }),
        security_context: Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            capabilities: Some(drop_all()),
            run_as_non_root: Some(true),
            run_as_user: Some(RUNNER_UID),
            read_only_root_filesystem: Some(true),
            ..SecurityContext::default()
        }),
        volume_mounts: Some(vec![mount(VOLUME_RUNNER, RUNNER_DIR, false)]),
        ..Container::default()
    };

    let image_pull_secrets: Vec<LocalObjectReference> =
        policy.image_pull_secrets.clone().unwrap_or_default();

    let pod = PodSpec {
        restart_policy: Some("Never".to_owned()),
        termination_grace_period_seconds: Some(TERMINATION_GRACE_PERIOD_SECONDS),
        service_account_name: Some(req.service_account.to_owned()),
        image_pull_secrets: (!image_pull_secrets.is_empty()).then_some(image_pull_secrets),
        security_context: Some(pod_security_context(policy.pod_security_context.as_ref())),
        init_containers: Some(vec![init]),
        containers: vec![main],
        volumes: Some(volumes(req, &name)),
        // Placement (Tuning Jobs): passed through as the policy gives it.
        node_selector: policy.node_selector.clone(),
        tolerations: policy.tolerations.clone(),
        affinity: policy.affinity.clone(),
        priority_class_name: policy.priority_class_name.clone(),
        topology_spread_constraints: policy.topology_spread_constraints.clone(),
        ..PodSpec::default()
    };

    let job = Job {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: Some(req.namespace.to_owned()),
            labels: Some(labels.clone()),
            annotations: Some(job_annotations(req)),
            owner_references: Some(vec![owner_reference(
                api::API_VERSION,
                req.kind.kind(),
                req.name,
                req.uid,
                true,
            )]),
            ..ObjectMeta::default()
        },
        spec: Some(JobSpec {
            backoff_limit: Some(0),
            active_deadline_seconds: Some(policy.active_deadline_seconds_or_default()),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    annotations: Some(BTreeMap::from([(
                        annotations::SAFE_TO_EVICT.to_owned(),
                        "false".to_owned(),
                    )])),
                    ..ObjectMeta::default()
                }),
                spec: Some(pod),
            },
            ..JobSpec::default()
        }),
        status: None,
    };
    BuiltJob { job, dropped_env }
}

/// The per-run Secret `captf-run-<job>` holding the rendered root and inputs, owned by `job`
/// (which must be the Job as the API server returned it, carrying its UID) so it is collected
/// with it.
pub fn run_secret(job: &Job, main_tf_json: &str, tfvars_json: &str) -> Secret {
    let job_name = job.metadata.name.clone().unwrap_or_default();
    let job_labels = job.metadata.labels.clone().unwrap_or_default();
    let mut secret_labels = BTreeMap::from([(labels::MANAGED.to_owned(), "true".to_owned())]);
    for key in [labels::OWNER_KIND, labels::OWNER_NAME, labels::CLUSTER_NAME] {
        if let Some(value) = job_labels.get(key) {
            secret_labels.insert(key.to_owned(), value.clone());
        }
    }
    Secret {
        metadata: ObjectMeta {
            name: Some(names::run_secret_name(&job_name)),
            namespace: job.metadata.namespace.clone(),
            labels: Some(secret_labels),
            owner_references: Some(vec![owner_reference(
                Job::API_VERSION,
                Job::KIND,
                &job_name,
                job.metadata.uid.as_deref().unwrap_or_default(),
                true,
            )]),
            ..ObjectMeta::default()
        },
        data: Some(inputs_data(main_tf_json, tfvars_json)),
        type_: Some("Opaque".to_owned()),
        ..Secret::default()
    }
}

/// What the durable inputs Secret of an object records besides the rendered files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DurableInputs<'a> {
    /// The Terraform* object's kind.
    pub kind: ObjectKind,
    /// Its namespace.
    pub namespace: &'a str,
    /// Its name.
    pub name: &'a str,
    /// Its UID (the Secret's owner).
    pub uid: &'a str,
    /// Its cluster (`cluster.x-k8s.io/cluster-name`).
    pub cluster_name: &'a str,
    /// `spec.source.image` as written (`captf.io/image`).
    pub image: &'a str,
    /// The pinned digest, once an apply succeeded (`captf.io/image-digest`).
    pub image_digest: Option<&'a str>,
    /// The TerraformClusterIdentity the inputs ran with (`captf.io/identity`).
    pub identity: &'a str,
}

/// The durable inputs Secret `captf-inputs-<c|m|mp>-<name>`: owned (not as controller, never
/// blocking deletion) by the Terraform* object and labelled to travel with it on `clusterctl
/// move`.
pub fn durable_inputs_secret(
    d: &DurableInputs<'_>,
    main_tf_json: &str,
    tfvars_json: &str,
) -> Secret {
    let mut secret_labels = owner_labels(d.kind, d.name, d.cluster_name);
    secret_labels.insert(labels::MOVE.to_owned(), String::new());
    let mut secret_annotations = BTreeMap::from([
        (annotations::IMAGE.to_owned(), d.image.to_owned()),
        (annotations::IDENTITY.to_owned(), d.identity.to_owned()),
    ]);
    if let Some(digest) = d.image_digest.filter(|s| !s.is_empty()) {
        secret_annotations.insert(annotations::IMAGE_DIGEST.to_owned(), digest.to_owned());
    }
    Secret {
        metadata: ObjectMeta {
            name: Some(names::durable_inputs_secret_name(d.kind, d.name)),
            namespace: Some(d.namespace.to_owned()),
            labels: Some(secret_labels),
            annotations: Some(secret_annotations),
            owner_references: Some(vec![owner_reference(
                api::API_VERSION,
                d.kind.kind(),
                d.name,
                d.uid,
                false,
            )]),
            ..ObjectMeta::default()
        },
        data: Some(inputs_data(main_tf_json, tfvars_json)),
        type_: Some("Opaque".to_owned()),
        ..Secret::default()
    }
}

/// `captf.io/managed=true`, owner kind, owner name (hashed when overlong) and cluster name.
fn owner_labels(kind: ObjectKind, name: &str, cluster_name: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (labels::MANAGED.to_owned(), "true".to_owned()),
        (labels::OWNER_KIND.to_owned(), kind.kind().to_owned()),
        (labels::OWNER_NAME.to_owned(), names::owner_name_label(name)),
        (labels::CLUSTER_NAME.to_owned(), cluster_name.to_owned()),
    ])
}

/// The labels of the Job and of its pod template.
fn job_labels(req: &JobRequest<'_>) -> BTreeMap<String, String> {
    let mut out = owner_labels(req.kind, req.name, req.cluster_name);
    out.insert(labels::ATTEMPT.to_owned(), req.attempt.to_string());
    out.insert(labels::OP.to_owned(), req.operation.as_str().to_owned());
    out
}

/// The Job's annotations at creation.
fn job_annotations(req: &JobRequest<'_>) -> BTreeMap<String, String> {
    let mut out = BTreeMap::from([(
        annotations::INPUTS_HASH.to_owned(),
        req.inputs_hash.to_owned(),
    )]);
    if req.drift_remediation {
        out.insert(annotations::DRIFT_REMEDIATION.to_owned(), "true".to_owned());
    }
    if let Some(plan) = non_empty(req.approved_plan) {
        out.insert(annotations::APPROVED_PLAN.to_owned(), plan.to_owned());
    }
    if let Some(value) = req.requested {
        out.insert(annotations::REQUESTED_AT.to_owned(), value.to_owned());
    }
    if let Some(restore) = req.restore {
        out.insert(
            annotations::RESTORE_SERIAL.to_owned(),
            restore.serial.to_string(),
        );
    }
    out
}

/// The backend's `labels` as an HCL object expression with sorted, quoted keys, the value of
/// `-backend-config=labels=…`: the state Secrets and lock Lease get the object's labels and the
/// `clusterctl move` label.
fn backend_labels(req: &JobRequest<'_>) -> String {
    let mut map = owner_labels(req.kind, req.name, req.cluster_name);
    map.insert(labels::MOVE.to_owned(), String::new());
    let items: Vec<String> = map
        .iter()
        .map(|(k, v)| format!("{}={}", hcl_string(k), hcl_string(v)))
        .collect();
    format!("{{{}}}", items.join(","))
}

/// `runner run` and its flags, in the documented order.
fn main_args(req: &JobRequest<'_>, job_name: &str) -> Vec<String> {
    let lock_timeout = req.policy.lock_timeout_seconds_or_default().max(0);
    let mut args = vec![
        "run".to_owned(),
        format!("--op={}", req.operation.as_str()),
        format!("--bin={RUNTIME_BIN}"),
        format!("--image={}", req.image_ref),
        format!("--module={MODULE_DIR}"),
        format!("--providers={PROVIDERS_DIR}"),
        format!("--workdir={WORK_DIR}"),
        format!("--config={CONFIG_DIR}"),
        format!("--lock-timeout={lock_timeout}s"),
        format!("--stop-timeout={STOP_TIMEOUT_SECONDS}s"),
        format!("--backend-config=secret_suffix={}", req.state_suffix),
        format!("--backend-config=namespace={}", req.namespace),
        "--backend-config=in_cluster_config=true".to_owned(),
        format!("--backend-config=labels={}", backend_labels(req)),
    ];
    if let Some(lock) = non_empty(req.force_unlock) {
        args.push(format!("--force-unlock={lock}"));
    }
    if req.guard_deletes {
        args.push("--guard-deletes".to_owned());
        args.push(format!("--inputs-hash={}", req.inputs_hash));
    }
    if let Some(hash) = non_empty(req.allow_deletes_hash) {
        args.push(format!("--allow-deletes-hash={hash}"));
    }
    if let Some(plan) = non_empty(req.expect_plan) {
        args.push(format!("--expect-plan={plan}"));
    }
    // Plan Approval "Reading the plan": a plan Job stores its plan as text for the reviewer,
    // and the approved apply stores the plan it made (it replaces status.plan when it changed)
    // and deletes it once applied.
    if req.kind == ObjectKind::Cluster
        && (req.operation == Operation::Plan || non_empty(req.expect_plan).is_some())
    {
        args.push(format!(
            "--plan-text-secret={}",
            names::plan_text_secret_name(req.kind, req.name)
        ));
        args.push(format!("--plan-text-owner={}", object_ref(req)));
    }
    if let Some(restore) = req.restore {
        args.push(format!("--restore-chunks={}", restore.chunks));
        args.push(format!("--restore-resources={}", restore.resources));
    }
    if let Some(keyless) = req.keyless {
        args.extend(keyless_args(keyless));
    }
    if req.runner_events {
        args.push(format!("--event-object={}", object_ref(req)));
        args.push(format!("--job-name={job_name}"));
    }
    args
}

/// The runner flags of a keyless identity: the token file, then each cloud's fields that are
/// set (Identities and Credentials, "Keyless identity").
fn keyless_args(keyless: &WorkloadIdentity) -> Vec<String> {
    let mut args = vec![format!(
        "--web-identity-token={TOKEN_DIR}/{TOKEN_FILE_NAME}"
    )];
    let mut flag = |name: &str, value: Option<&str>| {
        if let Some(v) = value.filter(|v| !v.is_empty()) {
            args.push(format!("--{name}={v}"));
        }
    };
    if let Some(aws) = &keyless.aws {
        flag("aws-role-arn", Some(&aws.role_arn));
        flag("aws-role-session-name", aws.role_session_name.as_deref());
    }
    if let Some(azure) = &keyless.azure {
        flag("azure-client-id", Some(&azure.client_id));
        flag("azure-tenant-id", Some(&azure.tenant_id));
        flag("azure-authority-host", azure.authority_host.as_deref());
    }
    if let Some(gcp) = &keyless.gcp {
        flag(
            "gcp-workload-identity-provider",
            Some(&gcp.workload_identity_provider),
        );
        flag("gcp-service-account", gcp.service_account_email.as_deref());
    }
    args
}

/// The object as the runner names it: `<apiVersion>/<kind>/<namespace>/<name>/<uid>`.
fn object_ref(req: &JobRequest<'_>) -> String {
    format!(
        "{}/{}/{}/{}/{}",
        api::API_VERSION,
        req.kind.kind(),
        req.namespace,
        req.name,
        req.uid
    )
}

/// The fixed environment, then `spec.jobs.env` without its `TF_*`/`KUBE_*` entries (whose names
/// are returned).
fn main_env(req: &JobRequest<'_>) -> (Vec<EnvVar>, Vec<String>) {
    let mut env = vec![
        env_var("TF_IN_AUTOMATION", "1"),
        env_var("TF_INPUT", "0"),
        env_var("HOME", WORK_DIR),
        env_var("TMPDIR", TMP_DIR),
        env_var("KUBE_NAMESPACE", req.namespace),
        env_var("CHECKPOINT_DISABLE", "1"),
    ];
    let mut dropped = Vec::new();
    for var in req.policy.env.iter().flatten() {
        if is_reserved_env_name(&var.name) {
            dropped.push(var.name.clone());
        } else {
            env.push(var.clone());
        }
    }
    (env, dropped)
}

/// `spec.jobs.resources` as a whole, else 250m CPU / 512Mi requested and a 2Gi memory limit
/// (deliberately no CPU limit).
fn main_resources(policy: Option<&ResourceRequirements>) -> ResourceRequirements {
    policy.cloned().unwrap_or_else(|| ResourceRequirements {
        requests: Some(quantities(&[("cpu", "250m"), ("memory", "512Mi")])),
        limits: Some(quantities(&[("memory", "2Gi")])),
        ..ResourceRequirements::default()
    })
}

/// The main container's security context: `spec.jobs.securityContext` field by field over the
/// defaults (no privilege escalation, every capability dropped, read-only root filesystem);
/// `capabilities`, when set, replaces the default drop list whole. `runAsNonRoot` is not
/// defaulted.
fn main_security_context(policy: Option<&SecurityContext>) -> SecurityContext {
    let mut out = policy.cloned().unwrap_or_default();
    out.allow_privilege_escalation.get_or_insert(false);
    out.capabilities.get_or_insert_with(drop_all);
    out.read_only_root_filesystem.get_or_insert(true);
    out
}

/// The pod's security context: `spec.jobs.podSecurityContext` field by field over the defaults
/// (`RuntimeDefault` seccomp, `fsGroup` 65532).
fn pod_security_context(policy: Option<&PodSecurityContext>) -> PodSecurityContext {
    let mut out = policy.cloned().unwrap_or_default();
    out.seccomp_profile.get_or_insert_with(|| SeccompProfile {
        type_: "RuntimeDefault".to_owned(),
        ..SeccompProfile::default()
    });
    out.fs_group.get_or_insert(RUNNER_UID);
    out
}

/// The pod's volumes. A restore's config volume also projects each backup chunk's `tfstate` to
/// `restore/<i>`.
fn volumes(req: &JobRequest<'_>, job_name: &str) -> Vec<Volume> {
    let empty_dir = |name: &str| Volume {
        name: name.to_owned(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Volume::default()
    };
    let run_secret = names::run_secret_name(job_name);
    let config = match req.restore {
        None => Volume {
            name: VOLUME_CONFIG.to_owned(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(run_secret),
                default_mode: Some(SECRET_FILE_MODE),
                ..SecretVolumeSource::default()
            }),
            ..Volume::default()
        },
        Some(restore) => {
            let base = names::state_backup_secret_name(req.state_suffix, restore.serial);
            let mut sources = vec![VolumeProjection {
                secret: Some(SecretProjection {
                    name: run_secret,
                    ..SecretProjection::default()
                }),
                ..VolumeProjection::default()
            }];
            for index in 0..restore.chunks {
                sources.push(VolumeProjection {
                    secret: Some(SecretProjection {
                        name: names::chunk_secret_name(&base, index as usize),
                        items: Some(vec![KeyToPath {
                            key: TFSTATE_KEY.to_owned(),
                            path: format!("{RESTORE_SUBDIR}/{index}"),
                            ..KeyToPath::default()
                        }]),
                        ..SecretProjection::default()
                    }),
                    ..VolumeProjection::default()
                });
            }
            Volume {
                name: VOLUME_CONFIG.to_owned(),
                projected: Some(ProjectedVolumeSource {
                    default_mode: Some(SECRET_FILE_MODE),
                    sources: Some(sources),
                }),
                ..Volume::default()
            }
        }
    };
    vec![
        empty_dir(VOLUME_RUNNER),
        empty_dir(VOLUME_WORK),
        empty_dir(VOLUME_TMP),
        config,
        credentials_volume(req),
    ]
}

/// The identity's credential mirror as files, or a keyless identity's projected ServiceAccount
/// token for its audience.
fn credentials_volume(req: &JobRequest<'_>) -> Volume {
    match req.keyless {
        None => Volume {
            name: VOLUME_CREDS.to_owned(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(names::credential_mirror_secret_name(req.identity)),
                default_mode: Some(SECRET_FILE_MODE),
                ..SecretVolumeSource::default()
            }),
            ..Volume::default()
        },
        Some(keyless) => Volume {
            name: VOLUME_IDENTITY.to_owned(),
            projected: Some(ProjectedVolumeSource {
                default_mode: Some(SECRET_FILE_MODE),
                sources: Some(vec![VolumeProjection {
                    service_account_token: Some(ServiceAccountTokenProjection {
                        audience: Some(keyless.audience.clone()),
                        expiration_seconds: Some(keyless.expiration_seconds_or_default()),
                        path: TOKEN_FILE_NAME.to_owned(),
                    }),
                    ..VolumeProjection::default()
                }]),
            }),
            ..Volume::default()
        },
    }
}

fn owner_reference(
    api_version: &str,
    kind: &str,
    name: &str,
    uid: &str,
    controller: bool,
) -> OwnerReference {
    OwnerReference {
        api_version: api_version.to_owned(),
        kind: kind.to_owned(),
        name: name.to_owned(),
        uid: uid.to_owned(),
        controller: Some(controller),
        block_owner_deletion: Some(controller),
    }
}

fn inputs_data(main_tf_json: &str, tfvars_json: &str) -> BTreeMap<String, ByteString> {
    BTreeMap::from([
        (
            MAIN_TF_JSON.to_owned(),
            ByteString(main_tf_json.as_bytes().to_vec()),
        ),
        (
            TFVARS_JSON.to_owned(),
            ByteString(tfvars_json.as_bytes().to_vec()),
        ),
    ])
}

fn mount(volume: &str, path: &str, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: volume.to_owned(),
        mount_path: path.to_owned(),
        read_only: read_only.then_some(true),
        ..VolumeMount::default()
    }
}

fn env_var(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value: Some(value.to_owned()),
        ..EnvVar::default()
    }
}

fn drop_all() -> Capabilities {
    Capabilities {
        drop: Some(vec!["ALL".to_owned()]),
        ..Capabilities::default()
    }
}

fn quantities(pairs: &[(&str, &str)]) -> BTreeMap<String, Quantity> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), Quantity((*v).to_owned())))
        .collect()
}

fn non_empty(value: Option<&str>) -> Option<&str> {
    value.filter(|s| !s.is_empty())
}

#[cfg(test)]
mod tests;
