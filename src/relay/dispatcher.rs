//! One dispatcher actor per topic, with one duty: publish the topic's share of each batch
//! (deduplicating script calls of about 4 MiB of entries each, see `publish`) and own the
//! topic's outage state. Beside it, [`Topics`], the registry the cycle publishes through:
//! it starts each topic's dispatcher under a supervisor and has it watched like the relay's
//! other actors (at the relay's start for a configured topic, otherwise when a claim first
//! meets the topic: any topic name may show up in the outbox), and before a topic is
//! published with a partition count its streams have not been prepared for, it creates the
//! declared consumer groups on each of them and records the count in the
//! `<prefix>partitions` hash, so no entry is appended to a stream before its groups exist.
//! The per-topic upkeep is periodic jobs' (`registrar`, `sweeper`); repairing a stream that
//! lost entries is a stage of the cycle (`repair`).
//!
//! A publish that fails as a whole (an outage) is answered with a [`TopicOutage`]: the
//! topic's events wait a pause that doubles with each failure in a row (100 ms to 5 s), and
//! the cycle settles the other topics. On a Redis Cluster a topic lives on one master, so
//! while its pause runs the dispatcher answers at once without asking Redis: a dead master
//! costs its own topics a failed call per pause, and the other topics' cycles nothing.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use actix::{
    Actor, ActorContext, ActorFutureExt, Addr, Context, Handler, ResponseActFuture, Supervised,
    Supervisor, WrapFuture,
};
use uuid::Uuid;

use super::messages::{Publish, TopicOutage};
use super::supervision::{catching, Panicked, Watched};
use crate::config::GroupSpec;
use crate::publish::{Outcome, PublishError, Publisher};
use crate::telemetry::ActorName;
use outbox_core::backoff;

/// Publishes one topic.
pub struct Dispatcher {
    topic: String,
    publisher: Publisher,
    /// The topic's outage, while its publishes fail as a whole.
    down: Option<Down>,
}

/// A topic's publishes failing in a row.
struct Down {
    /// Failed publishes in a row.
    streak: u32,
    /// The last failure, as an outage: answered again while the pause runs.
    error: PublishError,
    /// On a cluster: publishes fail at once until then.
    until: Option<Instant>,
}

impl Dispatcher {
    /// The dispatcher of `topic`, not yet down.
    pub fn new(topic: String, publisher: Publisher) -> Self {
        Dispatcher {
            topic,
            publisher,
            down: None,
        }
    }

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
                // A loss is repaired once, by the cycle that met it: the answers given
                // during the pause are plain outages.
                let remembered = match &error {
                    PublishError::Behind(behind) => PublishError::Outage(behind.to_string()),
                    other => other.clone(),
                };
                self.down = Some(Down {
                    streak,
                    error: remembered,
                    until,
                });
                Err(TopicOutage { error, retry_in })
            }
        }
    }
}

impl Actor for Dispatcher {
    type Context = Context<Self>;
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
        let publish = async move {
            super::faults::panic_at("dispatch-panic");
            publisher
                .publish(&topic, &msg.chains, msg.maxlen, msg.partitions)
                .await
        };
        Box::pin(
            catching(ActorName::Dispatcher, publish)
                .into_actor(self)
                .map(move |result, act, ctx| {
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

/// The running dispatchers and what each topic's streams have. Cheap to clone.
#[derive(Clone)]
pub struct Topics {
    publisher: Publisher,
    groups: Arc<HashMap<String, Arc<[GroupSpec]>>>,
    /// Configured partition counts (a topic not here has one).
    partitions: Arc<HashMap<String, u32>>,
    by_topic: Arc<Mutex<HashMap<String, Known>>>,
    watched: Watched,
}

/// One topic as this replica knows it.
struct Known {
    dispatcher: Addr<Dispatcher>,
    /// The partition count it was last published with (or is configured with).
    partitions: u32,
    /// The count whose streams have the declared groups and whose count is in the
    /// `<prefix>partitions` hash.
    prepared_for: Option<u32>,
}

/// A topic seen by this replica, for the topic keeper.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeenTopic {
    /// Its name.
    pub topic: String,
    /// Its partition count as last published.
    pub partitions: u32,
}

impl Topics {
    /// An empty registry: `groups` are the declared consumer groups, `partitions` the
    /// configured counts; each started dispatcher is added to `watched`.
    pub fn new(
        publisher: Publisher,
        groups: &[GroupSpec],
        partitions: HashMap<String, u32>,
        watched: Watched,
    ) -> Self {
        let mut by_topic: HashMap<String, Vec<GroupSpec>> = HashMap::new();
        for group in groups {
            by_topic
                .entry(group.topic.clone())
                .or_default()
                .push(group.clone());
        }
        Topics {
            publisher,
            groups: Arc::new(
                by_topic
                    .into_iter()
                    .map(|(topic, groups)| (topic, groups.into()))
                    .collect(),
            ),
            partitions: Arc::new(partitions),
            by_topic: Arc::default(),
            watched,
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Known>> {
        self.by_topic.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The configured partitions of `topic` (1 when not configured).
    pub fn configured_partitions(&self, topic: &str) -> u32 {
        self.partitions.get(topic).copied().unwrap_or(1)
    }

    /// The shared publisher.
    pub fn publisher(&self) -> &Publisher {
        &self.publisher
    }

    /// At the relay's start: the dispatcher of every configured topic (declared groups or
    /// partitions), whose groups and count are made at once, before any event shows up. A
    /// topic whose streams cannot be prepared now is prepared before its first publish.
    /// Must run inside the actix system.
    pub fn start_configured(&self) {
        let configured: Vec<String> = self
            .groups
            .keys()
            .chain(self.partitions.keys())
            .cloned()
            .collect();
        for topic in configured {
            self.dispatcher(&topic);
            let me = self.clone();
            actix::spawn(async move {
                let partitions = me.configured_partitions(&topic);
                if let Err(e) = me.prepare(&topic, partitions).await {
                    tracing::debug!(%topic, error = %e, "consumer groups wait for the first publish");
                }
            });
        }
    }

    /// The topic's dispatcher, started (and watched) when the topic is new. A dispatcher that
    /// died for good is not replaced: the watchdog ends the process.
    fn dispatcher(&self, topic: &str) -> Addr<Dispatcher> {
        let mut map = self.lock();
        if let Some(known) = map.get(topic) {
            return known.dispatcher.clone();
        }
        let dispatcher = Dispatcher::new(topic.to_string(), self.publisher.clone());
        let addr = Supervisor::start(move |_| dispatcher);
        self.watched.add(ActorName::Dispatcher, &addr);
        crate::telemetry::topic_known(topic);
        map.insert(
            topic.to_string(),
            Known {
                dispatcher: addr.clone(),
                partitions: self.configured_partitions(topic),
                prepared_for: None,
            },
        );
        addr
    }

    /// Makes `topic`'s `partitions` streams ready for entries unless they are known to be:
    /// the declared groups on each, and the count in the `<prefix>partitions` hash (a topic
    /// of one partition has no field there unless configured).
    async fn prepare(&self, topic: &str, partitions: u32) -> Result<(), PublishError> {
        let groups = {
            let map = self.lock();
            if map.get(topic).and_then(|k| k.prepared_for) == Some(partitions) {
                return Ok(());
            }
            self.groups.get(topic).cloned()
        };
        let groups = groups.unwrap_or_else(|| Arc::new([]));
        self.publisher
            .ensure_groups(topic, &groups, partitions)
            .await?;
        if partitions > 1 {
            self.publisher.record_partitions(topic, partitions).await?;
        }
        self.prepared(topic, Some(partitions));
        Ok(())
    }

    fn prepared(&self, topic: &str, partitions: Option<u32>) {
        if let Some(known) = self.lock().get_mut(topic) {
            known.prepared_for = partitions;
            if let Some(partitions) = partitions {
                known.partitions = partitions;
            }
        }
    }

    /// Publishes one topic's chains: its streams prepared first if need be, then through its
    /// dispatcher. A failure of either is the topic's outage.
    pub async fn publish(
        &self,
        topic: &str,
        msg: Publish,
    ) -> Result<Vec<(Uuid, Outcome)>, TopicOutage> {
        let addr = self.dispatcher(topic);
        let partitions = msg.partitions;
        if let Err(error) = self.prepare(topic, partitions).await {
            return Err(TopicOutage {
                error,
                retry_in: backoff::outage_pause(1, backoff::unit()),
            });
        }
        let result = match addr.send(msg).await {
            Ok(result) => result,
            Err(e) => Err(TopicOutage {
                error: PublishError::Outage(format!("dispatcher of {topic} is gone: {e}")),
                retry_in: backoff::outage_pause(1, backoff::unit()),
            }),
        };
        if result.is_err() {
            // Its streams may have lost their groups too.
            self.prepared(topic, None);
        }
        result
    }

    /// Every topic this replica has a dispatcher for.
    pub fn seen(&self) -> Vec<SeenTopic> {
        self.lock()
            .iter()
            .map(|(topic, known)| SeenTopic {
                topic: topic.clone(),
                partitions: known.partitions,
            })
            .collect()
    }
}
