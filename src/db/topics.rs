//! All SQL of `outbox_topics`: pausing and resuming, per-topic trimming, partition counts,
//! and the publish-side read of them.
//!
//! A pause must be airtight: once `set_paused` returns, no replica publishes the topic. The
//! publish transaction takes a shared advisory lock per topic before checking the flag, and
//! `set_paused` takes it exclusively, so it waits for in-flight batches of that topic and
//! every later batch sees the new flag.

use std::collections::HashMap;

use diesel::sql_types::{Array, BigInt, Bool, Integer, Nullable, Text};
use diesel::QueryableByName;
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};

use super::{audit, DbError};
use outbox_core::prepared::prepared;

/// Advisory lock class of topic state ("outbox-t").
const TOPIC_LOCK: i64 = 0x6f75_7462_6f78_2d74;

#[derive(QueryableByName)]
struct TopicRow {
    #[diesel(sql_type = Text)]
    topic: String,
    #[diesel(sql_type = Bool)]
    paused: bool,
    #[diesel(sql_type = Nullable<BigInt>)]
    maxlen: Option<i64>,
    #[diesel(sql_type = Nullable<Integer>)]
    partitions: Option<i32>,
    #[diesel(sql_type = Nullable<BigInt>)]
    repair_below: Option<i64>,
}

/// What a publish batch must know of its topics.
#[derive(Debug, Default, Clone)]
pub struct TopicStates {
    /// Paused topics: their events must not be published by this batch.
    pub paused: Vec<String>,
    /// Per-topic stream trimming (`MAXLEN ~`), overriding `redis.maxlen`.
    pub maxlen: HashMap<String, u64>,
    /// Recorded partition counts (a topic with none recorded is not here).
    pub partitions: HashMap<String, u32>,
    /// Topics whose lost events are being published again: only rows up to this `seq` go.
    pub repair_below: HashMap<String, i64>,
}

/// Inside the publish transaction: takes the shared lock of each topic, then reads their
/// state (paused, maxlen).
pub async fn lock_for_publish(
    conn: &AsyncPgConnection,
    topics: &[&str],
) -> Result<TopicStates, DbError> {
    if topics.is_empty() {
        return Ok(TopicStates::default());
    }
    prepared(
        diesel::sql_query(
            "SELECT count(pg_advisory_xact_lock_shared(hashtextextended(t, $2))) FROM unnest($1::text[]) AS u(t)",
        )
        .bind::<Array<Text>, _>(topics)
        .bind::<BigInt, _>(TOPIC_LOCK),
    )
    .execute(&mut { conn })
    .await?;
    // A new statement, so a new snapshot: it sees a pause that committed while we waited.
    let rows: Vec<TopicRow> = prepared(
        diesel::sql_query(
            "SELECT topic, paused, maxlen, partitions, repair_below FROM outbox_topics
             WHERE topic = ANY($1)
               AND (paused OR maxlen IS NOT NULL OR partitions IS NOT NULL
                    OR repair_below IS NOT NULL)",
        )
        .bind::<Array<Text>, _>(topics),
    )
    .load(&mut { conn })
    .await?;
    let mut states = TopicStates::default();
    for row in rows {
        if row.paused {
            states.paused.push(row.topic.clone());
        }
        if let Some(below) = row.repair_below {
            states.repair_below.insert(row.topic.clone(), below);
        }
        if let Some(n) = row.partitions.and_then(|n| u32::try_from(n).ok()) {
            states.partitions.insert(row.topic.clone(), n);
        }
        if let Some(maxlen) = row.maxlen.and_then(|m| u64::try_from(m).ok()) {
            states.maxlen.insert(row.topic, maxlen);
        }
    }
    Ok(states)
}

/// Holds back the topic's events after `seq` until every pending row up to it is published
/// (a repair's lost events go first); a barrier already higher stays.
pub async fn hold_after(
    conn: &mut AsyncPgConnection,
    topic: &str,
    seq: i64,
) -> Result<(), DbError> {
    diesel::sql_query(
        "INSERT INTO outbox_topics (topic, repair_below, updated_at) VALUES ($1, $2, now())
         ON CONFLICT (topic) DO UPDATE
           SET repair_below = GREATEST(outbox_topics.repair_below, EXCLUDED.repair_below),
               updated_at = now()",
    )
    .bind::<Text, _>(topic)
    .bind::<BigInt, _>(seq)
    .execute(conn)
    .await?;
    Ok(())
}

/// Lifts the barriers of topics none of whose rows up to it is pending any more; returns those
/// topics.
pub async fn release_repaired(conn: &mut AsyncPgConnection) -> Result<Vec<String>, DbError> {
    #[derive(QueryableByName)]
    struct Released {
        #[diesel(sql_type = Text)]
        topic: String,
    }
    let rows: Vec<Released> = diesel::sql_query(
        "UPDATE outbox_topics t SET repair_below = NULL, updated_at = now()
         WHERE t.repair_below IS NOT NULL
           AND NOT EXISTS (
               SELECT 1 FROM outbox o
               WHERE o.topic = t.topic AND o.seq <= t.repair_below
                 AND o.published_at IS NULL AND o.dead_at IS NULL)
         RETURNING t.topic",
    )
    .load(conn)
    .await?;
    Ok(rows.into_iter().map(|r| r.topic).collect())
}

/// Sets (or clears, with `None`) a topic's stream trimming; the next batch uses it.
pub async fn set_maxlen(
    conn: &mut AsyncPgConnection,
    topic: &str,
    maxlen: Option<i64>,
) -> Result<(), DbError> {
    diesel::sql_query(
        "INSERT INTO outbox_topics (topic, maxlen, updated_at) VALUES ($1, $2, now())
         ON CONFLICT (topic) DO UPDATE SET maxlen = EXCLUDED.maxlen, updated_at = now()",
    )
    .bind::<Text, _>(topic)
    .bind::<Nullable<BigInt>, _>(maxlen)
    .execute(conn)
    .await?;
    Ok(())
}

/// Pauses or resumes a topic as `who` (a topic with no events yet gets a row too), with
/// its audit row. Returns after every in-flight batch of the topic has committed.
pub async fn set_paused(
    conn: &mut AsyncPgConnection,
    topic: &str,
    paused: bool,
    who: &str,
) -> Result<(), DbError> {
    let topic = topic.to_string();
    conn.transaction::<_, DbError, _>(async |c| {
        write_paused(c, &topic, paused).await?;
        let action = if paused { "pause" } else { "resume" };
        audit::record(c, who, action, &topic, &serde_json::json!({})).await
    })
    .await
}

/// Replaces a topic's settings (pause flag and stream trimming) as `who`, in one
/// transaction with its audit row.
pub async fn set_settings(
    conn: &mut AsyncPgConnection,
    topic: &str,
    paused: bool,
    maxlen: Option<i64>,
    who: &str,
) -> Result<(), DbError> {
    let topic = topic.to_string();
    conn.transaction::<_, DbError, _>(async |c| {
        write_paused(c, &topic, paused).await?;
        set_maxlen(c, &topic, maxlen).await?;
        let detail = serde_json::json!({ "paused": paused, "maxlen": maxlen });
        audit::record(c, who, "topic_settings", &topic, &detail).await
    })
    .await
}

/// Inside a transaction: waits for in-flight batches of the topic, and holds later ones back
/// until commit (the exclusive side of the lock [`lock_for_publish`] takes shared).
async fn lock_exclusively(c: &mut AsyncPgConnection, topic: &str) -> Result<(), DbError> {
    diesel::sql_query("SELECT pg_advisory_xact_lock(hashtextextended($1, $2))")
        .bind::<Text, _>(topic)
        .bind::<BigInt, _>(TOPIC_LOCK)
        .execute(c)
        .await?;
    Ok(())
}

/// Inside a transaction: waits for in-flight batches of the topic, then writes the flag.
async fn write_paused(c: &mut AsyncPgConnection, topic: &str, paused: bool) -> Result<(), DbError> {
    lock_exclusively(c, topic).await?;
    diesel::sql_query(
        "INSERT INTO outbox_topics (topic, paused, updated_at) VALUES ($1, $2, now())
         ON CONFLICT (topic) DO UPDATE SET paused = EXCLUDED.paused, updated_at = now()",
    )
    .bind::<Text, _>(topic)
    .bind::<Bool, _>(paused)
    .execute(c)
    .await?;
    if !paused {
        // Wake the claimers: the topic's backlog is claimable again.
        diesel::sql_query("SELECT pg_notify('outbox_events', '')")
            .execute(c)
            .await?;
    }
    Ok(())
}

/// Every topic a relay has published or an operator has set: the registry's rows.
pub async fn known(conn: &mut AsyncPgConnection) -> Result<Vec<String>, DbError> {
    #[derive(QueryableByName)]
    struct Topic {
        #[diesel(sql_type = Text)]
        topic: String,
    }
    let rows: Vec<Topic> = diesel::sql_query("SELECT topic FROM outbox_topics ORDER BY topic")
        .load(conn)
        .await?;
    Ok(rows.into_iter().map(|r| r.topic).collect())
}

/// Adds `topic` to the registry (active, no settings, `partitions` as configured) unless it
/// is there. Its metrics then exist from the first scrape of any replica, also after a
/// restart.
pub async fn register(
    conn: &mut AsyncPgConnection,
    topic: &str,
    partitions: u32,
) -> Result<(), DbError> {
    diesel::sql_query(
        "INSERT INTO outbox_topics (topic, partitions) VALUES ($1, $2) ON CONFLICT DO NOTHING",
    )
    .bind::<Text, _>(topic)
    .bind::<Integer, _>(i32::try_from(partitions).unwrap_or(1))
    .execute(conn)
    .await?;
    Ok(())
}

/// [`register`] for several topics in one statement, inside the claim transaction that
/// publishes their first events: a topic is in the registry once any of its events has been
/// published, whatever happens to the replica afterwards. Sorted, so that two replicas
/// registering the same new topics take their index entries in one order.
pub async fn register_all(
    conn: &mut AsyncPgConnection,
    topics: &[(String, u32)],
) -> Result<(), DbError> {
    let mut sorted: Vec<&(String, u32)> = topics.iter().collect();
    sorted.sort();
    let names: Vec<&str> = sorted.iter().map(|(t, _)| t.as_str()).collect();
    let partitions: Vec<i32> = sorted
        .iter()
        .map(|(_, p)| i32::try_from(*p).unwrap_or(1))
        .collect();
    prepared(
        diesel::sql_query(
            "INSERT INTO outbox_topics (topic, partitions)
             SELECT topic, partitions FROM unnest($1::text[], $2::int[]) AS t (topic, partitions)
             ORDER BY topic
             ON CONFLICT DO NOTHING",
        )
        .bind::<Array<Text>, _>(names)
        .bind::<Array<Integer>, _>(partitions),
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// A topic whose configured partition count differs from the recorded one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionMismatch {
    /// The topic.
    pub topic: String,
    /// Recorded in `outbox_topics`.
    pub recorded: u32,
    /// In this relay's settings (1 for a topic not listed).
    pub configured: u32,
}

/// Records which topics park their keys on a dead event: `parking` (listed by
/// [`record_partitions`] already) and no other.
pub async fn record_parking(
    conn: &mut AsyncPgConnection,
    parking: &[String],
) -> Result<(), DbError> {
    diesel::sql_query(
        "UPDATE outbox_topics SET park_on_dead = (topic = ANY($1))
         WHERE park_on_dead IS DISTINCT FROM (topic = ANY($1))",
    )
    .bind::<Array<Text>, _>(parking)
    .execute(conn)
    .await?;
    Ok(())
}

/// Records the configured partition counts of topics new to the registry, and one partition
/// for topics registered before any count was recorded (they were published to one stream);
/// then returns every topic whose recorded count differs from `configured` (a topic not in it
/// has one partition).
pub async fn record_partitions(
    conn: &mut AsyncPgConnection,
    configured: &HashMap<String, u32>,
) -> Result<Vec<PartitionMismatch>, DbError> {
    let (names, counts): (Vec<&str>, Vec<i32>) = configured
        .iter()
        .map(|(topic, n)| (topic.as_str(), i32::try_from(*n).unwrap_or(i32::MAX)))
        .unzip();
    conn.transaction::<_, DbError, _>(async |c| {
        diesel::sql_query(
            "INSERT INTO outbox_topics (topic, partitions)
             SELECT * FROM unnest($1::text[], $2::int[])
             ON CONFLICT DO NOTHING",
        )
        .bind::<Array<Text>, _>(&names)
        .bind::<Array<Integer>, _>(&counts)
        .execute(c)
        .await?;
        diesel::sql_query("UPDATE outbox_topics SET partitions = 1 WHERE partitions IS NULL")
            .execute(c)
            .await?;
        #[derive(QueryableByName)]
        struct Recorded {
            #[diesel(sql_type = Text)]
            topic: String,
            #[diesel(sql_type = Integer)]
            partitions: i32,
        }
        let rows: Vec<Recorded> = diesel::sql_query(
            "SELECT topic, partitions FROM outbox_topics WHERE partitions IS NOT NULL ORDER BY topic",
        )
        .load(c)
        .await?;
        Ok(rows
            .into_iter()
            .filter_map(|row| {
                let recorded = u32::try_from(row.partitions).ok()?;
                let configured = configured.get(&row.topic).copied().unwrap_or(1);
                (recorded != configured).then_some(PartitionMismatch {
                    topic: row.topic,
                    recorded,
                    configured,
                })
            })
            .collect())
    })
    .await
}

/// The recorded partitions of `topic` (1 when none is recorded) and whether it is paused.
pub async fn partitions_and_pause(
    conn: &mut AsyncPgConnection,
    topic: &str,
) -> Result<(u32, bool), DbError> {
    #[derive(QueryableByName)]
    struct Row {
        #[diesel(sql_type = Nullable<Integer>)]
        partitions: Option<i32>,
        #[diesel(sql_type = Bool)]
        paused: bool,
    }
    let rows: Vec<Row> =
        diesel::sql_query("SELECT partitions, paused FROM outbox_topics WHERE topic = $1")
            .bind::<Text, _>(topic)
            .load(conn)
            .await?;
    Ok(<[Row]>::first(&rows).map_or((1, false), |r| {
        let n = r
            .partitions
            .and_then(|n| u32::try_from(n).ok())
            .unwrap_or(1);
        (n, r.paused)
    }))
}

/// Sets `topic`'s partition count as `who`, with its audit row, once in-flight batches of the
/// topic have committed (the exclusive side of [`lock_for_publish`]'s lock): every later batch
/// publishes by the new count.
pub async fn set_partitions(
    conn: &mut AsyncPgConnection,
    topic: &str,
    partitions: u32,
    who: &str,
) -> Result<(), DbError> {
    let topic = topic.to_string();
    let n = i32::try_from(partitions).unwrap_or(i32::MAX);
    conn.transaction::<_, DbError, _>(async |c| {
        lock_exclusively(c, &topic).await?;
        diesel::sql_query(
            "INSERT INTO outbox_topics (topic, partitions, updated_at) VALUES ($1, $2, now())
             ON CONFLICT (topic) DO UPDATE SET partitions = EXCLUDED.partitions, updated_at = now()",
        )
        .bind::<Text, _>(&topic)
        .bind::<Integer, _>(n)
        .execute(c)
        .await?;
        let detail = serde_json::json!({ "partitions": partitions });
        audit::record(c, who, "repartition", &topic, &detail).await
    })
    .await
}
