//! One claim cycle, the relay's hot path, as a plain async function (testable without actix).
//!
//! Everything happens in one short Postgres transaction, so each published event costs one
//! row write: lock a batch (`FOR UPDATE SKIP LOCKED`), publish it to Redis, mark it published
//! (or delete it), commit. A crash at any instant rolls the transaction back and releases the
//! locks; the events are claimed again, and the Redis-side dedup refuses the second XADD of
//! any that had reached their stream. An outage rolls back too: no attempt is consumed.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use actix::Addr;
use chrono::Utc;
use diesel_async::AsyncConnection;
use futures::future::join_all;
use uuid::Uuid;

use super::dispatcher::Dispatchers;
use super::messages::{Fault, PlanRetries, Publish};
use super::ordering::{self, Claimed};
use super::overlap::Overlap;
use super::retry::RetryScheduler;
use super::slots::SlotGate;
use crate::db::outbox::{self, BatchLimits, ClaimedRow, HeadScan};
use crate::db::{topics, DbError, Pool};
use crate::publish::{Outcome, PublishError, StreamEvent};
use crate::relay::sizing::SizeHint;

/// How many window-sized slices after the oldest window a fallback head scan may start at.
const AFTER_SLICES: i64 = 4;

/// What a cycle needs; cheap to clone into each cycle's future.
#[derive(Clone)]
pub struct CycleDeps {
    /// The shared pool.
    pub pool: Pool,
    /// The topic registry.
    pub dispatchers: Dispatchers,
    /// Where failures are planned.
    pub retry: Addr<RetryScheduler>,
    /// What one transaction may claim (`relay.batch_size`, `relay.batch_bytes`).
    pub limits: BatchLimits,
    /// The size of recent events, which narrows the row limit when they are big.
    pub size_hint: SizeHint,
    /// Delete published rows in the same transaction (`retention.published_for = 0s`).
    pub delete_on_publish: bool,
    /// Whether the mark may run beside the publish.
    pub overlap: Overlap,
    /// Cluster-wide claim slots (`relay.cluster_claims`).
    pub slots: SlotGate,
}

/// What one cycle did.
#[derive(Debug, Default, Clone)]
pub struct CycleReport {
    /// Events locked (heads and their runs).
    pub claimed: usize,
    /// Heads locked.
    pub heads: usize,
    /// The claim stopped at a limit (rows or bytes): more work may be waiting.
    pub full: bool,
    /// Newly appended, per topic.
    pub published: HashMap<String, u64>,
    /// Found already in their stream (an earlier attempt's XADD survived a crash).
    pub duplicates: usize,
    /// Failed through their own fault (retried later or dead).
    pub failed: usize,
    /// Left for a later cycle (behind a failure of their key, or their topic was paused).
    pub deferred: usize,
    /// Time from the first claim statement to commit.
    pub elapsed: Duration,
    /// Commit-to-stream latency of each newly published event.
    pub latencies: Vec<Duration>,
    /// The highest `seq` claimed: how far arrivals have got (see `quiet`).
    pub max_seq: Option<i64>,
    /// Every cluster-wide claim slot was held elsewhere: nothing was claimed.
    pub no_slot: bool,
}

/// Why a cycle was rolled back. Neither kind is an event's fault.
#[derive(Debug, thiserror::Error)]
pub enum CycleError {
    /// Postgres is unreachable or a statement failed.
    #[error(transparent)]
    Postgres(#[from] DbError),
    /// Redis is unreachable.
    #[error(transparent)]
    Redis(#[from] PublishError),
    /// The retry scheduler did not answer.
    #[error("retry scheduler unavailable: {0}")]
    Retry(String),
}

impl From<diesel::result::Error> for CycleError {
    fn from(e: diesel::result::Error) -> Self {
        CycleError::Postgres(DbError::Query(e))
    }
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

/// Moves a claimed row's text into the event that goes to Redis (no copy of the payload).
fn into_stream_event(row: ClaimedRow) -> StreamEvent {
    StreamEvent {
        id: row.id,
        topic: row.topic,
        key: row.partition_key,
        payload: row.payload,
        headers: row.headers,
        created_at: row.created_at,
    }
}

/// What settling an event needs once its outcome is known.
struct Settle {
    attempts: i32,
    created_at: chrono::DateTime<Utc>,
    /// See [`ClaimedRow::ctid`].
    ctid: String,
}

/// Claims, publishes and records one batch.
///
/// With overlap allowed (see [`Overlap`]) the mark runs beside the publish; if an event then
/// fails, that transaction rolls back and the batch is redone publish-first.
pub async fn run_once(deps: &CycleDeps) -> Result<CycleReport, CycleError> {
    let started = Instant::now();
    let mut conn = deps.pool.get().await.map_err(DbError::from)?;
    let first = attempt(&mut conn, deps, deps.overlap.allowed(), &HashSet::new()).await;
    let mut report = match first {
        Ok(report) => report,
        Err(Attempt::Failed(error)) => return Err(error),
        Err(Attempt::Redo(appended)) => {
            deps.overlap.be_careful();
            tracing::debug!(
                appended = appended.len(),
                "an event failed in an overlapped cycle: rolled back, publishing first"
            );
            attempt(&mut conn, deps, false, &appended)
                .await
                .map_err(Attempt::into_cycle_error)?
        }
    };
    report.elapsed = started.elapsed();
    Ok(report)
}

/// Why one transaction of a cycle ended without committing.
#[derive(Debug)]
enum Attempt {
    /// Rolled back for a reason that is nobody's fault.
    Failed(CycleError),
    /// An overlapped mark met a failing event; these events were appended before the rollback.
    Redo(HashSet<Uuid>),
}

impl Attempt {
    fn into_cycle_error(self) -> CycleError {
        match self {
            Attempt::Failed(error) => error,
            // Only an overlapped attempt asks for a redo, and the redo is not overlapped.
            Attempt::Redo(_) => CycleError::Retry("redo asked for a second redo".into()),
        }
    }
}

impl From<CycleError> for Attempt {
    fn from(e: CycleError) -> Self {
        Attempt::Failed(e)
    }
}

impl From<DbError> for Attempt {
    fn from(e: DbError) -> Self {
        Attempt::Failed(e.into())
    }
}

impl From<diesel::result::Error> for Attempt {
    fn from(e: diesel::result::Error) -> Self {
        Attempt::Failed(e.into())
    }
}

impl From<PublishError> for Attempt {
    fn from(e: PublishError) -> Self {
        Attempt::Failed(e.into())
    }
}

async fn attempt(
    conn: &mut diesel_async::AsyncPgConnection,
    deps: &CycleDeps,
    overlap: bool,
    appended: &HashSet<Uuid>,
) -> Result<CycleReport, Attempt> {
    conn.transaction::<_, Attempt, _>(async |c| claim_and_publish(c, deps, overlap, appended).await)
        .await
}

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
        // rows the others just locked; starting at one of a few slices spreads them out
        // (3 replicas: cycles of ~1,000 unkeyed heads took 400-1,000 ms, mostly that walk).
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
    // side by side on one connection): the runs no longer wait for the two lock statements. The runs are claimed
    // before the pauses are known; a topic paused since the heads' snapshot is rare, and its
    // runs only stay locked, unpublished, until this transaction ends (`assemble` drops
    // followers whose head is gone).
    let shared: &diesel_async::AsyncPgConnection = c;
    let (states, followers) = futures::try_join!(
        topics::lock_for_publish(shared, &topic_names),
        outbox::claim_runs(shared, &keyed, per_key, run_limits),
    )?;
    let paused = states.paused;
    if !paused.is_empty() {
        heads.retain(|h| !paused.contains(&h.topic));
        deferred += head_count - heads.len();
    }
    Ok(Claim {
        chains: ordering::assemble(heads, followers),
        heads: head_count,
        deferred,
        full,
        maxlen: states.maxlen,
    })
}

async fn claim_and_publish(
    c: &mut diesel_async::AsyncPgConnection,
    deps: &CycleDeps,
    overlap: bool,
    appended: &HashSet<Uuid>,
) -> Result<CycleReport, Attempt> {
    let mut report = CycleReport::default();
    if !deps.slots.admit(c).await? {
        // Other claimers fill every slot: they drain the backlog; this one waits for a wake.
        report.no_slot = true;
        return Ok(report);
    }
    let Claim {
        chains,
        heads,
        deferred,
        maxlen,
        full,
    } = claim_chains(c, deps.size_hint.limits(deps.limits)).await?;
    deps.size_hint.observe(
        chains.iter().map(Vec::len).sum(),
        chains.iter().flatten().map(outbox::row_bytes).sum(),
    );
    report.heads = heads;
    report.full = full;
    report.deferred = deferred;
    if chains.is_empty() {
        tracing::trace!(deferred = report.deferred, "cycle claimed nothing");
        return Ok(report);
    }
    let t_claimed = Instant::now();
    report.max_seq = chains.iter().flatten().map(|row| row.seq).max();

    // Per topic (by slot): its name, its chains for the dispatcher, and what settling needs
    // of each event in the order the dispatcher answers in (chains flattened), so outcomes
    // are matched by position, not looked up.
    let mut topic_slot: HashMap<String, usize> = HashMap::new();
    let mut topic_names: Vec<String> = Vec::new();
    let mut publishes: Vec<Vec<Vec<StreamEvent>>> = Vec::new();
    let mut settles: Vec<Vec<Settle>> = Vec::new();
    for mut chain in chains {
        report.claimed += chain.len();
        let Some(first) = chain.first() else { continue };
        let slot = match topic_slot.get(&first.topic) {
            Some(&slot) => slot,
            None => {
                topic_slot.insert(first.topic.clone(), topic_names.len());
                topic_names.push(first.topic.clone());
                publishes.push(Vec::new());
                settles.push(Vec::new());
                topic_names.len() - 1
            }
        };
        settles[slot].extend(chain.iter_mut().map(|row| Settle {
            attempts: row.attempts,
            created_at: row.created_at,
            ctid: std::mem::take(&mut row.ctid),
        }));
        publishes[slot].push(chain.into_iter().map(into_stream_event).collect());
    }

    let calls = topic_names.iter().zip(publishes).map(|(topic, chains)| {
        let maxlen = maxlen.get(topic).copied();
        deps.dispatchers.publish(topic, Publish { chains, maxlen })
    });
    let results = if overlap {
        let all: Vec<&str> = settles.iter().flatten().map(|e| e.ctid.as_str()).collect();
        let (results, marked) = futures::join!(join_all(calls), settle(c, deps, &all));
        marked?;
        results
    } else {
        join_all(calls).await
    };
    let t_publish = t_claimed.elapsed();

    let now = Utc::now();
    let mut done: Vec<&str> = Vec::with_capacity(report.claimed);
    let mut faults: Vec<Fault> = Vec::new();
    let mut unsettled = false;
    let mut newly: HashSet<Uuid> = HashSet::new();
    for ((topic, events), result) in topic_names.iter().zip(&settles).zip(results) {
        let outcomes = result?;
        if outcomes.len() != events.len() {
            return Err(CycleError::Redis(PublishError::Outage(format!(
                "{} outcomes for {} events of {topic}",
                outcomes.len(),
                events.len()
            )))
            .into());
        }
        let mut published = 0;
        for ((id, outcome), event) in outcomes.into_iter().zip(events) {
            match outcome {
                Outcome::Published => {
                    if overlap {
                        newly.insert(id);
                    }
                    published += 1;
                    report
                        .latencies
                        .push((now - event.created_at).to_std().unwrap_or_default());
                    done.push(&event.ctid);
                }
                // Appended by this cycle's own overlapped attempt, rolled back since.
                Outcome::Duplicate if appended.contains(&id) => {
                    published += 1;
                    done.push(&event.ctid);
                }
                Outcome::Duplicate => {
                    report.duplicates += 1;
                    done.push(&event.ctid);
                }
                Outcome::Failed(error) => {
                    unsettled = true;
                    report.failed += 1;
                    faults.push(Fault {
                        id,
                        attempts: event.attempts,
                        error,
                    });
                }
                Outcome::Skipped => {
                    unsettled = true;
                    report.deferred += 1;
                }
            }
        }
        if published > 0 {
            *report.published.entry(topic.clone()).or_default() += published;
        }
    }
    if overlap {
        if unsettled {
            // The mark also covered events that must stay pending: roll it all back.
            return Err(Attempt::Redo(newly));
        }
    } else {
        settle(c, deps, &done).await?;
    }
    tracing::trace!(?t_publish, t_mark = ?t_claimed.elapsed(), overlap, "cycle phases after claim");
    if !faults.is_empty() {
        let failures = deps
            .retry
            .send(PlanRetries { faults })
            .await
            .map_err(|e| CycleError::Retry(e.to_string()))?;
        outbox::schedule_retry(c, &failures).await?;
    }
    Ok(report)
}

/// Marks published (or deletes, in `published_for = 0s` mode) the rows at `ctids`.
async fn settle(
    c: &mut diesel_async::AsyncPgConnection,
    deps: &CycleDeps,
    ctids: &[&str],
) -> Result<usize, DbError> {
    if deps.delete_on_publish {
        outbox::delete_published(c, ctids).await
    } else {
        outbox::mark_published(c, ctids).await
    }
}
