//! [`StaticLookups`]: a [`Lookups`] that answers from memory, for unit tests, the proptest
//! target and the latency benchmark (which must measure the webhook, not an API server).

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, PoisonError};

use api::capi::{Cluster, Machine};
use k8s_openapi::api::authentication::v1::UserInfo;
use kube::ResourceExt;

use crate::lookups::{LookupError, Lookups};
use crate::rules::identity::Inventory;

/// The in-memory world a [`StaticLookups`] answers from.
#[derive(Debug, Default, Clone)]
pub struct World {
    /// `(user, namespace, name)` triples allowed to `get` a Secret.
    pub secret_readers: BTreeSet<(String, String, String)>,
    /// `(user, namespace, ServiceAccount)` triples allowed to create tokens (`""` namespace:
    /// every namespace, which also allows each one).
    pub token_creators: BTreeSet<(String, String, String)>,
    /// Machines.
    pub machines: Vec<Machine>,
    /// Clusters.
    pub clusters: Vec<Cluster>,
    /// What resolves to identities.
    pub inventory: Inventory,
    /// When set, every lookup fails with this reason.
    pub fail: Option<String>,
    /// The manager's user name, when not the default one.
    pub manager: Option<String>,
}

/// A [`Lookups`] over a shared, mutable [`World`].
#[derive(Debug, Default, Clone)]
pub struct StaticLookups {
    world: Arc<Mutex<World>>,
}

impl StaticLookups {
    /// Lookups over `world`.
    pub fn new(world: World) -> Self {
        Self {
            world: Arc::new(Mutex::new(world)),
        }
    }

    /// Changes the world.
    pub fn update(&self, f: impl FnOnce(&mut World)) {
        f(&mut self.world.lock().unwrap_or_else(PoisonError::into_inner));
    }

    fn read<T>(&self, what: &str, f: impl FnOnce(&World) -> T) -> Result<T, LookupError> {
        let world = self.world.lock().unwrap_or_else(PoisonError::into_inner);
        match &world.fail {
            Some(reason) => Err(LookupError::new(what, reason)),
            None => Ok(f(&world)),
        }
    }
}

fn find<K: ResourceExt + Clone>(items: &[K], namespace: &str, name: &str) -> Option<K> {
    items
        .iter()
        .find(|o| o.namespace().as_deref() == Some(namespace) && o.name_any() == name)
        .cloned()
}

impl Lookups for StaticLookups {
    async fn may_get_secret(
        &self,
        user: &UserInfo,
        namespace: &str,
        name: &str,
    ) -> Result<bool, LookupError> {
        let key = (
            user.username.clone().unwrap_or_default(),
            namespace.to_owned(),
            name.to_owned(),
        );
        self.read("creating a SubjectAccessReview", |w| {
            w.secret_readers.contains(&key)
        })
    }

    async fn may_create_token(
        &self,
        user: &UserInfo,
        namespace: &str,
        name: &str,
    ) -> Result<bool, LookupError> {
        let user = user.username.clone().unwrap_or_default();
        self.read("creating a SubjectAccessReview", |w| {
            [namespace, ""].iter().any(|ns| {
                w.token_creators
                    .contains(&(user.clone(), (*ns).to_owned(), name.to_owned()))
            })
        })
    }

    async fn machine(&self, namespace: &str, name: &str) -> Result<Option<Machine>, LookupError> {
        self.read(&format!("reading Machine {namespace}/{name}"), |w| {
            find(&w.machines, namespace, name)
        })
    }

    async fn cluster(&self, namespace: &str, name: &str) -> Result<Option<Cluster>, LookupError> {
        self.read(&format!("reading Cluster {namespace}/{name}"), |w| {
            find(&w.clusters, namespace, name)
        })
    }

    async fn inventory(&self) -> Result<Inventory, LookupError> {
        self.read("listing TerraformClusters", |w| w.inventory.clone())
    }

    fn manager_username(&self) -> String {
        let world = self.world.lock().unwrap_or_else(PoisonError::into_inner);
        world
            .manager
            .clone()
            .unwrap_or_else(crate::lookups::default_manager_username)
    }
}
