//! The TerraformMachineTemplate controller (spec: Machine Role "Autoscale-from-zero", Image
//! Contract "OCI labels", The Kinds "Templates"; INTERFACE-FACTS §1 `CapacityResolved`, §2
//! `CapacityResolved` and `ImageInspectFailed`, §3 `captf_image_inspect_errors_total`, §4
//! `--terraformmachinetemplate-concurrency`).
//!
//! For each template it reads the module image's config — the manifest (through an index, for
//! the manager's platform) and the config blob, never a layer — with the credentials of the pull
//! Secrets named in `spec.template.spec.jobs.imagePullSecrets`, and copies the labels
//! `io.captf.capacity` and `io.captf.node-info` into `status.capacity` and `status.nodeInfo`
//! (see [`contract::capacity`]). An image is read again only when `spec.template.spec.source.image`
//! changes, or, after a failed read, with the per-object error backoff.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use api::constants::{conditions as ctype, events, reasons};
use api::machine::{TerraformMachineTemplate, TerraformMachineTemplateStatus};
use contract::capacity::{self, Capacity};
use contract::health::ConditionStatus;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::watcher;
use kube::{Api, Resource, ResourceExt};
use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::manifest::ImageIndexEntry;
use oci_client::secrets::RegistryAuth;
use tracing::debug;

use crate::pass::Error;
use crate::pass::conditions::Conditions;
use crate::runtime::backoff::ErrorBackoff;
use crate::runtime::context::Context;
use crate::runtime::events::Outbox;

/// Why an image could not be read: the `reason` label of `captf_image_inspect_errors_total`
/// and the message of `CapacityResolved=False/ImageInspectFailed`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InspectError {
    /// `pull_secret` (a named pull Secret is missing or malformed), `reference` (the image
    /// reference does not parse), `unauthorized`, `not_found` or `registry` (anything else).
    pub kind: &'static str,
    /// What failed; never a credential.
    pub message: String,
}

/// The metric reason of a label that is present but invalid.
pub const LABEL_INVALID: &str = "label_invalid";

/// What reading the image gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The image's config labels.
    Labels(BTreeMap<String, String>),
    /// The image could not be read.
    Failed(InspectError),
}

/// Whether a template's image must be read on this pass: its condition is missing or for an
/// older generation, its status came from another image, or the last read failed.
pub fn needs_inspect(tmt: &TerraformMachineTemplate) -> bool {
    let image = &tmt.spec.template.spec.workspace.source.image;
    let Some(status) = &tmt.status else {
        return true;
    };
    let cond = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == ctype::CAPACITY_RESOLVED);
    let Some(cond) = cond else { return true };
    cond.reason == reasons::IMAGE_INSPECT_FAILED
        || cond.observed_generation != tmt.meta().generation
        || status.capacity_source.as_ref().map(|s| &s.image) != Some(image)
}

/// The status a read gives, from the status before it: the condition, and the capacity,
/// node info and source image all together or not at all (a bad label writes none of them; a
/// failed read keeps what an earlier read of the same image resolved).
pub fn next_status(
    before: &TerraformMachineTemplateStatus,
    generation: Option<i64>,
    image: &str,
    outcome: &Outcome,
    now: Time,
) -> Result<TerraformMachineTemplateStatus, serde_json::Error> {
    let mut conds = Conditions::new(before.conditions.clone(), generation, now);
    let mut status = before.clone();
    let source = Some(api::machine::CapacitySource {
        image: image.to_owned(),
    });
    match outcome {
        Outcome::Failed(e) => {
            conds.set(
                ctype::CAPACITY_RESOLVED,
                ConditionStatus::False,
                reasons::IMAGE_INSPECT_FAILED,
                &format!("Reading the config of image {image}: {}", e.message),
            );
            if status.capacity_source != source {
                status.capacity = None;
                status.node_info = None;
                status.capacity_source = None;
            }
        }
        Outcome::Labels(labels) => match capacity::resolve(labels) {
            Err(e) => {
                conds.set(
                    ctype::CAPACITY_RESOLVED,
                    ConditionStatus::False,
                    reasons::CAPACITY_LABEL_INVALID,
                    &format!(
                        "Image {image}: {e}; status.capacity and status.nodeInfo are left unset"
                    ),
                );
                status.capacity = None;
                status.node_info = None;
                status.capacity_source = source;
            }
            Ok(Capacity::NotDeclared) => {
                conds.set(
                    ctype::CAPACITY_RESOLVED,
                    ConditionStatus::True,
                    reasons::CAPACITY_NOT_DECLARED,
                    &format!(
                        "Image {image} has neither {} nor {}",
                        capacity::CAPACITY_LABEL,
                        capacity::NODE_INFO_LABEL
                    ),
                );
                status.capacity = None;
                status.node_info = None;
                status.capacity_source = source;
            }
            Ok(Capacity::Resolved {
                capacity,
                node_info,
            }) => {
                let declared: Vec<&str> = [
                    capacity.as_ref().map(|_| capacity::CAPACITY_LABEL),
                    node_info.as_ref().map(|_| capacity::NODE_INFO_LABEL),
                ]
                .into_iter()
                .flatten()
                .collect();
                conds.set(
                    ctype::CAPACITY_RESOLVED,
                    ConditionStatus::True,
                    reasons::CAPACITY_RESOLVED,
                    &format!("Resolved from {} of image {image}", declared.join(" and ")),
                );
                status.capacity = capacity.map(|c| {
                    c.into_iter()
                        .map(|(k, v)| {
                            (
                                k,
                                k8s_openapi::apimachinery::pkg::api::resource::Quantity(v),
                            )
                        })
                        .collect()
                });
                status.node_info = node_info
                    .map(|n| {
                        serde_json::from_value(serde_json::json!({
                            "architecture": n.architecture,
                            "operatingSystem": n.operating_system,
                        }))
                    })
                    .transpose()?;
                status.capacity_source = source;
            }
        },
    }
    status.conditions = Some(conds.into_list());
    Ok(status)
}

/// The events and metric of a pass that went from `before` to `after`: `CapacityResolved` when
/// the capacity or node info changed, `ImageInspectFailed` when a read newly failed (or failed
/// differently), and one count of `captf_image_inspect_errors_total` per new failure.
pub fn announce(
    before: &TerraformMachineTemplateStatus,
    after: &TerraformMachineTemplateStatus,
    outcome: &Outcome,
) -> (Outbox, Option<&'static str>) {
    let mut outbox = Outbox::default();
    let cond = |s: &TerraformMachineTemplateStatus| {
        s.conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == ctype::CAPACITY_RESOLVED)
            .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
    };
    let (old, new) = (cond(before), cond(after));
    let newly = old != new;
    let mut metric = None;
    match outcome {
        Outcome::Failed(e) if newly => {
            if let Some((_, _, message)) = &new {
                outbox.warning(events::IMAGE_INSPECT_FAILED, message.clone());
            }
            metric = Some(e.kind);
        }
        Outcome::Labels(_) if newly && new.as_ref().is_some_and(|c| c.0 == "False") => {
            metric = Some(LABEL_INVALID);
        }
        _ => {}
    }
    if (before.capacity != after.capacity || before.node_info != after.node_info)
        && new.as_ref().is_some_and(|c| c.0 == "True")
    {
        let capacity = after
            .capacity
            .iter()
            .flatten()
            .map(|(k, v)| format!("{k}={}", v.0))
            .collect::<Vec<_>>()
            .join(", ");
        let node_info = after.node_info.as_ref().map_or_else(
            || "none".to_owned(),
            |n| serde_json::to_string(n).unwrap_or_default(),
        );
        let capacity = if capacity.is_empty() {
            "none".to_owned()
        } else {
            capacity
        };
        outbox.normal(
            events::CAPACITY_RESOLVED,
            format!("Capacity {capacity}; node info {node_info}"),
        );
    }
    (outbox, metric)
}

/// Picks the manifest of an index for the manager's own platform, else linux/amd64, else the
/// first image (capacity labels are the same on every platform of an image).
fn platform(manifests: &[ImageIndexEntry]) -> Option<String> {
    oci_client::client::current_platform_resolver(manifests)
        .or_else(|| oci_client::client::linux_amd64_resolver(manifests))
        .or_else(|| {
            manifests
                .iter()
                .find(|m| {
                    m.platform
                        .as_ref()
                        .is_none_or(|p| p.os.to_string() != "unknown")
                })
                .map(|m| m.digest.clone())
        })
}

/// The credentials for `reference` from the pull Secrets `names` in `namespace`: the first
/// Secret with a matching entry wins; a missing or malformed Secret is an error.
async fn registry_auth(
    client: &kube::Client,
    namespace: &str,
    names: &[String],
    reference: &oci_client::Reference,
) -> Result<RegistryAuth, InspectError> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    for name in names {
        let secret = secrets.get_opt(name).await.map_err(|e| InspectError {
            kind: "pull_secret",
            message: format!("reading pull Secret {name}: {e}"),
        })?;
        let Some(secret) = secret else {
            return Err(InspectError {
                kind: "pull_secret",
                message: format!("pull Secret {name} does not exist"),
            });
        };
        let data = secret.data.unwrap_or_default();
        let Some(config) = data
            .get(".dockerconfigjson")
            .or_else(|| data.get(".dockercfg"))
        else {
            return Err(InspectError {
                kind: "pull_secret",
                message: format!("pull Secret {name} has neither .dockerconfigjson nor .dockercfg"),
            });
        };
        let found = contract::registry_auth::credentials_for(
            &config.0,
            reference.registry(),
            reference.repository(),
        )
        .map_err(|e| InspectError {
            kind: "pull_secret",
            message: format!("pull Secret {name}: {e}"),
        })?;
        if let Some(c) = found {
            return Ok(RegistryAuth::Basic(c.username, c.password));
        }
    }
    Ok(RegistryAuth::Anonymous)
}

fn classify(e: &oci_client::errors::OciDistributionError) -> &'static str {
    use oci_client::errors::OciDistributionError as E;
    match e {
        E::AuthenticationFailure(_)
        | E::UnauthorizedError { .. }
        | E::ServerError {
            code: 401 | 403, ..
        } => "unauthorized",
        E::ImageManifestNotFoundError(_) | E::ServerError { code: 404, .. } => "not_found",
        E::RegistryError { envelope, .. } => {
            use oci_client::errors::OciErrorCode as C;
            match envelope.errors.first().map(|e| &e.code) {
                Some(C::Unauthorized | C::Denied) => "unauthorized",
                Some(C::ManifestUnknown | C::NameUnknown | C::NotFound | C::BlobUnknown) => {
                    "not_found"
                }
                _ => "registry",
            }
        }
        _ => "registry",
    }
}

/// Reads the labels of `image`'s config: the manifest (resolving an index) and the config blob.
pub async fn image_labels(
    client: &kube::Client,
    namespace: &str,
    pull_secrets: &[String],
    image: &str,
) -> Outcome {
    match read_labels(client, namespace, pull_secrets, image).await {
        Ok(labels) => Outcome::Labels(labels),
        Err(e) => Outcome::Failed(e),
    }
}

async fn read_labels(
    client: &kube::Client,
    namespace: &str,
    pull_secrets: &[String],
    image: &str,
) -> Result<BTreeMap<String, String>, InspectError> {
    let reference: oci_client::Reference = image.parse().map_err(|e| InspectError {
        kind: "reference",
        message: format!("not an image reference: {e}"),
    })?;
    let auth = registry_auth(client, namespace, pull_secrets, &reference).await?;
    // One crypto provider for the process (ring); an error means one is already installed.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let registry = reference.resolve_registry().to_owned();
    let protocol = if contract::image_ref::is_loopback_registry(&registry) {
        ClientProtocol::HttpsExcept(vec![registry])
    } else {
        ClientProtocol::Https
    };
    let config = ClientConfig {
        protocol,
        connect_timeout: Some(Duration::from_secs(10)),
        read_timeout: Some(Duration::from_secs(30)),
        platform_resolver: Some(Box::new(platform)),
        ..Default::default()
    };
    // reqwest panics when the system has no CA certificates at all: an error, not a crash.
    let oci = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        oci_client::Client::try_from(config)
    }))
    .map_err(|_| InspectError {
        kind: "registry",
        message: "cannot set up an HTTPS client (no CA certificates?)".to_owned(),
    })?
    .map_err(|e| InspectError {
        kind: "registry",
        message: format!("cannot set up an HTTPS client: {e}"),
    })?;
    let (_manifest, _digest, config) = oci
        .pull_manifest_and_config(&reference, &auth)
        .await
        .map_err(|e| InspectError {
            kind: classify(&e),
            message: e.to_string(),
        })?;
    let config: serde_json::Value = serde_json::from_str(&config).map_err(|e| InspectError {
        kind: "registry",
        message: format!("the image config is not JSON: {e}"),
    })?;
    let labels = config
        .pointer("/config/Labels")
        .and_then(serde_json::Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_owned())))
                .collect()
        })
        .unwrap_or_default();
    Ok(labels)
}

async fn reconcile_template(
    tmt: Arc<TerraformMachineTemplate>,
    ctx: Arc<Context>,
    backoff: &ErrorBackoff,
) -> Result<Action, Error> {
    let uid = tmt.metadata.uid.clone().unwrap_or_default();
    if !needs_inspect(&tmt) {
        backoff.succeeded(&uid);
        return Ok(Action::await_change());
    }
    let ns = tmt.namespace().unwrap_or_default();
    let spec = &tmt.spec.template.spec.workspace;
    let image = spec.source.image.clone();
    let pull_secrets: Vec<String> = spec
        .jobs
        .as_ref()
        .and_then(|j| j.image_pull_secrets.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|r| r.name)
        .filter(|n| !n.is_empty())
        .collect();
    let outcome = image_labels(&ctx.client, &ns, &pull_secrets, &image).await;
    debug!(template = %tmt.name_any(), image, failed = matches!(outcome, Outcome::Failed(_)), "image inspected");
    let before = tmt.status.clone().unwrap_or_default();
    let after = next_status(
        &before,
        tmt.meta().generation,
        &image,
        &outcome,
        Time(Timestamp::now()),
    )?;
    let patch = crate::runtime::patch::merge_patch(
        &serde_json::to_value(&before)?,
        &serde_json::to_value(&after)?,
    );
    if let Some(patch) = patch {
        let api: Api<TerraformMachineTemplate> = Api::namespaced(ctx.client.clone(), &ns);
        let body = serde_json::json!({
            "metadata": {"resourceVersion": tmt.metadata.resource_version},
            "status": patch,
        });
        match api
            .patch_status(
                &tmt.name_any(),
                &PatchParams::default(),
                &Patch::Merge(body),
            )
            .await
        {
            Ok(_) => {}
            // Written meanwhile: the newer version wakes this controller again.
            Err(e) if crate::runtime::kubeutil::is_conflict(&e) => {
                return Ok(Action::requeue(Duration::from_secs(1)));
            }
            Err(e) => return Err(e.into()),
        }
        let (outbox, metric) = announce(&before, &after, &outcome);
        if let Some(reason) = metric {
            ctx.metrics.image_inspect_error(reason);
        }
        outbox.publish(&ctx, &tmt.object_ref(&())).await;
    }
    Ok(match outcome {
        Outcome::Failed(_) => Action::requeue(backoff.failed(&uid, ctx.settings.sync_period)),
        Outcome::Labels(_) => {
            backoff.succeeded(&uid);
            Action::await_change()
        }
    })
}

/// Runs the TerraformMachineTemplate controller until `shutdown` resolves: its own watch of the
/// templates (in `--namespace`, with `--watch-filter`), `--terraformmachinetemplate-concurrency`
/// passes at once.
pub async fn run(ctx: Arc<Context>, shutdown: impl Future<Output = ()> + Send + Sync + 'static) {
    let api: Api<TerraformMachineTemplate> = match &ctx.settings.namespace {
        Some(ns) => Api::namespaced(ctx.client.clone(), ns),
        None => Api::all(ctx.client.clone()),
    };
    let mut config = watcher::Config::default();
    if let Some(filter) = &ctx.settings.watch_filter {
        config = config.labels(&format!(
            "{}={filter}",
            api::constants::labels::WATCH_FILTER
        ));
    }
    let backoff = ErrorBackoff::default();
    let on_error = backoff.clone();
    Controller::new(api, config)
        .with_config(ControllerConfig::default().concurrency(ctx.settings.template_concurrency))
        .graceful_shutdown_on(shutdown)
        .run(
            move |tmt, ctx| {
                let backoff = backoff.clone();
                async move { reconcile_template(tmt, ctx, &backoff).await }
            },
            move |tmt, _err, ctx| {
                let uid = tmt.metadata.uid.clone().unwrap_or_default();
                Action::requeue(on_error.failed(&uid, ctx.settings.sync_period))
            },
            ctx,
        )
        .for_each(|_| async {})
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::machine::{TerraformMachineTemplateResource, TerraformMachineTemplateSpec};

    fn at(secs: i64) -> Time {
        Time(Timestamp::from_second(secs).expect("time"))
    }

    fn tmt(
        image: &str,
        status: Option<TerraformMachineTemplateStatus>,
    ) -> TerraformMachineTemplate {
        let mut spec = TerraformMachineTemplateSpec {
            template: TerraformMachineTemplateResource::default(),
        };
        spec.template.spec.workspace.source.image = image.to_owned();
        let mut t = TerraformMachineTemplate::new("t", spec);
        t.metadata.generation = Some(1);
        t.status = status;
        t
    }

    fn labels(pairs: &[(&str, &str)]) -> Outcome {
        Outcome::Labels(
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        )
    }

    fn reason(s: &TerraformMachineTemplateStatus) -> (String, String) {
        let c = s
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == ctype::CAPACITY_RESOLVED)
            .expect("condition");
        (c.status.clone(), c.reason.clone())
    }

    /// The status of a first read of image `r/i:1`.
    fn first(outcome: &Outcome) -> TerraformMachineTemplateStatus {
        next_status(
            &TerraformMachineTemplateStatus::default(),
            Some(1),
            "r/i:1",
            outcome,
            at(1),
        )
        .expect("status")
    }

    const CAP: &str = r#"{"cpu":"2","memory":"4Gi"}"#;
    const INFO: &str = r#"{"architecture":"amd64","operatingSystem":"linux"}"#;

    #[test]
    fn resolved_labels_fill_capacity_node_info_and_source() {
        let out = labels(&[
            (capacity::CAPACITY_LABEL, CAP),
            (capacity::NODE_INFO_LABEL, INFO),
        ]);
        let s = first(&out);
        assert_eq!(
            reason(&s),
            ("True".into(), reasons::CAPACITY_RESOLVED.into())
        );
        let cap = s.capacity.clone().expect("capacity");
        assert_eq!(cap["memory"].0, "4Gi");
        assert_eq!(
            serde_json::to_value(s.node_info.as_ref().expect("info")).expect("json"),
            serde_json::json!({"architecture": "amd64", "operatingSystem": "linux"})
        );
        assert_eq!(s.capacity_source.as_ref().expect("source").image, "r/i:1");
        let (outbox, metric) = announce(&TerraformMachineTemplateStatus::default(), &s, &out);
        assert_eq!(metric, None);
        assert_eq!(outbox.events()[0].reason, events::CAPACITY_RESOLVED);
        // Nothing to do again for the same image and generation.
        assert!(!needs_inspect(&tmt("r/i:1", Some(s.clone()))));
        assert!(needs_inspect(&tmt("r/i:2", Some(s))));
    }

    #[test]
    fn a_bad_label_writes_nothing_partial() {
        let good = labels(&[
            (capacity::CAPACITY_LABEL, CAP),
            (capacity::NODE_INFO_LABEL, INFO),
        ]);
        let before = first(&good);
        let bad = labels(&[
            (capacity::CAPACITY_LABEL, CAP),
            (capacity::NODE_INFO_LABEL, "{x"),
        ]);
        let s = next_status(&before, Some(1), "r/i:2", &bad, at(2)).expect("status");
        assert_eq!(
            reason(&s),
            ("False".into(), reasons::CAPACITY_LABEL_INVALID.into())
        );
        assert_eq!((s.capacity.as_ref(), s.node_info.as_ref()), (None, None));
        let message = &s.conditions.as_ref().expect("c")[0].message;
        assert!(message.contains(capacity::NODE_INFO_LABEL), "{message}");
        let (outbox, metric) = announce(&before, &s, &bad);
        assert_eq!(metric, Some(LABEL_INVALID));
        assert!(outbox.events().is_empty());
        assert!(
            !needs_inspect(&tmt("r/i:2", Some(s))),
            "the same bad image is not read again"
        );
    }

    #[test]
    fn a_failed_read_keeps_what_the_same_image_resolved_and_is_retried() {
        let good = labels(&[(capacity::CAPACITY_LABEL, CAP)]);
        let before = first(&good);
        let failed = Outcome::Failed(InspectError {
            kind: "unauthorized",
            message: "401".into(),
        });
        let same = next_status(&before, Some(1), "r/i:1", &failed, at(2)).expect("s");
        assert_eq!(reason(&same).1, reasons::IMAGE_INSPECT_FAILED);
        assert_eq!(same.capacity, before.capacity);
        let other = next_status(&before, Some(1), "r/i:2", &failed, at(2)).expect("s");
        assert_eq!((other.capacity, other.capacity_source), (None, None));
        let (outbox, metric) = announce(&before, &same, &failed);
        assert_eq!(metric, Some("unauthorized"));
        assert_eq!(outbox.events()[0].reason, events::IMAGE_INSPECT_FAILED);
        assert!(needs_inspect(&tmt("r/i:1", Some(same.clone()))));
        // The same failure again is no new event and no new count.
        let again = next_status(&same, Some(1), "r/i:1", &failed, at(3)).expect("s");
        let (outbox, metric) = announce(&same, &again, &failed);
        assert!(outbox.events().is_empty() && metric.is_none());
    }

    #[test]
    fn no_labels_is_not_declared_and_clears() {
        let good = labels(&[(capacity::CAPACITY_LABEL, CAP)]);
        let before = first(&good);
        let none = labels(&[]);
        let s = next_status(&before, Some(1), "r/i:2", &none, at(2)).expect("s");
        assert_eq!(
            reason(&s),
            ("True".into(), reasons::CAPACITY_NOT_DECLARED.into())
        );
        assert_eq!(s.capacity, None);
        assert_eq!(s.capacity_source.expect("source").image, "r/i:2");
    }
}
