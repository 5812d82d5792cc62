//! One claim cycle, the relay's hot path, as a plain async function (testable without actix),
//! in stages: read the publish gate (`gate`), claim and group by topic (`batch`), publish
//! (each topic through its dispatcher, see `topics` and `dispatcher`), repair the streams found to have
//! lost entries (`repair`), settle the outcomes (`batch`, pure), apply (mark, retry plan,
//! commit).
//!
//! Everything happens in one short Postgres transaction, so each published event costs one
//! row write: lock a batch (`FOR UPDATE SKIP LOCKED`), publish it to Redis, mark it published
//! (or delete it), commit. A crash at any instant rolls the transaction back and releases the
//! locks; the events are claimed again, and the Redis-side dedup refuses the second XADD of
//! any that had reached their stream. An outage rolls back too: no attempt is consumed.
//!
//! An outage of some topics only (on a Redis Cluster, the master holding their streams is
//! down) does not hold the others: those topics' events are postponed, without an attempt
//! counted, and the rest of the batch commits. On one Redis server, where every topic shares
//! the outage, a batch whose every topic failed rolls back as a whole.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use chrono::Utc;
use diesel_async::AsyncPgConnection;
use futures::future::join_all;

use super::batch::{self, claim_chains, Claim, Row, Settled, TopicResult};
use super::gate::PublishGate;
use super::messages::Publish;
use super::overlap::Overlap;
use super::registrar::Registered;
use super::repair::{self, RepairSettings};
use super::retry;
use super::slots::SlotGate;
use super::topics::Topics;
use crate::config::RetrySettings;
use crate::db::outbox::{self, BatchLimits, Failure};
use crate::db::{Db, DbError};
use crate::publish::PublishError;
use crate::relay::sizing::SizeHint;

/// What a cycle needs; cheap to clone into each cycle's future.
#[derive(Clone)]
pub struct CycleDeps {
    /// The shared pool.
    pub db: Db,
    /// The topic registry: each topic's dispatcher.
    pub topics: Topics,
    /// The topics this replica has recorded in `outbox_topics`.
    pub registered: Registered,
    /// Whether anything may be sent to Redis now.
    pub gate: PublishGate,
    /// What repairing a stream that lost entries needs.
    pub repair: RepairSettings,
    /// The retry policy (`retry.*`), applied in the cycle's own transaction.
    pub retry: RetrySettings,
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
    /// `database.wait_standbys` and `database.wait_standbys_timeout`.
    pub standbys: (u32, Duration),
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
    /// Left for a later cycle (behind a failure of their key, or their topic was paused).
    pub deferred: usize,
    /// Failed through their own fault: retried later, or dead.
    pub failures: Vec<Failure>,
    /// Time from the first claim statement to commit.
    pub elapsed: Duration,
    /// Commit-to-stream latency of each newly published event.
    pub latencies: Vec<Duration>,
    /// The highest `seq` claimed: how far arrivals have got (see `quiet`).
    pub max_seq: Option<i64>,
    /// Every cluster-wide claim slot was held elsewhere: nothing was claimed.
    pub no_slot: bool,
    /// Some topics' events were postponed after an outage of their own; the soonest of them
    /// comes due after this.
    pub postponed_for: Option<Duration>,
    /// Topics this cycle recorded in `outbox_topics` (their first batch on this replica).
    pub registered: Vec<String>,
}

impl CycleReport {
    /// Events newly appended, all topics.
    pub fn published_total(&self) -> u64 {
        self.published.values().sum()
    }

    /// The earliest retry (or postponed event) this cycle scheduled.
    pub fn next_retry(&self) -> Option<Duration> {
        self.failures
            .iter()
            .filter(|f| !f.dead)
            .map(|f| Duration::from_millis(u64::try_from(f.delay_ms).unwrap_or(0)))
            .chain(self.postponed_for)
            .min()
    }
}

/// Why a cycle was rolled back. No kind is an event's fault.
#[derive(Debug, thiserror::Error)]
pub enum CycleError {
    /// Postgres is unreachable or a statement failed.
    #[error(transparent)]
    Postgres(#[from] DbError),
    /// Redis is unreachable.
    #[error(transparent)]
    Redis(#[from] PublishError),
}

impl CycleError {
    /// A wait for `database.wait_standbys` in vain: logged by the wait, not as an outage.
    pub fn is_standbys(&self) -> bool {
        matches!(self, CycleError::Postgres(DbError::Standbys(_)))
    }
}

impl From<diesel::result::Error> for CycleError {
    fn from(e: diesel::result::Error) -> Self {
        CycleError::Postgres(DbError::Query(e))
    }
}

/// Claims, publishes and records one batch.
///
/// With overlap allowed (see [`Overlap`]) the mark runs beside the publish, after a savepoint;
/// if an event then fails, only the mark is undone and the outcomes are settled the careful
/// way in the same transaction, with the batch's rows still locked.
pub async fn run_once(deps: &CycleDeps) -> Result<CycleReport, CycleError> {
    super::faults::panic_at("cycle-panic");
    super::faults::stall_at("cycle-stall").await;
    if deps.gate.held().is_some() {
        // Nothing could be confirmed, or Redis is too full: claim nothing (readiness says
        // why, once).
        return Ok(CycleReport::default());
    }
    let started = Instant::now();
    let mut conn = deps.db.conn().await?;
    let overlap = deps.overlap.allowed();
    // The transaction sets the lease as its own timeouts (`Session::begin_sql`): also through
    // a transaction pooler, Postgres ends it when this replica hangs inside it.
    let mut report = conn
        .transaction::<_, CycleError, _>(async |c| claim_and_publish(c, deps, overlap).await)
        .await?;
    deps.registered
        .insert_all(std::mem::take(&mut report.registered));
    report.elapsed = started.elapsed();
    Ok(report)
}

/// The stages, in the cycle's transaction: what each stage decides is pure
/// ([`PublishPlan::of`], `batch::settle`, [`marking`], `retry::plan_all`); this runs the
/// statements and calls between them.
async fn claim_and_publish(
    c: &mut AsyncPgConnection,
    deps: &CycleDeps,
    overlap: bool,
) -> Result<CycleReport, CycleError> {
    let mut report = CycleReport::default();
    if !deps.slots.admit(c).await? {
        // Other claimers fill every slot: they drain the backlog; this one waits for a wake.
        report.no_slot = true;
        return Ok(report);
    }
    let claim = claim_chains(c, deps.size_hint.limits(deps.limits)).await?;
    deps.size_hint.observe(
        claim.chains.iter().map(Vec::len).sum(),
        claim.chains.iter().flatten().map(outbox::row_bytes).sum(),
    );
    report.heads = claim.heads;
    report.full = claim.full;
    report.deferred = claim.deferred;
    if claim.chains.is_empty() {
        tracing::trace!(deferred = report.deferred, "cycle claimed nothing");
        return Ok(report);
    }
    let PublishPlan {
        calls,
        rows,
        claimed,
        max_seq,
    } = PublishPlan::of(claim, |topic| deps.topics.configured_partitions(topic));
    report.claimed = claimed;
    report.max_seq = max_seq;
    register_new_topics(c, deps, &calls, &mut report).await?;
    if let Some(held) = deps.gate.held() {
        // Held since the cycle began: nothing is sent, the batch rolls back.
        return Err(CycleError::Redis(PublishError::Outage(held)));
    }
    wait_standbys(c, deps.standbys).await?;
    let results = publish(c, deps, calls, overlap.then_some(&rows)).await?;
    let results = repair::stage(deps.topics.publisher(), &deps.db, deps.repair, results).await;
    if let Some(outage) = whole_outage(deps, &results) {
        return Err(CycleError::Redis(outage));
    }
    let settled = batch::settle(
        rows.iter()
            .map(|(topic, rows)| (topic.as_str(), rows.as_slice())),
        results,
        Utc::now(),
    )
    .map_err(|e| CycleError::Redis(PublishError::Outage(e.to_string())))?;
    apply(c, deps, overlap, settled, &mut report).await?;
    Ok(report)
}

/// What the publish stage sends and what the outcomes are settled against, planned from a
/// claim: each topic's publish (its chains, its trimming, its partition count) and its rows,
/// topics in the same order in both.
struct PublishPlan {
    /// Each topic's publish, for its dispatcher.
    calls: Vec<(String, Publish)>,
    /// Each topic's rows, in the order its dispatcher answers in.
    rows: Vec<(String, Vec<Row>)>,
    /// Events in the batch.
    claimed: usize,
    /// The highest `seq` claimed.
    max_seq: Option<i64>,
}

impl PublishPlan {
    /// Groups the claim by topic (`batch::group_by_topic`) and gives each topic its trimming
    /// and partition count: the recorded count wins, `configured` only stands in until a
    /// count is recorded.
    fn of(claim: Claim, configured: impl Fn(&str) -> u32) -> PublishPlan {
        let Claim {
            chains,
            maxlen,
            partitions: recorded,
            ..
        } = claim;
        let grouped = batch::group_by_topic(chains);
        let mut plan = PublishPlan {
            calls: Vec::with_capacity(grouped.shares.len()),
            rows: Vec::with_capacity(grouped.shares.len()),
            claimed: grouped.claimed,
            max_seq: grouped.max_seq,
        };
        for share in grouped.shares {
            let partitions = recorded
                .get(&share.topic)
                .copied()
                .unwrap_or_else(|| configured(&share.topic));
            let publish = Publish {
                chains: share.chains,
                maxlen: maxlen.get(&share.topic).copied(),
                partitions,
            };
            plan.calls.push((share.topic.clone(), publish));
            plan.rows.push((share.topic, share.rows));
        }
        plan
    }
}

/// With `database.wait_standbys`, waits until enough standbys have flushed the WAL up to the
/// batch's claim; in vain, the batch rolls back.
async fn wait_standbys(
    c: &mut AsyncPgConnection,
    (standbys, timeout): (u32, Duration),
) -> Result<(), CycleError> {
    if standbys == 0 {
        return Ok(());
    }
    // The claimed rows' commits are before this point of the WAL: once the standbys have
    // flushed it, a failover to one of them keeps every event about to be published.
    if !crate::db::standbys::wait(c, standbys, timeout).await? {
        let error = DbError::Standbys(format!(
            "fewer than {standbys} standby(s) flushed the WAL to the batch's claim within {timeout:?} (database.wait_standbys): the batch goes back to pending, no attempt spent"
        ));
        crate::telemetry::wait_standbys_timed_out(&error);
        return Err(CycleError::Postgres(error));
    }
    crate::telemetry::wait_standbys_met();
    Ok(())
}

/// Records in `outbox_topics`, in this transaction, the batch's topics this replica has not
/// registered yet: once their events are published, every replica's first scrape has them.
async fn register_new_topics(
    c: &mut AsyncPgConnection,
    deps: &CycleDeps,
    calls: &[(String, Publish)],
    report: &mut CycleReport,
) -> Result<(), DbError> {
    let missing = deps
        .registered
        .missing(calls.iter().map(|(topic, _)| topic.as_str()));
    let new = new_topics(&missing, calls);
    if new.is_empty() {
        return Ok(());
    }
    crate::db::topics::register_all(c, &new).await?;
    report.registered = new.into_iter().map(|(topic, _)| topic).collect();
    Ok(())
}

/// The topics of `calls` among `missing` (those this replica has not registered), each with
/// the partition count it is published at.
fn new_topics(missing: &[&str], calls: &[(String, Publish)]) -> Vec<(String, u32)> {
    missing
        .iter()
        .filter_map(|topic| calls.iter().find(|(t, _)| t == topic))
        .map(|(topic, publish)| (topic.clone(), publish.partitions))
        .collect()
}

/// On one Redis server, a batch whose every topic met an outage met Redis's: the cycle rolls
/// back and the claim loop backs off. (On a cluster each topic's outage is its master's: those
/// events are postponed, and the cycle commits.)
fn whole_outage(deps: &CycleDeps, results: &[TopicResult]) -> Option<PublishError> {
    if deps.topics.publisher().is_cluster() {
        return None;
    }
    let mut errors = results.iter().map(|r| r.as_ref().err());
    let first = errors.next()??;
    errors.all(|e| e.is_some()).then(|| first.error.clone())
}

/// The publish stage: each topic's share through its dispatcher, all topics at once. With
/// `overlap_rows`, every row is marked published beside the publish, after a savepoint. A
/// topic's outage is its result; only the mark's failure fails the stage.
async fn publish(
    c: &mut AsyncPgConnection,
    deps: &CycleDeps,
    calls: Vec<(String, Publish)>,
    overlap_rows: Option<&Vec<(String, Vec<Row>)>>,
) -> Result<Vec<TopicResult>, CycleError> {
    let calls = calls
        .into_iter()
        .map(|(topic, msg)| async move { deps.topics.publish(&topic, msg).await });
    match overlap_rows {
        Some(rows) => {
            let all: Vec<&str> = rows
                .iter()
                .flat_map(|(_, rows)| rows.iter().map(|r| r.ctid.as_str()))
                .collect();
            outbox::before_overlapped_mark(c).await?;
            let (results, marked) = futures::join!(join_all(calls), mark(c, deps, &all));
            marked?;
            Ok(results)
        }
        None => Ok(join_all(calls).await),
    }
}

/// The apply stage: mark what reached its stream (unless the overlapped mark did), plan the
/// failures (the pure retry policy) and write them, and fill in the report.
async fn apply(
    c: &mut AsyncPgConnection,
    deps: &CycleDeps,
    overlap: bool,
    settled: Settled<'_>,
    report: &mut CycleReport,
) -> Result<(), CycleError> {
    let marking = marking(overlap, settled.unsettled);
    if marking.undo_overlapped {
        outbox::undo_overlapped_mark(c).await?;
        deps.overlap.be_careful();
        tracing::debug!(
            failed = settled.failed,
            deferred = settled.deferred,
            "an event failed in an overlapped cycle: its mark undone, publishing first for a while"
        );
    }
    if marking.mark_done {
        mark(c, deps, &settled.done).await?;
    }
    let failures = retry::plan_all(&deps.retry, settled.faults, rand::random::<f64>);
    if !failures.is_empty() {
        outbox::schedule_retry(c, &failures).await?;
    }
    for postponed in &settled.postponed {
        let wait = postponed.outage.retry_in;
        outbox::postpone(c, &postponed.ctids, wait.as_millis() as i64).await?;
        tracing::debug!(
            topic = postponed.topic,
            events = postponed.ctids.len(),
            wait_ms = wait.as_millis() as u64,
            "events postponed: {}",
            postponed.outage.error
        );
        report.postponed_for = Some(report.postponed_for.map_or(wait, |w| w.min(wait)));
    }
    report.published = settled.published;
    report.latencies = settled.latencies;
    report.duplicates = settled.duplicates;
    report.deferred += settled.deferred;
    report.failures = failures;
    Ok(())
}

/// What the apply stage does about the marks.
#[derive(Debug, PartialEq, Eq)]
struct Marking {
    /// Roll back to the savepoint taken before the overlapped mark.
    undo_overlapped: bool,
    /// Mark (or delete) the rows that reached their stream.
    mark_done: bool,
}

/// The marks to write once the outcomes are settled: `overlap`, the mark already ran beside the
/// publish; `unsettled`, some events must stay pending. An overlapped mark that also covered
/// such events is undone alone, and the rows that reached their stream are marked again: the
/// rows stay locked by this transaction, so no other worker or replica can claim them and take
/// this cycle's appends for a crash's.
fn marking(overlap: bool, unsettled: bool) -> Marking {
    Marking {
        undo_overlapped: overlap && unsettled,
        mark_done: !overlap || unsettled,
    }
}

/// Marks published (or deletes, in `published_for = 0s` mode) the rows at `ctids`.
async fn mark(
    c: &mut AsyncPgConnection,
    deps: &CycleDeps,
    ctids: &[&str],
) -> Result<usize, DbError> {
    if deps.delete_on_publish {
        outbox::delete_published(c, ctids).await
    } else {
        outbox::mark_published(c, ctids).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::outbox::ClaimedRow;

    fn row(topic: &str, key: Option<&str>, seq: i64) -> ClaimedRow {
        ClaimedRow::for_test(topic, key, seq, 0)
    }

    /// A claim of three topics: `a` recorded at 4 partitions and trimmed, `b` configured at 3
    /// and not recorded yet, `c` neither.
    fn mixed_claim() -> Claim {
        Claim {
            chains: vec![
                vec![row("a", Some("k"), 1), row("a", Some("k"), 5)],
                vec![row("b", None, 2)],
                vec![row("a", None, 3)],
                vec![row("c", Some("k"), 4)],
            ],
            heads: 4,
            maxlen: HashMap::from([("a".to_string(), 100)]),
            partitions: HashMap::from([("a".to_string(), 4)]),
            ..Claim::default()
        }
    }

    fn configured(topic: &str) -> u32 {
        match topic {
            "a" => 8,
            "b" => 3,
            _ => 1,
        }
    }

    #[test]
    fn a_mixed_claim_is_planned_per_topic_in_order_of_first_appearance() {
        let plan = PublishPlan::of(mixed_claim(), configured);
        assert_eq!(plan.claimed, 5);
        assert_eq!(plan.max_seq, Some(5));
        let topics: Vec<&str> = plan.calls.iter().map(|(t, _)| t.as_str()).collect();
        assert_eq!(topics, ["a", "b", "c"]);
        let row_topics: Vec<&str> = plan.rows.iter().map(|(t, _)| t.as_str()).collect();
        assert_eq!(row_topics, topics);
        // The recorded count wins over the configured one; the configured one stands in
        // until a count is recorded; a topic of neither has one partition.
        let partitions: Vec<u32> = plan.calls.iter().map(|(_, p)| p.partitions).collect();
        assert_eq!(partitions, [4, 3, 1]);
        let maxlen: Vec<Option<u64>> = plan.calls.iter().map(|(_, p)| p.maxlen).collect();
        assert_eq!(maxlen, [Some(100), None, None]);
        // Each topic's rows follow its chains flattened: the dispatcher's answer order.
        let (_, a) = &plan.calls[0];
        assert_eq!(a.chains.len(), 2);
        assert_eq!(a.chains[0].len(), 2);
        let ctids: Vec<&str> = plan.rows[0].1.iter().map(|r| r.ctid.as_str()).collect();
        assert_eq!(ctids, ["(0,1)", "(0,5)", "(0,3)"]);
    }

    #[test]
    fn only_the_missing_topics_are_registered_at_the_count_they_are_published_at() {
        let plan = PublishPlan::of(mixed_claim(), configured);
        assert_eq!(
            new_topics(&["b", "not-in-this-batch", "a"], &plan.calls),
            [("b".to_string(), 3), ("a".to_string(), 4)]
        );
        assert!(new_topics(&[], &plan.calls).is_empty());
    }

    #[test]
    fn an_overlapped_mark_is_undone_only_when_some_events_stay_pending() {
        // Publish first: the done rows are marked after the publish, whatever failed.
        for unsettled in [false, true] {
            assert_eq!(
                marking(false, unsettled),
                Marking {
                    undo_overlapped: false,
                    mark_done: true
                }
            );
        }
        // Overlapped and every event appended or duplicate: the mark already covers them.
        assert_eq!(
            marking(true, false),
            Marking {
                undo_overlapped: false,
                mark_done: false
            }
        );
        // Overlapped and one failed mid-batch: the mark is undone and the done rows are
        // marked again, in the same transaction.
        assert_eq!(
            marking(true, true),
            Marking {
                undo_overlapped: true,
                mark_done: true
            }
        );
    }
}
