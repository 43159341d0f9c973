//! Fuzzing (issue 19): arbitrary AdmissionReview bodies through the real router: every request
//! gets an HTTP 200 AdmissionReview whose response is allowed, or denied with a message; nothing
//! panics. Bodies range from random bytes and random JSON to well-formed reviews of every kind
//! and operation whose objects are Terraform* shapes with random values in every field; the seven
//! kinds are `Kind::ALL`, each posted to every kind's path.
//!
//! `CAPTF_FUZZ_CASES` sets the cases per property (default 1024; `make fuzz` runs 10 000).

mod common;
#[path = "../../contract/tests/fuzz_support/mod.rs"]
mod fuzz_support;

use std::sync::OnceLock;

use axum::Router;
use axum::body::Body;
use http::{Request, StatusCode};
use http_body_util_shim::collect;
use proptest::prelude::*;
use serde_json::{Value, json};
use tower::ServiceExt as _;
use webhook::fake::{StaticLookups, World};
use webhook::kinds::Kind;
use webhook::metrics::Metrics;
use webhook::server::{AppState, webhook_router};

mod http_body_util_shim {
    use axum::body::Body;

    /// The whole body of a response.
    pub async fn collect(body: Body) -> Vec<u8> {
        axum::body::to_bytes(body, usize::MAX)
            .await
            .map(|b| b.to_vec())
            .unwrap_or_default()
    }
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime")
    })
}

fn router() -> Router {
    let mut world = World::default();
    world
        .secret_readers
        .insert(("alice".into(), "creds".into(), "aws".into()));
    webhook_router(AppState::new(StaticLookups::new(world), Metrics::new()))
}

/// Posts `body` to `kind`'s path and checks the answer's shape; returns the response JSON.
fn post(kind: Kind, body: Vec<u8>) -> Result<Value, TestCaseError> {
    runtime().block_on(async {
        let request = Request::post(kind.path())
            .header("content-type", "application/json")
            .body(Body::from(body))
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let response = router()
            .oneshot(request)
            .await
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(response.status(), StatusCode::OK);
        let bytes = collect(response.into_body()).await;
        let review: Value =
            serde_json::from_slice(&bytes).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(review["apiVersion"].as_str(), Some("admission.k8s.io/v1"));
        prop_assert_eq!(review["kind"].as_str(), Some("AdmissionReview"));
        let response = &review["response"];
        let allowed = response["allowed"].as_bool();
        prop_assert!(allowed.is_some(), "no allowed field: {review}");
        if allowed == Some(false) {
            let message = response["status"]["message"].as_str().unwrap_or_default();
            prop_assert!(!message.is_empty(), "a denial without a message: {review}");
        }
        Ok(response.clone())
    })
}

fn any_kind() -> impl Strategy<Value = Kind> {
    prop::sample::select(Kind::ALL.to_vec())
}

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        "[a-zA-Z0-9_:/@.\\-]{0,40}".prop_map(Value::from),
        ".{0,20}".prop_map(Value::from),
        Just(json!("TF_LOG")),
        Just(json!("ghcr.io/example/module:v1")),
        Just(json!(0)),
        Just(json!(-1)),
        Just(json!(true)),
    ]
}

fn any_json() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(4, 64, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map("[a-zA-Z_]{1,12}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Field paths of the seven kinds, so random values land where the rules look.
const FIELDS: &[&str] = &[
    "/spec/source/image",
    "/spec/source/imagePullPolicy",
    "/spec/identityRef",
    "/spec/identityRef/name",
    "/spec/variables",
    "/spec/variablesFrom",
    "/spec/jobs",
    "/spec/jobs/securityContext",
    "/spec/jobs/securityContext/privileged",
    "/spec/jobs/securityContext/capabilities",
    "/spec/jobs/env",
    "/spec/jobs/lockTimeoutSeconds",
    "/spec/jobs/activeDeadlineSeconds",
    "/spec/defaults",
    "/spec/defaults/jobs",
    "/spec/defaults/drift",
    "/spec/drift",
    "/spec/drift/intervalSeconds",
    "/spec/membershipRefreshIntervalSeconds",
    "/spec/controlPlaneEndpoint",
    "/spec/providerID",
    "/spec/remediation",
    "/spec/template",
    "/spec/template/spec",
    "/spec/template/spec/source/image",
    "/spec/template/spec/jobs",
    "/spec/template/spec/variables",
    "/spec/template/metadata",
    "/spec/secretRef",
    "/spec/secretRef/name",
    "/spec/allowedNamespaces",
    "/status/namespaces",
    "/metadata/ownerReferences",
    "/metadata/labels",
    "/metadata/annotations",
    "/metadata/name",
    "/metadata",
    "/spec",
];

fn base_object(kind: Kind) -> Value {
    match kind {
        Kind::Cluster => common::cluster("c", "ns"),
        Kind::Machine => common::machine("m", "ns"),
        Kind::MachinePool => common::pool("p", "ns"),
        Kind::ClusterIdentity => common::identity("aws", "creds", "aws"),
        t => common::template(t, "t", "ns"),
    }
}

fn mutated_object(kind: Kind) -> impl Strategy<Value = Value> {
    prop::collection::vec((prop::sample::select(FIELDS.to_vec()), any_json()), 0..5).prop_map(
        move |edits| {
            let mut obj = base_object(kind);
            for (field, value) in edits {
                set_lenient(&mut obj, field, value);
            }
            obj
        },
    )
}

/// Like `common::set`, but a non-object on the path is replaced by an object.
fn set_lenient(obj: &mut Value, pointer: &str, value: Value) {
    let parts: Vec<&str> = pointer.trim_start_matches('/').split('/').collect();
    let mut cur = obj;
    for (i, part) in parts.iter().enumerate() {
        if !cur.is_object() {
            *cur = json!({});
        }
        let Some(map) = cur.as_object_mut() else {
            return;
        };
        if i + 1 == parts.len() {
            map.insert((*part).to_owned(), value);
            return;
        }
        cur = map.entry((*part).to_owned()).or_insert_with(|| json!({}));
    }
}

fn operation() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec!["CREATE", "UPDATE", "DELETE", "CONNECT"])
}

proptest! {
    #![proptest_config(fuzz_support::config_or(1024))]

    #[test]
    fn random_bytes_get_an_answer(kind in any_kind(), body in prop::collection::vec(any::<u8>(), 0..512)) {
        post(kind, body)?;
    }

    #[test]
    fn random_json_gets_an_answer(kind in any_kind(), body in any_json()) {
        post(kind, serde_json::to_vec(&body).unwrap_or_default())?;
    }

    #[test]
    fn random_review_envelopes_get_an_answer(kind in any_kind(), request in any_json(), review_kind in leaf()) {
        let body = json!({"apiVersion": "admission.k8s.io/v1", "kind": review_kind, "request": request});
        post(kind, serde_json::to_vec(&body).unwrap_or_default())?;
    }

    #[test]
    fn reviews_of_every_kind_with_random_fields_get_an_answer(
        kind in any_kind(),
        body_kind in any_kind(),
        op in operation(),
        new in any_kind().prop_flat_map(mutated_object),
        old in any_kind().prop_flat_map(mutated_object),
        same_kind_objects in any::<bool>(),
        dry_run in any::<bool>(),
        user in prop::sample::select(vec!["alice", "bob", ""]),
    ) {
        // Mostly objects of the body's own kind; sometimes anything at all.
        let (new, old) = if same_kind_objects {
            let fresh = base_object(body_kind);
            let mut n = fresh.clone();
            let mut o = fresh;
            for (src, dst) in [(&new, &mut n), (&old, &mut o)] {
                if let Some(spec) = src.get("spec") {
                    set_lenient(dst, "/spec", spec.clone());
                }
            }
            (n, o)
        } else {
            (new, old)
        };
        let body = common::review(body_kind, op, Some(&new), Some(&old), user, dry_run);
        let response = post(kind, body)?;
        prop_assert_eq!(response["uid"].as_str(), Some("0d6c5b0e-1111-2222-3333-444455556666"));
    }
}
