//! The claim stage of a cycle, in the caller's transaction: lock a batch of heads with
//! `FOR UPDATE SKIP LOCKED` (the oldest window first, a later slice when it is blocked), take
//! the claimed topics' shared locks (a pause waits for them) and the runs behind keyed heads,
//! and drop what belongs to paused topics.

use std::collections::HashMap;

use super::ordering::{self, Claimed};
use crate::db::outbox::{self, BatchLimits, ClaimedRow, HeadScan};
use crate::db::{topics, DbError};
use crate::relay::sizing::SizeHint;

/// How many window-sized slices after the oldest window a fallback head scan may start at.
const AFTER_SLICES: i64 = 4;

/// The claim half of a cycle, in the caller's transaction: locks heads, drops paused
/// topics (after taking their shared locks), locks the runs behind keyed heads.
#[derive(Debug, Default)]
pub struct Claim {
    /// Chains in order of their heads.
    pub chains: Vec<Vec<ClaimedRow>>,
    /// Heads locked (a full batch means more is waiting).
    pub heads: usize,
    /// Heads left for later (their topic is paused).
    pub deferred: usize,
    /// The heads reached a limit (rows or bytes): more may be waiting.
    pub full: bool,
    /// Per-topic trimming of the claimed topics.
    pub maxlen: HashMap<String, u64>,
    /// Recorded partition counts of the claimed topics (read under the same lock as the pause
    /// flag, so a repartition waits for this batch).
    pub partitions: HashMap<String, u32>,
}

/// Claims one batch within `limits`; see [`Claim`].
pub async fn claim_chains(
    c: &mut diesel_async::AsyncPgConnection,
    limits: BatchLimits,
) -> Result<Claim, DbError> {
    let window = limits.rows * 4;
    let mut heads = outbox::claim_heads(c, limits, HeadScan::Oldest(window)).await?;
    if heads.is_empty() && outbox::window_has_waiting(c, window).await? {
        // The oldest window is blocked: events not due yet (a failing key's head waiting
        // for its retry, and that key's followers) or paused topics. Look further, so they
        // never starve the rest. When it holds neither, every key head in it is locked by
        // another claimer, which is making progress: scanning on (an O(backlog) walk behind
        // a hot key) would only burn Postgres time.
        //
        // Concurrent claimers that all scanned right after it would each walk past the
        // rows the others just locked; starting at one of a few slices spreads them out.
        // Any start is correct: claimability, not scan position, keeps per-key order; and
        // every row is still reached, by the scans that draw the first slice. No second scan
        // when a later slice is empty: it would walk the same rows again.
        let slice = rand::random_range(0..AFTER_SLICES);
        heads = outbox::claim_heads(c, limits, HeadScan::After(window * (1 + slice))).await?;
    }
    let head_bytes: i64 = heads.iter().map(outbox::row_bytes).sum();
    let full = heads.len() as i64 >= limits.rows || head_bytes >= limits.bytes;
    let head_count = heads.len();
    let mut deferred = 0;
    if heads.is_empty() {
        return Ok(Claim::default());
    }
    let mut topic_names: Vec<&str> = heads.iter().map(|h| h.topic.as_str()).collect();
    topic_names.sort_unstable();
    topic_names.dedup();
    let keyed: Vec<(String, String, i64)> = heads
        .iter()
        .filter_map(|h| {
            h.partition_key
                .as_ref()
                .map(|k| (h.topic.clone(), k.clone(), h.seq))
        })
        .collect();
    // Runs get their own budget of a batch's rows: with many busy keys, every head brings
    // its share of followers, so keys advance by more than one event per transaction. Bytes
    // are one budget for the whole batch: what the heads left.
    let left = limits.bytes - head_bytes;
    let run_limits = BatchLimits {
        rows: SizeHint::run_rows(limits, heads.len(), head_bytes, left),
        bytes: left,
    };
    let per_key = if keyed.is_empty() {
        0
    } else {
        (run_limits.rows + keyed.len() as i64 - 1) / keyed.len() as i64
    };
    // The topics' locks and the runs go out together (diesel-async pipelines futures polled
    // side by side on one connection), so the runs do not wait for the lock statements. The runs are claimed
    // before the pauses are known; a topic paused since the heads' snapshot is rare, and its
    // runs only stay locked, unpublished, until this transaction ends (`assemble` drops
    // followers whose head is gone).
    let shared: &diesel_async::AsyncPgConnection = c;
    let (states, mut followers) = futures::try_join!(
        topics::lock_for_publish(shared, &topic_names),
        outbox::claim_runs(shared, &keyed, per_key, run_limits),
    )?;
    let paused = states.paused;
    if !paused.is_empty() {
        heads.retain(|h| !paused.contains(&h.topic));
        deferred += head_count - heads.len();
    }
    // A topic being repaired: its newer events wait behind the lost ones (heads were
    // filtered in their own statement; a barrier set since, and runs, are filtered here).
    let barrier = &states.repair_below;
    if !barrier.is_empty() {
        let beyond = |r: &ClaimedRow| barrier.get(&r.topic).is_some_and(|b| r.seq > *b);
        let before = heads.len();
        heads.retain(|h| !beyond(h));
        deferred += before - heads.len();
        followers.retain(|f| !beyond(f));
    }
    Ok(Claim {
        chains: ordering::assemble(heads, followers),
        heads: head_count,
        deferred,
        full,
        maxlen: states.maxlen,
        partitions: states.partitions,
    })
}

impl Claimed for ClaimedRow {
    fn topic(&self) -> &str {
        &self.topic
    }
    fn key(&self) -> Option<&str> {
        self.partition_key.as_deref()
    }
    fn seq(&self) -> i64 {
        self.seq
    }
    fn ready(&self) -> bool {
        self.ready
    }
}
