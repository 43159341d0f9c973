//! The TerraformClusterIdentity status (spec: Identities and Credentials "Confirm it worked",
//! "Delete an identity"; INTERFACE-FACTS §1 `Ready` for TCI, §2 `IdentitySecretFound` /
//! `IdentitySecretNotFound`): `Ready` from the credentials Secret's existence and
//! `status.namespaces` from the mirrors that exist.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use api::constants::{annotations, conditions as ctype, events, labels, reasons};
use api::identity::{TerraformClusterIdentity, TerraformClusterIdentityStatus};
use contract::health::ConditionStatus;
use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::{Api, Resource, ResourceExt};

use crate::pass::Error;
use crate::pass::conditions::Conditions;
use crate::runtime::context::Context;
use crate::runtime::events::Outbox;

async fn reconcile_identity(
    tci: Arc<TerraformClusterIdentity>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    let name = tci.name_any();
    let status = tci.status.clone().unwrap_or_default();
    let before = serde_json::to_value(&status)?;
    let mut conds = Conditions::new(
        status.conditions.clone(),
        tci.meta().generation,
        Time(Timestamp::now()),
    );
    let (ready, reason, message) = readiness(&tci, &ctx);
    conds.set(ctype::READY, ready, reason, &message);
    let transitions = conds.transitions();
    // Identities are cluster-wide, whatever --namespace says: so are their mirrors.
    let mut namespaces: Vec<String> = ctx
        .caches
        .secrets
        .state()
        .into_iter()
        .filter(|s| {
            s.labels()
                .get(labels::MIRRORED)
                .is_some_and(|v| v == "true")
                && s.annotations().get(annotations::IDENTITY) == Some(&name)
        })
        .filter_map(|s| s.metadata.namespace.clone())
        .collect();
    namespaces.sort();
    namespaces.dedup();
    let new = TerraformClusterIdentityStatus {
        conditions: Some(conds.into_list()),
        namespaces: Some(namespaces).filter(|n| !n.is_empty()),
    };
    let after = serde_json::to_value(&new)?;
    if let Some(patch) = crate::runtime::patch::merge_patch(&before, &after) {
        let api: Api<TerraformClusterIdentity> = Api::all(ctx.client.clone());
        let body = serde_json::json!({
            "metadata": {"resourceVersion": tci.metadata.resource_version},
            "status": patch,
        });
        match api
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(body))
            .await
        {
            Ok(_) => {}
            // Written meanwhile: the newer version wakes this controller again.
            Err(e) if crate::runtime::kubeutil::is_conflict(&e) => {
                return Ok(Action::requeue(Duration::from_secs(1)));
            }
            Err(e) => return Err(e.into()),
        }
        let mut outbox = Outbox::default();
        // A keyless identity has no Secret to be found or lost.
        for t in transitions
            .into_iter()
            .filter(|t| t.reason != reasons::WORKLOAD_IDENTITY)
        {
            if t.status == "True" {
                outbox.normal(events::IDENTITY_SECRET_FOUND, t.message);
            } else {
                outbox.warning(events::IDENTITY_SECRET_NOT_FOUND, t.message);
            }
        }
        outbox.publish(&ctx, &tci.object_ref(&())).await;
    }
    // The credentials Secret and the mirrors are watched (the caches wake this controller); the
    // sync period is a backstop.
    Ok(Action::requeue(ctx.settings.sync_period))
}

/// The identity's `Ready`: its credentials Secret exists (`SecretFound`) or not
/// (`SecretNotFound`); a keyless identity is ready as written (`WorkloadIdentity`).
fn readiness(
    tci: &TerraformClusterIdentity,
    ctx: &Context,
) -> (ConditionStatus, &'static str, String) {
    if let Some(keyless) = tci.spec.keyless() {
        return (
            ConditionStatus::True,
            reasons::WORKLOAD_IDENTITY,
            format!(
                "Keyless: Jobs run as ServiceAccount {} of their namespace with a token for audience {}",
                keyless.service_account_name, keyless.audience
            ),
        );
    }
    let Some(secret_ref) = tci.spec.secret_ref.as_ref() else {
        return (
            ConditionStatus::False,
            reasons::SECRET_NOT_FOUND,
            "Neither secretRef nor workloadIdentity is set".to_owned(),
        );
    };
    let place = format!("Secret {}/{}", secret_ref.namespace, secret_ref.name);
    if ctx
        .caches
        .secret(&secret_ref.namespace, &secret_ref.name)
        .is_some()
    {
        (
            ConditionStatus::True,
            reasons::SECRET_FOUND,
            format!("{place} exists"),
        )
    } else {
        (
            ConditionStatus::False,
            reasons::SECRET_NOT_FOUND,
            format!("{place} does not exist"),
        )
    }
}

/// Runs the identity status controller until `shutdown` resolves. The caches wake an identity
/// when it changes, when a mirror of it changes, and when its credentials Secret appears,
/// changes or goes (after a `clusterctl move` an identity can arrive before its Secret).
pub async fn run(
    ctx: Arc<Context>,
    controller: Controller<TerraformClusterIdentity>,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    controller
        .graceful_shutdown_on(shutdown)
        .run(
            reconcile_identity,
            |_obj, _err, _ctx| Action::requeue(Duration::from_secs(5)),
            ctx,
        )
        .for_each(|_| async {})
        .await;
}
