//! The group keeper: every few seconds it samples each declared consumer group (lag, pending,
//! the oldest pending entry's age and idle time; per partition too, for a partitioned topic;
//! its fleet's members and owners; its parked keys) into the metrics, and with
//! `redis.trim_acked`, every `retention.interval`, trims each stream with declared groups up to
//! the oldest entry one of them has not acknowledged. Trimming is one atomic script per stream, so any replica may run it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use futures::FutureExt;

use super::periodic::Job;
use crate::config::GroupSpec;
use crate::publish::groups::Trim;
use crate::publish::inspect::InspectError;
use crate::publish::{keys, PublishError, Publisher};
use crate::telemetry::ActorName;

/// Why a run of the keeper failed.
#[derive(Debug, thiserror::Error)]
pub enum GroupsError {
    /// Sampling a stream failed.
    #[error("sampling consumer groups: {0}")]
    Inspect(#[from] InspectError),
    /// Trimming a stream failed.
    #[error("trimming acknowledged entries: {0}")]
    Trim(#[from] PublishError),
}

/// The keeper's settings.
#[derive(Clone)]
pub struct GroupKeeper {
    /// The shared publisher.
    pub publisher: Publisher,
    /// Declared groups by topic.
    pub groups: Arc<BTreeMap<String, Vec<String>>>,
    /// Time between samples.
    pub interval: Duration,
    /// `redis.trim_acked`: trim every `trim_every`.
    pub trim_every: Option<Duration>,
    /// When the last trim ran.
    pub last_trim: Arc<Mutex<Option<Instant>>>,
    /// The (topic, group) pairs seen with a consumer fleet since the relay started.
    pub fleets: Arc<Mutex<BTreeSet<(String, String)>>>,
}

impl GroupKeeper {
    /// A keeper of `groups`; trims every `trim_every` when set.
    pub fn new(
        publisher: Publisher,
        groups: &[GroupSpec],
        interval: Duration,
        trim_every: Option<Duration>,
    ) -> Self {
        let mut by_topic: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for g in groups {
            crate::telemetry::group_known(&g.topic, &g.name);
            by_topic
                .entry(g.topic.clone())
                .or_default()
                .push(g.name.clone());
        }
        GroupKeeper {
            publisher,
            groups: Arc::new(by_topic),
            interval,
            trim_every,
            last_trim: Arc::default(),
            fleets: Arc::default(),
        }
    }

    fn trim_due(&self) -> bool {
        let Some(every) = self.trim_every else {
            return false;
        };
        let mut last = match self.last_trim.lock() {
            Ok(last) => last,
            Err(poisoned) => poisoned.into_inner(),
        };
        if last.is_some_and(|at| at.elapsed() < every) {
            return false;
        }
        *last = Some(Instant::now());
        true
    }
}

/// One declared group over all of a topic's partitions: lag and pending summed, the oldest
/// pending entry the oldest of any partition.
#[derive(Debug, Default)]
struct Sample {
    lag: Option<u64>,
    pending: u64,
    oldest: Option<Duration>,
    oldest_idle: Option<Duration>,
}

/// Samples every declared group (on every partition of its topic, by the counts in
/// `<prefix>partitions`), then trims when due.
async fn run_once(keeper: GroupKeeper, trim: bool) -> Result<(), GroupsError> {
    // Without the hash (Redis away, an old relay) a topic is taken to have one stream.
    let counts = keeper
        .publisher
        .partition_counts()
        .await
        .unwrap_or_default();
    let prefix = keeper.publisher.config().stream_prefix.clone();
    for (topic, declared) in keeper.groups.iter() {
        let partitions = counts.get(topic).copied().unwrap_or(1);
        let mut samples: BTreeMap<&str, Sample> = declared
            .iter()
            .map(|name| {
                (
                    name.as_str(),
                    Sample {
                        lag: Some(0),
                        ..Sample::default()
                    },
                )
            })
            .collect();
        let mut owned: BTreeMap<&str, Vec<bool>> = BTreeMap::new();
        for (p, key) in keys::partition_keys(&prefix, topic, partitions)
            .iter()
            .enumerate()
        {
            let stream = keeper.publisher.inspect_stream(topic, key).await?;
            for group in &stream.groups {
                if let Some(owners) = samples
                    .get_key_value(group.name.as_str())
                    .map(|(name, _)| owned.entry(*name).or_default())
                {
                    owners.resize(p, false);
                    owners.push(group.owner.is_some());
                }
                let Some(sample) = samples.get_mut(group.name.as_str()) else {
                    continue;
                };
                if partitions > 1 {
                    crate::telemetry::partition_sampled(
                        topic,
                        p,
                        &group.name,
                        group.lag,
                        group.pending,
                    );
                }
                sample.lag = sample.lag.zip(group.lag).map(|(a, b)| a + b);
                sample.pending += group.pending;
                let age = group.oldest_pending.as_ref().map(|(_, age)| *age);
                sample.oldest = sample.oldest.max(age);
                sample.oldest_idle = sample.oldest_idle.max(group.oldest_pending_idle);
            }
        }
        for (name, sample) in samples {
            crate::telemetry::group_sampled(
                topic,
                name,
                crate::telemetry::GroupSample {
                    lag: sample.lag,
                    pending: sample.pending,
                    oldest_pending: sample.oldest,
                    oldest_pending_idle: sample.oldest_idle,
                },
            );
        }
        let now_ms = chrono::Utc::now().timestamp_millis();
        for name in declared {
            let parked = keeper.publisher.group_parked(topic, name).await?;
            let parked: Vec<_> = parked.iter().filter(|k| !k.state.released).collect();
            let oldest = parked
                .iter()
                .map(|k| now_ms.saturating_sub(k.state.since_ms).max(0))
                .max()
                .map(|ms| Duration::from_millis(u64::try_from(ms).unwrap_or(0)));
            crate::telemetry::parked_keys_sampled(topic, name, parked.len(), oldest);
        }
        if partitions > 1 {
            for name in declared {
                // Only groups whose consumers keep a fleet: others own nothing by design. A
                // fleet whose last member left (its members key expired with it) is still
                // one: its gauges say 0 members and no owners rather than freeze.
                let members = keeper.publisher.fleet_members(topic, name).await?;
                let fleet = (topic.clone(), name.clone());
                let members = {
                    let mut seen = keeper.fleets.lock().unwrap_or_else(|e| e.into_inner());
                    match members {
                        Some(members) => {
                            seen.insert(fleet);
                            Some(members)
                        }
                        None => seen.contains(&fleet).then_some(0),
                    }
                };
                if let Some(members) = members {
                    let mut owners = owned.remove(name.as_str()).unwrap_or_default();
                    owners.resize(partitions as usize, false);
                    crate::telemetry::fleet_sampled(topic, name, members, &owners);
                }
            }
        }
        if trim {
            let names: Vec<&str> = declared.iter().map(String::as_str).collect();
            for key in keys::partition_keys(&prefix, topic, partitions) {
                match keeper.publisher.trim_acked(&key, &names).await? {
                    Trim::Trimmed { removed, minid } => {
                        crate::telemetry::stream_trimmed(topic, removed, &minid)
                    }
                    Trim::GroupMissing(group) => tracing::warn!(
                        %topic,
                        stream = %key,
                        %group,
                        "stream not trimmed while a declared group is missing from it (the relay creates declared groups when it starts)"
                    ),
                }
            }
        }
    }
    Ok(())
}

impl Job for GroupKeeper {
    const ACTOR: ActorName = ActorName::Groups;
    type Error = GroupsError;

    fn interval(&self) -> Duration {
        self.interval
    }

    fn run_once(&self) -> BoxFuture<'static, Result<(), GroupsError>> {
        let trim = self.trim_due();
        run_once(self.clone(), trim).boxed()
    }
}
