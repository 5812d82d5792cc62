//! The fleet: how the consumers of one group divide a partitioned topic's partitions, so that
//! each partition (and so each key) is handled by one consumer at a time.
//!
//! Each consumer keeps itself in the group's members set and, from the sorted live names,
//! computes which partitions it should own ([`assign`]). It takes a partition's lease when
//! the lease is free, with the next fencing epoch; it renews what it holds; it gives up what
//! it should no longer own once the batch in hand is finished. A lease is trusted locally only
//! until a margin before it could have run out in Redis, and every command that moves a
//! partition's entries checks the lease in the same script ([`scripts`]), so a consumer that
//! was frozen past its lease neither reads nor takes entries when it resumes. The inbox checks
//! the epoch inside the effect's transaction (fencing), so it cannot commit either.
//!
//! The loop ([`crate::consumer`]) asks this module what it may read and handle; the heartbeat
//! ([`beat`]) runs beside it on a connection of its own (the loop's blocking reads would
//! delay a renewal otherwise). What the heartbeat's lease replies change is a pure function
//! ([`leases`]), property-tested against a model of the lease script.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use outbox_core::{keys, Lease};

mod assign;
mod beat;
mod leases;
pub(crate) mod scripts;

pub(crate) use beat::{heartbeat, leave};

/// One partition's keys.
#[derive(Debug, Clone)]
struct PartitionKeys {
    stream: Arc<str>,
    owner: String,
    epoch: String,
}

/// A partitioned topic of this consumer.
#[derive(Debug, Clone)]
struct FleetTopic {
    topic: String,
    members: String,
    partitions: Vec<PartitionKeys>,
}

/// A lease this consumer holds.
#[derive(Debug, Clone, Copy)]
struct Held {
    partition: u32,
    epoch: u64,
    /// Until when this consumer may act on the lease: a margin before it could run out.
    valid_until: Instant,
    /// Still one of this consumer's targets; false: give it up after the batch in hand.
    keep: bool,
    /// The previous owner's pending entries were taken over.
    handed_over: bool,
}

#[derive(Debug, Default)]
struct State {
    /// Every topic read, with its partition count as last resolved.
    counts: Vec<(String, u32)>,
    /// The partitions hash disagrees with `counts`: the loop resolves the streams again.
    stale: bool,
    topics: Vec<FleetTopic>,
    /// Owner key of each fenced stream.
    owners: HashMap<Arc<str>, String>,
    held: HashMap<Arc<str>, Held>,
    /// Topics whose members set this consumer has joined (it takes leases from the beat
    /// after its first, so consumers starting together see each other first).
    joined: std::collections::HashSet<String>,
}

/// The fleet bookkeeping of one consumer, shared by the loop and the heartbeat.
#[derive(Debug)]
pub(crate) struct Fleet {
    me: String,
    group: String,
    prefix: String,
    lease: Duration,
    state: Mutex<State>,
    /// Wakes the heartbeat when the topics change, so a new count is acted on at once.
    changed: tokio::sync::Notify,
}

impl Fleet {
    /// The fleet of consumer `me` of `group`; leases last `lease` (`claim_idle`).
    pub(crate) fn new(me: &str, group: &str, prefix: &str, lease: Duration) -> Fleet {
        Fleet {
            me: me.to_string(),
            group: group.to_string(),
            prefix: prefix.to_string(),
            lease,
            state: Mutex::new(State::default()),
            changed: tokio::sync::Notify::new(),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves plain data behind: keep using it.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets the topics (name and streams, as resolved from the partitions hash); a topic with
    /// more than one stream is divided among the group. Leases of streams no longer listed are
    /// forgotten (the caller re-resolves after a repartition).
    pub(crate) fn configure(&self, topics: &[(String, Vec<Arc<str>>)]) {
        let mut state = self.state();
        state.counts = topics
            .iter()
            .map(|(topic, streams)| (topic.clone(), u32::try_from(streams.len()).unwrap_or(1)))
            .collect();
        state.stale = false;
        state.topics = topics
            .iter()
            .filter(|(_, streams)| streams.len() > 1)
            .map(|(topic, streams)| FleetTopic {
                topic: topic.clone(),
                members: keys::fleet_members(&self.prefix, topic, &self.group),
                partitions: streams
                    .iter()
                    .map(|stream| PartitionKeys {
                        stream: stream.clone(),
                        owner: keys::partition_owner(stream, &self.group),
                        epoch: keys::partition_epoch(stream, &self.group),
                    })
                    .collect(),
            })
            .collect();
        let owners: HashMap<Arc<str>, String> = state
            .topics
            .iter()
            .flat_map(|t| t.partitions.iter())
            .map(|p| (p.stream.clone(), p.owner.clone()))
            .collect();
        state.held.retain(|stream, _| owners.contains_key(stream));
        state.owners = owners;
        let divided: std::collections::HashSet<String> =
            state.topics.iter().map(|t| t.topic.clone()).collect();
        state.joined.retain(|topic| divided.contains(topic));
        drop(state);
        self.changed.notify_one();
    }

    /// Whether a topic's partition count changed since [`Fleet::configure`] (a topic got
    /// partitioned after the consumer started, or was repartitioned); clears the flag.
    pub(crate) fn take_stale(&self) -> bool {
        std::mem::take(&mut self.state().stale)
    }

    /// Whether any topic is divided among the group.
    pub(crate) fn is_active(&self) -> bool {
        !self.state().topics.is_empty()
    }

    /// The owner key of a fenced stream.
    pub(crate) fn owner_key(&self, stream: &str) -> Option<String> {
        self.state().owners.get(stream).cloned()
    }

    /// The lease under which this consumer may handle `stream`'s entries now: held, taken
    /// over and trusted still; `None` otherwise (for an unfenced stream too).
    pub(crate) fn lease_in_hand(&self, stream: &str) -> Option<Lease> {
        let state = self.state();
        let h = state.held.get(stream)?;
        (h.handed_over && Instant::now() < h.valid_until).then_some(Lease {
            partition: h.partition,
            epoch: h.epoch,
        })
    }

    /// Of `streams`, those this consumer may read: unfenced ones, and partitions it holds,
    /// has taken over, and does not give up.
    pub(crate) fn readable(&self, streams: &[Arc<str>]) -> Vec<Arc<str>> {
        let state = self.state();
        let now = Instant::now();
        streams
            .iter()
            .filter(|s| {
                !state.owners.contains_key(*s)
                    || state
                        .held
                        .get(*s)
                        .is_some_and(|h| h.handed_over && h.keep && now < h.valid_until)
            })
            .cloned()
            .collect()
    }

    /// Partitions taken and still valid whose previous owner's entries are to be taken over,
    /// with their owner keys and leases.
    pub(crate) fn to_hand_over(&self) -> Vec<(Arc<str>, String, Lease)> {
        let state = self.state();
        let now = Instant::now();
        state
            .held
            .iter()
            .filter(|(_, h)| !h.handed_over && now < h.valid_until)
            .filter_map(|(s, h)| {
                let owner = state.owners.get(s)?.clone();
                let lease = Lease {
                    partition: h.partition,
                    epoch: h.epoch,
                };
                Some((s.clone(), owner, lease))
            })
            .collect()
    }

    /// The hand-over of `stream` is done.
    pub(crate) fn handed_over(&self, stream: &str) {
        if let Some(h) = self.state().held.get_mut(stream) {
            h.handed_over = true;
        }
    }

    /// Partitions to give up (no longer targets), with their owner and epoch keys.
    pub(crate) fn to_release(&self) -> Vec<(Arc<str>, String, String)> {
        let state = self.state();
        state
            .held
            .iter()
            .filter(|(_, h)| !h.keep)
            .filter_map(|(s, _)| {
                let p = state
                    .topics
                    .iter()
                    .flat_map(|t| t.partitions.iter())
                    .find(|p| &p.stream == s)?;
                Some((s.clone(), p.owner.clone(), p.epoch.clone()))
            })
            .collect()
    }

    /// This consumer no longer holds `stream` (released, or fenced out by a newer owner).
    pub(crate) fn forget(&self, stream: &str) {
        self.state().held.remove(stream);
    }

    /// Every lease held, with its keys (for a clean stop), and the members keys.
    fn everything(&self) -> (Vec<(String, String)>, Vec<String>) {
        let state = self.state();
        let leases = state
            .topics
            .iter()
            .flat_map(|t| t.partitions.iter())
            .filter(|p| state.held.contains_key(&p.stream))
            .map(|p| (p.owner.clone(), p.epoch.clone()))
            .collect();
        let members = state.topics.iter().map(|t| t.members.clone()).collect();
        (leases, members)
    }

    /// How long this consumer trusts a lease after the renewal that set it was sent: a third
    /// of the lease short of its end in Redis, for clock drift and a slow reply.
    fn trust(&self) -> Duration {
        self.lease - self.lease / 3
    }

    /// The lease in milliseconds, as Redis takes it.
    fn lease_ms(&self) -> u64 {
        u64::try_from(self.lease.as_millis()).unwrap_or(u64::MAX)
    }
}
