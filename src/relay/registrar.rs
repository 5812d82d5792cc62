//! The topic registrar: records each topic this replica has met in `outbox_topics` (the
//! registry the admin lists and every replica's metrics start from), once. A claim cycle
//! registers the topics of its batch that this replica has not registered yet, in its own
//! transaction ([`Registered::missing`]), so that no topic is ever published without being
//! registered (a replica killed a moment after a first publish included); the periodic job
//! registers, every second, the topics met otherwise (a repartition, a topic whose publish
//! rolled back).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::{FutureExt, TryFutureExt};

use super::periodic::Job;
use super::topics::Topics;
use crate::db::{topics, Db, DbError};
use crate::telemetry::ActorName;

/// How soon a new topic is registered.
const EVERY: Duration = Duration::from_secs(1);

/// The registrar's pool, the topics it reads and those it has registered.
#[derive(Clone)]
pub struct TopicRegistrar {
    /// The shared pool.
    pub db: Db,
    /// The topics met.
    pub topics: Topics,
    /// Those registered by this replica.
    pub registered: Registered,
}

impl TopicRegistrar {
    /// A registrar sharing `registered` with the claim cycles.
    pub fn new(db: Db, topics: Topics, registered: Registered) -> Self {
        TopicRegistrar {
            db,
            topics,
            registered,
        }
    }
}

/// The topics this replica has registered, shared by the claim cycles and the periodic job;
/// cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct Registered(Arc<Mutex<HashSet<String>>>);

impl Registered {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        // A poisoned lock only means a panic while inserting: the set is still whole.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Of `topics`, those not registered yet by this replica.
    pub fn missing<'a>(&self, topics: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
        let registered = self.lock();
        topics
            .into_iter()
            .filter(|t| !registered.contains(*t))
            .collect()
    }

    /// Whether `topic` is registered by this replica.
    pub fn contains(&self, topic: &str) -> bool {
        self.lock().contains(topic)
    }

    /// Records topics whose registration committed.
    pub fn insert_all(&self, topics: impl IntoIterator<Item = String>) {
        self.lock().extend(topics);
    }
}

/// Registers the topics met and not registered yet; returns how many it registered.
pub async fn run_once(registrar: TopicRegistrar) -> Result<usize, DbError> {
    let new: Vec<_> = registrar
        .topics
        .seen()
        .into_iter()
        .filter(|seen| !registrar.registered.contains(&seen.topic))
        .collect();
    for seen in &new {
        registrar
            .db
            .unit(async |c| topics::register(c, &seen.topic, seen.partitions).await)
            .await?;
        registrar.registered.insert_all([seen.topic.clone()]);
    }
    Ok(new.len())
}

impl Job for TopicRegistrar {
    const ACTOR: ActorName = ActorName::Registrar;
    // Postgres away: the claim cycles log the outage; the next tick tries again.
    const QUIET: bool = true;
    type Error = DbError;

    fn interval(&self) -> Duration {
        EVERY
    }

    fn run_once(&self) -> BoxFuture<'static, Result<(), DbError>> {
        run_once(self.clone()).map_ok(drop).boxed()
    }
}
