//! The plan as text for its reviewer (Plan Approval, "Reading the plan"): with
//! `--plan-text-secret`, the output of `show -no-color` on the saved plan (sensitive values
//! redacted by the runtime, the identity's credential values by the runner) is stored, capped at
//! [`contract::plan::PLAN_TEXT_MAX_BYTES`], in a Secret owned by the object
//! (`--plan-text-owner`). The next plan replaces it; an apply that succeeds deletes it, the plan
//! being consumed.

use std::collections::BTreeMap;

use api::constants::{annotations, labels};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::Api;
use kube::api::{DeleteParams, PostParams};

use crate::cli::EventObject;

/// Where the plan text goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The Secret's name.
    pub secret: String,
    /// The object it belongs to (its namespace is the Secret's).
    pub owner: EventObject,
}

/// The Secret holding `text` (already capped) for the plan `plan_hash` of `inputs_hash`.
pub fn secret(target: &Target, plan_hash: &str, inputs_hash: &str, text: &str) -> Secret {
    let owner = &target.owner;
    let mut annotations =
        BTreeMap::from([(annotations::PLAN_HASH.to_owned(), plan_hash.to_owned())]);
    if !inputs_hash.is_empty() {
        annotations.insert(annotations::INPUTS_HASH.to_owned(), inputs_hash.to_owned());
    }
    Secret {
        metadata: ObjectMeta {
            name: Some(target.secret.clone()),
            namespace: Some(owner.namespace.clone()),
            labels: Some(BTreeMap::from([
                (labels::MANAGED.to_owned(), "true".to_owned()),
                (labels::OWNER_KIND.to_owned(), owner.kind.clone()),
                (
                    labels::OWNER_NAME.to_owned(),
                    contract::names::owner_name_label(&owner.name),
                ),
            ])),
            annotations: Some(annotations),
            owner_references: Some(vec![OwnerReference {
                api_version: owner.api_version.clone(),
                kind: owner.kind.clone(),
                name: owner.name.clone(),
                uid: owner.uid.clone(),
                controller: Some(false),
                block_owner_deletion: Some(false),
            }]),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([(
            contract::plan::PLAN_TEXT_KEY.to_owned(),
            ByteString(text.as_bytes().to_vec()),
        )])),
        type_: Some("Opaque".to_owned()),
        ..Secret::default()
    }
}

/// Creates the Secret, or replaces the one an earlier plan left (the runner's role may create,
/// get and update Secrets, not patch them).
pub async fn store(client: kube::Client, want: Secret) -> Result<(), String> {
    let ns = want.metadata.namespace.clone().unwrap_or_default();
    let name = want.metadata.name.clone().unwrap_or_default();
    let api: Api<Secret> = Api::namespaced(client, &ns);
    match api.create(&PostParams::default(), &want).await {
        Ok(_) => return Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => return Err(format!("creating Secret {name}: {e}")),
    }
    let current = api
        .get(&name)
        .await
        .map_err(|e| format!("reading Secret {name}: {e}"))?;
    let replacement = Secret {
        metadata: ObjectMeta {
            resource_version: current.metadata.resource_version,
            ..want.metadata
        },
        ..want
    };
    api.replace(&name, &PostParams::default(), &replacement)
        .await
        .map(|_| ())
        .map_err(|e| format!("replacing Secret {name}: {e}"))
}

/// Deletes the Secret; one that is gone already is fine.
pub async fn delete(client: kube::Client, target: &Target) -> Result<(), String> {
    let api: Api<Secret> = Api::namespaced(client, &target.owner.namespace);
    match api.delete(&target.secret, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(format!("deleting Secret {}: {e}", target.secret)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target() -> Target {
        Target {
            secret: "captf-plan-c-prod".into(),
            owner: EventObject {
                api_version: "infrastructure.cluster.x-k8s.io/v1alpha1".into(),
                kind: "TerraformCluster".into(),
                namespace: "team-a".into(),
                name: "prod".into(),
                uid: "0b7e-uid".into(),
            },
        }
    }

    #[test]
    fn the_secret_is_the_objects_and_names_the_plan() {
        let s = secret(
            &target(),
            "p1:abc",
            "h2:def",
            "  + resource \"x\" \"y\" {}\n",
        );
        let meta = &s.metadata;
        assert_eq!(meta.name.as_deref(), Some("captf-plan-c-prod"));
        assert_eq!(meta.namespace.as_deref(), Some("team-a"));
        let owner = &meta.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
            ("TerraformCluster", "prod", "0b7e-uid")
        );
        let ann = meta.annotations.as_ref().unwrap();
        assert_eq!(ann[annotations::PLAN_HASH], "p1:abc");
        assert_eq!(ann[annotations::INPUTS_HASH], "h2:def");
        assert_eq!(meta.labels.as_ref().unwrap()[labels::OWNER_NAME], "prod");
        assert_eq!(
            s.data.as_ref().unwrap()[contract::plan::PLAN_TEXT_KEY].0,
            b"  + resource \"x\" \"y\" {}\n"
        );
    }
}
