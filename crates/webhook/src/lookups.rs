//! What a decision needs from the API server, behind one trait so the rules stay pure and tests
//! need no cluster: a SubjectAccessReview for the requester, the owning Machine and its Cluster,
//! and the objects that may resolve to an identity. [`KubeLookups`] is the real implementation;
//! [`crate::fake::StaticLookups`] answers from memory.
//!
//! Errors say what could not be read, never what an object contains.

use std::future::Future;

use api::capi::{Cluster, Machine};
use api::{TerraformCluster, TerraformMachine, TerraformMachinePool};
use k8s_openapi::api::authentication::v1::UserInfo;
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};

use crate::rules::identity::Inventory;

/// A lookup that failed; the request is refused (fail closed) with this message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what}: {reason}")]
pub struct LookupError {
    /// What was being read.
    pub what: String,
    /// Why it failed (the API server's answer).
    pub reason: String,
}

impl LookupError {
    /// A failure reading `what`.
    pub fn new(what: impl Into<String>, reason: &impl ToString) -> Self {
        Self {
            what: what.into(),
            reason: reason.to_string(),
        }
    }
}

/// Reads the webhook's decisions depend on.
pub trait Lookups: Send + Sync + 'static {
    /// Whether `user` may `get` the Secret `namespace/name`.
    fn may_get_secret(
        &self,
        user: &UserInfo,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<bool, LookupError>> + Send;

    /// The Machine `namespace/name`, if it exists.
    fn machine(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<Machine>, LookupError>> + Send;

    /// The Cluster `namespace/name`, if it exists.
    fn cluster(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<Cluster>, LookupError>> + Send;

    /// Every object that may resolve to an identity, cluster-wide.
    fn inventory(&self) -> impl Future<Output = Result<Inventory, LookupError>> + Send;
}

/// [`Lookups`] against the API server.
#[derive(Clone)]
pub struct KubeLookups {
    client: Client,
}

impl std::fmt::Debug for KubeLookups {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeLookups").finish_non_exhaustive()
    }
}

impl KubeLookups {
    /// Lookups through `client`.
    pub fn new(client: Client) -> Self {
        Self { client }
    }

    /// The client.
    pub fn client(&self) -> &Client {
        &self.client
    }
}

/// A SubjectAccessReview spec for `user`, keeping every identity attribute the API server sent.
pub fn review_for(user: &UserInfo) -> SubjectAccessReviewSpec {
    SubjectAccessReviewSpec {
        user: user.username.clone(),
        groups: user.groups.clone(),
        uid: user.uid.clone(),
        extra: user.extra.clone(),
        ..SubjectAccessReviewSpec::default()
    }
}

/// Whether `spec` is allowed, asked of the API server.
pub async fn subject_access(
    client: &Client,
    spec: SubjectAccessReviewSpec,
) -> Result<bool, kube::Error> {
    let api: Api<SubjectAccessReview> = Api::all(client.clone());
    let review = SubjectAccessReview {
        spec,
        ..SubjectAccessReview::default()
    };
    let answer = api.create(&PostParams::default(), &review).await?;
    Ok(answer.status.is_some_and(|s| s.allowed))
}

/// A review of `get` on a non-resource URL (the diagnostics endpoint's authorization).
pub fn non_resource_get(user: &UserInfo, path: &str) -> SubjectAccessReviewSpec {
    non_resource_review(user, path, "get")
}

/// A review of `verb` (the lower-cased HTTP method) on a non-resource URL `path`.
pub fn non_resource_review(user: &UserInfo, path: &str, verb: &str) -> SubjectAccessReviewSpec {
    SubjectAccessReviewSpec {
        non_resource_attributes: Some(NonResourceAttributes {
            path: Some(path.to_owned()),
            verb: Some(verb.to_owned()),
        }),
        ..review_for(user)
    }
}

fn not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

impl Lookups for KubeLookups {
    async fn may_get_secret(
        &self,
        user: &UserInfo,
        namespace: &str,
        name: &str,
    ) -> Result<bool, LookupError> {
        let spec = SubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                verb: Some("get".into()),
                group: Some(String::new()),
                version: Some("v1".into()),
                resource: Some("secrets".into()),
                namespace: Some(namespace.to_owned()),
                name: Some(name.to_owned()),
                ..ResourceAttributes::default()
            }),
            ..review_for(user)
        };
        subject_access(&self.client, spec)
            .await
            .map_err(|e| LookupError::new("creating a SubjectAccessReview", &e))
    }

    async fn machine(&self, namespace: &str, name: &str) -> Result<Option<Machine>, LookupError> {
        let api: Api<Machine> = Api::namespaced(self.client.clone(), namespace);
        match api.get(name).await {
            Ok(m) => Ok(Some(m)),
            Err(e) if not_found(&e) => Ok(None),
            Err(e) => Err(LookupError::new(
                format!("reading Machine {namespace}/{name}"),
                &e,
            )),
        }
    }

    async fn cluster(&self, namespace: &str, name: &str) -> Result<Option<Cluster>, LookupError> {
        let api: Api<Cluster> = Api::namespaced(self.client.clone(), namespace);
        match api.get(name).await {
            Ok(c) => Ok(Some(c)),
            Err(e) if not_found(&e) => Ok(None),
            Err(e) => Err(LookupError::new(
                format!("reading Cluster {namespace}/{name}"),
                &e,
            )),
        }
    }

    async fn inventory(&self) -> Result<Inventory, LookupError> {
        let lp = ListParams::default();
        let c = self.client.clone();
        let (clusters, machines, pools, capi_clusters) = tokio::try_join!(
            async {
                Api::<TerraformCluster>::all(c.clone())
                    .list(&lp)
                    .await
                    .map_err(|e| LookupError::new("listing TerraformClusters", &e))
            },
            async {
                Api::<TerraformMachine>::all(c.clone())
                    .list(&lp)
                    .await
                    .map_err(|e| LookupError::new("listing TerraformMachines", &e))
            },
            async {
                Api::<TerraformMachinePool>::all(c.clone())
                    .list(&lp)
                    .await
                    .map_err(|e| LookupError::new("listing TerraformMachinePools", &e))
            },
            async {
                Api::<Cluster>::all(c.clone())
                    .list(&lp)
                    .await
                    .map_err(|e| LookupError::new("listing Clusters", &e))
            },
        )?;
        Ok(Inventory {
            clusters: clusters.items,
            machines: machines.items,
            pools: pools.items,
            capi_clusters: capi_clusters.items,
        })
    }
}
