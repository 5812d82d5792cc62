//! A batch's way through a cycle, in two halves around the publish.
//!
//! **Claim**, in the caller's transaction: lock a batch of heads with `FOR UPDATE SKIP LOCKED`
//! (the oldest window first, a later slice when it is blocked), take the claimed topics' shared
//! locks (a pause waits for them) and the runs behind keyed heads, drop what belongs to paused
//! topics, and assemble the chains by the per-key ordering rule.
//!
//! The rule, as pure functions: the claim SQL locks *heads*: pending events with no earlier
//! pending event of their (topic, partition key). [`assemble`] turns the heads plus the
//! locked events that follow them into *chains*: an unkeyed event alone, or a key's head
//! followed by its next events in seq order, up to the first one not yet due. A chain is
//! published in order and stops at its first failure, so an event never reaches its stream
//! ahead of an earlier one of its key.
//!
//! **Settle**, pure: the chains grouped by topic for the dispatchers ([`group_by_topic`]), and
//! the dispatchers' outcomes matched back to the rows they came from ([`settle`]). No database
//! and no Redis there, so every way a publish can end is unit-tested on made-up outcomes.

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::messages::{Fault, TopicOutage};
use crate::db::outbox::{self, BatchLimits, ClaimedRow, HeadScan};
use crate::db::{topics, DbError};
use crate::publish::{Outcome, StreamEvent};
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
mod claim_tests {
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

/// What settling one event needs once its outcome is known.
#[derive(Debug, Clone)]
pub struct Row {
    /// Failed attempts before this one.
    pub attempts: i32,
    /// When the producer wrote it (for the commit-to-stream latency).
    pub created_at: DateTime<Utc>,
    /// See [`ClaimedRow::ctid`].
    pub ctid: String,
}

/// One topic's share of a batch.
#[derive(Debug)]
pub struct TopicShare {
    /// The topic.
    pub topic: String,
    /// Chains in order, for the dispatcher: a key's run, or a single unkeyed event.
    pub chains: Vec<Vec<StreamEvent>>,
    /// The same events' rows, in the order the dispatcher answers in (chains flattened), so
    /// outcomes are matched by position, not looked up.
    pub rows: Vec<Row>,
}

/// A claimed batch, by topic in order of first appearance.
#[derive(Debug, Default)]
pub struct Grouped {
    /// Per topic.
    pub shares: Vec<TopicShare>,
    /// Events in the batch.
    pub claimed: usize,
    /// The highest `seq` claimed.
    pub max_seq: Option<i64>,
}

/// Moves a claimed row's text into the event that goes to Redis (no copy of the payload).
fn into_stream_event(mut row: ClaimedRow) -> (StreamEvent, Row) {
    let settle = Row {
        attempts: row.attempts,
        created_at: row.created_at,
        ctid: std::mem::take(&mut row.ctid),
    };
    let event = StreamEvent {
        id: row.id,
        topic: row.topic,
        key: row.partition_key,
        payload: row.payload,
        headers: row.headers,
        created_at: row.created_at,
    };
    (event, settle)
}

/// Groups chains by topic, keeping each topic's chains in their order.
pub fn group_by_topic(chains: Vec<Vec<ClaimedRow>>) -> Grouped {
    let mut grouped = Grouped::default();
    let mut slot_of: HashMap<String, usize> = HashMap::new();
    for chain in chains {
        let Some(first) = chain.first() else { continue };
        grouped.claimed += chain.len();
        grouped.max_seq = chain.iter().map(|row| row.seq).chain(grouped.max_seq).max();
        let slot = *slot_of.entry(first.topic.clone()).or_insert_with(|| {
            grouped.shares.push(TopicShare {
                topic: first.topic.clone(),
                chains: Vec::new(),
                rows: Vec::new(),
            });
            grouped.shares.len() - 1
        });
        let share = &mut grouped.shares[slot];
        let (events, rows): (Vec<_>, Vec<_>) = chain.into_iter().map(into_stream_event).unzip();
        share.rows.extend(rows);
        share.chains.push(events);
    }
    grouped
}

/// What the outcomes of a batch come to.
#[derive(Debug, Default)]
pub struct Settled<'a> {
    /// Rows to mark published (or delete): appended now, or found in their stream already.
    pub done: Vec<&'a str>,
    /// Events that failed through their own fault, for the retry plan.
    pub faults: Vec<Fault>,
    /// Newly appended, per topic.
    pub published: HashMap<String, u64>,
    /// Commit-to-stream latency of each newly appended event.
    pub latencies: Vec<Duration>,
    /// Found in their stream already (an earlier attempt's XADD survived a crash).
    pub duplicates: usize,
    /// Failed through their own fault.
    pub failed: usize,
    /// Not attempted (behind a failure of their key in this batch).
    pub deferred: usize,
    /// Some events must stay pending (failed or not attempted).
    pub unsettled: bool,
    /// Topics whose publish failed as a whole (their Redis node unreachable): their rows wait,
    /// no attempt counted, while the other topics' outcomes are settled.
    pub postponed: Vec<Postponed<'a>>,
}

/// One topic's rows, left pending after an outage of its own.
#[derive(Debug)]
pub struct Postponed<'a> {
    /// The topic.
    pub topic: &'a str,
    /// Its rows in the batch.
    pub ctids: Vec<&'a str>,
    /// What happened, and how long they wait.
    pub outage: TopicOutage,
}

/// The dispatcher answered with a different number of outcomes than it was given events.
#[derive(Debug, thiserror::Error)]
#[error("{outcomes} outcomes for {events} events of {topic}")]
pub struct Mismatch {
    topic: String,
    outcomes: usize,
    events: usize,
}

/// What one topic's dispatcher answered.
pub type TopicResult = Result<Vec<(Uuid, Outcome)>, TopicOutage>;

/// Matches each topic's outcomes to its rows. A topic whose publish failed as a whole is postponed, all its rows.
pub fn settle<'a>(
    rows: impl IntoIterator<Item = (&'a str, &'a [Row])>,
    results: Vec<TopicResult>,
    now: DateTime<Utc>,
) -> Result<Settled<'a>, Mismatch> {
    let mut settled = Settled::default();
    for ((topic, rows), result) in rows.into_iter().zip(results) {
        let outcomes = match result {
            Ok(outcomes) => outcomes,
            Err(outage) => {
                settled.unsettled = true;
                settled.deferred += rows.len();
                settled.postponed.push(Postponed {
                    topic,
                    ctids: rows.iter().map(|r| r.ctid.as_str()).collect(),
                    outage,
                });
                continue;
            }
        };
        if outcomes.len() != rows.len() {
            return Err(Mismatch {
                topic: topic.to_string(),
                outcomes: outcomes.len(),
                events: rows.len(),
            });
        }
        let mut published = 0;
        for ((id, outcome), row) in outcomes.into_iter().zip(rows) {
            match outcome {
                Outcome::Published => {
                    published += 1;
                    settled
                        .latencies
                        .push((now - row.created_at).to_std().unwrap_or_default());
                    settled.done.push(&row.ctid);
                }
                Outcome::Duplicate => {
                    settled.duplicates += 1;
                    settled.done.push(&row.ctid);
                }
                Outcome::Failed(error) => {
                    settled.unsettled = true;
                    settled.failed += 1;
                    settled.faults.push(Fault {
                        id,
                        attempts: row.attempts,
                        error,
                    });
                }
                Outcome::Skipped => {
                    settled.unsettled = true;
                    settled.deferred += 1;
                }
            }
        }
        if published > 0 {
            *settled.published.entry(topic.to_string()).or_default() += published;
        }
    }
    Ok(settled)
}

#[cfg(test)]
mod settle_tests {
    use super::*;

    fn row(topic: &str, key: Option<&str>, seq: i64) -> ClaimedRow {
        ClaimedRow::for_test(topic, key, seq, 1)
    }

    fn rows(ctids: &[&str]) -> Vec<Row> {
        ctids
            .iter()
            .map(|c| Row {
                attempts: 2,
                created_at: Utc::now() - chrono::Duration::milliseconds(5),
                ctid: (*c).into(),
            })
            .collect()
    }

    #[test]
    fn grouping_keeps_each_topics_chains_in_order() {
        let chains = vec![
            vec![row("a", Some("k"), 1), row("a", Some("k"), 4)],
            vec![row("b", None, 2)],
            vec![row("a", None, 3)],
            vec![],
        ];
        let g = group_by_topic(chains);
        assert_eq!(g.claimed, 4);
        assert_eq!(g.max_seq, Some(4));
        let topics: Vec<&str> = g.shares.iter().map(|s| s.topic.as_str()).collect();
        assert_eq!(topics, ["a", "b"]);
        let a = &g.shares[0];
        assert_eq!(a.chains.len(), 2);
        let ctids: Vec<&str> = a.rows.iter().map(|r| r.ctid.as_str()).collect();
        assert_eq!(
            ctids,
            ["(0,1)", "(0,4)", "(0,3)"],
            "rows follow the chains flattened"
        );
    }

    #[test]
    fn each_outcome_lands_where_it_belongs() {
        let a = rows(&["a1", "a2", "a3", "a4"]);
        let b = rows(&["b1"]);
        let ids: Vec<Uuid> = (0..5).map(|_| Uuid::new_v4()).collect();
        let outcomes = vec![
            Ok(vec![
                (ids[0], Outcome::Published),
                (ids[1], Outcome::Duplicate),
                (ids[2], Outcome::Failed("WRONGTYPE".into())),
                (ids[3], Outcome::Skipped),
            ]),
            Ok(vec![(ids[4], Outcome::Published)]),
        ];
        let s = settle(
            [("a", a.as_slice()), ("b", b.as_slice())],
            outcomes,
            Utc::now(),
        )
        .expect("as many outcomes as events");
        assert_eq!(s.done, ["a1", "a2", "b1"]);
        assert_eq!(s.published.get("a"), Some(&1));
        assert_eq!(s.published.get("b"), Some(&1));
        assert_eq!((s.duplicates, s.failed, s.deferred), (1, 1, 1));
        assert!(s.unsettled);
        assert_eq!(s.faults.len(), 1);
        assert_eq!(s.faults[0].id, ids[2]);
        assert_eq!(s.faults[0].attempts, 2, "attempts before this one");
        assert_eq!(s.latencies.len(), 2);
    }

    #[test]
    fn a_topic_whose_node_is_down_waits_whole_while_the_others_settle() {
        let a = rows(&["a1", "a2"]);
        let b = rows(&["b1", "b2", "b3"]);
        let outage = TopicOutage {
            error: crate::publish::PublishError::Outage("Connection refused".into()),
            retry_in: Duration::from_millis(400),
        };
        let published = Uuid::new_v4();
        let s = settle(
            [("a", a.as_slice()), ("b", b.as_slice())],
            vec![
                Ok(vec![
                    (published, Outcome::Published),
                    (Uuid::new_v4(), Outcome::Duplicate),
                ]),
                Err(outage),
            ],
            Utc::now(),
        )
        .expect("settles");
        assert_eq!(s.done, ["a1", "a2"], "the healthy topic is settled");
        assert!(s.faults.is_empty(), "an outage charges nobody");
        assert_eq!((s.deferred, s.failed), (3, 0));
        assert!(s.unsettled);
        assert_eq!(s.postponed.len(), 1);
        assert_eq!(s.postponed[0].topic, "b");
        assert_eq!(s.postponed[0].ctids, ["b1", "b2", "b3"]);
        assert_eq!(s.postponed[0].outage.retry_in, Duration::from_millis(400));
    }

    #[test]
    fn a_short_answer_is_refused() {
        let a = rows(&["a1", "a2"]);
        let outcomes = vec![Ok(vec![(Uuid::new_v4(), Outcome::Published)])];
        let err = settle([("a", a.as_slice())], outcomes, Utc::now())
            .expect_err("one outcome for two events");
        assert_eq!(err.to_string(), "1 outcomes for 2 events of a");
    }
}
