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
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ListParams, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Api, Resource, ResourceExt};

use crate::conditions::Conditions;
use crate::context::Context;
use crate::events::Outbox;
use crate::kubeutil::get_opt;
use crate::reconcile::Error;

async fn reconcile_identity(
    tci: Arc<TerraformClusterIdentity>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    let name = tci.name_any();
    let secret_ref = &tci.spec.secret_ref;
    let sources: Api<Secret> = Api::namespaced(ctx.client.clone(), &secret_ref.namespace);
    let found = get_opt(&sources, &secret_ref.name).await?.is_some();
    let status = tci.status.clone().unwrap_or_default();
    let before = serde_json::to_value(&status)?;
    let mut conds = Conditions::new(
        status.conditions.clone(),
        tci.meta().generation,
        Time(Timestamp::now()),
    );
    if found {
        conds.set(
            ctype::READY,
            ConditionStatus::True,
            reasons::SECRET_FOUND,
            &format!("Secret {}/{} exists", secret_ref.namespace, secret_ref.name),
        );
    } else {
        conds.set(
            ctype::READY,
            ConditionStatus::False,
            reasons::SECRET_NOT_FOUND,
            &format!(
                "Secret {}/{} does not exist",
                secret_ref.namespace, secret_ref.name
            ),
        );
    }
    let transitions = conds.transitions().to_vec();
    // Identities are cluster-wide, whatever --namespace says: so are their mirrors.
    let mirrors: Api<Secret> = Api::all(ctx.client.clone());
    let lp = ListParams::default().labels(&format!("{}=true", labels::MIRRORED));
    let mut namespaces: Vec<String> = mirrors
        .list_metadata(&lp)
        .await?
        .items
        .into_iter()
        .filter(|s| {
            s.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(annotations::IDENTITY))
                == Some(&name)
        })
        .filter_map(|s| s.metadata.namespace)
        .collect();
    namespaces.sort();
    namespaces.dedup();
    let new = TerraformClusterIdentityStatus {
        conditions: Some(conds.into_list()),
        namespaces: Some(namespaces).filter(|n| !n.is_empty()),
    };
    let after = serde_json::to_value(&new)?;
    if let Some(patch) = crate::patch::merge_patch(&before, &after) {
        let api: Api<TerraformClusterIdentity> = Api::all(ctx.client.clone());
        api.patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({ "status": patch })),
        )
        .await?;
        let mut outbox = Outbox::default();
        for t in transitions {
            if t.status == "True" {
                outbox.normal(events::IDENTITY_SECRET_FOUND, t.message);
            } else {
                outbox.warning(events::IDENTITY_SECRET_NOT_FOUND, t.message);
            }
        }
        outbox.publish(&ctx, &tci.object_ref(&())).await;
    }
    // The source Secret cannot be watched (any namespace, any name): look again each sync period.
    Ok(Action::requeue(ctx.settings.sync_period))
}

/// Runs the identity status controller until `shutdown` resolves.
pub async fn run(
    ctx: Arc<Context>,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) -> anyhow::Result<()> {
    let api: Api<TerraformClusterIdentity> = Api::all(ctx.client.clone());
    let mirrors: Api<Secret> = Api::all(ctx.client.clone());
    Controller::new(api, watcher::Config::default())
        .watches(
            mirrors,
            watcher::Config::default().labels(&format!("{}=true", labels::MIRRORED)),
            |s: Secret| {
                s.annotations()
                    .get(annotations::IDENTITY)
                    .map(|n| ObjectRef::<TerraformClusterIdentity>::new(n))
            },
        )
        .graceful_shutdown_on(shutdown)
        .run(
            reconcile_identity,
            |_obj, _err, _ctx| Action::requeue(Duration::from_secs(5)),
            ctx,
        )
        .for_each(|_| async {})
        .await;
    Ok(())
}
