//! Where the loop's entries come from, and what it may do with them: the `Source` seam under
//! the consumer loop ([`crate::consumer`]). Read new entries (waiting for them when there are
//! none), list and fetch this consumer's own pending ones, claim what dead consumers left,
//! take a pending entry for its next delivery, keep the entries in hand, acknowledge, and say
//! whether an entry of a stream is still this consumer's to handle.
//!
//! Two implementations: [`Group`], a consumer group on plain streams (every command a plain
//! Redis stream command, no script, no lease), and [`Fenced`], a group whose partitioned
//! topics are divided by the fleet ([`crate::fleet`]): every command that moves a partition's
//! entries checks its lease in the same script, and between batches partitions are given up
//! and taken over. The loop uses `Group` while none of its topics is partitioned and `Fenced`
//! once one is (it also reads that consumer's plain topics, unfenced).

use std::sync::Arc;
use std::time::Duration;

use redis::RedisResult;

use outbox_core::{Lease, RedisConn};

use crate::config::ConsumerConfig;
use crate::stream::{by_stream, EntryRef, RawEntry};

mod fleet;
mod group;

pub(crate) use fleet::Fenced;
pub(crate) use group::{ack, Group};

/// A pending entry's id and how many times it was delivered.
pub(crate) type Pending = (String, u64);

/// What a read of new entries found.
#[derive(Debug, Default)]
pub(crate) struct NewEntries {
    /// Entries, now in this consumer's pending list, to handle now.
    pub(crate) entries: Vec<RawEntry>,
    /// Streams where this consumer still has older pending entries: those come first.
    pub(crate) held: Vec<Arc<str>>,
    /// Entries read in the same round trip from a `held` stream: pending now, handled after
    /// the older ones; never attempted, so their first handling is their first delivery.
    pub(crate) early: Vec<EntryRef>,
}

/// What the consumer may do with an entry of a stream now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Check {
    /// A stream any consumer of the group reads.
    Anyone,
    /// A partition this consumer holds, under this lease.
    Held(Lease),
    /// A partition this consumer does not hold (any more): leave its entries alone.
    NotMine,
}

/// What changed between batches in what this consumer reads.
#[derive(Debug, Default)]
pub(crate) struct Rebalanced {
    /// Streams given up: nothing of them is this consumer's any more.
    pub(crate) released: Vec<Arc<str>>,
    /// Streams taken over with their previous owner's pending entries: look at them first.
    pub(crate) taken: Vec<Arc<str>>,
}

/// The loop's view of the group: see the module docs. What needs no fence is done as a plain
/// group does it (the provided methods, [`Group`]'s commands).
pub(crate) trait Source: Sync {
    /// Whether this source fences partitions (the loop switches source when the topics'
    /// partitioning no longer matches).
    const FENCED: bool;

    /// Of `streams`, those this consumer may read now.
    fn readable(&self, streams: &[Arc<str>]) -> Vec<Arc<str>>;

    /// What this consumer may do with an entry of `stream` now.
    fn check(&self, stream: &str) -> Check;

    /// A newer owner refused this consumer's effect on `stream`: stop handling it.
    fn fenced_out(&self, stream: &str);

    /// Whether [`Source::rebalance`] is about to give streams up: what was handled is
    /// acknowledged first.
    fn releasing(&self) -> bool;

    /// Between batches (nothing in hand): gives up and takes over streams.
    async fn rebalance(
        &self,
        conn: &mut RedisConn,
        config: &ConsumerConfig,
    ) -> RedisResult<Rebalanced>;

    /// Up to `batch_size` entries per stream never delivered to the group, now this
    /// consumer's; `acks` are acknowledged first, in the same round trip. With nothing new,
    /// waits up to `block` for an entry to arrive. Reads nothing new from a stream where this
    /// consumer still has pending entries, whatever the loop's bookkeeping says: an entry read
    /// now could overtake an older one of its key.
    async fn read_new(
        &self,
        conn: &mut RedisConn,
        config: &ConsumerConfig,
        streams: &[Arc<str>],
        acks: &[EntryRef],
    ) -> RedisResult<NewEntries>;

    /// This consumer's pending entries of `stream`, oldest first, with their delivery counts.
    async fn pending_mine(
        &self,
        conn: &mut RedisConn,
        config: &ConsumerConfig,
        stream: &str,
    ) -> RedisResult<Vec<Pending>> {
        group::pending_mine(conn, config, stream).await
    }

    /// The entries with these ids, without touching the group (`None`: trimmed or deleted).
    async fn fetch(
        &self,
        conn: &mut RedisConn,
        stream: &Arc<str>,
        ids: &[String],
    ) -> RedisResult<Vec<Option<RawEntry>>> {
        group::fetch(conn, stream, ids).await
    }

    /// Claims entries of `stream` idle longer than `claim_idle` (their consumer is taken for
    /// dead) to this consumer; returns how many.
    async fn claim_abandoned(
        &self,
        conn: &mut RedisConn,
        config: &ConsumerConfig,
        stream: &str,
    ) -> RedisResult<usize> {
        group::claim_abandoned(conn, config, stream).await
    }

    /// Takes pending entry `id` for its delivery number `deliveries`: false when it is no
    /// longer this consumer's.
    async fn take(
        &self,
        conn: &mut RedisConn,
        config: &ConsumerConfig,
        stream: &str,
        id: &str,
        deliveries: u64,
    ) -> RedisResult<bool> {
        group::take(conn, config, stream, id, deliveries).await
    }

    /// Restarts the idle time of the entries in hand (idle at least `min_idle`), so that no
    /// other consumer claims them while a slow handler runs.
    async fn keep_in_hand(
        &self,
        conn: &mut RedisConn,
        config: &ConsumerConfig,
        refs: &[EntryRef],
        min_idle: Duration,
    ) -> RedisResult<()> {
        group::keep_in_hand(conn, config, by_stream(refs), min_idle).await
    }

    /// Acknowledges `refs`.
    async fn ack(
        &self,
        conn: &mut RedisConn,
        config: &ConsumerConfig,
        refs: &[EntryRef],
    ) -> RedisResult<()> {
        group::ack(conn, config, refs).await
    }
}
