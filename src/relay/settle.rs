//! The pure middle of a claim cycle: a claimed batch grouped by topic for the dispatchers, and
//! the dispatchers' outcomes matched back to the rows they came from. No database and no
//! Redis, so every way a publish can end is unit-tested here on made-up outcomes.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::messages::{Fault, TopicOutage};
use crate::db::outbox::ClaimedRow;
use crate::publish::{Outcome, StreamEvent};

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
    /// Appended now: a redo of an overlapped cycle must count them as its own.
    pub appended: HashSet<Uuid>,
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

/// Matches each topic's outcomes to its rows. `appended_before` holds the events this cycle's
/// own rolled-back attempt appended: found again, they count as published, not duplicates.
/// A topic whose publish failed as a whole is postponed, all its rows.
pub fn settle<'a>(
    rows: impl IntoIterator<Item = (&'a str, &'a [Row])>,
    results: Vec<TopicResult>,
    appended_before: &HashSet<Uuid>,
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
                    settled.appended.insert(id);
                    published += 1;
                    settled
                        .latencies
                        .push((now - row.created_at).to_std().unwrap_or_default());
                    settled.done.push(&row.ctid);
                }
                Outcome::Duplicate if appended_before.contains(&id) => {
                    published += 1;
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
mod tests {
    use super::*;

    fn row(topic: &str, key: Option<&str>, seq: i64) -> ClaimedRow {
        ClaimedRow {
            id: Uuid::new_v4(),
            seq,
            topic: topic.into(),
            partition_key: key.map(Into::into),
            payload: "{}".into(),
            headers: "{}".into(),
            created_at: Utc::now(),
            attempts: 1,
            ready: true,
            ctid: format!("(0,{seq})"),
        }
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
            &HashSet::new(),
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
        assert_eq!(s.appended, HashSet::from([ids[0], ids[4]]));
    }

    #[test]
    fn a_redo_counts_its_own_appends_as_published() {
        let a = rows(&["a1", "a2"]);
        let mine = Uuid::new_v4();
        let outcomes = vec![Ok(vec![
            (mine, Outcome::Duplicate),
            (Uuid::new_v4(), Outcome::Duplicate),
        ])];
        let s = settle(
            [("a", a.as_slice())],
            outcomes,
            &HashSet::from([mine]),
            Utc::now(),
        )
        .expect("settles");
        assert_eq!(s.published.get("a"), Some(&1));
        assert_eq!(s.duplicates, 1);
        assert!(!s.unsettled);
        assert_eq!(s.done, ["a1", "a2"]);
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
            &HashSet::new(),
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
        assert_eq!(s.appended, HashSet::from([published]));
    }

    #[test]
    fn a_short_answer_is_refused() {
        let a = rows(&["a1", "a2"]);
        let outcomes = vec![Ok(vec![(Uuid::new_v4(), Outcome::Published)])];
        let err = settle([("a", a.as_slice())], outcomes, &HashSet::new(), Utc::now())
            .expect_err("one outcome for two events");
        assert_eq!(err.to_string(), "1 outcomes for 2 events of a");
    }
}
