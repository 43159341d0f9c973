//! Deterministic names, one test per rule (Terraform State "Secret names and the suffix", The
//! Reconcile Lifecycle "Job names and history", Secrets inventory).

use contract::names::{
    JobNameParts, MAX_JOB_NAME, MAX_OBJECT_NAME, ObjectKind, Operation, chunk_secret_name,
    cluster_lease_name, credential_mirror_secret_name, durable_inputs_secret_name, job_name,
    owner_name_label, run_lease_name, run_secret_name, state_backup_secret_name,
    state_lock_lease_name, state_secret_name, state_suffix,
};
use proptest::prelude::*;
use sha2::{Digest, Sha256};

fn sha_hex(s: &str) -> String {
    hex::encode(Sha256::digest(s.as_bytes()))
}

#[test]
fn state_suffix_is_16_hex_of_namespace_kind_name_and_the_kind_code() {
    let want = &sha_hex("team-a/TerraformMachine/prod-md-0-abcde")[..16];
    assert_eq!(
        state_suffix("team-a", ObjectKind::Machine, "prod-md-0-abcde"),
        format!("{want}-m")
    );
    assert!(state_suffix("ns", ObjectKind::Cluster, "x").ends_with("-c"));
    assert!(state_suffix("ns", ObjectKind::MachinePool, "x").ends_with("-mp"));
}

#[test]
fn state_suffix_differs_per_kind_for_the_same_name() {
    let c = state_suffix("ns", ObjectKind::Cluster, "same");
    let m = state_suffix("ns", ObjectKind::Machine, "same");
    assert_ne!(c[..16], m[..16]);
}

#[test]
fn state_and_lock_names_follow_the_backend() {
    assert_eq!(state_secret_name("abc-m"), "tfstate-default-abc-m");
    assert_eq!(state_lock_lease_name("abc-m"), "lock-tfstate-default-abc-m");
    assert_eq!(
        chunk_secret_name("tfstate-default-abc-m", 0),
        "tfstate-default-abc-m"
    );
    assert_eq!(
        chunk_secret_name("tfstate-default-abc-m", 2),
        "tfstate-default-abc-m-part-2"
    );
}

#[test]
fn lease_and_backup_names() {
    assert_eq!(run_lease_name("abc-c"), "captf-run-abc-c");
    assert_eq!(
        cluster_lease_name("team-a", "prod"),
        format!("captf-cluster-{}", &sha_hex("team-a/prod")[..16])
    );
    assert_eq!(
        state_backup_secret_name("abc-c", 42),
        "captf-state-backup-abc-c-42"
    );
}

#[test]
fn inputs_run_and_credential_secret_names() {
    assert_eq!(
        durable_inputs_secret_name(ObjectKind::Cluster, "prod"),
        "captf-inputs-c-prod"
    );
    assert_eq!(
        durable_inputs_secret_name(ObjectKind::Machine, "prod-1"),
        "captf-inputs-m-prod-1"
    );
    assert_eq!(
        durable_inputs_secret_name(ObjectKind::MachinePool, "pool"),
        "captf-inputs-mp-pool"
    );
    assert_eq!(
        run_secret_name("captf-m-x-apply-a1-abcdef"),
        "captf-run-captf-m-x-apply-a1-abcdef"
    );
    assert_eq!(credential_mirror_secret_name("aws"), "captf-creds-aws");
}

#[test]
fn overlong_secret_names_become_prefix_and_hash_within_253() {
    let long = "n".repeat(253);
    let name = durable_inputs_secret_name(ObjectKind::MachinePool, &long);
    assert_eq!(name, format!("captf-inputs-mp-{}", &sha_hex(&long)[..16]));
    assert!(name.len() <= MAX_OBJECT_NAME);
    let creds = credential_mirror_secret_name(&long);
    assert_eq!(creds, format!("captf-creds-{}", &sha_hex(&long)[..16]));
    // Exactly at the limit stays readable.
    let fits = "n".repeat(MAX_OBJECT_NAME - "captf-creds-".len());
    assert_eq!(credential_mirror_secret_name(&fits).len(), MAX_OBJECT_NAME);
    assert!(credential_mirror_secret_name(&fits).ends_with(&fits));
}

#[test]
fn owner_name_label_is_hashed_to_16_hex_when_longer_than_63() {
    assert_eq!(owner_name_label("short"), "short");
    let at_limit = "a".repeat(63);
    assert_eq!(owner_name_label(&at_limit), at_limit);
    let long = "a".repeat(64);
    assert_eq!(owner_name_label(&long), &sha_hex(&long)[..16]);
}

fn parts<'a>(
    name: &'a str,
    op: Operation,
    attempt: u32,
    tick: Option<&'a str>,
) -> JobNameParts<'a> {
    JobNameParts {
        kind: ObjectKind::Machine,
        name,
        operation: op,
        attempt,
        inputs_hash: "h2:0123",
        tick,
    }
}

#[test]
fn job_name_has_kind_name_operation_attempt_and_hash6() {
    let name = job_name(&parts("prod-md-0", Operation::Apply, 1, None));
    let hash6 = &sha_hex("h2:0123\napply\n1\n")[..6];
    assert_eq!(name, format!("captf-m-prod-md-0-apply-a1-{hash6}"));
}

#[test]
fn job_name_is_deterministic_so_a_retry_finds_the_same_job() {
    let a = job_name(&parts("x", Operation::Refresh, 2, Some("t1")));
    assert_eq!(a, job_name(&parts("x", Operation::Refresh, 2, Some("t1"))));
}

#[test]
fn job_name_hash_changes_with_inputs_operation_attempt_and_tick() {
    let base = job_name(&parts("x", Operation::Drift, 1, Some("t1")));
    assert_ne!(base, job_name(&parts("x", Operation::Drift, 1, Some("t2"))));
    assert_ne!(base, job_name(&parts("x", Operation::Drift, 2, Some("t1"))));
    let mut other = parts("x", Operation::Drift, 1, Some("t1"));
    other.inputs_hash = "h2:9999";
    assert_ne!(base[base.len() - 6..], job_name(&other)[base.len() - 6..]);
    // An apply and a drift-remediation apply of the same inputs and attempt differ by tick.
    assert_ne!(
        job_name(&parts("x", Operation::Apply, 1, None)),
        job_name(&parts("x", Operation::Apply, 1, Some("remediation-1")))
    );
}

#[test]
fn overlong_job_name_replaces_the_object_name_with_a_hash() {
    let long = "a-very-long-machine-deployment-name-abcde-xyz12";
    let name = job_name(&parts(long, Operation::Restore, 12, None));
    assert!(name.len() <= MAX_JOB_NAME, "{name}");
    assert!(name.starts_with(&format!("captf-m-{}-restore-a12-", &sha_hex(long)[..16])));
    // A name that just fits is kept.
    let fits = "n".repeat(MAX_JOB_NAME - "captf-m--apply-a1-abcdef".len());
    let kept = job_name(&parts(&fits, Operation::Apply, 1, None));
    assert_eq!(kept.len(), MAX_JOB_NAME);
    assert!(kept.contains(&fits));
}

proptest! {
    #[test]
    fn names_stay_within_their_limits(
        ns in "[a-z0-9-]{1,63}",
        name in "[a-z0-9][a-z0-9.-]{0,252}",
        attempt in any::<u32>(),
        op in 0usize..6,
    ) {
        for kind in [ObjectKind::Cluster, ObjectKind::Machine, ObjectKind::MachinePool] {
            let suffix = state_suffix(&ns, kind, &name);
            prop_assert!(!suffix.rsplit('-').next().unwrap_or("").chars().all(|c| c.is_ascii_digit()));
            prop_assert!(durable_inputs_secret_name(kind, &name).len() <= MAX_OBJECT_NAME);
            let job = job_name(&JobNameParts {
                kind, name: &name, operation: Operation::ALL[op], attempt,
                inputs_hash: "h2:x", tick: None,
            });
            prop_assert!(job.len() <= MAX_JOB_NAME, "{}", job);
            prop_assert!(run_secret_name(&job).len() <= MAX_OBJECT_NAME);
        }
        prop_assert!(owner_name_label(&name).len() <= 63);
        prop_assert!(credential_mirror_secret_name(&name).len() <= MAX_OBJECT_NAME);
    }
}
