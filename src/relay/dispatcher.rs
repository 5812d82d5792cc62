//! One dispatcher actor per topic: it owns the topic's stream and publishes its share of each
//! batch with deduplicating script calls of about 4 MiB of entries each, on a timer unlinks the topic's retired dedup
//! sets (a topic whose traffic stopped gets no publish that would), and at its start records
//! the topic in the registry table and makes its metrics exist. [`Dispatchers`] is the
//! topic registry that starts them on first use, under a supervisor, and replaces one whose
//! mailbox closed.
//!
//! A publish that fails as a whole (an outage) is answered with a [`TopicOutage`]: the
//! topic's events wait a pause that doubles with each failure in a row (100 ms to 5 s), and
//! the cycle settles the other topics. On a Redis Cluster a topic lives on one master, so
//! while its pause runs the dispatcher answers at once without asking Redis: a dead master
//! costs its own topics a failed call per pause, and the other topics' cycles nothing.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use actix::{
    Actor, ActorContext, ActorFutureExt, Addr, AsyncContext, Context, Handler, ResponseActFuture,
    Supervised, Supervisor, WrapFuture,
};
use uuid::Uuid;

use super::actors::ActorName;
use super::messages::{Publish, TopicOutage};
use super::supervision::{catching, Panicked};
use crate::config::GroupSpec;
use crate::db::{topics, Db};
use crate::publish::{keys, Behind, Outcome, PublishError, Publisher};
use crate::relay::repair::{self, RepairSettings};
use outbox_core::backoff;

/// Publishes one topic.
pub struct Dispatcher {
    topic: String,
    publisher: Publisher,
    db: Db,
    /// The topic's outage, while its publishes fail as a whole.
    down: Option<Down>,
    /// The topic's declared consumer groups.
    groups: Arc<[GroupSpec]>,
    /// The topic's partitions as last known: configured at start, then as each batch says.
    partitions: u32,
    /// The partition count whose streams have the declared groups and whose count is in the
    /// `<prefix>partitions` hash (made by this dispatcher or found there).
    ready_for: Option<u32>,
    /// What repairing a stream that lost entries needs.
    repair: RepairSettings,
}

/// A topic's publishes failing in a row.
struct Down {
    /// Failed publishes in a row.
    streak: u32,
    /// The last failure.
    error: PublishError,
    /// On a cluster: publishes fail at once until then.
    until: Option<Instant>,
}

impl Dispatcher {
    /// While the topic's pause runs (cluster only), the outage to answer without asking Redis.
    fn still_down(&self) -> Option<TopicOutage> {
        let down = self.down.as_ref()?;
        let retry_in = down.until?.checked_duration_since(Instant::now())?;
        Some(TopicOutage {
            error: down.error.clone(),
            retry_in,
        })
    }

    /// Records how a publish that went to Redis ended.
    fn ended(
        &mut self,
        result: Result<Vec<(Uuid, Outcome)>, PublishError>,
    ) -> Result<Vec<(Uuid, Outcome)>, TopicOutage> {
        match result {
            Ok(outcomes) => {
                if let Some(down) = self.down.take() {
                    crate::telemetry::topic_outage_over(&self.topic, down.streak);
                }
                Ok(outcomes)
            }
            Err(error) => {
                let streak = self.down.as_ref().map_or(0, |d| d.streak).saturating_add(1);
                let retry_in = backoff::outage_pause(streak, backoff::unit());
                crate::telemetry::topic_outage(&self.topic, &error, streak, retry_in);
                // On one server every topic shares the outage, and the claim loop's own
                // backoff paces the retries; on a cluster only this topic's master is away.
                let until = self
                    .publisher
                    .is_cluster()
                    .then(|| Instant::now() + retry_in);
                self.down = Some(Down {
                    streak,
                    error: error.clone(),
                    until,
                });
                Err(TopicOutage { error, retry_in })
            }
        }
    }
}

impl Actor for Dispatcher {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        crate::telemetry::topic_known(&self.topic);
        let (db, topic, partitions) = (self.db.clone(), self.topic.clone(), self.partitions);
        actix::spawn(async move {
            let registered = async {
                db.unit(async |c| topics::register(c, &topic, partitions).await)
                    .await
            };
            if let Err(e) = registered.await {
                tracing::debug!(%topic, error = %e, "topic not registered; the next start tries again");
            }
        });
        let every = keys::sweep_every(self.publisher.config().dedup_window);
        ctx.run_interval(every, |me, _| {
            let publisher = me.publisher.clone();
            let (topic, partitions) = (me.topic.clone(), me.partitions);
            // Beside the publishes, not ahead of them in the mailbox.
            actix::spawn(async move {
                match publisher.sweep(&topic, partitions).await {
                    Ok(0) => {}
                    Ok(n) => tracing::debug!(%topic, sets = n, "retired dedup sets unlinked"),
                    Err(e) => tracing::debug!(%topic, error = %e, "dedup sweep skipped"),
                }
            });
        });
        if !self.groups.is_empty() || self.partitions > 1 {
            let partitions = self.partitions;
            let (publisher, topic, groups) = (
                self.publisher.clone(),
                self.topic.clone(),
                self.groups.clone(),
            );
            let made = async move { prepare(&publisher, &topic, &groups, partitions).await };
            ctx.spawn(made.into_actor(self).map(move |result, act, _| match result {
                Ok(()) => act.ready_for = Some(partitions),
                Err(e) => {
                    tracing::debug!(topic = %act.topic, error = %e, "consumer groups wait for the first publish")
                }
            }));
        }
    }
}

impl Supervised for Dispatcher {
    fn restarting(&mut self, _: &mut Context<Self>) {
        tracing::warn!(topic = %self.topic, "dispatcher restarting");
        crate::telemetry::actor_restarting(ActorName::Dispatcher);
    }
}

impl Handler<Publish> for Dispatcher {
    type Result = ResponseActFuture<Self, Result<Vec<(Uuid, Outcome)>, TopicOutage>>;

    fn handle(&mut self, msg: Publish, _: &mut Context<Self>) -> Self::Result {
        if let Some(outage) = self.still_down() {
            return Box::pin(actix::fut::ready(Err(outage)));
        }
        let publisher = self.publisher.clone();
        let topic = self.topic.clone();
        let partitions = msg.partitions;
        self.partitions = partitions;
        let groups = (self.ready_for != Some(partitions)).then(|| self.groups.clone());
        let (db, repair) = (self.db.clone(), self.repair);
        let publish = async move {
            if let Some(groups) = &groups {
                prepare(&publisher, &topic, groups, partitions).await?;
            }
            match publisher
                .publish(&topic, &msg.chains, msg.maxlen, partitions)
                .await
            {
                Err(PublishError::Behind(behind)) => {
                    Err(repaired(&publisher, &db, &behind, repair).await)
                }
                other => other,
            }
        };
        Box::pin(
            catching(ActorName::Dispatcher, publish)
                .into_actor(self)
                .map(move |result, act, ctx| {
                    match &result {
                        Ok(Ok(_)) => act.ready_for = Some(partitions),
                        // Its streams may have lost their groups too.
                        Ok(Err(_)) => act.ready_for = None,
                        Err(_) => {}
                    }
                    let result = result.unwrap_or_else(|Panicked| {
                        // Restarted by its supervisor; the topic's events wait as after an
                        // outage.
                        ctx.stop();
                        Err(PublishError::Outage(format!(
                            "the dispatcher of {} panicked",
                            act.topic
                        )))
                    });
                    act.ended(result)
                }),
        )
    }
}

/// After the publish found a stream behind what the relay appended: repairs it, and fails the
/// batch as an outage, so it rolls back and the lost events, now pending again with lower
/// `seq`, are claimed before it.
async fn repaired(
    publisher: &Publisher,
    db: &Db,
    behind: &Behind,
    settings: RepairSettings,
) -> PublishError {
    match repair::repair(publisher, db, behind, settings).await {
        Ok(repaired) => {
            if !repaired.lost.is_empty() || repaired.unrepairable.is_some() {
                crate::telemetry::redis_lost(behind, &repaired);
            } else {
                tracing::info!(stream = %behind.stream, "{behind}: every event marked published is still there (the entries lost were never confirmed)");
            }
            PublishError::Outage(format!(
                "{behind}; {} events queued to be published again",
                repaired.requeued
            ))
        }
        Err(e) => PublishError::Outage(format!("{behind}; repair failed, retried: {e}")),
    }
}

/// Before a topic's first publish with `partitions` streams: the declared groups on each of
/// them, and the count in the `<prefix>partitions` hash (a topic of one partition has no field
/// there unless configured).
async fn prepare(
    publisher: &Publisher,
    topic: &str,
    groups: &[GroupSpec],
    partitions: u32,
) -> Result<(), PublishError> {
    publisher.ensure_groups(topic, groups, partitions).await?;
    if partitions > 1 {
        publisher.record_partitions(topic, partitions).await?;
    }
    Ok(())
}

/// The running dispatchers by topic: each started at its topic's first publish (or at start,
/// for a topic with declared groups).
#[derive(Clone)]
pub struct Dispatchers {
    publisher: Publisher,
    db: Db,
    groups: Arc<HashMap<String, Arc<[GroupSpec]>>>,
    /// Configured partition counts (a topic not here has one).
    partitions: Arc<HashMap<String, u32>>,
    by_topic: Arc<Mutex<HashMap<String, Addr<Dispatcher>>>>,
    repair: RepairSettings,
}

impl Dispatchers {
    /// An empty registry; dispatchers start when their topic first shows up, and record it in
    /// the topic registry table (through `db`). `groups` are the declared consumer groups.
    pub fn new(
        publisher: Publisher,
        db: Db,
        groups: &[GroupSpec],
        partitions: HashMap<String, u32>,
        repair: RepairSettings,
    ) -> Self {
        let mut by_topic: HashMap<String, Vec<GroupSpec>> = HashMap::new();
        for group in groups {
            by_topic
                .entry(group.topic.clone())
                .or_default()
                .push(group.clone());
        }
        Dispatchers {
            publisher,
            db,
            groups: Arc::new(
                by_topic
                    .into_iter()
                    .map(|(topic, groups)| (topic, groups.into()))
                    .collect(),
            ),
            partitions: Arc::new(partitions),
            by_topic: Arc::new(Mutex::new(HashMap::new())),
            repair,
        }
    }

    /// The configured partitions of `topic` (1 when not configured).
    pub fn configured_partitions(&self, topic: &str) -> u32 {
        self.partitions.get(topic).copied().unwrap_or(1)
    }

    /// Starts the dispatcher of every topic with declared groups or partitions, which creates
    /// the groups on every stream and records the count at once.
    pub fn start_grouped(&self) {
        for topic in self.groups.keys().chain(self.partitions.keys()) {
            self.ensure_running(topic);
        }
    }

    /// Starts the topic's dispatcher unless one is running (a dispatcher whose mailbox closed
    /// is replaced), and returns its address. Must run inside the actix system.
    pub fn ensure_running(&self, topic: &str) -> Addr<Dispatcher> {
        let mut map = match self.by_topic.lock() {
            Ok(map) => map,
            Err(poisoned) => poisoned.into_inner(),
        };
        if let Some(addr) = map.get(topic) {
            if addr.connected() {
                return addr.clone();
            }
        }
        let addr = self.start(topic);
        map.insert(topic.to_string(), addr.clone());
        addr
    }

    /// The shared publisher.
    pub fn publisher(&self) -> &Publisher {
        &self.publisher
    }

    /// A new dispatcher for `topic`, under a supervisor.
    fn start(&self, topic: &str) -> Addr<Dispatcher> {
        let dispatcher = Dispatcher {
            topic: topic.to_string(),
            publisher: self.publisher.clone(),
            db: self.db.clone(),
            down: None,
            groups: self
                .groups
                .get(topic)
                .cloned()
                .unwrap_or_else(|| Arc::new([])),
            partitions: self.configured_partitions(topic),
            ready_for: None,
            repair: self.repair,
        };
        Supervisor::start(move |_| dispatcher)
    }

    /// Publishes one topic's chains through its dispatcher.
    pub async fn publish(
        &self,
        topic: &str,
        msg: Publish,
    ) -> Result<Vec<(Uuid, Outcome)>, TopicOutage> {
        let addr = self.ensure_running(topic);
        match addr.send(msg).await {
            Ok(result) => result,
            Err(e) => Err(TopicOutage {
                error: PublishError::Outage(format!("dispatcher of {topic} is gone: {e}")),
                retry_in: backoff::outage_pause(1, backoff::unit()),
            }),
        }
    }
}
