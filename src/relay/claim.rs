//! The claim stage of a cycle, in the caller's transaction: lock a batch of heads with
//! `FOR UPDATE SKIP LOCKED` (the oldest window first, a later slice when it is blocked), take
//! the claimed topics' shared locks (a pause waits for them) and the runs behind keyed heads,
//! drop what belongs to paused topics, and assemble the chains by the per-key ordering rule.
//!
//! The rule, as pure functions: the claim SQL locks *heads*: pending events with no earlier
//! pending event of their (topic, partition key). [`assemble`] turns the heads plus the
//! locked events that follow them into *chains*: an unkeyed event alone, or a key's head
//! followed by its next events in seq order, up to the first one not yet due. A chain is
//! published in order and stops at its first failure, so an event never reaches its stream
//! ahead of an earlier one of its key.

use std::collections::HashMap;

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
        chains: assemble(heads, followers),
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

/// What the rule needs to know of a claimed event.
pub trait Claimed {
    /// The topic.
    fn topic(&self) -> &str;
    /// The partition key.
    fn key(&self) -> Option<&str>;
    /// Insertion order.
    fn seq(&self) -> i64;
    /// `available_at` has passed.
    fn ready(&self) -> bool;
}

/// Builds chains from claimed heads and the followers locked behind them. Chains come out in
/// the order of their heads' seq; followers of keys without a head are dropped.
pub fn assemble<E: Claimed>(mut heads: Vec<E>, mut followers: Vec<E>) -> Vec<Vec<E>> {
    heads.sort_by_key(|e| e.seq());
    followers.sort_by_key(|e| e.seq());
    // Each follower's chain, looked up with keys borrowed from the rows before any row moves.
    let slots: Vec<Option<usize>> = {
        let by_key: HashMap<(&str, &str), usize> = heads
            .iter()
            .enumerate()
            .filter_map(|(n, head)| head.key().map(|key| ((head.topic(), key), n)))
            .collect();
        followers
            .iter()
            .map(|f| {
                f.key()
                    .and_then(|key| by_key.get(&(f.topic(), key)).copied())
            })
            .collect()
    };
    let mut chains: Vec<Vec<E>> = heads.into_iter().map(|head| vec![head]).collect();
    let mut closed = vec![false; chains.len()];
    for (follower, slot) in followers.into_iter().zip(slots) {
        let Some(slot) = slot else { continue };
        let last_seq = chains[slot].last().map(|e| e.seq()).unwrap_or(i64::MAX);
        if closed[slot] || follower.seq() <= last_seq {
            continue;
        }
        if !follower.ready() {
            closed[slot] = true;
            continue;
        }
        chains[slot].push(follower);
    }
    chains
}

/// The claim rule itself, for the model in tests and for documentation: `event` may be
/// published when no pending event of the same topic and key has a smaller seq.
pub fn is_claimable<E: Claimed>(event: &E, pending: &[E]) -> bool {
    match event.key() {
        None => true,
        Some(key) => !pending
            .iter()
            .any(|p| p.topic() == event.topic() && p.key() == Some(key) && p.seq() < event.seq()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone, PartialEq)]
    struct Ev {
        topic: String,
        key: Option<String>,
        seq: i64,
        ready: bool,
    }

    impl Claimed for Ev {
        fn topic(&self) -> &str {
            &self.topic
        }
        fn key(&self) -> Option<&str> {
            self.key.as_deref()
        }
        fn seq(&self) -> i64 {
            self.seq
        }
        fn ready(&self) -> bool {
            self.ready
        }
    }

    fn ev(topic: &str, key: Option<&str>, seq: i64) -> Ev {
        Ev {
            topic: topic.into(),
            key: key.map(Into::into),
            seq,
            ready: true,
        }
    }

    #[test]
    fn run_stops_at_first_event_not_due() {
        let heads = vec![ev("t", Some("k"), 1)];
        let mut late = ev("t", Some("k"), 3);
        late.ready = false;
        let followers = vec![ev("t", Some("k"), 2), late, ev("t", Some("k"), 4)];
        let chains = assemble(heads, followers);
        assert_eq!(chains.len(), 1);
        assert_eq!(
            chains[0].iter().map(|e| e.seq).collect::<Vec<_>>(),
            vec![1, 2]
        );
    }

    #[test]
    fn same_key_on_other_topic_is_another_chain() {
        let heads = vec![
            ev("a", Some("k"), 1),
            ev("b", Some("k"), 2),
            ev("a", None, 3),
        ];
        let followers = vec![ev("b", Some("k"), 5), ev("a", Some("k"), 4)];
        let chains = assemble(heads, followers);
        let seqs: Vec<Vec<i64>> = chains
            .iter()
            .map(|c| c.iter().map(|e| e.seq).collect())
            .collect();
        assert_eq!(seqs, vec![vec![1, 4], vec![2, 5], vec![3]]);
    }

    // A model of the whole relay loop: events are inserted, a "relay" repeatedly claims
    // heads (the SQL rule), extends them into chains (assemble), and publishes each chain
    // until an injected failure; failed events go back to pending. Per-key order in the
    // resulting stream must equal insertion order, whatever fails.
    proptest! {
        #[test]
        fn stream_keeps_per_key_order_through_failures(
            keys in proptest::collection::vec(proptest::option::of(0u8..4), 1..60),
            failures in proptest::collection::vec(any::<bool>(), 0..400),
            batch in 1usize..8,
        ) {
            let all: Vec<Ev> = keys.iter().enumerate().map(|(i, k)| {
                ev(if i % 3 == 0 { "x" } else { "y" }, None, i as i64 + 1)
                    .with_key(k.map(|k| format!("k{k}")))
            }).collect();
            let mut pending = all.clone();
            let mut stream: Vec<Ev> = Vec::new();
            let mut fail = failures.into_iter();
            let mut rounds = 0;
            while !pending.is_empty() && rounds < 2_000 {
                rounds += 1;
                let mut heads: Vec<Ev> = pending.iter()
                    .filter(|e| is_claimable(*e, &pending))
                    .cloned().collect();
                heads.sort_by_key(|e| e.seq);
                heads.truncate(batch);
                let followers: Vec<Ev> = pending.iter()
                    .filter(|e| !heads.contains(e))
                    .cloned().collect();
                for chain in assemble(heads, followers) {
                    for e in chain {
                        if fail.next().unwrap_or(false) {
                            break;
                        }
                        pending.retain(|p| p.seq != e.seq);
                        stream.push(e);
                    }
                }
            }
            prop_assert!(pending.is_empty(), "every event is published eventually");
            for key in 0u8..4 {
                for topic in ["x", "y"] {
                    let k = format!("k{key}");
                    let published: Vec<i64> = stream.iter()
                        .filter(|e| e.topic == topic && e.key.as_deref() == Some(k.as_str()))
                        .map(|e| e.seq).collect();
                    let mut sorted = published.clone();
                    sorted.sort();
                    prop_assert_eq!(published, sorted);
                }
            }
        }
    }

    impl Ev {
        fn with_key(mut self, key: Option<String>) -> Self {
            self.key = key;
            self
        }
    }
}
