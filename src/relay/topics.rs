//! The topic registry the cycle publishes through, [`Topics`]. Not an actor: a map shared by
//! the cycles and the periodic jobs, with three duties on each topic it meets.
//!
//! - It starts the topic's dispatcher (`dispatcher`) under a supervisor and has it watched
//!   like the relay's other actors: at the relay's start for a configured topic, otherwise
//!   when a claim first meets the topic (any topic name may show up in the outbox).
//! - Before a topic is published with a partition count its streams have not been prepared
//!   for, it creates the declared consumer groups on each of them and records the count in the
//!   `<prefix>partitions` hash, so no entry is appended to a stream before its groups exist.
//! - It tells the others what it knows: a topic's configured partition count (the cycle's
//!   stand-in until a count is recorded) and the topics met with the count they were last
//!   published at (`registrar`, `sweeper`).
//!
//! The three share one entry per topic under one lock: the dispatcher's address, the count
//! last published and the count prepared for change together when a topic is met or
//! published, and the cycle looks them up once per topic per batch.
//!
//! The per-topic upkeep is periodic jobs' (`registrar`, `sweeper`); repairing a stream that
//! lost entries is a stage of the cycle (`repair`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use actix::{Addr, Supervisor};
use uuid::Uuid;

use super::dispatcher::Dispatcher;
use super::messages::{Publish, TopicOutage};
use super::supervision::Watched;
use crate::config::GroupSpec;
use crate::publish::{Outcome, PublishError, Publisher};
use crate::telemetry::ActorName;
use outbox_core::backoff;

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
