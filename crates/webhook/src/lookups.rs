//! What a decision needs from the API server, behind one trait so the rules stay pure and tests
//! need no cluster: a SubjectAccessReview for the requester, the owning Machine and its Cluster,
//! and the objects that may resolve to an identity. [`KubeLookups`] is the real implementation;
//! [`crate::fake::StaticLookups`] answers from memory.
//!
//! Errors say what could not be read, never what an object contains.

use std::future::Future;

use api::capi::{Cluster, ClusterSpec, ContractVersionedObjectReference, Machine};
use api::cluster::{ClusterDefaults, TerraformClusterSpec};
use api::machine::TerraformMachineSpec;
use api::machinepool::TerraformMachinePoolSpec;
use api::shared::IdentityReference;
use api::workload::WorkspaceSpec;
use api::{TerraformCluster, TerraformMachine, TerraformMachinePool};
use k8s_openapi::api::authentication::v1::UserInfo;
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{ApiResource, DynamicObject, ListParams, ObjectMeta, PostParams};
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

    /// Whether `user` may `create` `serviceaccounts/token` for the ServiceAccount `name` in
    /// `namespace` (`""`: in every namespace).
    fn may_create_token(
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

    /// The user name the manager authenticates as (`system:serviceaccount:<ns>:<name>` of its
    /// ServiceAccount): the only user that may write a TerraformMachine's `spec.providerID` the
    /// first time. Configuration, not a read.
    fn manager_username(&self) -> String {
        default_manager_username()
    }
}

/// The manager's user name in the default installation (`captf-system/captf-controller-manager`).
pub fn default_manager_username() -> String {
    contract::names::service_account_username(
        contract::names::PROVIDER_NAMESPACE,
        contract::names::MANAGER_SERVICE_ACCOUNT,
    )
}

/// [`Lookups`] against the API server.
#[derive(Clone)]
pub struct KubeLookups {
    client: Client,
    manager: String,
}

impl std::fmt::Debug for KubeLookups {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeLookups").finish_non_exhaustive()
    }
}

impl KubeLookups {
    /// Lookups through `client`, with the default manager user name.
    pub fn new(client: Client) -> Self {
        Self {
            client,
            manager: default_manager_username(),
        }
    }

    /// The same lookups, for a manager that authenticates as `username`.
    #[must_use]
    pub fn with_manager_username(mut self, username: impl Into<String>) -> Self {
        self.manager = username.into();
        self
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

impl KubeLookups {
    /// A SubjectAccessReview: may `user` `verb` the core-group `(resource, subresource)` named
    /// `name` in `namespace` (`""`: in every namespace)?
    async fn may(
        &self,
        user: &UserInfo,
        verb: &str,
        (resource, subresource): (&str, Option<&str>),
        namespace: &str,
        name: &str,
    ) -> Result<bool, LookupError> {
        let spec = SubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                verb: Some(verb.to_owned()),
                group: Some(String::new()),
                version: Some("v1".into()),
                resource: Some(resource.to_owned()),
                subresource: subresource.map(str::to_owned),
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
}

impl Lookups for KubeLookups {
    fn manager_username(&self) -> String {
        self.manager.clone()
    }

    async fn may_get_secret(
        &self,
        user: &UserInfo,
        namespace: &str,
        name: &str,
    ) -> Result<bool, LookupError> {
        self.may(user, "get", ("secrets", None), namespace, name)
            .await
    }

    async fn may_create_token(
        &self,
        user: &UserInfo,
        namespace: &str,
        name: &str,
    ) -> Result<bool, LookupError> {
        self.may(
            user,
            "create",
            ("serviceaccounts", Some("token")),
            namespace,
            name,
        )
        .await
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
        let all = |ar: ApiResource| Api::<DynamicObject>::all_with(self.client.clone(), &ar);
        let (clusters, machines, pools, capi_clusters) = tokio::try_join!(
            list_paged(
                all(ApiResource::erase::<TerraformCluster>(&())),
                INVENTORY_PAGE,
                "listing TerraformClusters",
                |o| Some(slim_cluster(o)),
            ),
            list_paged(
                all(ApiResource::erase::<TerraformMachine>(&())),
                INVENTORY_PAGE,
                "listing TerraformMachines",
                |o| Some(slim_machine(o)),
            ),
            list_paged(
                all(ApiResource::erase::<TerraformMachinePool>(&())),
                INVENTORY_PAGE,
                "listing TerraformMachinePools",
                |o| Some(slim_pool(o)),
            ),
            list_paged(
                all(ApiResource::erase::<Cluster>(&())),
                INVENTORY_PAGE,
                "listing Clusters",
                slim_capi_cluster,
            ),
        )?;
        Ok(Inventory {
            clusters: clusters.items,
            machines: machines.items,
            pools: pools.items,
            capi_clusters: capi_clusters.items,
        })
    }
}

/// Objects per page when listing what may use an identity: each page is a bounded response, so
/// neither the API server nor the webhook ever holds a whole large cluster's objects at once.
pub const INVENTORY_PAGE: u32 = 500;

/// What a paged list kept.
#[derive(Debug)]
pub struct Paged<T> {
    /// The kept items, in list order.
    pub items: Vec<T>,
    /// How many pages were read.
    pub pages: usize,
}

/// Lists every object of `api`, `page` at a time (the API server's `limit` and `continue`),
/// keeping of each only what `keep` returns, before the next page is read.
pub async fn list_paged<K, T>(
    api: Api<K>,
    page: u32,
    what: &str,
    mut keep: impl FnMut(K) -> Option<T>,
) -> Result<Paged<T>, LookupError>
where
    K: Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
    let mut out = Paged {
        items: Vec::new(),
        pages: 0,
    };
    let mut token: Option<String> = None;
    loop {
        let mut lp = ListParams::default().limit(page);
        if let Some(t) = token.take() {
            lp = lp.continue_token(&t);
        }
        let list = api
            .list(&lp)
            .await
            .map_err(|e| LookupError::new(what, &e))?;
        out.pages += 1;
        token = list.metadata.continue_.filter(|t| !t.is_empty());
        out.items
            .extend(list.items.into_iter().filter_map(&mut keep));
        if token.is_none() {
            return Ok(out);
        }
    }
}

/// Name, namespace and the labels identity resolution reads.
fn slim_meta(meta: ObjectMeta) -> ObjectMeta {
    let labels = meta.labels.and_then(|mut l| {
        l.remove(api::constants::labels::CLUSTER_NAME)
            .map(|c| [(api::constants::labels::CLUSTER_NAME.to_owned(), c)].into())
    });
    ObjectMeta {
        name: meta.name,
        namespace: meta.namespace,
        labels,
        ..ObjectMeta::default()
    }
}

/// The identity a raw object names at `pointer` (`/spec/identityRef`), read leniently: objects
/// are listed untyped, so one stored object that no longer decodes as its kind cannot make the
/// whole list unreadable.
fn identity_at(object: &DynamicObject, pointer: &str) -> Option<IdentityReference> {
    let name = object.data.pointer(pointer)?.get("name")?.as_str()?;
    Some(IdentityReference {
        name: name.to_owned(),
    })
}

/// A TerraformCluster reduced to its identity references.
fn slim_cluster(o: DynamicObject) -> TerraformCluster {
    let mut spec = TerraformClusterSpec {
        workspace: slim_workspace(&o),
        ..TerraformClusterSpec::default()
    };
    spec.defaults =
        identity_at(&o, "/spec/defaults/identityRef").map(|identity_ref| ClusterDefaults {
            identity_ref: Some(identity_ref),
            ..ClusterDefaults::default()
        });
    TerraformCluster {
        metadata: slim_meta(o.metadata),
        spec,
        status: None,
    }
}

/// The workload spec reduced to its identity reference.
fn slim_workspace(o: &DynamicObject) -> WorkspaceSpec {
    WorkspaceSpec {
        identity_ref: identity_at(o, "/spec/identityRef"),
        ..WorkspaceSpec::default()
    }
}

/// A TerraformMachine reduced to its identity reference and cluster label.
fn slim_machine(o: DynamicObject) -> TerraformMachine {
    let spec = TerraformMachineSpec {
        workspace: slim_workspace(&o),
        ..TerraformMachineSpec::default()
    };
    TerraformMachine {
        metadata: slim_meta(o.metadata),
        spec,
        status: None,
    }
}

/// A TerraformMachinePool reduced to its identity reference and cluster label.
fn slim_pool(o: DynamicObject) -> TerraformMachinePool {
    let spec = TerraformMachinePoolSpec {
        workspace: slim_workspace(&o),
        ..TerraformMachinePoolSpec::default()
    };
    TerraformMachinePool {
        metadata: slim_meta(o.metadata),
        spec,
        status: None,
    }
}

/// A Cluster API Cluster backed by a TerraformCluster, reduced to that reference; others dropped.
fn slim_capi_cluster(o: DynamicObject) -> Option<Cluster> {
    let infra = o.data.pointer("/spec/infrastructureRef")?;
    let field = |f: &str| infra.get(f).and_then(serde_json::Value::as_str);
    if field("apiGroup") != Some(api::GROUP) || field("kind") != Some("TerraformCluster") {
        return None;
    }
    let mut slim = Cluster::new(
        o.metadata.name.as_deref().unwrap_or_default(),
        ClusterSpec {
            infrastructure_ref: Some(ContractVersionedObjectReference {
                api_group: api::GROUP.to_owned(),
                kind: "TerraformCluster".to_owned(),
                name: field("name")?.to_owned(),
            }),
            ..ClusterSpec::default()
        },
    );
    slim.metadata.namespace = o.metadata.namespace;
    Some(slim)
}
