//! One AdmissionReview (v1) in, one out. Every body gets an answer: a request that cannot be read
//! is refused as invalid, an object that cannot be decoded as its kind is denied naming the
//! problem, and a request for another kind than the path validates is denied. Nothing here
//! panics or logs object contents; [`Outcome`] carries only names and rule labels.

use api::cluster::TerraformClusterTemplate;
use api::identity::TerraformClusterIdentity;
use api::machine::TerraformMachineTemplate;
use api::machinepool::TerraformMachinePoolTemplate;
use api::{TerraformCluster, TerraformMachine, TerraformMachinePool};
use kube::core::DynamicObject;
use kube::core::TypeMeta;
use kube::core::admission::{
    AdmissionRequest, AdmissionResponse, AdmissionReview, META_API_VERSION_V1, META_KIND, Operation,
};

use crate::kinds::{Change, Kind, RequestInfo, Validate};
use crate::lookups::Lookups;
use crate::rules::{Rule, Violation};

/// How long the checks of one request may take: below the API server's 10-second webhook timeout,
/// so a slow lookup ends in a denial with a message rather than a timed-out call.
pub const CHECK_DEADLINE: std::time::Duration = std::time::Duration::from_secs(8);

/// What happened to one request, for metrics and logs (no object contents, no messages).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The kind the path validates.
    pub kind: Kind,
    /// `create`, `update`, `delete`, `connect`, or `unknown` when the request was unreadable.
    pub operation: &'static str,
    /// The request's UID (empty when unreadable).
    pub uid: String,
    /// The object's namespace, if any.
    pub namespace: Option<String>,
    /// The object's name.
    pub name: String,
    /// The requesting user.
    pub user: String,
    /// Whether the request is a dry run.
    pub dry_run: bool,
    /// The rules broken; empty when allowed.
    pub rules: Vec<Rule>,
    /// The rules the request was warned about (allowed, with an admission warning).
    pub warnings: Vec<Rule>,
}

impl Outcome {
    /// Whether the request was allowed.
    pub fn allowed(&self) -> bool {
        self.rules.is_empty()
    }
}

fn operation_label(op: &Operation) -> &'static str {
    match op {
        Operation::Create => "create",
        Operation::Update => "update",
        Operation::Delete => "delete",
        Operation::Connect => "connect",
    }
}

/// The response envelope the API server expects (`admissionReviewVersions: [v1]`).
fn v1(mut review: AdmissionReview<DynamicObject>) -> AdmissionReview<DynamicObject> {
    review.types = TypeMeta {
        api_version: META_API_VERSION_V1.to_owned(),
        kind: META_KIND.to_owned(),
    };
    if let Some(r) = review.response.as_mut() {
        r.types = review.types.clone();
    }
    review
}

/// Answers one AdmissionReview body for the path of `kind`.
pub async fn review<L: Lookups>(
    kind: Kind,
    body: &[u8],
    lookups: &L,
) -> (AdmissionReview<DynamicObject>, Outcome) {
    let (request, violations) = match parse(kind, body) {
        Parsed::Request(request) => {
            let violations = match tokio::time::timeout(
                CHECK_DEADLINE,
                decide(kind, &request, lookups),
            )
            .await
            {
                Ok(v) => v,
                Err(_) => vec![Violation::new(
                    Rule::Lookup,
                    format!(
                        "could not finish the checks within {} seconds (the API server is slow to answer); try again",
                        CHECK_DEADLINE.as_secs()
                    ),
                )],
            };
            (request, violations)
        }
        Parsed::UndecodableObject(request, violation) => (request, vec![violation]),
        Parsed::Unreadable { uid, message } => {
            let outcome = Outcome {
                kind,
                operation: "unknown",
                uid: uid.clone(),
                namespace: None,
                name: String::new(),
                user: String::new(),
                dry_run: false,
                rules: vec![Rule::Request],
                warnings: Vec::new(),
            };
            let mut response = AdmissionResponse::invalid(message);
            response.uid = uid;
            return (v1(response.into_review()), outcome);
        }
    };
    let outcome = Outcome {
        kind,
        operation: operation_label(&request.operation),
        uid: request.uid.clone(),
        namespace: request.namespace.clone(),
        name: request.name.clone(),
        user: request.user_info.username.clone().unwrap_or_default(),
        dry_run: request.dry_run,
        rules: violations
            .iter()
            .filter(|v| !v.warning)
            .map(|v| v.rule)
            .collect(),
        warnings: violations
            .iter()
            .filter(|v| v.warning)
            .map(|v| v.rule)
            .collect(),
    };
    let mut response = AdmissionResponse::from(&*request);
    let (warnings, denials): (Vec<Violation>, Vec<Violation>) =
        violations.into_iter().partition(|v| v.warning);
    if !denials.is_empty() {
        let message = denials
            .iter()
            .map(|v| v.message.as_str())
            .collect::<Vec<_>>()
            .join("; ");
        response = response.deny(message);
    }
    if !warnings.is_empty() {
        response.warnings = Some(warnings.into_iter().map(|v| v.message).collect());
    }
    (v1(response.into_review()), outcome)
}

enum Parsed {
    Request(Box<AdmissionRequest<DynamicObject>>),
    /// The envelope reads, but an object in it is not even a Kubernetes object.
    UndecodableObject(Box<AdmissionRequest<DynamicObject>>, Violation),
    Unreadable {
        uid: String,
        message: String,
    },
}

fn parse(kind: Kind, body: &[u8]) -> Parsed {
    let error = match serde_json::from_slice::<AdmissionReview<DynamicObject>>(body) {
        Ok(review) => {
            return match review.try_into() {
                Ok(request) => Parsed::Request(Box::new(request)),
                Err(_) => Parsed::Unreadable {
                    uid: String::new(),
                    message: "the AdmissionReview carries no request".to_owned(),
                },
            };
        }
        Err(e) => e,
    };
    // Salvage the envelope without its objects, so the denial carries the request's UID.
    let mut value: serde_json::Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(_) => {
            return Parsed::Unreadable {
                uid: String::new(),
                message: format!("the body is not an AdmissionReview: {error}"),
            };
        }
    };
    let uid = value
        .pointer("/request/uid")
        .and_then(serde_json::Value::as_str)
        .unwrap_or_default()
        .to_owned();
    if let Some(request) = value
        .get_mut("request")
        .and_then(serde_json::Value::as_object_mut)
    {
        request.remove("object");
        request.remove("oldObject");
    }
    match serde_json::from_value::<AdmissionReview<DynamicObject>>(value).map(TryInto::try_into) {
        Ok(Ok(request)) => Parsed::UndecodableObject(
            Box::new(request),
            Violation::new(
                Rule::Decode,
                format!(
                    "the object in the request is not a valid {}: {error}",
                    kind.name()
                ),
            ),
        ),
        _ => Parsed::Unreadable {
            uid,
            message: format!("the body is not an AdmissionReview: {error}"),
        },
    }
}

/// Every violation of `request` against the rules of `kind`.
pub async fn decide<L: Lookups>(
    kind: Kind,
    request: &AdmissionRequest<DynamicObject>,
    lookups: &L,
) -> Vec<Violation> {
    if request.kind.group != api::GROUP
        || request.kind.kind != kind.name()
        || request.kind.version != api::VERSION
    {
        return vec![Violation::new(
            Rule::Request,
            format!(
                "this endpoint validates {}/{} {}, not {}/{} {}: check the webhook configuration",
                api::GROUP,
                api::VERSION,
                kind.name(),
                request.kind.group,
                request.kind.version,
                request.kind.kind
            ),
        )];
    }
    match kind {
        Kind::Cluster => dispatch::<TerraformCluster, L>(request, lookups).await,
        Kind::ClusterTemplate => dispatch::<TerraformClusterTemplate, L>(request, lookups).await,
        Kind::Machine => dispatch::<TerraformMachine, L>(request, lookups).await,
        Kind::MachineTemplate => dispatch::<TerraformMachineTemplate, L>(request, lookups).await,
        Kind::MachinePool => dispatch::<TerraformMachinePool, L>(request, lookups).await,
        Kind::MachinePoolTemplate => {
            dispatch::<TerraformMachinePoolTemplate, L>(request, lookups).await
        }
        Kind::ClusterIdentity => dispatch::<TerraformClusterIdentity, L>(request, lookups).await,
    }
}

fn decode<T: Validate>(object: Option<&DynamicObject>, which: &str) -> Result<T, Violation> {
    let Some(object) = object else {
        return Err(Violation::new(
            Rule::Request,
            format!("the request carries no {which}"),
        ));
    };
    object.clone().try_parse::<T>().map_err(|e| {
        Violation::new(
            Rule::Decode,
            format!("the {which} is not a valid {}: {e}", T::KIND.name()),
        )
    })
}

async fn dispatch<T: Validate, L: Lookups>(
    request: &AdmissionRequest<DynamicObject>,
    lookups: &L,
) -> Vec<Violation> {
    let manager = lookups.manager_username();
    let info = RequestInfo {
        user: &request.user_info,
        dry_run: request.dry_run,
        manager: &manager,
    };
    match request.operation {
        Operation::Connect => Vec::new(),
        Operation::Delete if !T::KIND.validates_delete() => Vec::new(),
        // Metadata only: a stored object that no longer decodes never blocks its own deletion.
        Operation::Delete => match request.old_object.as_ref() {
            Some(old) => T::validate_delete(old, lookups).await,
            None => vec![Violation::new(
                Rule::Request,
                "the request carries no oldObject",
            )],
        },
        Operation::Create => match decode::<T>(request.object.as_ref(), "object") {
            Ok(new) => T::validate(Change::Create(&new), info, lookups).await,
            Err(v) => vec![v],
        },
        Operation::Update => update::<T, L>(request, info, lookups).await,
    }
}

/// An UPDATE. When the stored object no longer decodes as its kind (after a schema change), the
/// rules comparing old and new cannot run: a change that leaves everything but `metadata` and
/// `status` as it was (labels, annotations, finalizer removal) is allowed; otherwise the fields
/// the kind fixes must be unchanged and the new object, which must decode, is checked as if
/// created.
async fn update<T: Validate, L: Lookups>(
    request: &AdmissionRequest<DynamicObject>,
    info: RequestInfo<'_>,
    lookups: &L,
) -> Vec<Violation> {
    let new = decode::<T>(request.object.as_ref(), "object");
    let old = decode::<T>(request.old_object.as_ref(), "oldObject");
    match (new, old) {
        (Ok(new), Ok(old)) => {
            T::validate(
                Change::Update {
                    new: &new,
                    old: &old,
                },
                info,
                lookups,
            )
            .await
        }
        (new, Err(stored)) if stored.rule == Rule::Decode => {
            let (Some(new_raw), Some(old_raw)) = (&request.object, &request.old_object) else {
                return vec![stored];
            };
            if only_metadata_changed(&new_raw.data, &old_raw.data) {
                return Vec::new();
            }
            let new = match new {
                Ok(new) => new,
                Err(v) => return vec![v],
            };
            let fixed: Vec<Violation> = T::fixed_while_undecodable(&old_raw.data)
                .into_iter()
                .filter(|p| new_raw.data.pointer(p) != old_raw.data.pointer(p))
                .map(|p| {
                    Violation::new(
                        Rule::Decode,
                        format!(
                            "the stored {} no longer decodes, so {} cannot be checked for an allowed change and may not change: {}",
                            T::KIND.name(),
                            p.trim_start_matches('/').replace('/', "."),
                            stored.message
                        ),
                    )
                })
                .collect();
            if !fixed.is_empty() {
                return fixed;
            }
            T::validate(Change::Create(&new), info, lookups).await
        }
        (Err(v), _) | (_, Err(v)) => vec![v],
    }
}

/// Whether two objects differ only in `metadata` and `status`.
fn only_metadata_changed(new: &serde_json::Value, old: &serde_json::Value) -> bool {
    rest(new) == rest(old)
}

/// An object's top-level fields other than `metadata` and `status`.
fn rest(v: &serde_json::Value) -> Option<std::collections::BTreeMap<&String, &serde_json::Value>> {
    v.as_object().map(|o| {
        o.iter()
            .filter(|(k, _)| !matches!(k.as_str(), "metadata" | "status"))
            .collect()
    })
}
