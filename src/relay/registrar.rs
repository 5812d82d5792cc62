//! The topic registrar: records each topic this replica has met in `outbox_topics` (the
//! registry the admin lists and every replica's metrics start from), once, every second for
//! the topics new since. Beside the publishes, never in their way: a topic is published
//! whether or not it is registered yet.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::{FutureExt, TryFutureExt};

use super::dispatcher::Topics;
use super::periodic::Job;
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
    pub registered: Arc<Mutex<HashSet<String>>>,
}

impl TopicRegistrar {
    /// A registrar that has registered nothing yet.
    pub fn new(db: Db, topics: Topics) -> Self {
        TopicRegistrar {
            db,
            topics,
            registered: Arc::default(),
        }
    }
}

/// Registers the topics met and not registered yet; returns how many it registered.
pub async fn run_once(registrar: TopicRegistrar) -> Result<usize, DbError> {
    let new: Vec<_> = {
        let registered = registrar
            .registered
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        registrar
            .topics
            .seen()
            .into_iter()
            .filter(|seen| !registered.contains(&seen.topic))
            .collect()
    };
    for seen in &new {
        registrar
            .db
            .unit(async |c| topics::register(c, &seen.topic, seen.partitions).await)
            .await?;
        registrar
            .registered
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(seen.topic.clone());
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
